"""The one Collector: maps the latest snapshots to metric families on every scrape. No I/O, no parsing.

Registered on a private CollectorRegistry, so nothing collects at registration and the default registry's
process metrics never mix with ours: serve adds its own (``exporter.metrics.selfmetrics``) as the last section.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.clock import wall_time
from exporter.config import Config
from exporter.inventory import gpu_inventory, known_gpus, merge_links, physical_gpu, smi_reports, tool_processes
from exporter.metrics.devices import device_families
from exporter.metrics.gpu import (
    gpu_families,
    gpu_owners,
    pod_families,
    process_families,
    process_gpu_families,
    topology_families,
)
from exporter.metrics.groups import hidden_family_names
from exporter.metrics.health import health_families, http_server_families, push_families, state_file_families
from exporter.metrics.kernel import kernel_families
from exporter.metrics.selfmetrics import ExporterMetrics
from exporter.metrics.verdict import VERDICT_SOURCES, VerdictMemo, verdict_families
from exporter.model.devices import DeviceWatchState, StateFileStatus
from exporter.model.gpu import SysfsSnapshot
from exporter.model.kernel import KernelLogState
from exporter.model.processes import PodResourcesSnapshot, ProcessInfo, ProcessSnapshot
from exporter.server.stats import StatsView
from exporter.sinks.status import PushStatus
from exporter.sources.kernel_log import CURSOR_FILE
from exporter.store import SnapshotStore, StoreView
from exporter.watchdog.health import PROCESS_SOURCE


class Section(msgspec.Struct, frozen=True):
    """A run of families built from the entries of ``inputs`` (None: every source). ``health``: from the
    sources' health, not their data; ``volatile``: from state outside the store, built on every scrape (at most
    once per the exposition's ``volatile_seconds``); ``lazy``: rendered by the scrape that finds its inputs
    changed, not after every collection (what changes at nearly every run, the sources' health); ``key``: what
    the families are made of, when that is less than the inputs' whole entries (the rendering is reused while it
    is equal)."""

    name: str
    inputs: tuple[str, ...] | None
    build: Callable[[StoreView], Iterator[Metric]]
    health: bool = False
    volatile: bool = False
    lazy: bool = False
    key: Callable[[StoreView], tuple[object, ...]] | None = None


def inputs_key(
    view: StoreView, names: Sequence[str], health: bool = False, data: Callable[[object], object] = lambda d: d
) -> tuple[object, ...]:
    """What a section built from the entries ``names`` is made of: each one's ``data`` (or its health, for a health
    section) and whether it is fresh. The exposition's default key (``Section.key`` None)."""
    out: list[object] = []
    for name in names:
        entry = view.entries.get(name)
        if entry is None:
            out += (name, None, None)
            continue
        out += (name, entry.health if health else data(entry.data), entry.health.fresh(view.now))
    return tuple(out)


def _without_time(data: object) -> object:
    return data.what() if isinstance(data, DeviceWatchState) else data


def _timeless_key(*inputs: str) -> Callable[[StoreView], tuple[object, ...]]:
    """``inputs_key`` with the devices state taken without when it was read (``DeviceWatchState.what``): a
    collection that found the same state renders nothing again."""
    return lambda view: inputs_key(view, inputs, data=_without_time)


_DEVICES_KEY = _timeless_key("devices")
_STATE_FILES_KEY = _timeless_key("devices", "kernel-log")


def _kernel_key(view: StoreView) -> tuple[object, ...]:
    """The kernel section reads the kernel-log state and the list of GPUs only (not their changing readings)."""
    entry = view.entries.get("kernel-log")
    return (entry.data if entry is not None else None, tuple(known_gpus(view)))


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
        clock: Callable[[], float] = wall_time,
        push: PushStatus | None = None,
        exporter_metrics: ExporterMetrics | None = None,
        http: Callable[[], StatsView] | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._select(config)
        self._clock = clock
        self._push = push  # the Alertmanager push's health, when --alertmanager.url is set
        # serve's process_*, python_* and scrape-duration series (not --web.disable-exporter-metrics; never once)
        self._exporter = exporter_metrics
        self._http = http  # serve's HTTP server counters (exporter.server.stats), read per scrape
        self._verdict_memo = VerdictMemo(config.health_event_window_seconds)  # the verdict, while it holds
        # serve's verdict file for node-problem-detector (exporter.sinks.health_file): how its last write went
        self.verdict_file_status: Callable[[], StateFileStatus] | None = None

    def reconfigure(
        self, config: Config, push: PushStatus | None, exporter_metrics: ExporterMetrics | None = None
    ) -> None:
        """A reloaded configuration (SIGHUP): the next build uses it. The rendering cache must be dropped too
        (``Exposition.invalidate``): its keys are the store's entries, not the configuration."""
        self._config, self._push, self._exporter = config, push, exporter_metrics
        self._verdict_memo = VerdictMemo(config.health_event_window_seconds)
        self._select(config)

    def _select(self, config: Config) -> None:
        # --metrics.disable / --metrics.enable-only: the groups off, and the names of their families
        self._off = config.metric_groups_disabled
        self._hidden = hidden_family_names(self._off)

    def _on(self, *groups: str) -> bool:
        """Whether any of ``groups`` is exported."""
        return any(g not in self._off for g in groups)

    def _shown(self, families: Iterable[Metric]) -> Iterator[Metric]:
        """``families`` without those of disabled groups: dropped before anything renders them."""
        hidden = self._hidden
        return (f for f in families if f.name not in hidden) if hidden else iter(families)

    def sections(self) -> tuple[Section, ...]:
        """The exposition in the order it is served, as sections each built from a few sources' entries: the
        rendering cache (``exporter.metrics.exposition``) re-renders a section only when those entries change.
        A section whose metric groups are all disabled is left out; the others drop the families of disabled
        groups before they are rendered."""
        every = None  # every source: the section reads all of them
        on = self._on
        candidates = (
            (True, Section("gpus", ("amd-smi", "rocm-smi", "sysfs"), self._gpus)),  # core: sysfs readable
            (
                on("processes", "processes.gpu", "attribution"),
                Section("processes", ("processes", "amd-smi", "rocm-smi"), self._processes),
            ),
            (
                on("attribution"),
                Section("kubernetes", ("kubernetes", "processes", "sysfs", "amd-smi", "rocm-smi"), self._kubernetes),
            ),
            # core: the conditions and the baseline
            (True, Section("devices", ("devices",), self._devices, key=_DEVICES_KEY)),
            (on("kernel"), Section("kernel", every, self._kernel, key=_kernel_key)),
            # core: the health verdict, re-rendered when it changes (an event's window ends without any input changing)
            (True, Section("health-verdict", (*VERDICT_SOURCES, PROCESS_SOURCE), self._verdict, key=self._verdict_key)),
            (True, Section("state-files", ("devices", "kernel-log"), self._state_files, key=self._state_files_key)),
            # every run of every source changes its health: rendered per scrape, not per run
            (True, Section("health", every, self._health, health=True, lazy=True)),
        )
        out = [section for wanted, section in candidates if wanted]
        if self._http is not None:
            out.append(Section("http", (), self._http_families, volatile=True))
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
            yield from self._shown(gpu_families(gpus))
            if self._on("gpu.topology", "gpu.topology.pairs"):
                links = merge_links(smi_reports(view))
                yield from self._shown(topology_families(links, pairs=self._on("gpu.topology.pairs")))

    def _processes(self, view: StoreView) -> Iterator[Metric]:
        processes = _processes(view)
        if processes is not None:
            if self._on("processes"):
                yield from process_families(processes, self._config.top_processes)
            if self._on("processes.gpu", "attribution"):
                yield from self._shown(process_gpu_families(processes, self._config.top_processes))

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
        yield from self._shown(device_families(devices if isinstance(devices, DeviceWatchState) else None))

    def _kernel(self, view: StoreView) -> Iterator[Metric]:
        # Kernel-log counters are cumulative counts of what was read: they stay exported when the reader
        # fails (its health series say so), so increase() keeps working across a reader outage.
        entry = view.entries.get("kernel-log")
        if entry is not None:
            kernel = entry.data if isinstance(entry.data, KernelLogState) else None
            known = known_gpus(view)
            # zero-initialised for physical GPUs: the kernel names a partition's physical function, never the
            # partition's own address (8 x 37 series on a CPX MI300X host, not 64 x 37)
            yield from kernel_families(kernel, sorted({physical_gpu(bdf, known) for bdf in known}))

    def _verdict_key(self, view: StoreView) -> tuple[object, ...]:
        return (self._verdict_memo.verdict(view),)

    def _verdict(self, view: StoreView) -> Iterator[Metric]:
        yield from verdict_families(self._verdict_memo.verdict(view))

    def _state_files_key(self, view: StoreView) -> tuple[object, ...]:
        status = self.verdict_file_status
        return (*_STATE_FILES_KEY(view), status() if status is not None else None)

    def _state_files(self, view: StoreView) -> Iterator[Metric]:
        files: list[StateFileStatus] = []
        if self.verdict_file_status is not None:
            files.append(self.verdict_file_status())
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

    def _http_families(self, view: StoreView) -> Iterator[Metric]:
        if self._http is not None:
            yield from http_server_families(self._http())

    def _exporter_families(self, view: StoreView) -> Iterator[Metric]:
        if self._exporter is not None:
            yield from self._exporter.families()


def make_registry(
    store: SnapshotStore,
    config: Config,
    clock: Callable[[], float] = wall_time,
    push: PushStatus | None = None,
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RocmCollector(store, config, clock, push))
    return registry
