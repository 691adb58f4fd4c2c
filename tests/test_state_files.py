"""The files of --state.dir (baseline, condition start times, auto-accept candidate) on real files: unreadable,
corrupt and unsaved are three states, each logged once with what to do, each its own metric with a true HELP;
drift not evaluated is visible; condition start times survive a restart of the exporter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from fakeroot import FakeRoot, two_gpu_root
from msgspec.structs import replace
from paths import PROJECT
from prometheus_client import CollectorRegistry, generate_latest

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.model.devices import DeviceWatchState
from exporter.sources.devices import CONDITIONS_FILE, DevicesSource
from exporter.store import SnapshotStore
from exporter.watchdog.baseline import BASELINE_FILE, CANDIDATE_FILE
from exporter.watchdog.commands import baseline_show

T0 = 1_700_000_000.0
POD_UID = 10001  # the non-root pod's uid (tests/test_nonroot_pod.py)
STATE_METRICS = ("unreadable", "corrupt", "unsaved")


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def registry(state: DeviceWatchState) -> CollectorRegistry:
    store = SnapshotStore()
    store.register("devices", 15, 45)
    store.record_success("devices", state, 0.01, state.collected_at)
    return make_registry(store, Config(), clock=lambda: state.collected_at)


def flags(state: DeviceWatchState, file: str) -> dict[str, float | None]:
    """The three state-file series of ``file`` and drift_evaluated, as scraped; a state-file series is served only
    while 1 (never a 0), so an absent one reads 0 here."""
    reg = registry(state)
    out: dict[str, float | None] = {}
    for m in STATE_METRICS:
        value = reg.get_sample_value(f"rocm_watchdog_state_file_{m}", {"file": file})
        assert value != 0.0, f"rocm_watchdog_state_file_{m} served at 0"
        out[m] = 0.0 if value is None else value
    out["drift_evaluated"] = reg.get_sample_value("rocm_watchdog_drift_evaluated")
    return out


def events(logs: Sequence[Mapping[str, Any]], *names: str) -> list[tuple[str, str | None]]:
    return [(e["event"], e.get("file")) for e in logs if not names or e["event"] in names]


STATE_EVENTS = (
    "state_file_unreadable",
    "state_file_readable",
    "state_file_corrupt",
    "state_write_failed",
    "state_write_recovered",
    "drift_not_evaluated",
    "drift_evaluation_resumed",
)


@pytest.fixture
def root(tmp_path: Path) -> FakeRoot:
    return two_gpu_root(tmp_path)


def first_run(root: FakeRoot, clock: Clock) -> DevicesSource:
    src = DevicesSource(root.config(), clock=clock)
    with structlog.testing.capture_logs():
        assert src.collect().baseline_created
    return src


# --- baseline.json ---------------------------------------------------------------------------------------------


def as_uid(uid: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a forked child dropped to ``uid`` (no supplementary groups); its JSON result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            data = json.dumps({"ok": fn()}).encode()
            status = 0
        except BaseException as e:
            data = json.dumps({"error": repr(e)}).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    os.waitpid(pid, 0)
    result = json.loads(raw)
    assert "error" not in result, result["error"]
    return result["ok"]


def test_a_baseline_the_exporter_may_not_read_is_unreadable_not_corrupt(open_tmp: Path) -> None:
    """A baseline.json of mode 0600 owned by root, read by the non-root exporter: permission denied."""
    root = two_gpu_root(open_tmp)
    first_run(root, Clock())
    path = root.state_dir / BASELINE_FILE
    before = path.read_bytes()
    path.chmod(0o600)

    def run() -> dict[str, Any]:
        with structlog.testing.capture_logs() as logs:
            src = DevicesSource(root.config(), clock=Clock(T0 + 60))
            state = src.collect()
            again = src.collect()
        text = generate_latest(registry(again)).decode()
        help_lines = [line for line in text.splitlines() if line.startswith("# HELP rocm_watchdog_state_file")]
        return {
            "events": events(logs, *STATE_EVENTS),
            "log": [e for e in logs if e["event"] in ("state_file_unreadable", "drift_not_evaluated")],
            "flags": flags(state, BASELINE_FILE),
            "unreadable": state.baseline_unreadable.reason if state.baseline_unreadable else None,
            "corrupt": state.baseline_corrupt is not None,
            "baseline": state.baseline is not None,
            "help": help_lines,
        }

    result = as_uid(POD_UID, run)
    assert result["events"] == [["state_file_unreadable", BASELINE_FILE], ["drift_not_evaluated", None]], (
        "each logged once over two collections"
    )
    unreadable, drift = result["log"]
    assert unreadable["error"] == "Permission denied" and "make it readable" in unreadable["action"]
    assert drift["reason"] == "baseline.json cannot be read" and "drift is not evaluated" in drift["action"]
    assert result["flags"] == {"unreadable": 1.0, "corrupt": 0.0, "unsaved": 0.0, "drift_evaluated": 0.0}
    assert "Permission denied" in result["unreadable"] and not result["corrupt"] and not result["baseline"]
    assert any("nothing was moved or replaced" in h for h in result["help"])
    # nothing was moved, replaced or written
    assert path.read_bytes() == before
    assert sorted(os.listdir(root.state_dir)) == [BASELINE_FILE]


def test_unreadable_baseline_is_read_again_and_carries_conditions_with_their_start(
    root: FakeRoot, capsys: pytest.CaptureFixture[str]
) -> None:
    """EISDIR (a directory where baseline.json should be) as root; drift that held before is neither reported nor
    cleared while it cannot be evaluated, and comes back with its start time."""
    clock = Clock()
    src = first_run(root, clock)
    root.chgrp("kfd", "video")
    clock.now = T0 + 10
    with structlog.testing.capture_logs():
        drifted = src.collect()
    assert ("gid_drift", "/dev/kfd") in {c.key for c in drifted.active()}

    path = root.state_dir / BASELINE_FILE
    saved = path.read_bytes()
    path.unlink()
    path.mkdir()
    clock.now = T0 + 20
    with structlog.testing.capture_logs() as logs:
        blind = src.collect()
        clock.now = T0 + 30
        src.collect()
    assert events(logs, *STATE_EVENTS) == [("state_file_unreadable", BASELINE_FILE), ("drift_not_evaluated", None)]
    assert not [e for e in logs if e["event"] == "device_condition_cleared" and e["condition"] == "gid_drift"]
    assert ("gid_drift", "/dev/kfd") not in {c.key for c in blind.active()}
    assert ("kfd_render_group_split", "/dev/kfd") in {c.key for c in blind.active()}  # rules still run
    assert flags(blind, BASELINE_FILE)["unreadable"] == 1.0 and flags(blind, BASELINE_FILE)["drift_evaluated"] == 0
    assert blind.baseline_unreadable is not None and blind.baseline_corrupt is None and path.is_dir()
    assert baseline_show(root.config()) == 2
    assert "nothing was changed" in capsys.readouterr().err
    persisted = json.loads((root.state_dir / CONDITIONS_FILE).read_text())["conditions"]
    assert any(c["condition"] == "gid_drift" and c["since"] == T0 + 10 for c in persisted), "carried, with its start"

    path.rmdir()
    path.write_bytes(saved)
    clock.now = T0 + 40
    with structlog.testing.capture_logs() as logs:
        back = src.collect()
    assert events(logs, *STATE_EVENTS) == [("state_file_readable", BASELINE_FILE), ("drift_evaluation_resumed", None)]
    assert not [e for e in logs if e["event"] == "device_condition_started"]
    gid = next(c for c in back.active() if c.key == ("gid_drift", "/dev/kfd"))
    assert gid.since == T0 + 10
    assert flags(back, BASELINE_FILE) == {"unreadable": 0.0, "corrupt": 0.0, "unsaved": 0.0, "drift_evaluated": 1.0}


def test_corrupt_baseline_is_moved_aside_and_said_once(root: FakeRoot) -> None:
    (root.state_dir / BASELINE_FILE).write_text('{"format": 1, "created": ')
    src = DevicesSource(root.config(), clock=Clock())
    with structlog.testing.capture_logs() as logs:
        state = src.collect()
        src.collect()
    assert events(logs, *STATE_EVENTS) == [("state_file_corrupt", BASELINE_FILE), ("drift_not_evaluated", None)]
    corrupt = next(e for e in logs if e["event"] == "state_file_corrupt")
    assert corrupt["moved_to"].startswith(str(root.state_dir / "baseline.json.corrupt-"))
    assert "baseline accept" in corrupt["action"]
    assert flags(state, BASELINE_FILE) == {"unreadable": 0.0, "corrupt": 1.0, "unsaved": 0.0, "drift_evaluated": 0.0}
    assert not (root.state_dir / BASELINE_FILE).exists()
    text = generate_latest(registry(state)).decode()
    assert "was moved aside" in text.split("# HELP rocm_watchdog_state_file_corrupt ", 1)[1].split("\n", 1)[0]


def test_unsaved_baseline_is_written_again_once_the_state_dir_takes_it(root: FakeRoot) -> None:
    state_dir = root.state_dir
    shutil.rmtree(state_dir)
    state_dir.write_text("")  # a file where the directory should be
    src = DevicesSource(root.config(), clock=Clock())
    with structlog.testing.capture_logs() as logs:
        state = src.collect()
        src.collect()
    assert events(logs, *STATE_EVENTS) == [("state_write_failed", BASELINE_FILE)]
    assert state.baseline is not None and state.baseline_unsaved and state.drift_evaluated
    assert flags(state, BASELINE_FILE) == {"unreadable": 0.0, "corrupt": 0.0, "unsaved": 1.0, "drift_evaluated": 1.0}

    state_dir.unlink()
    state_dir.mkdir()
    with structlog.testing.capture_logs() as logs:
        saved = src.collect()
    assert [e["event"] for e in logs] == ["state_write_recovered", "baseline_created"]
    assert saved.baseline_created and not saved.baseline_unsaved
    assert (state_dir / BASELINE_FILE).exists()
    assert flags(saved, BASELINE_FILE)["unsaved"] == 0.0


# --- conditions.json -------------------------------------------------------------------------------------------


def test_condition_start_times_survive_a_restart(root: FakeRoot) -> None:
    clock = Clock()
    first_run(root, clock)
    root.chmod("kfd", 0o666)
    clock.now = T0 + 10
    with structlog.testing.capture_logs():
        before = DevicesSource(root.config(), clock=clock).collect()
    started = {c.key: c.since for c in before.active()}
    assert started == {("mode_drift", "/dev/kfd"): T0 + 10, ("world_writable", "/dev/kfd"): T0 + 10}

    # a new exporter process, an hour later: the conditions began when they began, and were logged then
    restarted = DevicesSource(root.config(), clock=Clock(T0 + 3600))
    with structlog.testing.capture_logs() as logs:
        after = restarted.collect()
    assert {c.key: c.since for c in after.active()} == started
    assert not [e for e in logs if e["event"] == "device_condition_started"]
    since = registry(after).get_sample_value(
        "rocm_device_condition_since_timestamp_seconds",
        {"condition": "mode_drift", "subject": "/dev/kfd", "pci_bus": "", "cause": ""},
    )
    assert since == T0 + 10

    # fixed while no exporter ran: the next one clears them, once each, and forgets them
    root.chmod("kfd", 0o660)
    with structlog.testing.capture_logs() as logs:
        fixed = DevicesSource(root.config(), clock=Clock(T0 + 7200)).collect()
    assert fixed.active() == ()
    cleared = sorted(e["condition"] for e in logs if e["event"] == "device_condition_cleared")
    assert cleared == ["mode_drift", "world_writable"]
    assert json.loads((root.state_dir / CONDITIONS_FILE).read_text())["conditions"] == []


def once(root: FakeRoot) -> str:
    """`rocm-watchdog once` as its own process, as a textfile-collector cron job runs it."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "once",
            f"--path.rootfs={root.root}",
            f"--state.dir={root.state_dir}",
            f"--kernel-log.path={root.root / 'kern.log'}",
            "--no-collector.rocm-smi",
            "--no-collector.amd-smi",
            "--no-collector.kernel-log",
            "--no-collector.processes",
        ],
        env={**os.environ, "PYTHONPATH": str(PROJECT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def since_of(text: str, condition: str) -> float:
    name = "rocm_device_condition_since_timestamp_seconds{"
    line = next(x for x in text.splitlines() if x.startswith(name) and f'condition="{condition}"' in x)
    return float(line.rsplit(" ", 1)[1])


def test_condition_start_times_survive_a_new_process(root: FakeRoot) -> None:
    once(root)  # the first run writes the baseline
    root.chmod("kfd", 0o666)
    first = since_of(once(root), "mode_drift")
    time.sleep(1.1)  # the wall clock moves on between the two processes
    second = once(root)
    assert since_of(second, "mode_drift") == first
    assert "rocm_watchdog_drift_evaluated 1.0" in second


def test_conditions_file_unreadable_corrupt_unsaved(root: FakeRoot) -> None:
    clock = Clock()
    first_run(root, clock)
    root.chmod("kfd", 0o666)
    path = root.state_dir / CONDITIONS_FILE

    # unreadable: start times restart for this run, the file is left alone, said once
    path.mkdir()
    clock.now = T0 + 10
    src = DevicesSource(root.config(), clock=clock)
    with structlog.testing.capture_logs() as logs:
        state = src.collect()
        src.collect()
    assert events(logs, *STATE_EVENTS) == [("state_file_unreadable", CONDITIONS_FILE)]
    assert next(e for e in logs if e["event"] == "state_file_unreadable")["action"].startswith("condition start times")
    assert flags(state, CONDITIONS_FILE) == {"unreadable": 1.0, "corrupt": 0.0, "unsaved": 0.0, "drift_evaluated": 1.0}
    assert path.is_dir()

    # corrupt: moved aside, a new one written
    path.rmdir()
    path.write_text("[1, 2")
    with structlog.testing.capture_logs() as logs:
        state = DevicesSource(root.config(), clock=clock).collect()
    assert events(logs, *STATE_EVENTS) == [("state_file_corrupt", CONDITIONS_FILE)]
    assert flags(state, CONDITIONS_FILE)["corrupt"] == 1.0 and flags(state, CONDITIONS_FILE)["unreadable"] == 0.0
    assert [p.name.startswith("conditions.json.corrupt-") for p in root.state_dir.iterdir()].count(True) == 1
    assert json.loads(path.read_text())["conditions"]

    # unsaved: the state dir refuses the write of a changed set
    src = DevicesSource(root.config(), clock=clock)
    with structlog.testing.capture_logs():
        src.collect()
    subprocess.run(["chattr", "+i", str(root.state_dir)], check=True)
    try:
        root.chmod("kfd", 0o660)
        with structlog.testing.capture_logs() as logs:
            state = src.collect()
            src.collect()
        assert events(logs, *STATE_EVENTS) == [("state_write_failed", CONDITIONS_FILE)]
        assert flags(state, CONDITIONS_FILE)["unsaved"] == 1.0
    finally:
        subprocess.run(["chattr", "-i", str(root.state_dir)], check=True)
    with structlog.testing.capture_logs() as logs:
        state = src.collect()
    assert events(logs, *STATE_EVENTS) == [("state_write_recovered", CONDITIONS_FILE)]
    assert flags(state, CONDITIONS_FILE) == {"unreadable": 0.0, "corrupt": 0.0, "unsaved": 0.0, "drift_evaluated": 1.0}


# --- baseline-candidate.json -----------------------------------------------------------------------------------


@pytest.fixture
def auto_root(root: FakeRoot) -> Iterator[Callable[[], DevicesSource]]:
    config = replace(root.config(), baseline_auto_accept_boots=2)
    yield lambda: DevicesSource(config, clock=Clock())


def test_candidate_file_states_are_reported(root: FakeRoot, auto_root: Callable[[], DevicesSource]) -> None:
    first_run(root, Clock())
    root.chmod("kfd", 0o666)  # drifted and healthy: a candidate for auto-accept
    path = root.state_dir / CANDIDATE_FILE
    path.write_text("not json")
    with structlog.testing.capture_logs() as logs:
        state = auto_root().collect()
    assert events(logs, "state_file_corrupt") == [("state_file_corrupt", CANDIDATE_FILE)]
    assert flags(state, CANDIDATE_FILE)["corrupt"] == 1.0
    assert json.loads(path.read_text())["boots"]  # counting started over, in a new file

    path.unlink()
    path.mkdir()
    with structlog.testing.capture_logs() as logs:
        state = auto_root().collect()
    assert events(logs, "state_file_unreadable") == [("state_file_unreadable", CANDIDATE_FILE)]
    assert flags(state, CANDIDATE_FILE)["unreadable"] == 1.0
