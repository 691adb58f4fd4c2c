"""A state dir that refuses writes (read-only mount, not a directory): the sources keep working from memory and
say so; nothing crashes; `baseline accept` exits 2 with one message."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeGpu, FakeRoot, build_root
from prometheus_client import generate_latest

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.sources.devices import DevicesSource
from exporter.sources.kernel_log import CURSOR_FILE, KernelLogSource
from exporter.store import SnapshotStore
from exporter.watchdog.commands import baseline_accept

GPU = "0000:03:00.0"


@pytest.fixture
def readonly_dir(tmp_path: Path) -> Iterator[Path]:
    """A real read-only tmpfs holding a corrupt baseline and a corrupt kernel-log cursor."""
    path = tmp_path / "ro"
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(path)], capture_output=True, check=False).returncode:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    try:
        (path / "baseline.json").write_text("{not json")
        (path / CURSOR_FILE).write_text("garbage\n")
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False, capture_output=True)


@pytest.fixture
def root(tmp_path: Path) -> FakeRoot:
    root = build_root(tmp_path, [FakeGpu(GPU, card=1, render=128, kfd_node=1)])
    (root.root / "kern.log").write_text(f"[    5.000000] amdgpu {GPU}: amdgpu: GPU reset begin!\n")
    return root


def test_corrupt_files_in_a_read_only_state_dir(root: FakeRoot, readonly_dir: Path) -> None:
    config = root.config(state_dir=readonly_dir, kernel_log_path=root.root / "kern.log")
    with structlog.testing.capture_logs() as logs:
        kernel = KernelLogSource(config, lambda: [GPU]).collect()
        devices = DevicesSource(config).collect()
    assert dict(kernel.counts) == {(GPU, "gpu_reset_begin"): 1}  # counting goes on, from memory
    assert kernel.cursor_corrupt and kernel.cursor_unsaved
    assert devices.baseline is None and devices.baseline_corrupt is not None
    assert devices.baseline_corrupt.moved_to is None and "could not move it aside" in devices.baseline_corrupt.reason
    assert {e["event"] for e in logs} >= {"state_file_corrupt", "state_write_failed"}
    # Both files are still there, untouched: nothing was lost.
    assert (readonly_dir / "baseline.json").read_text() == "{not json"
    store = SnapshotStore()
    for name, data in (("kernel-log", kernel), ("devices", devices)):
        store.register(name, 15, 45)
        store.record_success(name, data, 0.01, devices.collected_at)
    registry = make_registry(store, Config(), clock=lambda: devices.collected_at)
    text = generate_latest(registry).decode()
    assert 'rocm_watchdog_state_file_corrupt{file="kernel-log-cursor.json"} 1.0' in text
    assert 'rocm_watchdog_state_file_unsaved{file="kernel-log-cursor.json"} 1.0' in text
    assert 'rocm_watchdog_state_file_corrupt{file="baseline.json"} 1.0' in text


def test_baseline_accept_into_a_read_only_dir_exits_2(
    root: FakeRoot, readonly_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with structlog.testing.capture_logs():
        assert baseline_accept(root.config(state_dir=readonly_dir)) == 2
    assert "cannot write" in capsys.readouterr().err


def test_a_state_dir_that_is_a_file_is_unsaved_not_corrupt(root: FakeRoot) -> None:
    state = root.root / "state-is-a-file"
    state.write_text("")
    with structlog.testing.capture_logs() as logs:
        devices = DevicesSource(root.config(state_dir=state)).collect()
        again = DevicesSource(root.config(state_dir=state)).collect()
    assert devices.baseline_corrupt is None
    assert devices.baseline is not None and devices.baseline_unsaved  # drift is still judged, from memory
    assert again.baseline_unsaved
    assert ("state_write_failed", "baseline.json") in {(e["event"], e.get("file")) for e in logs}
