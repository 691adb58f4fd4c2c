"""The health verdict's inputs taken from a store view, and its families. No I/O: the collector (``/metrics``) and
the verdict file for node-problem-detector (``exporter.sinks.health_file``) both build the verdict from here, so the
two never disagree."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.inventory import known_gpus, physical_gpu
from exporter.metrics import names as n
from exporter.metrics.families import new_family
from exporter.model.devices import DeviceWatchState
from exporter.model.gpu import GpuIdentity, SysfsSnapshot
from exporter.model.kernel import KernelLogState
from exporter.model.processes import ProcessSnapshot
from exporter.store import SourceEntry, StoreView
from exporter.watchdog.health import (
    CONDITION_SOURCE,
    KERNEL_SOURCE,
    PROCESS_SOURCE,
    SYSFS_SOURCE,
    HealthInputs,
    HealthVerdict,
    SourceStatus,
    evaluate,
    processes_from,
    valid_until,
)
from exporter.watchdog.health_reasons import HEALTH_STATES

VERDICT_SOURCES = (CONDITION_SOURCE, KERNEL_SOURCE, SYSFS_SOURCE)  # waited for when enabled (processes: as needed)
_UNREADABLE = frozenset({"timeout", "error"})


def source_status(entry: SourceEntry, now: float) -> SourceStatus:
    health = entry.health
    if health.fresh(now):
        return "fresh"
    if health.last_success is None:
        return "never" if health.up is None else "failing"
    return "stale"


def health_inputs(view: StoreView) -> HealthInputs:
    """What the verdict reads, from the sources' entries (those switched off have none and are not waited for)."""
    devices = view.fresh_data(CONDITION_SOURCE)
    state = devices if isinstance(devices, DeviceWatchState) else None
    identities: list[GpuIdentity] = []
    for name in (CONDITION_SOURCE, SYSFS_SOURCE):
        entry = view.entries.get(name)
        data = entry.data if entry is not None else None
        if isinstance(data, DeviceWatchState):
            data = data.sysfs
        if isinstance(data, SysfsSnapshot):
            identities.extend(data.gpus)
    gpus = set(known_gpus(view)) | {g.pci_bus for g in identities}
    if state is not None and state.baseline is not None:
        gpus.update(g.pci_bus for g in state.baseline.gpus)
    physical = {g.pci_bus: g.parent_pci_bus for g in identities if g.parent_pci_bus}
    for bdf in gpus:
        physical.setdefault(bdf, physical_gpu(bdf, gpus))
    sysfs = view.fresh_data(SYSFS_SOURCE)
    if not isinstance(sysfs, SysfsSnapshot):
        sysfs = state.sysfs if state is not None else None
    unreadable = frozenset(g.pci_bus for g in sysfs.gpus if g.sysfs_read in _UNREADABLE) if sysfs else frozenset()
    kernel_entry = view.entries.get(KERNEL_SOURCE)
    # the kernel log's counts are cumulative: what was read before an outage still holds (its staleness shows)
    kernel = kernel_entry.data if kernel_entry is not None and isinstance(kernel_entry.data, KernelLogState) else None
    procs = view.fresh_data(PROCESS_SOURCE)
    return HealthInputs(
        gpus=tuple(sorted(gpus)),
        physical=physical,
        conditions=state.active() if state is not None else (),
        kernel_last=kernel.last_event_seconds if kernel is not None else {},
        processes=processes_from(procs.processes) if isinstance(procs, ProcessSnapshot) else None,
        sources={name: source_status(view.entries[name], view.now) for name in VERDICT_SOURCES if name in view.entries},
        sysfs_unreadable=unreadable,
    )


def health_verdict(view: StoreView, window_seconds: float) -> HealthVerdict:
    return evaluate(health_inputs(view), view.now, window_seconds)


class VerdictMemo:
    """The verdict of the last view, reused for a later view while it cannot differ: the same entries (the store
    replaces an entry at each record, so identity is enough) and a time before the first instant at which a fresh
    entry turns stale or a kernel event enters or leaves the window (``valid_until``). What a scrape costs to know
    the verdict is unchanged is then a comparison per source, not the verdict's evaluation over every GPU."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._entries: tuple[SourceEntry, ...] = ()
        self._since, self._until = math.inf, -math.inf  # the times it holds for: [since, until)
        self._verdict = HealthVerdict()

    def verdict(self, view: StoreView) -> HealthVerdict:
        entries = tuple(view.entries.values())
        same = (
            self._since <= view.now < self._until
            and len(entries) == len(self._entries)
            and all(a is b for a, b in zip(entries, self._entries, strict=True))
        )
        if not same:
            inputs = health_inputs(view)
            self._verdict = evaluate(inputs, view.now, self.window_seconds)
            # staleness is the only way time changes what health_inputs reads
            self._until = min(view.fresh_until(), valid_until(inputs, view.now, self.window_seconds))
            self._entries, self._since = entries, view.now
        return self._verdict


def verdict_families(verdict: HealthVerdict) -> Iterator[Metric]:
    health = new_family(n.GPU_HEALTH)
    reason = new_family(n.GPU_HEALTH_REASON)
    for gpu in verdict.gpus:
        assert gpu.state in HEALTH_STATES
        health.add_metric([gpu.pci_bus, gpu.state], 1.0)
        for r in gpu.reasons:
            reason.add_metric([gpu.pci_bus, r], 1.0)
    yield health
    yield reason
    unhealthy = new_family(n.NODE_GPUS_UNHEALTHY)
    unhealthy.add_metric([], float(verdict.count("unhealthy")))
    yield unhealthy
