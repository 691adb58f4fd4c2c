"""The one Collector: maps the latest snapshots to metric families on every scrape. No I/O, no parsing.

Registered on a private CollectorRegistry, so nothing collects at registration and the default registry's
process metrics never mix with ours: serve adds its own (``exporter.metrics.selfmetrics``) as the last section.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.config import Config
from exporter.inventory import gpu_inventory, known_gpus, merge_links, smi_reports, tool_processes
from exporter.metrics.devices import device_families
from exporter.metrics.gpu import gpu_families, gpu_owners, pod_families, process_families, process_gpu_families
from exporter.metrics.health import health_families, push_families, state_file_families
from exporter.metrics.kernel import kernel_families
from exporter.metrics.selfmetrics import ExporterMetrics
from exporter.model.devices import DeviceWatchState, StateFileStatus
from exporter.model.gpu import SysfsSnapshot
from exporter.model.kernel import KernelLogState
from exporter.model.processes import PodResourcesSnapshot, ProcessInfo, ProcessSnapshot
from exporter.sinks.status import PushStatus
from exporter.sources.kernel_log import CURSOR_FILE
from exporter.store import SnapshotStore, StoreView


@dataclass(frozen=True, slots=True)
class Section:
    """A run of families built from the entries of ``inputs`` (None: every source). ``health``: from the
    sources' health, not their data; ``volatile``: from state outside the store, built on every scrape."""

    name: str
    inputs: tuple[str, ...] | None
    build: Callable[[StoreView], Iterator[Metric]]
    health: bool = False
    volatile: bool = False


def _processes(view: StoreView) -> list[ProcessInfo] | None:
    enriched = view.fresh_data("processes")
    if isinstance(enriched, ProcessSnapshot):
        return list(enriched.processes)
    reports = smi_reports(view)
    if not reports:
        return None
    # Without the processes source, fall back to the tools' own lists (no enrichment).
    return [
        ProcessInfo(pid=pid, name=name, vram_used_bytes=vram)
        for pid, (name, vram) in sorted(tool_processes(reports).items())
    ]


class RocmCollector(Collector):
    def __init__(
        self,
        store: SnapshotStore,
        config: Config,
        clock: Callable[[], float] = time.time,
        push: PushStatus | None = None,
        exporter_metrics: ExporterMetrics | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._push = push  # the Alertmanager push's health, when --alertmanager.url is set
        # serve's process_*, python_* and scrape-duration series (not --web.disable-exporter-metrics; never once)
        self._exporter = exporter_metrics

    def reconfigure(
        self, config: Config, push: PushStatus | None, exporter_metrics: ExporterMetrics | None = None
    ) -> None:
        """A reloaded configuration (SIGHUP): the next build uses it. The rendering cache must be dropped too
        (``Exposition.invalidate``): its keys are the store's entries, not the configuration."""
        self._config, self._push, self._exporter = config, push, exporter_metrics

    def sections(self) -> tuple[Section, ...]:
        """The exposition in the order it is served, as sections each built from a few sources' entries: the
        rendering cache (``exporter.metrics.exposition``) re-renders a section only when those entries change."""
        every = None  # every source: the section reads all of them
        out = [
            Section("gpus", ("amd-smi", "rocm-smi", "sysfs"), self._gpus),
            Section("processes", ("processes", "amd-smi", "rocm-smi"), self._processes),
            Section("kubernetes", ("kubernetes", "processes", "sysfs", "amd-smi", "rocm-smi"), self._kubernetes),
            Section("devices", ("devices",), self._devices),
            Section("kernel", every, self._kernel),
            Section("state-files", ("devices", "kernel-log"), self._state_files),
            Section("health", every, self._health, health=True),
        ]
        if self._push is not None:
            out.append(Section("push", every, self._push_health, volatile=True))
        if self._exporter is not None:
            out.append(Section("exporter", (), self._exporter_families, volatile=True))
        return tuple(out)

    def collect(self) -> Iterator[Metric]:
        view = self._store.view(self._clock())
        for section in self.sections():
            yield from section.build(view)

    def view(self) -> StoreView:
        return self._store.view(self._clock())

    def _gpus(self, view: StoreView) -> Iterator[Metric]:
        gpus = gpu_inventory(view)
        if gpus is not None:
            yield from gpu_families(gpus, merge_links(smi_reports(view)))

    def _processes(self, view: StoreView) -> Iterator[Metric]:
        processes = _processes(view)
        if processes is not None:
            yield from process_families(processes, self._config.top_processes)
            yield from process_gpu_families(processes, self._config.top_processes)

    def _kubernetes(self, view: StoreView) -> Iterator[Metric]:
        pods = view.fresh_data("kubernetes")
        if not isinstance(pods, PodResourcesSnapshot):
            return  # --collector.kubernetes is off, or its last success is too old
        gpus = gpu_inventory(view) or ()
        sysfs = view.fresh_data("sysfs")
        partitions = (
            {g.partition_device: g.pci_bus for g in sysfs.gpus if g.partition_device}
            if isinstance(sysfs, SysfsSnapshot)
            else {}
        )
        owners = gpu_owners(pods.allocations, {g.pci_bus for g in gpus}, partitions)
        yield from pod_families(owners, _processes(view) or (), self._config.top_processes)

    def _devices(self, view: StoreView) -> Iterator[Metric]:
        devices = view.fresh_data("devices")
        yield from device_families(devices if isinstance(devices, DeviceWatchState) else None)

    def _kernel(self, view: StoreView) -> Iterator[Metric]:
        # Kernel-log counters are cumulative counts of what was read: they stay exported when the reader
        # fails (its health series say so), so increase() keeps working across a reader outage.
        entry = view.entries.get("kernel-log")
        if entry is not None:
            kernel = entry.data if isinstance(entry.data, KernelLogState) else None
            yield from kernel_families(kernel, known_gpus(view))

    def _state_files(self, view: StoreView) -> Iterator[Metric]:
        files: list[StateFileStatus] = []
        devices = view.fresh_data("devices")
        if isinstance(devices, DeviceWatchState):
            files.extend(devices.state_files)
        entry = view.entries.get("kernel-log")
        if entry is not None and isinstance(entry.data, KernelLogState):
            # The kernel-log source fails instead of starting on a cursor it cannot read (source_up 0, its error
            # says so): while it has data, the cursor was readable.
            kernel = entry.data
            corrupt = "moved aside or left in place, counting anew" if kernel.cursor_corrupt else None
            unsaved = "the last write failed" if kernel.cursor_unsaved else None
            files.append(StateFileStatus(CURSOR_FILE, None, corrupt, None, unsaved))
        if files:
            yield from state_file_families(files)

    def _health(self, view: StoreView) -> Iterator[Metric]:
        yield from health_families(view, self._config.nodename)

    def _push_health(self, view: StoreView) -> Iterator[Metric]:
        if self._push is not None:
            yield from push_families(self._push.view())

    def _exporter_families(self, view: StoreView) -> Iterator[Metric]:
        if self._exporter is not None:
            yield from self._exporter.families()


def make_registry(
    store: SnapshotStore,
    config: Config,
    clock: Callable[[], float] = time.time,
    push: PushStatus | None = None,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RocmCollector(store, config, clock, push))
    return registry
