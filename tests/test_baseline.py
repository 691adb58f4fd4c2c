"""The persisted baseline: first start, reboots, atomic replace, crashes, corrupt files, show/accept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeRoot, build_root, two_gpu_root

from exporter.sources.devices import DevicesSource
from exporter.watchdog.baseline import (
    BASELINE_FILE,
    BaselineError,
    BaselineStore,
    build_baseline,
    from_json,
    to_json,
)
from exporter.watchdog.commands import baseline_accept, baseline_show

A, B = "0000:03:00.0", "0000:83:00.0"
T0 = 1_700_000_000.0


def source(root: FakeRoot, t: float = T0) -> DevicesSource:
    return DevicesSource(root.config(), clock=lambda: t)


def test_first_start_writes_the_baseline_and_reboots_keep_it(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    with structlog.testing.capture_logs() as logs:
        state = source(root).collect()
    assert state.baseline_created and state.baseline is not None
    assert [e["event"] for e in logs] == ["baseline_created"]
    stored = json.loads((root.state_dir / BASELINE_FILE).read_text())
    assert stored["format"] == 1 and stored["boot_id"] == "8f2d4c1e-6b3a-4f59-9d0e-2a7c5b1e3f40"
    assert stored["groups"] == {"render": 109, "video": 44}
    assert stored["kfd_major"] == 510
    assert {g["pci_bus"]: (g["card"], g["render"], g["kfd_node"]) for g in stored["gpus"]} == {
        A: (1, 128, 1),
        B: (2, 129, 2),
    }
    assert {"path": "/dev/kfd", "mode": "0660", "uid": 0, "gid": 109, "major": 510, "minor": 0, "acl": False} in (
        stored["nodes"]
    )
    assert stored["other_drm"] == [{"driver": "ast", "parent": "0000:63:00.0", "name": "card0"}]

    before = (root.state_dir / BASELINE_FILE).read_bytes()
    new_boot = root.reboot()
    state2 = source(root, T0 + 3600).collect()  # a restarted daemon after a clean reboot
    assert not state2.baseline_created
    assert state2.devices.boot_id == new_boot
    assert state2.baseline is not None and state2.baseline.boot_id != new_boot
    assert state2.active() == ()
    assert (root.state_dir / BASELINE_FILE).read_bytes() == before


def test_no_baseline_without_gpus(tmp_path: Path) -> None:
    """At boot before amdgpu loads: writing an empty baseline would turn every GPU into a 'new' one."""
    root = build_root(tmp_path, [], kfd_major=None)
    state = source(root).collect()
    assert state.baseline is None and not state.baseline_created
    assert not (root.state_dir / BASELINE_FILE).exists()


def test_crash_between_write_and_rename_loses_nothing(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    source(root).collect()
    store = BaselineStore(root.state_dir)
    old = (root.state_dir / BASELINE_FILE).read_bytes()
    root.renumber(A, card=3, render=130)
    from exporter.sources.devices import read_devices
    from exporter.sources.sysfs import read_sysfs

    sysfs = read_sysfs(root.sys, with_state=False)
    newer = build_baseline(sysfs, read_devices(root.config(), sysfs), T0 + 60)

    # a real crash: a child writes the temp file, then is killed before the rename
    pid = os.fork()
    if pid == 0:
        try:
            store.write_temp(newer)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    # and an older crash left a half-written temp file
    (root.state_dir / "baseline.json.tmp-half").write_text('{"format": 1, "created": 17000')

    assert len(store.temp_files()) == 2
    assert (root.state_dir / BASELINE_FILE).read_bytes() == old
    loaded, problem = store.load(move_corrupt=True)
    assert problem is None and loaded is not None
    assert loaded.gpu(A) is not None and loaded.gpu(A).render == 128  # type: ignore[union-attr]
    # the daemon sees the old baseline and reports the drift the unfinished write would have hidden
    state = source(root, T0 + 120).collect()
    assert ("render_renumbered", A) in {c.key for c in state.active()}

    store.write(newer)  # the next complete write sweeps the leftovers
    assert store.temp_files() == []
    reloaded, _ = store.load(move_corrupt=True)
    assert reloaded == newer


def test_corrupt_baseline_is_kept_aside_reported_and_not_replaced(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    path = root.state_dir / BASELINE_FILE
    path.write_text('{"format": 1, "created": 1700000000, "gpus": [{"pci_bus": ')  # torn by a bad disk
    root.renumber(A, card=3, render=130)  # and the host drifted meanwhile

    with structlog.testing.capture_logs() as logs:
        state = source(root).collect()
    assert state.baseline is None and state.baseline_corrupt is not None
    assert state.baseline_corrupt.moved_to is not None
    kept = Path(state.baseline_corrupt.moved_to)
    assert kept.name.startswith("baseline.json.corrupt-") and kept.read_text().endswith('"pci_bus": ')
    assert not path.exists(), "the drifted state must not silently become the new baseline"
    corrupt_events = [e for e in logs if e["event"] == "state_file_corrupt"]
    assert len(corrupt_events) == 1 and corrupt_events[0]["file"] == BASELINE_FILE

    # a restarted daemon still has no baseline and still reports it
    again = source(root, T0 + 60).collect()
    assert again.baseline is None and again.baseline_corrupt is not None and not path.exists()
    assert baseline_show(root.config()) == 2

    with structlog.testing.capture_logs():
        assert baseline_accept(root.config(), now=T0 + 120) == 0
    after = source(root, T0 + 180).collect()
    assert after.baseline is not None and after.baseline_corrupt is None
    assert after.active() == ()
    assert kept.exists(), "the corrupt file stays for inspection"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[]", "not a JSON object"),
        ('{"format": 2, "created": 1}', "format 2"),
        ('{"format": 1}', "created: missing"),
        ('{"format": 1, "created": 1, "gpus": [{"pci_bus": "0000:03:00.0", "render": "128"}]}', "gpus[0].render"),
        ('{"format": 1, "created": 1, "nodes": [{"path": "/dev/kfd", "mode": "rw-rw----"}]}', "not octal"),
        ('{"format": 1, "created": 1, "gpus": {}}', "gpus: expected a list"),
    ],
)
def test_from_json_rejects_with_a_reason(text: str, error: str) -> None:
    with pytest.raises(BaselineError, match=error.replace("[", r"\[").replace("]", r"\]")):
        from_json(json.loads(text))


def test_show_and_accept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = two_gpu_root(tmp_path)
    assert baseline_show(root.config()) == 1
    assert "no baseline" in capsys.readouterr().err

    with structlog.testing.capture_logs():
        assert baseline_accept(root.config(), now=T0) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["gpus"] == 2 and summary["drift_accepted"] == [] and summary["replaced_created"] is None

    assert baseline_show(root.config()) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == to_json(from_json(shown))
    assert shown["created"] == T0

    root.chmod("kfd", 0o666)
    with structlog.testing.capture_logs():
        assert baseline_accept(root.config(), now=T0 + 1) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["replaced_created"] == T0
    assert {"condition": "mode_drift", "subject": "/dev/kfd"}.items() <= summary["drift_accepted"][0].items()


def test_accept_next_to_a_running_daemon_takes_effect(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    src = source(root)
    src.collect()
    root.chgrp("kfd", "video")
    with structlog.testing.capture_logs() as logs:
        state = src.collect()
    assert ("gid_drift", "/dev/kfd") in {c.key for c in state.active()}
    started = [e for e in logs if e["event"] == "device_condition_started" and e["condition"] == "gid_drift"]
    assert len(started) == 1 and started[0]["subject"] == "/dev/kfd"
    with structlog.testing.capture_logs() as logs:
        assert baseline_accept(root.config(), now=T0 + 5) == 0
        state = src.collect()
    assert ("gid_drift", "/dev/kfd") not in {c.key for c in state.active()}
    cleared = [e for e in logs if e["event"] == "device_condition_cleared" and e["condition"] == "gid_drift"]
    assert len(cleared) == 1
    # the split between kfd (video) and render nodes (render) is a rule, not drift: accept does not hide it
    assert ("kfd_render_group_split", "/dev/kfd") in {c.key for c in state.active()}


def test_unwritable_state_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = two_gpu_root(tmp_path)
    subprocess.run(["chattr", "+i", str(root.state_dir)], check=True)  # immutable: even root cannot create files
    try:
        with structlog.testing.capture_logs() as logs:
            src = DevicesSource(root.config(), clock=lambda: T0)
            state = src.collect()
            again = src.collect()
        assert state.baseline is not None and not state.baseline_created  # kept in memory for this run
        assert again.baseline == state.baseline
        # once, not every interval
        assert [(e["event"], e["file"]) for e in logs] == [("state_write_failed", "baseline.json")]
        assert baseline_accept(root.config(), now=T0) == 2
        assert "cannot write" in capsys.readouterr().err
        assert os.listdir(root.state_dir) == []
    finally:
        subprocess.run(["chattr", "-i", str(root.state_dir)], check=True)


def test_auto_accept_after_n_healthy_boots(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    config = root.config(baseline_auto_accept_boots=2)
    candidate = root.state_dir / "baseline-candidate.json"
    with structlog.testing.capture_logs():
        DevicesSource(config, clock=lambda: T0).collect()
    first = (root.state_dir / BASELINE_FILE).read_bytes()

    root.renumber(A, card=3, render=130)
    root.reboot("boot-2")
    src = DevicesSource(config, clock=lambda: T0 + 100)
    with structlog.testing.capture_logs():
        state = src.collect()
        state = src.collect()  # the same boot again does not count twice
    assert ("render_renumbered", A) in {c.key for c in state.active()}
    assert json.loads(candidate.read_text())["boots"] == ["boot-2"]
    assert (root.state_dir / BASELINE_FILE).read_bytes() == first

    root.reboot("boot-3")
    with structlog.testing.capture_logs() as logs:
        state = DevicesSource(config, clock=lambda: T0 + 200).collect()
    events = [e["event"] for e in logs]
    assert "baseline_auto_accepted" in events
    assert state.active() == ()
    assert any(e["event"] == "device_condition_cleared" and e["condition"] == "render_renumbered" for e in logs)
    assert state.baseline is not None and state.baseline.gpu(A) is not None
    assert state.baseline.gpu(A).render == 130  # type: ignore[union-attr]
    assert not candidate.exists()


def test_auto_accept_never_takes_an_unhealthy_or_changing_state(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    config = root.config(baseline_auto_accept_boots=2)
    with structlog.testing.capture_logs():
        DevicesSource(config, clock=lambda: T0).collect()
    first = (root.state_dir / BASELINE_FILE).read_bytes()
    root.remove_gpu(B)  # a GPU that fell off the bus is not something to get used to
    for boot in ("boot-2", "boot-3", "boot-4"):
        root.reboot(boot)
        with structlog.testing.capture_logs():
            state = DevicesSource(config, clock=lambda: T0 + 100).collect()
        assert ("gpu_missing", B) in {c.key for c in state.active()}
    assert (root.state_dir / BASELINE_FILE).read_bytes() == first

    root = two_gpu_root(tmp_path, name="changing")
    config = root.config(baseline_auto_accept_boots=2)
    with structlog.testing.capture_logs():
        DevicesSource(config, clock=lambda: T0).collect()
    first = (root.state_dir / BASELINE_FILE).read_bytes()
    for boot, render in (("boot-2", 130), ("boot-3", 131)):  # drifting somewhere new every boot
        root.renumber(A, render=render)
        root.reboot(boot)
        with structlog.testing.capture_logs():
            DevicesSource(config, clock=lambda: T0 + 100).collect()
    assert (root.state_dir / BASELINE_FILE).read_bytes() == first
    assert json.loads((root.state_dir / "baseline-candidate.json").read_text())["boots"] == ["boot-3"]
    with structlog.testing.capture_logs():
        assert baseline_accept(config, now=T0 + 300) == 0  # an explicit accept ends the count
    assert not (root.state_dir / "baseline-candidate.json").exists()
