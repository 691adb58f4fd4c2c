"""The one subprocess runner, with real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.sources.runner import run


def test_captures_exit_code_and_both_streams() -> None:
    result = run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 10)
    assert result.returncode == 3
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert not result.timed_out and not result.ok and result.error is None


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    result = run(["sh", "-c", script], 0.5)
    assert result.timed_out and result.returncode is None
    child = int(pidfile.read_text())
    # The grandchild was killed with the group: it is gone (or a zombie about to be reaped by init).
    for _ in range(50):
        try:
            os.kill(child, 0)
            state = Path(f"/proc/{child}/stat").read_text().split()[2]
            if state == "Z":
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("grandchild survived the timeout")


def test_a_child_that_keeps_the_pipes_open_does_not_extend_the_wait(tmp_path: Path) -> None:
    # The leader exits at once but a background child holds stdout: the runner stops at the timeout.
    result = run(["sh", "-c", "echo first; sleep 300 &"], 0.5)
    assert result.stdout.startswith("first")
    assert result.timed_out


def test_output_is_capped() -> None:
    result = run([sys.executable, "-c", "print('x' * 100000)"], 10, max_bytes=1000)
    assert len(result.stdout) == 1000
    assert result.truncated


def test_missing_program_is_an_error_not_an_exception(tmp_path: Path) -> None:
    result = run([str(tmp_path / "no-such-tool")], 5)
    assert result.error is not None and "No such file" in result.error
    assert result.returncode is None


def test_not_executable(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o644)
    result = run([str(tool)], 5)
    assert result.error is not None and "ermission" in result.error


def test_never_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    result = run(["echo", f"; touch {marker}"], 5)
    assert result.stdout.strip() == f"; touch {marker}"
    assert not marker.exists()


def test_stop_all_kills_running_tools_and_starts_no_more() -> None:
    # In a child interpreter: stop_all is for the end of a process and stays in force.
    code = (
        "import threading, time\n"
        "from exporter.sources import runner\n"
        "out = {}\n"
        "t = threading.Thread(target=lambda: out.update(r=runner.run(['sleep', '300'], 120)))\n"
        "t.start()\n"
        "while not runner._running: time.sleep(0.01)\n"
        "runner.stop_all()\n"
        "t.join(30)\n"
        "assert not t.is_alive(), 'run() did not return after stop_all'\n"
        "assert out['r'].returncode != 0 and out['r'].duration_seconds < 100, out\n"
        "late = runner.run(['true'], 5)\n"
        "assert late.error and 'shutting down' in late.error, late\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert proc.stdout.strip() == "ok", proc.stderr


def test_spawn_runs_until_stopped_and_stop_ends_its_whole_group(tmp_path: Path) -> None:
    import psutil

    from exporter.sources.runner import spawn

    out = tmp_path / "out.log"
    pid_file = tmp_path / "child.pid"
    # a program that forks a helper, as a wrapper script does; stop must end both
    proc = spawn(
        ["sh", "-c", f"sleep 300 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; echo started; wait"], out
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = psutil.Process(int(pid_file.read_text()))
    assert proc.poll() is None and child.is_running()
    proc.stop(timeout_seconds=5)
    assert proc.poll() is not None

    def gone() -> bool:
        try:
            return child.status() == psutil.STATUS_ZOMBIE  # killed, waiting for init to reap it
        except psutil.NoSuchProcess:
            return True

    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()
    assert "started" in out.read_text()


def test_spawn_of_a_missing_program_raises() -> None:
    import pytest

    from exporter.sources.runner import spawn

    with pytest.raises(OSError):
        spawn(["/nonexistent/prometheus"], os.devnull)


def test_no_group_kill_once_the_leader_is_reaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group kill of run and Spawned.stop is made while the leader is not reaped yet (running, or a zombie),
    so its pid still names the group: once reaped, the pid (pid_max is 32768 on many hosts) may already be another
    process's that leads a group of its own (every tool, every spawned program), which the kill would end."""
    from exporter.sources import runner

    calls: list[tuple[int, bool]] = []
    real = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        calls.append((pgid, Path(f"/proc/{pgid}").exists()))  # a zombie is still there; a reaped pid is not
        real(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    assert run(["true"], 10).returncode == 0
    assert run(["sh", "-c", "sleep 300 & exec sleep 300"], 0.5).timed_out
    spawned = runner.spawn(["sh", "-c", "sleep 300 & wait"], tmp_path / "out.log")
    spawned.stop(timeout_seconds=5)
    assert spawned.poll() is not None
    assert calls and all(alive for _, alive in calls), calls


def test_setpriv_looked_up_by_two_threads_at_once_wraps_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """The smi sources' first runs start at once in two threads: the second must not run its tool without the
    parent-death signal because the first is still looking for setpriv."""
    import threading

    from exporter.sources import orphans

    monkeypatch.setattr(orphans, "_setpriv", None)
    monkeypatch.setattr(orphans, "_setpriv_looked", False)
    looking, release = threading.Event(), threading.Event()
    real = shutil.which

    def which(name: str, mode: int = os.F_OK | os.X_OK, path: str | None = None) -> str | None:
        if name == "setpriv":
            looking.set()
            assert release.wait(30)  # a guard: the test releases it
        return real(name, mode, path)

    monkeypatch.setattr(shutil, "which", which)
    found: dict[str, str | None] = {}
    first = threading.Thread(target=lambda: found.update(first=orphans.setpriv()))
    first.start()
    assert looking.wait(30)
    second = threading.Thread(target=lambda: found.update(second=orphans.setpriv()))
    second.start()
    second.join(0.5)  # before the fix it returned None here; after it, it waits for the first's answer
    release.set()
    first.join(30)
    second.join(30)
    assert found["first"] is not None and found["second"] == found["first"], found
