"""The messages a newcomer meets in the first hour (issue 20), each as a real subprocess: a runtime failure (a port
in use, a privileged port, an output that cannot be written) said as what it is, never as "invalid configuration";
``--output`` never makes a directory; a misspelt command gets a "did you mean"; a command's --help says what it
does; ``baseline show`` takes the path flags its --help lists."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fakeroot import FakeGpu, FakeRoot, build_root
from paths import PROJECT

from exporter.cli import _subparsers, build_parser

ENV = {**os.environ, "PYTHONPATH": str(PROJECT)}
CLI = [sys.executable, "-m", "exporter"]
QUIET = ["--no-collector.rocm-smi", "--no-collector.amd-smi", "--no-collector.kernel-log", "--log.level=error"]


def run(argv: list[str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *CLI, *argv], capture_output=True, text=True, timeout=120, env=ENV, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def root(tmp_path: Path) -> FakeRoot:
    return build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])


def host_flags(root: FakeRoot) -> list[str]:
    return [f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}"]


# --- runtime failures, said as what they are -------------------------------------------------------------------


def test_output_in_a_missing_directory_is_refused_and_nothing_is_made(root: FakeRoot, tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.prom"
    proc = run(["once", "--output", str(target), *host_flags(root), *QUIET])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"rocm-watchdog once: cannot write --output {target}: the directory {target.parent} does not exist "
        "(--output creates no directories)\n"
    )
    assert not (tmp_path / "nonexistent").exists()


def test_output_on_procfs_says_what_it_is(root: FakeRoot) -> None:
    proc = run(["once", "--output", "/proc/version", *host_flags(root), *QUIET])
    assert proc.returncode == 2
    assert "invalid configuration" not in proc.stderr and "No such file" not in proc.stderr
    assert proc.stderr.startswith(
        "rocm-watchdog once: cannot write --output /proc/version: it is on the kernel's proc filesystem (mounted at "
        "/proc), where no file can be created"
    ), proc.stderr


def test_output_that_is_a_directory_or_under_a_file(root: FakeRoot, tmp_path: Path) -> None:
    proc = run(["once", "--output", str(tmp_path), *host_flags(root), *QUIET])
    assert proc.returncode == 2 and f"{tmp_path}: it is a directory" in proc.stderr, proc.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run(["once", "--output", str(blocker / "x.prom"), *host_flags(root), *QUIET])
    assert proc.returncode == 2 and f"{blocker} is not a directory" in proc.stderr, proc.stderr
    assert "invalid configuration" not in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_output_in_a_directory_this_user_may_not_write(root: FakeRoot, tmp_path: Path) -> None:
    """A directory of another user, written by root without CAP_DAC_OVERRIDE: what any user without write
    access gets from the kernel."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o755)
    os.chown(closed, 65534, 65534)
    without = ("setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override")
    proc = run(["once", "--output", str(closed / "x.prom"), *host_flags(root), *QUIET], prefix=without)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"rocm-watchdog once: cannot write --output {closed / 'x.prom'}: Permission denied: the directory {closed} "
        "must be writable by this user\n"
    ), proc.stderr
    assert list(closed.iterdir()) == []  # no temp file left


def test_a_port_in_use_is_not_invalid_configuration(root: FakeRoot) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(["serve", f"--web.listen-address=127.0.0.1:{port}", *host_flags(root), *QUIET])
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        f"rocm-watchdog serve: cannot listen on 127.0.0.1:{port}: the port is in use by another process"
    ), proc.stderr
    assert "invalid configuration" not in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_privileged_port_without_the_capability_says_so(root: FakeRoot) -> None:
    """What a user gets on a port below 1024: the same refusal of the kernel, here for root without
    CAP_NET_BIND_SERVICE (the project's interpreter may live where another user cannot run it)."""
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start < 2:
        pytest.skip("net.ipv4.ip_unprivileged_port_start lets everyone bind every port")
    without = ("setpriv", "--inh-caps=-net_bind_service", "--bounding-set=-net_bind_service")
    proc = run(["serve", "--web.listen-address=127.0.0.1:1", *host_flags(root), *QUIET], prefix=without)
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        f"rocm-watchdog serve: cannot listen on 127.0.0.1:1: Permission denied: ports below {start} need root or "
        f"CAP_NET_BIND_SERVICE (net.ipv4.ip_unprivileged_port_start={start})"
    ), proc.stderr


# --- usage ---------------------------------------------------------------------------------------------------------


def test_a_listen_address_without_a_port_names_the_flag_once(root: FakeRoot) -> None:
    proc = run(["serve", "--web.listen-address", "localhost", *host_flags(root), *QUIET])
    assert proc.returncode == 2
    assert "  - --web.listen-address: expected [host]:port (such as 127.0.0.1:9862, [::1]:9862 or :9862), got " \
        "'localhost'\n" in proc.stderr, proc.stderr  # fmt: skip
    assert proc.stderr.count("--web.listen-address") == 1


def test_a_misspelt_command_gets_a_did_you_mean() -> None:
    proc = run(["serv"])
    assert proc.returncode == 2
    assert "  - unknown command 'serv' (did you mean serve?)\n" in proc.stderr, proc.stderr
    other = run(["frobnicate"])
    assert (
        other.returncode == 2 and "unknown command 'frobnicate' (commands: serve, once, capture, check," in other.stderr
    )


def test_parse_without_a_kind_points_at_parse_help() -> None:
    proc = run(["parse"])
    assert proc.returncode == 2
    assert "parse needs the kind of capture first: rocm-smi, amd-smi, kernel-log, gpu-metrics" in proc.stderr
    assert proc.stderr.rstrip().endswith("(rocm-watchdog parse --help lists its flags)"), proc.stderr


def test_every_command_says_what_it_does_in_its_help() -> None:
    commands = _subparsers(build_parser())
    assert {"serve", "once", "check", "parse", "baseline", "kmsg-relay", "prepare-state"} <= set(commands)
    for name, parser in commands.items():
        assert parser.description and len(parser.description.split()) >= 12, name
    for name in ("baseline", "check"):
        proc = run([name, "--help"])
        text = " ".join(proc.stdout.split())
        assert proc.returncode == 0 and " ".join(str(commands[name].description).split()) in text, name


def test_baseline_show_takes_the_path_flags_its_help_lists(root: FakeRoot) -> None:
    shown = run(["baseline", "show", *host_flags(root)])
    assert shown.returncode == 1 and "no baseline in" in shown.stderr, shown.stderr  # accepted; nothing stored yet
    accepted = run(["baseline", "accept", *host_flags(root)])
    assert accepted.returncode == 0, accepted.stderr
    shown = run(["baseline", "show", *host_flags(root), f"--path.sysfs={root.root / 'sys'}"])
    assert shown.returncode == 0 and "0000:03:00.0" in shown.stdout, shown.stderr
    missing = run(["baseline", "show", "--path.rootfs=/nonexistent", f"--state.dir={root.state_dir}"])
    assert missing.returncode == 2 and "--path.rootfs /nonexistent: no such directory" in missing.stderr
