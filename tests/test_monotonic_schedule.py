"""The scheduler's timer on the monotonic clock and the classifier's byte-capped match cache (issue 26)."""

from __future__ import annotations

import threading
import time

from exporter import clock
from exporter.model.kernel import KernelEvent, KernelRecord
from exporter.parsers.kernel_log import SkippedRecords, parse_kernel_log_items
from exporter.scheduler import Scheduled, Scheduler, jitter_seconds, next_due
from exporter.store import SnapshotStore
from exporter.watchdog.kernel_classify import MATCH_CACHE_BYTES, MATCH_CACHE_SIZE, KernelClassifier, plan_bytes
from exporter.watchdog.kernel_rules import default_rules


def test_next_due_is_the_next_grid_point_and_coalesces_missed_runs() -> None:
    assert next_due(100.0, 10.0, 95.0) == 100.0  # not yet due
    assert next_due(100.0, 10.0, 100.0) == 110.0
    assert next_due(100.0, 10.0, 109.9) == 110.0
    assert next_due(100.0, 10.0, 135.0) == 140.0  # three runs missed (a thread not scheduled, a suspend): one now
    assert next_due(100.0, 0.0, 100.0) > 100.0  # never the same point again
    assert (jitter_seconds(1.0), jitter_seconds(5.0), jitter_seconds(30.0)) == (0.0, 0.5, 3.0)


def test_wall_time_counts_on_the_monotonic_clock() -> None:
    before = time.monotonic()
    now = clock.wall_time()
    after = time.monotonic()
    assert clock.wall_of(before) <= now <= clock.wall_of(after)
    assert abs(clock.wall_skew_seconds()) < 60  # this machine's clock was not stepped since the import


class Counting:
    """A polled source that counts its runs and signals each."""

    name = "counting"

    def __init__(self) -> None:
        self.runs = 0
        self.ran = threading.Condition()

    def collect(self) -> int:
        with self.ran:
            self.runs += 1
            self.ran.notify_all()
        return self.runs

    def close(self) -> None:
        return None


def test_the_timer_runs_each_polled_source_at_once_and_then_every_interval() -> None:
    source = Counting()
    store = SnapshotStore()
    scheduler = Scheduler(store, [Scheduled(source, 0.05)])
    assert store.view(clock.wall_time()).pending() == ("counting",)
    scheduler.start()
    try:
        with source.ran:
            assert source.ran.wait_for(lambda: source.runs >= 5, timeout=30)  # only a guard
    finally:
        scheduler.shutdown()
    health = store.view(clock.wall_time()).entries["counting"].health
    assert health.up is True and not health.pending and health.failures_total == 0
    assert health.last_success is not None and abs(health.last_success - clock.wall_time()) < 30


def test_the_match_cache_is_capped_in_bytes_and_dropped_on_demand() -> None:
    classifier = KernelClassifier(default_rules(), known_gpus=["0000:03:00.0"])
    pad = "x" * 2000  # long texts: the byte cap, not the count, decides
    for n in range(2000):
        classifier.feed_many(parse(f"[{n}.0] amdgpu 0000:03:00.0: amdgpu: GPU reset begin! {pad} {n}"), [])
    cached = len(classifier._plans) + len(classifier._older_plans)
    assert cached < MATCH_CACHE_SIZE
    assert classifier.cache_bytes() <= MATCH_CACHE_BYTES
    assert cached >= (MATCH_CACHE_BYTES // 2) // plan_bytes(f"amdgpu 0000:03:00.0: amdgpu: GPU reset begin! {pad} 1999")
    classifier.drop_cache()
    assert classifier.cache_bytes() == 0 and not classifier._plans and not classifier._older_plans
    events: list[KernelEvent] = []
    classifier.feed_many(parse("[9999.0] amdgpu 0000:03:00.0: amdgpu: GPU reset begin! again"), events)
    assert len(events) == 1  # classifying goes on, the cache filling again


def parse(line: str) -> list[KernelRecord | SkippedRecords]:
    return list(parse_kernel_log_items(line + "\n", None).items)
