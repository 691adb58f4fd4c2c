"""The rendering cache serves exactly what the uncached collector renders: for every capture, in text,
OpenMetrics and gzip, after changes and across staleness, and the same bytes again while nothing changed."""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeGpu, build_root, capture_gpus
from paths import FIXTURES
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from test_collector import NOW, filled_store

from exporter.config import Config
from exporter.metrics.collector import RocmCollector, make_registry
from exporter.metrics.exposition import Exposition
from exporter.model.kernel import KernelLogState
from exporter.parsers.amd_smi import parse_amd_smi
from exporter.parsers.rocm_smi import parse_rocm_smi
from exporter.sources.devices import DevicesSource
from exporter.sources.sysfs import read_sysfs
from exporter.store import SnapshotStore, StoreView

SMI = sorted((FIXTURES / "smi").glob("*/*"))
SMI = [p for p in SMI if p.suffix in (".json", ".txt", ".csv")]
# every KFD capture a fake host can be built from (mi25-1gpu-plus-copy holds two nodes at one address: the sysfs
# tests cover it, a host cannot have it)
TOPOLOGIES = sorted(
    p.name for p in (FIXTURES / "sysfs" / "kfd-topology").iterdir() if p.is_dir() and p.name != "mi25-1gpu-plus-copy"
)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def assert_same(store: SnapshotStore, clock: Callable[[], float], config: Config | None = None) -> Exposition:
    config = config or Config(nodename="node-1")
    exposition = Exposition(RocmCollector(store, config, clock))
    registry = make_registry(store, config, clock)
    text, om = generate_latest(registry), openmetrics_latest(registry)  # type: ignore[no-untyped-call]
    assert exposition.get() == text
    assert exposition.get(openmetrics=True) == om
    assert gzip.decompress(exposition.get(gzip=True)) == text
    assert gzip.decompress(exposition.get(openmetrics=True, gzip=True)) == om
    return exposition


@pytest.mark.parametrize("capture", SMI, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_smi_capture_renders_the_same(capture: Path) -> None:
    store = SnapshotStore()
    tool = capture.parent.name
    store.register(tool, 30, 110)
    parse = parse_amd_smi if tool == "amd-smi" else parse_rocm_smi
    store.record_success(tool, parse(capture.read_text(errors="replace")), 1.0, NOW - 1)
    assert_same(store, lambda: NOW)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_sysfs_layout_with_devices_and_kernel_log_renders_the_same(tmp_path: Path, topology: str) -> None:
    root = build_root(tmp_path, capture_gpus(topology))
    store = SnapshotStore()
    for name in ("sysfs", "devices", "kernel-log"):
        store.register(name, 15, 65)
    with structlog.testing.capture_logs():
        devices = DevicesSource(root.config(), clock=lambda: NOW).collect()
    sysfs = read_sysfs(root.sys)
    store.record_success("sysfs", sysfs, 0.01, NOW - 1)
    store.record_success("devices", devices, 0.01, NOW - 1)
    bus = sysfs.gpus[0].pci_bus
    kernel = KernelLogState(counts={(bus, "gpu_reset_begin"): 2}, last_event_seconds={(bus, "gpu_reset_begin"): NOW})
    store.record_success("kernel-log", kernel, 0.001, NOW - 1)
    assert_same(store, lambda: NOW)


def test_a_quiet_scrape_serves_the_same_bytes_and_changes_show_at_once() -> None:
    clock = Clock(NOW)
    store = filled_store()
    exposition = assert_same(store, clock)
    first = exposition.get()
    assert exposition.get() is first  # nothing changed: nothing rendered
    # an equal snapshot (a new object) renders nothing either
    sysfs = store.view(NOW).entries["sysfs"].data
    store.record_success("sysfs", sysfs, 0.01, NOW - 5)
    assert exposition.get() is first
    # a new run of a source: its health moves, and so do the bytes
    store.record_success("sysfs", sysfs, 0.02, NOW)
    assert exposition.get() != first
    assert_same(store, clock)


def test_staleness_withdraws_values_on_time_without_a_collection() -> None:
    clock = Clock(NOW)
    store = filled_store()
    exposition = assert_same(store, clock)
    assert b"rocm_gpu_busy_ratio{" in exposition.get()
    clock.now = NOW + 3 * 15 + 20 + 1  # sysfs past its max age; nothing was recorded meanwhile
    assert b"rocm_gpu_busy_ratio{" not in exposition.get()
    assert b'rocm_watchdog_source_stale{source="sysfs"} 1.0' in exposition.get()
    assert_same(store, clock)


def test_the_store_listener_renders_in_the_collecting_thread(tmp_path: Path) -> None:
    clock = Clock(NOW)
    store = filled_store()
    exposition = Exposition(RocmCollector(store, Config(), clock))
    store.subscribe(exposition.refresh)
    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    store.record_success("sysfs", read_sysfs(root.sys), 0.01, NOW)  # renders here, in this (the "scheduler") thread
    rendered = exposition.get()
    assert b'rocm_gpu_info{card="card1"' in rendered
    assert exposition.get() is rendered


class CountingCollector(RocmCollector):
    """Counts the builds of the two sections made from the devices state."""

    def __init__(self, store: SnapshotStore, config: Config, clock: Callable[[], float]) -> None:
        super().__init__(store, config, clock)
        self.built: Counter[str] = Counter()

    def _devices(self, view: StoreView) -> Iterator[Metric]:
        self.built["devices"] += 1
        yield from super()._devices(view)

    def _state_files(self, view: StoreView) -> Iterator[Metric]:
        self.built["state-files"] += 1
        yield from super()._state_files(view)


def test_a_devices_collection_that_found_the_same_state_renders_nothing_again(tmp_path: Path) -> None:
    """The devices state says when it was read (``collected_at``), and equality takes it in: the sections built from
    it are keyed on what it is (``DeviceWatchState.what``), so an unchanged host renders them once, not every run."""
    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    clock = Clock(NOW)
    source = DevicesSource(root.config(), clock=clock)
    with structlog.testing.capture_logs():
        source.collect()  # the first run writes the baseline (baseline_created): not the state of the next runs
        states = []
        for later in (60, 90):
            clock.now = NOW + later
            states.append(source.collect())
    before, after = states
    assert after != before and after.what() == before.what()
    store = SnapshotStore()
    store.register("devices", 30, 110)
    collector = CountingCollector(store, Config(), clock)
    exposition = Exposition(collector)
    store.record_success("devices", before, 0.01, NOW + 60)
    first = exposition.get()
    assert collector.built == {"devices": 1, "state-files": 1}
    store.record_success("devices", after, 0.01, NOW + 90)
    assert exposition.get() != first  # the devices source's health moved
    assert collector.built == {"devices": 1, "state-files": 1}  # its state did not
    assert_same(store, clock)
