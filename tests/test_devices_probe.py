"""``serve --devices.probe``: the devices source asks the kernel too, only when asked; the exporter's own KFD
process is then left out of the process series. Real opens of real nodes in fake roots (1:3 opens here, 510:0 has
no driver)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import structlog
from fakeroot import FakeRoot, two_gpu_root
from prometheus_client import generate_latest

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.model.devices import DeviceWatchState
from exporter.model.smi import SmiProcess, SmiReport
from exporter.sources.devices import DevicesSource
from exporter.sources.processes import ProcessesSource
from exporter.store import SnapshotStore

OPENS = {"kfd": (1, 3), "renderD128": (1, 5), "renderD129": (1, 7)}


def collect(root: FakeRoot, probe: bool) -> DeviceWatchState:
    with structlog.testing.capture_logs():
        return DevicesSource(root.config(devices_probe=probe), clock=lambda: 1e9).collect()


def scrape(state: DeviceWatchState) -> str:
    store = SnapshotStore()
    store.register("devices", 15, 45)
    store.record_success("devices", state, 0.01, time.time())
    return generate_latest(make_registry(store, Config())).decode()


def test_the_daemon_opens_nothing_unless_asked(tmp_path: Path) -> None:
    state = collect(two_gpu_root(tmp_path, devs=OPENS), probe=False)
    assert state.probe is None
    text = scrape(state)
    assert "rocm_device_node_open_ok" not in text
    assert 'rocm_device_node_accessible{path="/dev/kfd",pci_bus=""} 1.0' in text


def test_with_devices_probe_the_kernels_answer_is_exported(tmp_path: Path) -> None:
    state = collect(two_gpu_root(tmp_path / "a", devs=OPENS), probe=True)
    assert state.probe is not None
    assert {n.path: n.status for n in state.probe.nodes} == {
        "/dev/kfd": "opened",
        "/dev/dri/renderD128": "opened",
        "/dev/dri/renderD129": "opened",
    }  # the card nodes are never opened
    text = scrape(state)
    assert 'rocm_device_node_open_ok{error="",path="/dev/kfd",pci_bus=""} 1.0' in text
    assert 'rocm_device_node_open_ok{error="",path="/dev/dri/renderD129",pci_bus="0000:83:00.0"} 1.0' in text

    state = collect(two_gpu_root(tmp_path / "b"), probe=True)  # 510:0 and 226:N: no driver here
    text = scrape(state)
    assert 'rocm_device_node_open_ok{error="ENXIO",path="/dev/kfd",pci_bus=""} 0.0' in text
    # accessible keeps its meaning: computed from the bits, 1 for root whatever the kernel says
    assert 'rocm_device_node_accessible{path="/dev/kfd",pci_bus=""} 1.0' in text


def test_the_exporters_own_kfd_process_is_left_out_with_the_probe(tmp_path: Path) -> None:
    sysfs, procfs = tmp_path / "sys", tmp_path / "proc"
    me, other = os.getpid(), 4242
    for pid in (me, other):
        (sysfs / "class" / "kfd" / "kfd" / "proc" / str(pid)).mkdir(parents=True)
        (procfs / str(pid)).mkdir(parents=True)
        (procfs / str(pid) / "comm").write_text("python3\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    tools = [SmiReport("rocm-smi", "json", processes=(SmiProcess(me), SmiProcess(other)))]
    for probe, expected in ((False, {me, other}), (True, {other})):
        config = Config(rootfs=tmp_path, sysfs=sysfs, procfs=procfs, devices_probe=probe)
        snapshot = ProcessesSource(config, lambda: tools).collect()
        assert {p.pid for p in snapshot.processes} == expected, probe
