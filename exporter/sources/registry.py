"""Which sources run, built from the config. The one place that knows the list of sources."""

from __future__ import annotations

from collections.abc import Iterator

from exporter.clock import wall_time
from exporter.config import Config
from exporter.model.smi import SmiReport
from exporter.scheduler import Scheduled
from exporter.store import SnapshotStore


def _smi_jobs(config: Config) -> Iterator[Scheduled]:
    amd, rocm = config.enabled("amd-smi"), config.enabled("rocm-smi")
    if not amd and not rocm:
        return  # without importing the tools' sources and parsers
    from exporter.sources.smi import AMD_SMI_PROBED, AmdSmiSource, AutoSmiSource, RocmSmiSource

    timeout = config.smi_timeout_seconds
    # amd-smi runs up to one invocation per probed subcommand, one after the other, each with the timeout.
    amd_timeout = len(AMD_SMI_PROBED) * timeout
    backend = config.smi_backend
    if backend == "auto" and amd and rocm:
        interval = max(config.intervals_seconds["amd-smi"], config.intervals_seconds["rocm-smi"])
        yield Scheduled(AutoSmiSource(config), interval, amd_timeout + timeout, names=AutoSmiSource.names)
        return
    if amd and backend in ("auto", "amd-smi", "both"):
        yield Scheduled(AmdSmiSource(config), config.intervals_seconds["amd-smi"], amd_timeout)
    if rocm and backend in ("auto", "rocm-smi", "both"):
        yield Scheduled(RocmSmiSource(config), config.intervals_seconds["rocm-smi"], timeout)


def build_jobs(config: Config, store: SnapshotStore) -> list[Scheduled]:
    jobs = list(_smi_jobs(config))
    interval = config.intervals_seconds
    if config.enabled("sysfs"):
        from exporter.sources.sysfs import SysfsSource

        jobs.append(Scheduled(SysfsSource(config), interval["sysfs"]))
    if config.enabled("devices"):
        from exporter.sources.devices import DevicesSource

        jobs.append(Scheduled(DevicesSource(config), interval["devices"]))
    if config.enabled("processes"):
        from exporter.inventory import smi_reports
        from exporter.sources.processes import ProcessesSource

        def reports() -> list[SmiReport]:
            return smi_reports(store.view(wall_time()))

        jobs.append(Scheduled(ProcessesSource(config, reports), interval["processes"]))
    if config.enabled("kubernetes"):  # opt-in: --collector.kubernetes; grpcio is imported by its first run
        from exporter.sources.podresources import PodResourcesSource

        jobs.append(Scheduled(PodResourcesSource(config), interval["kubernetes"], config.kubernetes_timeout_seconds))
    if config.enabled("kernel-log"):
        from exporter.inventory import known_gpus
        from exporter.sources.kernel_log import PERSIST_EVERY_SECONDS, KernelLogSource

        source = KernelLogSource(
            config, lambda: known_gpus(store.view(wall_time())), persist_every_seconds=PERSIST_EVERY_SECONDS
        )
        jobs.append(Scheduled(source, interval["kernel-log"]))
    return jobs
