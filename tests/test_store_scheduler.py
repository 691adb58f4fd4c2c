"""Snapshot store, staleness rule and the scheduler wrapper that records health."""

from __future__ import annotations

import threading
import time

from exporter.scheduler import Scheduled, Scheduler, run_source
from exporter.sources import SourceError
from exporter.store import SnapshotStore


class ListSource:
    """A real source that returns (or raises) what a test queued."""

    def __init__(self, name: str, outcomes: list[object]) -> None:
        self.name = name
        self.outcomes = outcomes
        self.closed = False

    def collect(self) -> object:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def close(self) -> None:
        self.closed = True


def test_success_then_failure_keeps_last_good_data() -> None:
    store = SnapshotStore()
    store.register("x", 10, 30)
    source = ListSource("x", ["data-1", SourceError("tool hung"), RuntimeError("bug")])
    assert run_source(source, store)
    assert not run_source(source, store)
    assert not run_source(source, store)
    entry = store.view(time.time()).entries["x"]
    assert entry.data == "data-1"
    assert entry.health.up is False
    assert entry.health.failures_total == 2
    assert entry.health.consecutive_failures == 2
    assert entry.health.last_error is not None and "internal error" in entry.health.last_error


def test_stale_data_is_not_served() -> None:
    store = SnapshotStore()
    store.register("x", 10, 30)
    store.record_success("x", "data", 0.1, now=1000.0)
    assert store.view(1030.0).fresh_data("x") == "data"
    assert store.view(1030.5).fresh_data("x") is None
    store.record_failure("x", "boom", 0.1, now=1031.0)
    assert store.view(1031.0).fresh_data("x") is None
    assert store.view(1031.0).entries["x"].data == "data"


def test_max_age_is_three_intervals_plus_timeout() -> None:
    job = Scheduled(ListSource("x", []), interval_seconds=30, timeout_seconds=20)
    assert job.max_age_seconds == 110


class BlockingSource:
    name = "slow"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.runs = 0

    def collect(self) -> object:
        self.runs += 1
        self.started.release()
        self.release.wait(10)
        return self.runs

    def close(self) -> None:
        self.release.set()


def test_a_hung_source_does_not_pile_up_and_others_keep_running() -> None:
    store = SnapshotStore()
    slow = BlockingSource()
    fast = ListSource("fast", list(range(1000)))
    scheduler = Scheduler(store, [Scheduled(slow, 0.05), Scheduled(fast, 0.05)])
    scheduler.start()
    try:
        assert slow.started.acquire(timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            entry = store.view(time.time()).entries["fast"]
            if entry.health.last_success is not None and isinstance(entry.data, int) and entry.data >= 3:
                break
            time.sleep(0.02)
        assert slow.runs == 1  # max_instances=1: the blocked job was not started again
        assert isinstance(store.view(time.time()).entries["fast"].data, int)
    finally:
        slow.release.set()
        scheduler.shutdown()
    assert fast.closed
