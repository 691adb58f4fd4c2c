"""The snapshot store: the only state the scheduler threads and the scrape share.

Each source has an entry: its last good data and its health. A scrape reads a consistent ``StoreView`` (one
lock acquisition, no I/O) and never waits for a source.

Staleness rule: a source's data is exported while its last success is at most ``max_age_seconds`` old
(three intervals plus the source's timeout, see ``scheduler``). Past that its values disappear from
``/metrics`` (``rocm_watchdog_source_stale{source}`` becomes 1) instead of being served as if fresh; its
health series stay.

Times are ``exporter.clock.wall_time()`` readings (unix seconds counted on the monotonic clock), so an age here is a
monotonic age: a step of the system clock makes no source stale, nor a stale one fresh.

Readiness rule: a registered source is ``pending`` until its first run has finished, whether it succeeded or failed
(``StoreView.pending``; serve's ``/readyz`` answers 503 while any is).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

import msgspec
from msgspec.structs import replace


class SourceHealth(msgspec.Struct, frozen=True):
    interval_seconds: float
    max_age_seconds: float
    up: bool | None = None  # None: never ran yet
    duration_seconds: float | None = None
    last_attempt: float | None = None  # unix time
    last_success: float | None = None  # unix time
    failures_total: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    pending: bool = False  # registered, its first run not finished yet

    def fresh(self, now: float) -> bool:
        return self.last_success is not None and now - self.last_success <= self.max_age_seconds


class SourceEntry(msgspec.Struct, frozen=True):
    health: SourceHealth
    data: object | None = None  # the last good snapshot the source returned


class StoreView(msgspec.Struct, frozen=True):
    now: float
    entries: Mapping[str, SourceEntry]
    # label -> why: sources with nothing installed to read (``SourceAbsent``), rocm_watchdog_source_absent
    absent: Mapping[str, str] = msgspec.field(default_factory=dict)

    def fresh_data(self, name: str) -> object | None:
        """The source's last good data, or None when it never succeeded or its data is stale."""
        entry = self.entries.get(name)
        if entry is None or not entry.health.fresh(self.now):
            return None
        return entry.data

    def fresh_until(self) -> float:
        """Until when every fresh entry stays fresh (exclusive; ``inf``: none is fresh): a stale entry stays stale
        until the source records again, so what the view's fresh data is can change with time only then."""
        bounds = (
            e.health.last_success + e.health.max_age_seconds
            for e in self.entries.values()
            if e.health.last_success is not None and e.health.fresh(self.now)
        )
        return min(bounds, default=math.inf)

    def pending(self) -> tuple[str, ...]:
        """The sources whose first run has not finished yet (not ready while there is one)."""
        return tuple(sorted(name for name, entry in self.entries.items() if entry.health.pending))


class SnapshotStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, SourceEntry] = {}
        self._absent: dict[str, str] = {}
        self._listeners: list[Callable[[str], None]] = []

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(name)`` after every recorded run of a source, in the scheduler's thread and outside the
        lock. A listener only signals (sets an event); it never blocks or does I/O, or it would hold the source."""
        with self._lock:
            self._listeners.append(listener)

    def _notify(self, name: str) -> None:
        with self._lock:
            listeners = tuple(self._listeners)
        for listener in listeners:
            listener(name)

    def register(self, name: str, interval_seconds: float, max_age_seconds: float) -> None:
        """A source that will record under ``name``. Registered again (a reloaded configuration), its data and
        health are kept and only its interval and staleness limit change: no gap in /metrics, no counter reset."""
        with self._lock:
            old = self._entries.get(name)
            if old is None:
                self._entries[name] = SourceEntry(SourceHealth(interval_seconds, max_age_seconds, pending=True))
            else:
                health = replace(old.health, interval_seconds=interval_seconds, max_age_seconds=max_age_seconds)
                self._entries[name] = SourceEntry(health, old.data)

    def unregister(self, names: Iterable[str]) -> None:
        """Sources that no longer run (switched off by a reloaded configuration): their series go."""
        with self._lock:
            for name in names:
                self._entries.pop(name, None)

    def _entry(self, name: str) -> SourceEntry:
        entry = self._entries.get(name)
        if entry is None:  # a source that registers itself late (auto-selected smi tool)
            entry = SourceEntry(SourceHealth(0.0, float("inf")))
        return entry

    def record_success(self, name: str, data: object, duration_seconds: float, now: float) -> None:
        with self._lock:
            entry = self._entry(name)
            health = replace(
                entry.health,
                up=True,
                duration_seconds=duration_seconds,
                last_attempt=now,
                last_success=now,
                consecutive_failures=0,
                last_error=None,
                pending=False,
            )
            self._entries[name] = SourceEntry(health, data)
        self._notify(name)

    def record_failure(self, name: str, error: str, duration_seconds: float, now: float) -> None:
        with self._lock:
            entry = self._entry(name)
            health = replace(
                entry.health,
                up=False,
                duration_seconds=duration_seconds,
                last_attempt=now,
                failures_total=entry.health.failures_total + 1,
                consecutive_failures=entry.health.consecutive_failures + 1,
                last_error=error,
                pending=False,
            )
            self._entries[name] = SourceEntry(health, entry.data)  # keep the last good data
        self._notify(name)

    def record_unused(self, name: str) -> None:
        """A name the source no longer reports under (the smi tool auto-selection chose the other tool): no up,
        duration or staleness series, as before its first run; its failure count stays."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or (entry.health.up is None and not entry.health.pending):
                return
            health = replace(
                entry.health, up=None, duration_seconds=None, consecutive_failures=0, last_error=None, pending=False
            )
            self._entries[name] = SourceEntry(health, None)
        self._notify(name)

    def set_absent(self, label: str, why: str | None) -> None:
        """``label``'s tools are not installed (``why``), or no longer absent (None)."""
        with self._lock:
            if self._absent.get(label) == why:
                return
            if why is None:
                self._absent.pop(label, None)
            else:
                self._absent[label] = why
        self._notify(label)

    def first_run_over(self, names: Iterable[str]) -> None:
        """The first run of the source that reports under ``names`` has finished (or passed its deadline): any of
        them it recorded nothing under is no longer pending, and has no series (as a name not in use)."""
        changed = False
        with self._lock:
            for name in names:
                entry = self._entries.get(name)
                if entry is not None and entry.health.pending:
                    self._entries[name] = SourceEntry(replace(entry.health, pending=False), entry.data)
                    changed = True
        if changed:
            for name in names:
                self._notify(name)

    def view(self, now: float) -> StoreView:
        with self._lock:
            return StoreView(now, MappingProxyType(dict(self._entries)), MappingProxyType(dict(self._absent)))
