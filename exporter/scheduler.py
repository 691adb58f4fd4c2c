"""Collect on a schedule, serve from memory.

One APScheduler 3.x interval job per polled source (``max_instances=1`` so a hung tool never piles up runs,
``coalesce=True`` so missed runs collapse into one, jitter so a fleet does not run rocm-smi in lock-step).
A source that can wait for its input (the kernel log: ``WaitingSource``) gets a thread of its own instead,
which collects whenever input arrives and at least every interval (its heartbeat), so it never reads as stale
while healthy and costs nothing while the host is quiet. The wrapper here, not the sources, records every
source's health in the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from exporter.logging import get_logger
from exporter.sources import Source, SourceError
from exporter.sources.wakeup import Interrupt, wait_readable
from exporter.store import SnapshotStore

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

log = get_logger("scheduler")

# Collects of a waiting source are at least this far apart: a burst of records is read in one go, not one
# collect per record (a record still counts within 100 ms of being written).
MIN_GAP_SECONDS = 0.05
SHUTDOWN_JOIN_SECONDS = 2.0


@runtime_checkable
class WaitingSource(Protocol):
    """A source that can block until it has input (poll on a device, inotify on a file)."""

    def wait(self, timeout_seconds: float, interrupt: Interrupt) -> None: ...


@dataclass(frozen=True, slots=True)
class Scheduled:
    source: Source[object]
    interval_seconds: float
    timeout_seconds: float = 0.0  # the longest one run may take (tools); 0 for in-process sources
    # Every name the source may report under (the auto-selected smi tool reports as the tool it chose).
    names: tuple[str, ...] = ()

    @property
    def max_age_seconds(self) -> float:
        """How old the last success may be before the source's values stop being exported."""
        return 3 * self.interval_seconds + self.timeout_seconds


def run_source(source: Source[object], store: SnapshotStore) -> bool:
    """Run one collection and record its health; never raises. Returns whether it succeeded."""
    started = time.monotonic()
    try:
        data = source.collect()
    except SourceError as exc:
        # The name is read after the run: an auto-selecting source names the tool it ended up using.
        bound = log.bind(source=source.name)
        _record_failure(store, source.name, str(exc), time.monotonic() - started, bound)
        return False
    except Exception as exc:  # a bug in a source must not stop the others or the daemon
        bound = log.bind(source=source.name)
        error = f"internal error: {exc!r}"
        previous = store.view(time.time()).entries.get(source.name)
        if previous is None or previous.health.last_error != error:  # the traceback once, not every interval
            bound.exception("source_crashed")
        _record_failure(store, source.name, error, time.monotonic() - started, bound)
        return False
    duration = time.monotonic() - started
    name = source.name
    bound = log.bind(source=name)
    previous = store.view(time.time()).entries.get(name)
    store.record_success(name, data, duration, time.time())
    if previous is not None and previous.health.up is False:
        bound.info("source_recovered", duration_seconds=round(duration, 3))
    else:
        bound.debug("source_ok", duration_seconds=round(duration, 3))
    return True


def _record_failure(store: SnapshotStore, name: str, error: str, duration: float, bound: FilteringBoundLogger) -> None:
    previous = store.view(time.time()).entries.get(name)
    store.record_failure(name, error, duration, time.time())
    # Log when a source starts failing or fails differently; repeats of the same failure go to debug.
    if previous is None or previous.health.up is not False or previous.health.last_error != error:
        bound.warning("source_failed", error=error, duration_seconds=round(duration, 3))
    else:
        bound.debug("source_still_failing", error=error)


class Scheduler:
    def __init__(self, store: SnapshotStore, jobs: Sequence[Scheduled]) -> None:
        self._store = store
        self._jobs = list(jobs)
        self._scheduler: Any = None
        self._interrupt: Interrupt | None = None
        self._threads: list[threading.Thread] = []
        for job in self._jobs:
            for name in job.names or (job.source.name,):
                store.register(name, job.interval_seconds, job.max_age_seconds)

    @property
    def store(self) -> SnapshotStore:
        return self._store

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler  # not for once: 40 ms of imports

        scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=timezone.utc,
        )
        now = datetime.now(timezone.utc)
        interrupt = self._interrupt = Interrupt()
        for job in self._jobs:
            if isinstance(job.source, WaitingSource):
                thread = threading.Thread(
                    target=self._follow, args=(job, interrupt), name=f"source-{job.source.name}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
                continue
            scheduler.add_job(
                run_source,
                "interval",
                args=(job.source, self._store),
                seconds=job.interval_seconds,
                jitter=job.interval_seconds * 0.1 if job.interval_seconds >= 5 else None,
                next_run_time=now,  # first run at once, not one interval after start
                id=job.source.name,
                name=job.source.name,
            )
        scheduler.start()
        self._scheduler = scheduler

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
        """One collection of every source in order (the ``once`` command)."""
        for job in self._jobs:
            run_source(job.source, self._store)

    def shutdown(self) -> None:
        if self._scheduler is not None:
            # Do not wait for a job stuck on a tool: the daemon kills the tools first (runner.stop_all).
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self._interrupt is not None:
            self._interrupt.set()
            for thread in self._threads:  # a collect in progress finishes (it never blocks); then close below
                thread.join(SHUTDOWN_JOIN_SECONDS)
            self._threads.clear()
            self._interrupt.close()
            self._interrupt = None
        for job in self._jobs:
            try:
                job.source.close()
            except Exception:
                log.exception("source_close_failed", source=job.source.name)


def interrupt_wait(interrupt: Interrupt, seconds: float) -> None:
    """Sleep up to ``seconds``, less when the interrupt is set."""
    if not interrupt.is_set():
        wait_readable([interrupt.fileno()], seconds)
