"""Collect on a schedule, serve from memory.

One timer thread runs every polled source on the monotonic clock (``_Timer``): one run at a time, so a hung tool
never piles up runs; missed runs coalesce into one; jitter (a tenth of intervals of 5 s and more) so a fleet does not
run rocm-smi in lock-step. Its due times are ``time.monotonic()`` readings, so a step of the system clock (an NTP
step, a VM restored from a snapshot) neither stops collection nor runs it in a burst: APScheduler 3.x, which this
replaced, computes its run times on the wall clock, and an interval job stepped an hour back ran no more for an
hour. A source that can wait for its input (the kernel log: ``WaitingSource``) gets a thread of its own instead,
which collects whenever input arrives and at least every interval (its heartbeat), so it never reads as stale
while healthy and costs nothing while the host is quiet. The wrapper here, not the sources, records every
source's health in the store, on ``exporter.clock.wall_time`` (monotonic) readings.

No run can wedge its source or the daemon. The timer only dispatches (``_Guard``): it hands the collect to the
source's own daemon thread and returns at once, so it never blocks (nor keeps the process alive at exit). The
source's thread lives as long as the process (a tool's parent-death signal fires when the thread that started it
ends: ``exporter.sources.runner``). A tick while a run is in progress starts no other and is logged as
``source_skipped`` (info once per streak, then debug). A run still going past its deadline
(``Scheduled.deadline_seconds``: the tool's timeout plus a grace, or ``IN_PROCESS_DEADLINE_SECONDS``) is recorded as
a failure (``up`` 0) at every tick until it returns. So at most one thread per source is ever stuck; a read in
uninterruptible sleep leaves exactly that daemon thread behind (``exporter.sources.deadline``).
"""

from __future__ import annotations

import contextvars
import heapq
import queue
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from exporter.clock import wall_time
from exporter.logging import get_logger
from exporter.sources import Source, SourceAbsent, SourceError
from exporter.sources.wakeup import Interrupt, wait_readable
from exporter.store import SnapshotStore

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

log = get_logger("scheduler")

# Collects of a waiting source are at least this far apart: a burst of records is read in one go, not one
# collect per record (a record still counts within 100 ms of being written).
MIN_GAP_SECONDS = 0.05
SHUTDOWN_JOIN_SECONDS = 2.0
# How long a run of an in-process source (sysfs, devices, processes) may take before it counts as stuck. The
# sysfs source's own per-GPU deadline is far below: one hung GPU never makes the whole source stuck.
IN_PROCESS_DEADLINE_SECONDS = 10.0
# Past a tool's own timeout (by then the runner has killed it), how long its source may take to finish the run.
RUN_GRACE_SECONDS = 5.0


@runtime_checkable
class WaitingSource(Protocol):
    """A source that can block until it has input (poll on a device, inotify on a file)."""

    def wait(self, timeout_seconds: float, interrupt: Interrupt) -> None: ...


class Scheduled(msgspec.Struct, frozen=True):
    source: Source[object]
    interval_seconds: float
    timeout_seconds: float = 0.0  # the longest one run may take (tools); 0 for in-process sources
    # Every name the source may report under (the auto-selected smi tool reports as the tool it chose).
    names: tuple[str, ...] = ()

    @property
    def max_age_seconds(self) -> float:
        """How old the last success may be before the source's values stop being exported."""
        return 3 * self.interval_seconds + self.timeout_seconds

    @property
    def deadline_seconds(self) -> float:
        """How long one run may take before it counts as stuck."""
        return self.timeout_seconds + RUN_GRACE_SECONDS if self.timeout_seconds > 0 else IN_PROCESS_DEADLINE_SECONDS


def run_source(source: Source[object], store: SnapshotStore) -> bool:
    """Run one collection and record its health; never raises. Returns whether it succeeded."""
    try:
        return _run_source(source, store)
    finally:  # whatever it recorded under, none of its names waits for a first run any more
        store.first_run_over((source.name, *getattr(source, "names", ())))


def _run_source(source: Source[object], store: SnapshotStore) -> bool:
    started = time.monotonic()
    absent_label = getattr(source, "absent_label", None)  # a source whose tools may all be missing (auto smi)
    try:
        data = source.collect()
    except SourceAbsent as exc:  # nothing of it installed: a state, not a failure (no up series, no alert)
        for name in getattr(source, "names", ()) or (source.name,):
            store.record_unused(name)
        store.set_absent(exc.label, str(exc))
        return True
    except SourceError as exc:
        if absent_label is not None:
            store.set_absent(absent_label, None)
        # The name is read after the run: an auto-selecting source names the tool it ended up using, or, when none
        # worked, gives each tool's own error.
        duration = time.monotonic() - started
        for name, error in (exc.by_source or {source.name: str(exc)}).items():
            _record_failure(store, name, error, duration, log.bind(source=name))
        return False
    except Exception as exc:  # a bug in a source must not stop the others or the daemon
        bound = log.bind(source=source.name)
        error = f"internal error: {exc!r}"
        previous = store.view(wall_time()).entries.get(source.name)
        if previous is None or previous.health.last_error != error:  # the traceback once, not every interval
            bound.exception("source_crashed")
        _record_failure(store, source.name, error, time.monotonic() - started, bound)
        return False
    duration = time.monotonic() - started
    name = source.name
    bound = log.bind(source=name)
    previous = store.view(wall_time()).entries.get(name)
    store.record_success(name, data, duration, wall_time())
    if absent_label is not None:
        store.set_absent(absent_label, None)
    for other in getattr(source, "names", ()):  # the auto-selected tool: the one not chosen is not in use
        if other != name:
            store.record_unused(other)
    if previous is not None and previous.health.up is False:
        bound.info("source_recovered", duration_seconds=round(duration, 3))
    else:
        bound.debug("source_ok", duration_seconds=round(duration, 3))
    return True


def _record_failure(store: SnapshotStore, name: str, error: str, duration: float, bound: FilteringBoundLogger) -> None:
    previous = store.view(wall_time()).entries.get(name)
    store.record_failure(name, error, duration, wall_time())
    # Log when a source starts failing or fails differently; repeats of the same failure go to debug.
    if previous is None or previous.health.up is not False or previous.health.last_error != error:
        bound.warning("source_failed", error=error, duration_seconds=round(duration, 3))
    else:
        bound.debug("source_still_failing", error=error)


class _Run:
    """One collect of a polled source, in the source's daemon thread."""

    __slots__ = ("done", "started")

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()


class _Guard:
    """Runs a polled source so that no run blocks its caller for long: one run at a time, each in the source's
    daemon thread (started with the first run, kept: a run never starts while one is in progress, so the thread
    is free whenever a run is due), a failure recorded at every tick while a run is past its deadline."""

    def __init__(self, job: Scheduled, store: SnapshotStore) -> None:
        self._job = job
        self._store = store
        self._lock = threading.Lock()
        self._run: _Run | None = None
        self._skips = 0  # ticks skipped since the last run started
        self._stopping = False
        self._runs: queue.SimpleQueue[tuple[_Run, contextvars.Context] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def busy(self) -> bool:
        run = self._run
        return run is not None and not run.done.is_set()

    def stop(self) -> None:
        """Start no more runs; the source's thread ends once the run in progress (if any) returns."""
        with self._lock:
            self._stopping = True
            if self._thread is not None:
                self._runs.put(None)
                self._thread = None

    def tick(self) -> None:
        """The timer's call: start a run unless one is in progress; returns at once."""
        with self._lock:
            if self._stopping:
                return
            if self._run is not None and not self._run.done.is_set():
                self._still_running(self._run)
                return
            self._start()

    def run_and_wait(self) -> None:
        """One run, waited for up to its deadline (the ``once`` command)."""
        with self._lock:
            run = self._run if self.busy() else self._start()
        if run is not None and not run.done.wait(max(0.0, self._job.deadline_seconds - self._age(run))):
            with self._lock:
                self._still_running(run)

    @staticmethod
    def _age(run: _Run) -> float:
        return time.monotonic() - run.started

    def _start(self) -> _Run | None:
        if self._thread is None or not self._thread.is_alive():
            name = f"collect-{self._job.source.name}"
            thread = threading.Thread(target=self._loop, name=name, daemon=True)  # a stuck read must not hold the exit
            try:
                thread.start()
            except RuntimeError as exc:  # can't start new thread: out of threads or memory
                bound = log.bind(source=self._job.source.name)
                error = f"cannot start a collect thread: {exc}"
                _record_failure(self._store, self._job.source.name, error, 0.0, bound)
                return None
            self._thread = thread
        run = _Run()
        # the caller's log context (``once``: the service and version)
        self._runs.put((run, contextvars.copy_context()))
        self._run = run
        self._skips = 0
        return run

    def _loop(self) -> None:
        while (item := self._runs.get()) is not None:
            run, context = item
            context.run(self._execute, run)

    def _still_running(self, run: _Run) -> None:
        """A tick while ``run`` is in progress (the lock is held): skipped, or a failure once past the deadline."""
        age = self._age(run)
        name = self._job.source.name
        if age < self._job.deadline_seconds:
            self._skips += 1
            level = log.info if self._skips == 1 else log.debug
            level("source_skipped", source=name, running_seconds=round(age, 3), reason="the previous run is running")
            return
        error = f"a run did not return within {self._job.deadline_seconds:g}s; no new run starts until it does"
        _record_failure(self._store, name, error, age, log.bind(source=name))
        self._store.first_run_over(self._job.names)

    def _execute(self, run: _Run) -> None:
        try:
            run_source(self._job.source, self._store)
        finally:
            run.done.set()


def jitter_seconds(interval_seconds: float) -> float:
    """The most a run is moved past its due time: a tenth of intervals of 5 s and more, none below."""
    return interval_seconds * 0.1 if interval_seconds >= 5 else 0.0


def next_due(first: float, interval_seconds: float, now: float) -> float:
    """The first point of the grid ``first + k * interval`` after ``now`` (monotonic seconds): runs missed while a
    thread was not scheduled, or the machine was suspended, collapse into the one due now."""
    if now < first:
        return first
    interval = max(interval_seconds, 0.001)
    return first + (int((now - first) // interval) + 1) * interval


class _Timer:
    """The polled sources' ticks, each on its own grid of the monotonic clock, in one thread that sleeps in
    poll(2) on the interrupt until the next is due."""

    def __init__(self, guards: Sequence[tuple[Scheduled, _Guard]], interrupt: Interrupt) -> None:
        self._interrupt = interrupt
        start = time.monotonic()
        self._jobs = list(guards)
        # (due, index, grid point): the grid point without its jitter, so jitter never accumulates
        self._heap = [(start, i, start) for i in range(len(self._jobs))]  # first run at once
        heapq.heapify(self._heap)
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_seconds: float) -> None:
        self._thread.join(timeout_seconds)

    def _loop(self) -> None:
        heap, interrupt = self._heap, self._interrupt
        while heap and not interrupt.is_set():
            due, i, point = heap[0]
            wait = due - time.monotonic()
            if wait > 0:
                interrupt_wait(interrupt, wait)
                continue
            job, guard = self._jobs[i]
            try:
                guard.tick()
            except Exception:  # a bug in dispatching must not end every source's schedule
                log.exception("source_tick_failed", source=job.source.name)
            point = next_due(point, job.interval_seconds, time.monotonic())
            jitter = jitter_seconds(job.interval_seconds)
            heapq.heapreplace(heap, (point + (random.uniform(0, jitter) if jitter else 0.0), i, point))


class Scheduler:
    def __init__(self, store: SnapshotStore, jobs: Sequence[Scheduled]) -> None:
        self._store = store
        self._jobs = list(jobs)
        self._timer: _Timer | None = None
        self._interrupt: Interrupt | None = None
        self._threads: list[threading.Thread] = []
        self._guards: dict[int, _Guard] = {}  # id(job) -> its guard, made on first use
        for job in self._jobs:
            for name in job.names or (job.source.name,):
                store.register(name, job.interval_seconds, job.max_age_seconds)

    @property
    def store(self) -> SnapshotStore:
        return self._store

    @property
    def names(self) -> tuple[str, ...]:
        """Every name the jobs report under."""
        return tuple(name for job in self._jobs for name in (job.names or (job.source.name,)))

    def _guard(self, job: Scheduled) -> _Guard:
        guard = self._guards.get(id(job))
        if guard is None:
            guard = self._guards[id(job)] = _Guard(job, self._store)
        return guard

    def start(self) -> None:
        interrupt = self._interrupt = Interrupt()
        polled: list[tuple[Scheduled, _Guard]] = []
        for job in self._jobs:
            if isinstance(job.source, WaitingSource):
                thread = threading.Thread(
                    target=self._follow, args=(job, interrupt), name=f"source-{job.source.name}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            else:
                polled.append((job, self._guard(job)))
        self._timer = _Timer(polled, interrupt)
        self._timer.start()

    def _follow(self, job: Scheduled, interrupt: Interrupt) -> None:
        """A waiting source's thread: collect, then sleep until input, the heartbeat or shutdown."""
        source = job.source
        assert isinstance(source, WaitingSource)
        while not interrupt.is_set():
            started = time.monotonic()
            run_source(job.source, self._store)
            try:
                source.wait(job.interval_seconds, interrupt)
            except Exception:  # a bug in waiting must not turn into a busy loop or a dead source
                log.exception("source_wait_failed", source=job.source.name)
                interrupt_wait(interrupt, min(job.interval_seconds, 1.0))
            gap = MIN_GAP_SECONDS - (time.monotonic() - started)
            if gap > 0:
                interrupt_wait(interrupt, gap)

    def run_all_once(self) -> None:
        """One collection of every source in order (the ``once`` command), each waited for up to its deadline."""
        for job in self._jobs:
            self._guard(job).run_and_wait()

    def shutdown(self) -> None:
        """Stop scheduling and close the sources. Never waits for a polled run in progress: it is a daemon thread,
        and the daemon has killed the tools first (runner.stop_all)."""
        for guard in self._guards.values():
            guard.stop()
        if self._interrupt is not None:
            self._interrupt.set()  # the timer only dispatches: it ends at once
            if self._timer is not None:
                self._timer.join(SHUTDOWN_JOIN_SECONDS)
                self._timer = None
            for thread in self._threads:  # a collect in progress finishes (it never blocks); then close below
                thread.join(SHUTDOWN_JOIN_SECONDS)
            self._threads.clear()
            self._interrupt.close()
            self._interrupt = None
        for job in self._jobs:
            running = self._guards.get(id(job))
            if running is not None and running.busy():
                # Closing under a running collect is not safe; the process is about to exit anyway.
                log.info("source_not_closed", source=job.source.name, reason="a run is in progress")
                continue
            try:
                job.source.close()
            except Exception:
                log.exception("source_close_failed", source=job.source.name)


def interrupt_wait(interrupt: Interrupt, seconds: float) -> None:
    """Sleep up to ``seconds``, less when the interrupt is set."""
    if not interrupt.is_set():
        wait_readable([interrupt.fileno()], seconds)
