"""The health verdict of every GPU and partition: ``healthy``, ``unhealthy`` or ``unknown``. Pure: the inputs and
the clock are arguments (``evaluate(inputs, now, window)``), so a table test with fixed timestamps drives it, and
the caller chooses the clock (wall time today; monotonic-derived times work as long as inputs and ``now`` share it).

Rules, in order (the reasons are ``exporter.watchdog.health_reasons.HEALTH_REASONS``):

1. ``unhealthy`` while any reason of the table holds on the GPU: an active condition of its kind on the GPU
   (``render_renumbered`` only while a KFD process that started before the renumbering holds the GPU), or a
   critical kernel event on the GPU (or its physical GPU) whose own timestamp is less than ``window`` seconds ago.
   The window runs from the event's timestamp, which the kernel-log source persists with its cursor: a restart
   keeps it, and an old record (a 15-hour-old reset read at start) never makes a GPU unhealthy. An event stamped
   more than ``window`` in the future (a clock that went back) is not trusted either.
2. ``unknown`` while a source the verdict needs has not finished a first run, failed since, or its data is stale
   (``store`` staleness); or while the GPU's sysfs read failed or timed out. Unknown never counts as unhealthy.
3. ``unknown`` with reason ``node_kernel_event`` while a critical kernel event under ``pci_bus="unknown"`` is
   within the window: it may be any GPU's.
4. ``healthy`` otherwise.

A GPU known only from the baseline (``gpu_missing``) is judged too: it is unhealthy, not absent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Literal

import msgspec

from exporter.model.devices import Condition
from exporter.model.kernel import UNKNOWN_DEVICE
from exporter.model.processes import ProcessInfo
from exporter.watchdog.health_reasons import HEALTH_REASONS, HealthState

SourceStatus = Literal["fresh", "stale", "never", "failing"]
KFD_PATH = "/dev/kfd"
RENDER_PREFIX = "/dev/dri/renderD"
# The sources each input comes from; a source that is switched off is not waited for.
CONDITION_SOURCE = "devices"
KERNEL_SOURCE = "kernel-log"
SYSFS_SOURCE = "sysfs"
PROCESS_SOURCE = "processes"


class Process(msgspec.Struct, frozen=True):
    """What the verdict needs of a KFD process: when it started (Unix time; None: not known) and its GPUs."""

    pid: int
    start_time: float | None
    gpus: frozenset[str]


class HealthInputs(msgspec.Struct, frozen=True):
    gpus: tuple[str, ...]  # every GPU and partition to judge (pci_bus)
    physical: Mapping[str, str] = msgspec.field(default_factory=dict)  # partition -> its physical GPU
    conditions: tuple[Condition, ...] = ()  # the active conditions of fresh devices data
    kernel_last: Mapping[tuple[str, str], float] = msgspec.field(default_factory=dict)  # (pci_bus, class) -> time
    processes: tuple[Process, ...] | None = None  # None: the processes source has no fresh data
    sources: Mapping[str, SourceStatus] = msgspec.field(default_factory=dict)  # the enabled sources it reads
    sysfs_unreadable: frozenset[str] = frozenset()  # GPUs whose sysfs read failed or timed out


class GpuHealth(msgspec.Struct, frozen=True):
    pci_bus: str
    state: HealthState
    reasons: tuple[str, ...] = ()  # unhealthy: its reasons; unknown through a node event: node_kernel_event
    why: str = ""  # unknown for another cause: which ("devices source stale", "sysfs read failed")


class HealthVerdict(msgspec.Struct, frozen=True):
    gpus: tuple[GpuHealth, ...] = ()
    node_events: tuple[str, ...] = ()  # critical classes under pci_bus="unknown" within the window
    not_fresh: tuple[str, ...] = ()  # the sources it reads that are stale, failing or not through a first run

    def count(self, state: HealthState) -> int:
        return sum(1 for g in self.gpus if g.state == state)

    @property
    def node_state(self) -> HealthState:
        """The node's: unhealthy when a GPU is, else unknown when one is (or, with no GPU known, while a source has
        not told yet: before the first runs there is no GPU to judge), else healthy (also with no GPU)."""
        states = {g.state for g in self.gpus}
        if "unhealthy" in states:
            return "unhealthy"
        return "unknown" if "unknown" in states or (not self.gpus and self.not_fresh) else "healthy"


def processes_from(infos: Iterable[ProcessInfo]) -> tuple[Process, ...]:
    return tuple(Process(p.pid, p.start_time, frozenset(g.pci_bus for g in p.gpus)) for p in infos)


def _within(t: float | None, now: float, window: float) -> bool:
    return t is not None and -window < now - t < window


def valid_until(inputs: HealthInputs, now: float, window_seconds: float) -> float:
    """Until when ``evaluate(inputs, t, window_seconds)`` is ``evaluate(inputs, now, window_seconds)`` for every
    ``t`` from ``now`` on (exclusive; ``inf``: for good). Time enters the verdict only through the kernel events'
    window (``_within``): an event counts from ``t - window`` (exclusive) to ``t + window`` (exclusive), so the
    verdict can change only at those instants. A boundary at ``now`` itself gives ``now``: valid at no later time.
    """
    bounds = (b for t in inputs.kernel_last.values() for b in (t - window_seconds, t + window_seconds) if b >= now)
    return min(bounds, default=math.inf)


def _condition_holds(c: Condition, gpu: str) -> bool:
    spec = HEALTH_REASONS[c.kind]
    if spec.on == "gpu":
        return c.subject == gpu
    if c.subject == KFD_PATH:
        return True
    if spec.on == "render":
        return c.pci_bus == gpu and c.subject.startswith(RENDER_PREFIX)
    return c.pci_bus == gpu  # "nodes": a card or render node of the GPU


def _in_use(c: Condition, gpu: str, processes: tuple[Process, ...]) -> bool:
    # A process whose start is not known may have opened the old number: it counts.
    return any(gpu in p.gpus and (p.start_time is None or p.start_time < c.since) for p in processes)


def evaluate(inputs: HealthInputs, now: float, window_seconds: float) -> HealthVerdict:
    """The verdict at ``now`` (same clock as the inputs' timestamps) with events counting for ``window_seconds``."""
    by_gpu: dict[str, list[Condition]] = {}
    for c in inputs.conditions:
        if c.active and c.kind in HEALTH_REASONS and HEALTH_REASONS[c.kind].input == "condition":
            for gpu in inputs.gpus:
                if _condition_holds(c, gpu):
                    by_gpu.setdefault(gpu, []).append(c)
    reason_of = {c: name for name, spec in HEALTH_REASONS.items() if spec.input == "kernel_event" for c in spec.classes}
    node_classes = next(s.classes for s in HEALTH_REASONS.values() if s.input == "node_kernel_event")
    last = inputs.kernel_last
    node_events = tuple(c for c in node_classes if _within(last.get((UNKNOWN_DEVICE, c)), now, window_seconds))
    recent: dict[str, set[str]] = {}  # pci_bus -> reasons of its critical events within the window
    for (bus, cls), t in last.items():
        name = reason_of.get(cls)
        if name is not None and _within(t, now, window_seconds):
            recent.setdefault(bus, set()).add(name)
    not_fresh = sorted((name, status) for name, status in inputs.sources.items() if status != "fresh")
    out: list[GpuHealth] = []
    for gpu in inputs.gpus:
        reasons: list[str] = []
        need_processes = False
        for c in by_gpu.get(gpu, ()):
            if HEALTH_REASONS[c.kind].in_use:
                if inputs.processes is None:
                    need_processes = True
                    continue
                if not _in_use(c, gpu, inputs.processes):
                    continue
            reasons.append(c.kind)
        buses = {gpu, inputs.physical.get(gpu, gpu)}
        for bus in buses:
            reasons.extend(recent.get(bus, ()))
        if reasons:
            out.append(GpuHealth(gpu, "unhealthy", tuple(sorted(set(reasons)))))
            continue
        why = ", ".join(f"{name} source {status}" for name, status in not_fresh)
        if not why and need_processes:
            why = "render node renumbered, processes source has no data"
        if not why and buses & inputs.sysfs_unreadable:
            why = "sysfs read failed"
        if why:
            out.append(GpuHealth(gpu, "unknown", why=why))
        elif node_events:
            out.append(GpuHealth(gpu, "unknown", ("node_kernel_event",)))
        else:
            out.append(GpuHealth(gpu, "healthy"))
    return HealthVerdict(tuple(out), node_events, tuple(name for name, _ in not_fresh))
