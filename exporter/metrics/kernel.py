"""Kernel-log metric families (contract section 4). Pure: the state in, metric families out."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.metrics.names import KERNEL_EVENT_LAST, KERNEL_EVENTS, KERNEL_PCIE_AER, KERNEL_RECORDS_LOST
from exporter.model.kernel import (
    AER_SEVERITIES,
    KERNEL_CLASSES,
    UNKNOWN_DEVICE,
    ZERO_INITIALISED_CLASSES,
    KernelLogState,
)
from exporter.parsers.common import normalize_bdf


def kernel_families(state: KernelLogState | None, known_gpus: Iterable[str]) -> Iterator[Metric]:
    """``rocm_kernel_events_total`` zero-initialised for every known GPU, ``unknown`` (events no GPU could be
    attributed to: their first one must move a counter that already exists, or ``increase()`` never sees it) and
    every class an alert reads that way (``ZERO_INITIALISED_CLASSES``), the other classes from their first event;
    the PCIe AER events split by every AER severity (an alert reads each); the last event time per (GPU, class)
    that has one, and the kmsg records lost.

    With no state yet (the source has not run successfully) nothing is emitted: a zero would be a lie when the
    persisted counts are higher, and a counter that jumps from 0 looks like a burst of events.
    """
    if state is None:
        return
    gpus = {b for b in (normalize_bdf(g) for g in known_gpus) if b} | {UNKNOWN_DEVICE}
    zeroed = [c for c in KERNEL_CLASSES if c in ZERO_INITIALISED_CLASSES]
    events = CounterMetricFamily(KERNEL_EVENTS.name, KERNEL_EVENTS.help, labels=KERNEL_EVENTS.labels)
    counted: dict[str, set[str]] = {}
    for bus, cls in state.counts:
        if cls not in ZERO_INITIALISED_CLASSES:
            counted.setdefault(bus, set()).add(cls)
    order = {c: i for i, c in enumerate(KERNEL_CLASSES)}
    for bus in sorted(gpus | {b for b, _ in state.counts}):
        others = sorted(counted.get(bus, ()), key=lambda c: (order.get(c, len(order)), c))
        for cls in (*zeroed, *others):
            events.add_metric([bus, cls], float(state.counts.get((bus, cls), 0)))
    yield events
    aer = CounterMetricFamily(
        KERNEL_PCIE_AER.name.removesuffix("_total"), KERNEL_PCIE_AER.help, labels=KERNEL_PCIE_AER.labels
    )
    for bus in sorted(gpus | {b for b, _ in state.aer_counts}):
        for sev in AER_SEVERITIES:
            aer.add_metric([bus, sev], float(state.aer_counts.get((bus, sev), 0)))
    yield aer
    last = GaugeMetricFamily(KERNEL_EVENT_LAST.name, KERNEL_EVENT_LAST.help, labels=KERNEL_EVENT_LAST.labels)
    for (bus, cls), seconds in sorted(state.last_event_seconds.items()):
        last.add_metric([bus, cls], seconds)
    yield last
    lost = CounterMetricFamily(KERNEL_RECORDS_LOST.name, KERNEL_RECORDS_LOST.help, labels=KERNEL_RECORDS_LOST.labels)
    lost.add_metric([], float(state.records_lost))
    yield lost
