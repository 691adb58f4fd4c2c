"""The systemd units of deploy/systemd/, checked offline by the real systemd-analyze: `verify` has nothing to say
about them and `security` scores each service at most 2.0; the textfile service keeps the daemon's hardening;
and the exporter runs under MemoryDenyWriteExecute (the kernel's PR_SET_MDWE, the same refusal)."""

from __future__ import annotations

import ctypes
import itertools
import re
import shlex
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from fakeroot import FakeGpu, build_root

from exporter.cli import build_config, build_parser

PROJECT = Path(__file__).resolve().parents[1]
UNITS_DIR = PROJECT / "deploy" / "systemd"
DAEMON = "rocm-watchdog.service"
TEXTFILE = "rocm-watchdog-textfile.service"
TIMER = "rocm-watchdog-textfile.timer"
SERVICES = (DAEMON, TEXTFILE)
MAX_EXPOSURE = 2.0
# Settings the textfile service may set differently from the daemon: how it runs, and its network (none).
RUN_SETTINGS = {"Type", "ExecStart", "ExecReload", "Restart", "RestartSec", "TimeoutStartSec", "ReadWritePaths"}
NETWORK_SETTINGS = {"RestrictAddressFamilies", "PrivateNetwork", "IPAddressDeny"}


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze is not installed (Debian package 'systemd'; scripts/test installs it)")
    return path


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values in order]}}; comments and blank lines skipped (no continuation lines are used)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def exec_start(unit: str) -> list[str]:
    (line,) = unit_settings(UNITS_DIR / unit)["Service"]["ExecStart"]
    return shlex.split(line)


@pytest.fixture
def unit_root(tmp_path: Path) -> Path:
    """A root for `systemd-analyze verify --root`: the host's own units (the targets ours order against), ours
    in etc/systemd/system, and an executable stub at every ExecStart path, so verify checks all of it."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    etc = root / "etc" / "systemd" / "system"
    etc.mkdir(parents=True)
    for unit in (*SERVICES, TIMER):
        shutil.copy(UNITS_DIR / unit, etc / unit)
    for unit in SERVICES:
        reload = unit_settings(UNITS_DIR / unit)["Service"].get("ExecReload", [])
        for path in (exec_start(unit)[0], *(shlex.split(line)[0] for line in reload)):
            binary = root / path.lstrip("/")
            binary.parent.mkdir(parents=True, exist_ok=True)
            binary.write_text("#!/bin/sh\n")
            binary.chmod(0o755)
    return root


def verify(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [systemd_analyze(), "verify", f"--root={root}", *SERVICES, TIMER],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_verify_has_nothing_to_say_about_the_units(unit_root: Path) -> None:
    proc = verify(unit_root)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "rocm-watchdog" in line]
    assert proc.returncode == 0 and not said, proc.stdout + proc.stderr


def test_verify_would_say_it(unit_root: Path) -> None:
    """The clean run above means something: the same root with one bad setting and a missing binary is reported."""
    unit = unit_root / "etc" / "systemd" / "system" / DAEMON
    unit.write_text(unit.read_text() + "[Service]\nProtectProc=sometimes\n")
    (unit_root / exec_start(TEXTFILE)[0].lstrip("/")).unlink()
    proc = verify(unit_root)
    out = proc.stdout + proc.stderr
    assert "protection mode, ignoring: sometimes" in out and "is not executable" in out, out


@pytest.mark.parametrize("unit", SERVICES)
def test_security_exposure_is_at_most_2(unit: str) -> None:
    # --threshold is in tenths of the displayed score (exposure 0-100 shown as 0.0-10.0): fail above 2.0.
    proc = subprocess.run(
        [
            systemd_analyze(),
            "security",
            "--offline=true",
            f"--threshold={round(MAX_EXPOSURE * 10)}",
            "--no-pager",
            str(UNITS_DIR / unit),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    m = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    exposure = float(m.group(1))
    assert exposure <= MAX_EXPOSURE and proc.returncode == 0, f"exposure {exposure}:\n{proc.stdout}{proc.stderr}"


def test_the_textfile_service_keeps_the_daemons_hardening() -> None:
    daemon = unit_settings(UNITS_DIR / DAEMON)["Service"]
    textfile = unit_settings(UNITS_DIR / TEXTFILE)["Service"]
    for key in set(daemon) - RUN_SETTINGS - NETWORK_SETTINGS:
        assert textfile.get(key) == daemon[key], key
    assert textfile["PrivateNetwork"] == ["yes"] and textfile["RestrictAddressFamilies"] == ["AF_UNIX"]


def test_ordering_and_device_access() -> None:
    unit = unit_settings(UNITS_DIR / DAEMON)
    after = " ".join(unit["Unit"]["After"]).split()
    assert "network-online.target" in after and "systemd-udev-settle.service" not in after
    service = unit["Service"]
    assert service["DevicePolicy"] == ["closed"]
    assert set(service["DeviceAllow"]) == {"/dev/kfd rw", "char-drm rw", "/dev/kmsg r"}
    assert service["CapabilityBoundingSet"] == service["AmbientCapabilities"] == ["CAP_SYSLOG"]
    assert service["SupplementaryGroups"] == ["render video"]
    # The processes source reads other users' /proc/<pid>, the boot id is in /proc/sys: neither may be hidden.
    assert "ProtectProc" not in service and "ProcSubset" not in service


def test_the_units_commands_are_ones_the_cli_accepts() -> None:
    daemon = build_config(build_parser().parse_args(exec_start(DAEMON)[1:]))
    textfile = build_config(build_parser().parse_args(exec_start(TEXTFILE)[1:]))
    assert daemon.state_dir == textfile.state_dir == Path("/var/lib/rocm-watchdog")
    assert textfile.once_output == Path("/var/lib/prometheus/node-exporter/rocm-watchdog.prom")
    writable = unit_settings(UNITS_DIR / TEXTFILE)["Service"]["ReadWritePaths"]
    assert writable == [f"-{textfile.once_output.parent}"]
    assert unit_settings(UNITS_DIR / TIMER)["Install"]["WantedBy"] == ["timers.target"]


def test_the_timer_fires_every_30_seconds() -> None:
    (spec,) = unit_settings(UNITS_DIR / TIMER)["Timer"]["OnCalendar"]
    proc = subprocess.run(
        [systemd_analyze(), "calendar", "--iterations=3", spec],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d+): \w{3} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", proc.stdout)
    times = [datetime.fromisoformat(s) for s in stamps]
    assert len(times) == 3 and {(b - a).total_seconds() for a, b in itertools.pairwise(times)} == {30.0}, proc.stdout


PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1


def deny_write_execute() -> None:
    """In the child before exec: the kernel's MemoryDenyWriteExecute (inherited across exec)."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_MDWE)")


def test_the_exporter_runs_with_memory_deny_write_execute(tmp_path: Path) -> None:
    """MemoryDenyWriteExecute=yes refuses writable+executable mappings: CPython, its C extensions (psutil,
    PyYAML, bcrypt) and ctypes callbacks (the amd-smi and rocm-smi CLIs are Python over ctypes) must not need
    one. Checked under the kernel's own switch for the same thing (Linux 6.3+)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import mmap; mmap.mmap(-1, 4096, prot=7)"],
        preexec_fn=deny_write_execute,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if "prctl(PR_SET_MDWE)" in probe.stderr:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    assert probe.returncode != 0 and "Permission denied" in probe.stderr, probe.stderr  # the switch is on

    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    (root.root / "kern.log").write_text("[  104.5] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!\n")
    code = (
        "import ctypes, sys\n"
        "assert ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 7)() == 7\n"
        "import exporter.http, exporter.webconfig, exporter.sinks.alertmanager\n"
        "from exporter.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = [
        sys.executable, "-c", code, "once",
        "--path.rootfs", str(root.root),
        "--state.dir", str(root.state_dir),
        "--kernel-log.path", str(root.root / "kern.log"),
        "--no-collector.rocm-smi", "--no-collector.amd-smi",
    ]  # fmt: skip
    proc = subprocess.run(
        argv,
        preexec_fn=deny_write_execute,
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "rocm_gpu_info{" in proc.stdout and 'rocm_watchdog_source_up{source="sysfs"} 1.0' in proc.stdout
    assert "reset" in proc.stdout
