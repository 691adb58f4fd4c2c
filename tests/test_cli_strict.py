"""Issue 12: every README command behaves in a pipe, on a terminal, with a closed stdin and with bad input; flags
and config as strict as node_exporter's; the web config checked as promtool checks it; one exit-code table.

Every command runs as a real subprocess over a fake host (tests/fakeroot.py), never the machine's /dev/kmsg.
"""

from __future__ import annotations

import gzip
import json
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
from fakeroot import FakeGpu, FakeRoot, build_root
from paths import DATA, FIXTURES, PROJECT
from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.build import build_info, git_revision
from exporter.config import Config
from exporter.exitcodes import MEANINGS, ExitCode
from exporter.metrics.collector import RocmCollector
from exporter.metrics.exposition import VOLATILE_SECONDS, Exposition
from exporter.metrics.selfmetrics import ExporterMetrics
from exporter.store import SnapshotStore
from exporter.webconfig import WebConfigError, load_web_config

ENV = {**os.environ, "PYTHONPATH": str(PROJECT), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
CLI = [sys.executable, "-m", "exporter"]
ROCM_SMI = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"
AMD_SMI = FIXTURES / "smi" / "amd-smi" / "amdsmi-changelog-rocm611_topology-a-t_json_2gpu-pcie.json"
KERNEL_LOG = DATA / "kernel-log" / "dmesg.txt"
GPU_METRICS = PROJECT / "tests" / "fixtures" / "gpu_metrics" / "mi100_arcturus_v1_3_a.bin"
CAPTURES = {"rocm-smi": ROCM_SMI, "amd-smi": AMD_SMI, "kernel-log": KERNEL_LOG, "gpu-metrics": GPU_METRICS}
NO_TRACEBACK = ("Traceback", "BrokenPipeError", "Exception ignored")


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=120, env=ENV, check=False, **kwargs)


def shell(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in bash, with ``$RW`` the command line; the exit code of the first command of the last pipeline
    is printed last on stderr as ``rc=N`` (``PIPESTATUS``)."""
    env = {**ENV, "RW": shlex.join(CLI)}
    return subprocess.run(
        ["bash", "-c", f'{script}; echo "rc=${{PIPESTATUS[0]}}" >&2'],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


def shell_rc(proc: subprocess.CompletedProcess[str]) -> int:
    return int(proc.stderr.rstrip().rsplit("rc=", 1)[1])


def assert_clean(stderr: str) -> None:
    for needle in NO_TRACEBACK:
        assert needle not in stderr, stderr


# ---- the fake host and the README's commands over it ------------------------------------------------------


class Host:
    def __init__(self, root: FakeRoot) -> None:
        self.root = root
        self.kern_log = root.root / "kern.log"

    @property
    def paths(self) -> list[str]:
        return [f"--path.rootfs={self.root.root}", f"--state.dir={self.root.state_dir}"]

    @property
    def collect(self) -> list[str]:
        return [*self.paths, f"--kernel-log.path={self.kern_log}", "--no-collector.rocm-smi", "--no-collector.amd-smi"]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    root = build_root(tmp_path_factory.mktemp("host"), [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    h = Host(root)
    h.kern_log.write_text("[  104.5] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!\n")
    accepted = run(["baseline", "accept", *h.paths])
    assert accepted.returncode == 0, accepted.stderr
    return h


def readme_commands() -> list[str]:
    """The commands of the README's "Commands" block: ``serve``, ``once``, ..., ``--version``."""
    text = (PROJECT / "README.md").read_text()
    block = text.split("## Commands", 1)[1].split("```", 2)[1]
    return [line.split()[1] for line in block.splitlines() if line.startswith("rocm-watchdog ")]


def cases(h: Host) -> dict[str, list[list[str]]]:
    """Each README command as concrete runs over the fake host (serve: tests below, it does not end by itself)."""
    return {
        "once": [["once", *h.collect]],
        "capture": [["capture", f"--output={h.root.root.parent / 'capture.ttar'}", *h.collect]],
        "check": [["check", *h.paths], ["check", "--json", *h.paths]],
        "parse": [["parse", kind, str(path)] for kind, path in CAPTURES.items()],
        "baseline": [["baseline", "show", f"--state.dir={h.root.state_dir}"], ["baseline", "accept", *h.paths]],
        "--version": [["--version"]],
    }


def test_every_readme_command_has_a_case(host: Host) -> None:
    # serve and demo do not end by themselves: serve's tests are below, demo's in tests/test_demo.py
    assert set(readme_commands()) == {*cases(host), "serve", "demo"}


def every_run(h: Host) -> Iterator[list[str]]:
    for runs in cases(h).values():
        yield from runs


# what differs between two runs of one command: the size of a capture (it records each tool run's duration)
_RUN_TO_RUN = re.compile(r"\(\d+ bytes\)")


def _first_line(stdout: str) -> str:
    return _RUN_TO_RUN.sub("(N bytes)", stdout.splitlines()[0]) if stdout else ""


def test_every_readme_command_in_a_pipe_ends_quietly_with_its_own_exit_code(host: Host) -> None:
    for argv in every_run(host):
        plain = run(argv)
        assert plain.returncode in (0, 1), (argv, plain.stderr)
        assert_clean(plain.stderr)
        first = _first_line(plain.stdout)
        for reader in ("head -1", "head -n 0"):  # head -n 0 has gone before the first write: EPIPE for sure
            piped = shell(f"$RW {shlex.join(argv)} | {reader}")
            assert shell_rc(piped) == plain.returncode, (argv, reader, piped.stderr)
            assert_clean(piped.stderr)
            if reader == "head -n 0":
                assert piped.stdout == "", argv
            else:
                assert piped.stdout.count("\n") == 1 and _first_line(piped.stdout) == first, (argv, piped.stdout)


def test_a_big_output_into_a_pipe_that_closes_early(host: Host, tmp_path: Path) -> None:
    # More than a pipe buffer (64 KiB): the write itself fails half-way, not only a later flush.
    log = tmp_path / "big.log"
    log.write_text(KERNEL_LOG.read_text() * 40)
    piped = shell(f"$RW parse kernel-log {shlex.quote(str(log))} | head -1")
    assert shell_rc(piped) == 0 and piped.stdout == "{\n"
    assert_clean(piped.stderr)
    piped = shell(f"$RW once {shlex.join(host.collect)} >&-")  # stdout closed before the start
    assert shell_rc(piped) == 0
    assert_clean(piped.stderr)


def test_every_readme_command_with_a_closed_stdin(host: Host) -> None:
    for argv in every_run(host):
        plain = run(argv)
        closed = shell(f"$RW {shlex.join(argv)} <&-")
        assert shell_rc(closed) == plain.returncode, (argv, closed.stderr)
        assert_clean(closed.stderr)
    for kind in CAPTURES:  # reading stdin, which is closed: a usage error that says so
        closed = shell(f"$RW parse {kind} <&-")
        assert shell_rc(closed) == ExitCode.USAGE
        assert "standard input is closed" in closed.stderr
        assert_clean(closed.stderr)


def test_parse_on_a_terminal_says_it_reads_stdin() -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, "parse", "rocm-smi"], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ENV, text=True)  # fmt: skip
    os.close(slave)
    try:
        assert proc.stderr is not None
        hint = proc.stderr.readline()
        assert "reading the capture from standard input (end it with Ctrl-D" in hint
        os.write(master, b"\x04")  # Ctrl-D on an empty line: end of input
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == ExitCode.PROBLEMS and "is empty" in err  # nothing typed: not a capture
        assert_clean(err)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_while_waiting_for_stdin_exits_130_without_a_traceback() -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, "parse", "kernel-log"], stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV, text=True)  # fmt: skip
    os.close(slave)
    try:
        assert proc.stderr is not None
        assert "standard input" in proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == ExitCode.INTERRUPTED
        assert_clean(err)
    finally:
        os.close(master)


# ---- exit codes -----------------------------------------------------------------------------------------


def test_the_exit_code_table_in_the_docs_is_the_one_in_the_code() -> None:
    text = (PROJECT / "docs" / "exit-codes.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `([A-Z]+)` \| (.+) \|$", text, re.MULTILINE)
    assert [(int(code), name, meaning) for code, name, meaning in rows] == [
        (int(c), c.name, MEANINGS[c]) for c in ExitCode
    ]
    assert [int(ExitCode.PROBLEMS), int(ExitCode.USAGE), int(ExitCode.INTERNAL)] == [1, 2, 70]
    assert "docs/exit-codes.md" in (PROJECT / "README.md").read_text()


@pytest.mark.parametrize("kind", sorted(CAPTURES))
def test_an_empty_file_is_not_a_capture_for_every_kind(tmp_path: Path, kind: str) -> None:
    for name, text in (("empty", ""), ("blank", "\n  \n")):
        if kind == "gpu-metrics" and text:
            continue  # binary: whitespace is data, and not a table
        empty = tmp_path / name
        empty.write_text(text)
        proc = run(["parse", kind, str(empty)])
        assert proc.returncode == ExitCode.PROBLEMS, proc.stderr
        assert proc.stdout == "" and f"{empty} is empty" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = run(["parse", kind], stdin=subprocess.DEVNULL)
    assert proc.returncode == ExitCode.PROBLEMS and "standard input is empty" in proc.stderr


def test_parse_input_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    for path in (tmp_path / "missing", tmp_path):
        proc = run(["parse", "rocm-smi", str(path)])
        assert proc.returncode == ExitCode.USAGE and f"cannot read {path}" in proc.stderr
        assert_clean(proc.stderr)
    proc = run(["parse", "amd-smi", str(KERNEL_LOG)])  # a capture of something else
    assert proc.returncode == ExitCode.PROBLEMS and len(proc.stderr.splitlines()) == 1


def boom_script(exception: str) -> str:
    return (
        "import sys\nimport exporter.cli as cli\n"
        f"def boom(_args):\n    raise {exception}\n"
        "cli.cmd_parse = boom\nsys.exit(cli.main(sys.argv[1:]))\n"
    )


def test_a_bug_exits_70_with_one_line_and_the_traceback_in_the_log() -> None:
    argv = [sys.executable, "-c", boom_script("ZeroDivisionError('the bug')"), "parse", "rocm-smi", str(ROCM_SMI)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV, check=False)
    assert proc.returncode == ExitCode.INTERNAL
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    others = [line for line in proc.stderr.splitlines() if not line.startswith("{")]
    (record,) = records
    assert (
        record["event"] == "internal_error" and "Traceback" in record["exception"] and "the bug" in record["exception"]
    )
    assert len(others) == 1 and "internal error (ZeroDivisionError: the bug)" in others[0] and "log" in others[0]


def test_ctrl_c_exits_130() -> None:
    argv = [sys.executable, "-c", boom_script("KeyboardInterrupt"), "parse", "rocm-smi", str(ROCM_SMI)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV, check=False)
    assert proc.returncode == ExitCode.INTERRUPTED and proc.stderr == ""


# ---- strict flags and config ----------------------------------------------------------------------------


def problems_of(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert proc.stderr.startswith("rocm-watchdog: invalid configuration:\n"), proc.stderr
    assert_clean(proc.stderr)
    return [line[4:] for line in proc.stderr.splitlines() if line.startswith("  - ")]


def test_abbreviated_flags_are_refused_with_what_was_meant(host: Host) -> None:
    assert problems_of(run(["once", "--path.root", str(host.root.root)])) == [
        "--path.root: unknown flag (did you mean --path.rootfs?)"
    ]
    # serve too: refused before anything listens
    assert problems_of(run(["serve", "--web.listen", "127.0.0.1:0", *host.collect])) == [
        "--web.listen: unknown flag (did you mean --web.listen-address?)"
    ]


def test_a_flag_of_another_command_is_refused(host: Host) -> None:
    assert problems_of(run(["once", "--web.listen-address=:9999", *host.collect])) == [
        "--web.listen-address: not a flag of once; it applies to demo and serve"
    ]
    assert problems_of(run(["check", "--kernel-log.path=/dev/kmsg", *host.paths])) == [
        "--kernel-log.path: not a flag of check; it applies to capture, once and serve"
    ]
    assert problems_of(run(["baseline", "show", "--smi.backend=auto", f"--state.dir={host.root.state_dir}"])) == [
        "--smi.backend: not a flag of baseline; it applies to capture, once and serve"
    ]


def test_every_bad_flag_is_reported_at_once(host: Host, tmp_path: Path) -> None:
    config = tmp_path / "c.yml"
    config.write_text("collector.sysfs: maybe\n")
    problems = problems_of(
        run(["serve", "--colector.sysfs", "--web.listen", ":1", "--bogus=1", "--smi.timeout=1s1s",
             "--processes.top-n", "x", f"--config.file={config}", "--path.rootfs=/nonexistent"])
    )  # fmt: skip
    assert problems == [
        "--colector.sysfs: unknown flag (did you mean --collector.sysfs?)",
        "--web.listen: unknown flag (did you mean --web.listen-address?)",
        "--bogus: unknown flag",
        "--smi.timeout: not a duration: '1s1s' (whole numbers with units y w d h m s ms, largest first, each once: "
        "e.g. 500ms, 15s, 1m30s)",
        "--processes.top-n: expected a whole number >= 0, got 'x'",
        f"--collector.sysfs (in {config}): expected true or false, got 'maybe'",
        "--path.rootfs /nonexistent: no such directory",
    ]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("web-listen-address: ':1'", "unknown setting 'web-listen-address' (did you mean 'web.listen-address'?)"),
        (
            "collector_kernel_log: false",
            "unknown setting 'collector_kernel_log' (did you mean 'collector.kernel-log'?)",
        ),
        ("path.rootf: /", "unknown setting 'path.rootf' (did you mean 'path.rootfs'?)"),
        ("no-collector.sysfs: true", "unknown setting 'no-collector.sysfs' (did you mean 'collector.sysfs: false'?)"),
        ("state.dir: /a\nstate.dir: /b", "key 'state.dir' is given twice in"),
        ("collector.sysfs.interval: 1s1s", "--collector.sysfs.interval (in "),
        ("web.listen-address: [", "while parsing"),
    ],
)
def test_config_file_keys_are_checked(tmp_path: Path, host: Host, setting: str, expected: str) -> None:
    config = tmp_path / "rocm-watchdog.yml"
    config.write_text(setting + "\n")
    (problem,) = problems_of(run(["serve", f"--config.file={config}", *host.collect]))
    assert expected in problem
    if "parsing" in expected or "twice" in expected:
        assert str(config) in problem and "line" in problem  # YAML errors name the file, not <unicode string>


def test_a_shared_config_file_is_fine_for_every_command(tmp_path: Path, host: Host) -> None:
    config = tmp_path / "shared.yml"
    blocker = tmp_path / "a-file"  # --output under a regular file: cannot be written
    blocker.write_text("")
    config.write_text(
        f"web.listen-address: 127.0.0.1:0\nalertmanager.url: http://127.0.0.1:9\nkernel-log.path: {host.kern_log}\n"
        "collector.rocm-smi: false\ncollector.amd-smi: false\ncollector.sysfs.interval: 5s\n"
        f"output: {blocker / 'rocm.prom'}\n"
    )
    check = run(["check", f"--config.file={config}", "--log.level=debug", "--log.format=json", *host.paths])
    assert check.returncode in (0, 1), check.stderr
    ignored = {json.loads(line)["setting"] for line in check.stderr.splitlines() if "config_setting_ignored" in line}
    assert ignored == {
        "web.listen-address", "alertmanager.url", "kernel-log.path", "collector.rocm-smi", "collector.amd-smi",
        "collector.sysfs.interval", "output",
    }  # fmt: skip
    once = run(["once", f"--config.file={config}", *host.paths])
    assert once.returncode == ExitCode.USAGE and "--output" in once.stderr  # once's own setting applies to once


def test_path_rootfs_must_be_a_directory_and_the_kernel_log_is_under_it(tmp_path: Path, host: Host) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    for command in ("once", "check", "serve", "baseline accept"):
        for rootfs, state in ((tmp_path / "missing", "no such directory"), (a_file, "not a directory")):
            proc = run([*command.split(), f"--path.rootfs={rootfs}", f"--state.dir={tmp_path / 'state'}"])
            assert problems_of(proc) == [f"--path.rootfs {rootfs}: {state}"]
    # --kernel-log.path left at its default: <rootfs>/dev/kmsg, which the fake root does not have
    proc = run(["once", *host.paths, "--no-collector.rocm-smi", "--no-collector.amd-smi", "--log.format=json"])
    assert proc.returncode == 0
    failed = [json.loads(line) for line in proc.stderr.splitlines() if '"source_failed"' in line]
    (error,) = [e["error"] for e in failed if e["source"] == "kernel-log"]
    assert f"{host.root.root}/dev/kmsg" in error


def test_durations_are_prometheus_durations(host: Host) -> None:
    for value in ("1s1s", "1.5s", "15", "1m1h", "0s"):
        (problem,) = problems_of(run(["serve", f"--collector.sysfs.interval={value}", *host.collect]))
        assert problem.startswith("--collector.sysfs.interval: not a") and repr(value) in problem
    for value in ("500ms", "1m30s", "1h"):
        proc = run(["serve", f"--smi.timeout={value}", *host.collect, "--web.max-requests=x"])
        assert problems_of(proc) == ["--web.max-requests: expected a whole number >= 0, got 'x'"]


def test_version_prints_node_exporters_lines() -> None:
    proc = run(["--version"])
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    info = build_info()
    assert lines[0] == f"rocm-watchdog, version 0.1.0 (branch: {info.branch}, revision: {info.revision})"
    assert [line.split(":", 1)[0].strip() for line in lines[1:]] == ["build date", "python version", "platform"]
    assert info.python_version in lines[2] and sys.platform in lines[3]
    if (PROJECT / ".git").exists():  # run from a checkout: the revision is the checkout's
        assert (info.revision, info.branch) == git_revision(PROJECT) and info.revision != "unknown"


def test_the_package_build_writes_the_revision(tmp_path: Path) -> None:
    from exporter._buildhook import build_module

    text = build_module(PROJECT, {"ROCM_WATCHDOG_REVISION": "abc", "SOURCE_DATE_EPOCH": "0"})
    values: dict[str, Any] = {}
    exec(text, values)
    assert values["REVISION"] == "abc" and values["BUILD_DATE"] == "19700101-00:00:00"
    assert values["BRANCH"] == git_revision(PROJECT)[1]
    assert git_revision(tmp_path) == ("unknown", "unknown")


# ---- the web config, against promtool -------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    directory = tmp_path_factory.mktemp("certs")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(directory / "k.pem"), "-out", str(directory / "c.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return directory


HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
TLS = "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n"
# (name, file, promtool and we accept it)
WEB_CONFIGS = [
    ("empty", "", True),
    ("tls", TLS, True),
    ("tls-empty-section", "tls_server_config: {}\n", True),
    ("tls-versions", TLS + "  min_version: TLS12\n  max_version: TLS13\n", True),
    ("tls10", TLS + "  min_version: TLS10\n", True),
    ("tls99", TLS + "  min_version: TLS99\n", False),
    ("max-tls99", TLS + "  max_version: TLS99\n", False),
    ("tls-lower-case", TLS + "  min_version: tls12\n", False),
    ("tls-as-number", TLS + "  min_version: 12\n", False),
    ("cipher", TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_128_CBC_SHA]\n", True),
    ("cipher-tls13-name", TLS + "  cipher_suites: [TLS_AES_256_GCM_SHA384]\n", True),
    ("cipher-unknown", TLS + "  cipher_suites: [TLS_NOPE]\n", False),
    ("cipher-openssl-name", TLS + "  cipher_suites: [ECDHE-RSA-AES128-GCM-SHA256]\n", False),
    ("cipher-go-insecure", TLS + "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA256]\n", False),
    ("cipher-old-chacha-alias", TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]\n", False),
    ("cipher-not-a-list", TLS + "  cipher_suites: TLS_AES_128_GCM_SHA256\n", False),
    ("client-auth", TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: c.pem\n", True),
    ("client-auth-no-ca", TLS + "  client_auth_type: RequireAndVerifyClientCert\n", True),
    ("client-auth-unknown", TLS + "  client_auth_type: Sometimes\n", False),
    ("client-ca-without-auth", TLS + "  client_ca_file: c.pem\n", False),
    ("client-ca-missing", TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: nope.pem\n", False),
    ("no-key", "tls_server_config:\n  cert_file: c.pem\n", False),
    ("no-cert", "tls_server_config:\n  key_file: k.pem\n", False),
    ("auth-without-cert", "tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n", False),
    ("cert-missing", "tls_server_config:\n  cert_file: nope.pem\n  key_file: k.pem\n", False),
    ("cert-and-key-swapped", "tls_server_config:\n  cert_file: k.pem\n  key_file: c.pem\n", False),
    ("cert-as-list", "tls_server_config:\n  cert_file: [c.pem]\n  key_file: k.pem\n", False),
    ("unknown-top-key", "foo: 1\n", False),
    ("unknown-nested-tls-key", TLS + "  bogus: 1\n", False),
    ("unknown-nested-http-key", "http_server_config:\n  bogus: 1\n", False),
    ("rate-limit-of-later-toolkits", "rate_limit:\n  interval: 1s\n", False),
    ("client-allowed-sans-of-later-toolkits", TLS + "  client_allowed_sans: [a]\n", False),
    ("key-twice", "http_server_config:\n  http2: true\nhttp_server_config:\n  http2: false\n", False),
    ("not-yaml", "tls_server_config: [\n", False),
    ("a-list", "- a\n", False),
    ("tls-not-a-mapping", "tls_server_config: yes\n", False),
    ("prefer-not-a-bool", TLS + "  prefer_server_cipher_suites: maybe\n", False),
    ("http2", "http_server_config:\n  http2: false\n", True),
    ("http2-not-a-bool", "http_server_config:\n  http2: maybe\n", False),
    (
        "headers",
        "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=1\n    X-XSS-Protection: 1\n"
        "    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n",
        True,
    ),
    ("header-not-allowed", "http_server_config:\n  headers:\n    Set-Cookie: x\n", False),
    ("header-lower-case", "http_server_config:\n  headers:\n    strict-transport-security: max-age=1\n", False),
    ("header-bad-frame-options", "http_server_config:\n  headers:\n    X-Frame-Options: DENY\n", False),
    ("header-bad-nosniff", "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", False),
    ("headers-as-list", "http_server_config:\n  headers: [a]\n", False),
    ("user", f"basic_auth_users:\n  alice: '{HASH}'\n", True),
    ("users-empty", "basic_auth_users:\n", True),
    ("user-plain-password", "basic_auth_users:\n  alice: s3cret\n", False),
    ("user-hash-too-short", "basic_auth_users:\n  alice: $2y$10$abc\n", False),
    ("user-hash-cost", "basic_auth_users:\n  alice: $2y$99$" + "a" * 53 + "\n", False),
    ("user-hash-version", "basic_auth_users:\n  alice: $3y$10$" + "a" * 53 + "\n", False),
    ("user-without-hash", "basic_auth_users:\n  alice:\n", False),
    ("users-as-list", "basic_auth_users: [a, b]\n", False),
]
# Accepted by promtool, refused here, on purpose: each would serve something other than what was asked.
STRICTER = [
    ("curves", TLS + "  curve_preferences: [X25519]\n"),  # Python's ssl cannot set the preference list
    ("min-above-max", TLS + "  min_version: TLS13\n  max_version: TLS12\n"),  # no connection could be made
    ("client-ca-not-a-cert", TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: k.pem\n"),
    ("user-hash-bad-salt", "basic_auth_users:\n  alice: $2y$10$" + "!" * 53 + "\n"),  # bcrypt would fail on it
    ("two-documents", "http_server_config: {}\n---\nfoo: 1\n"),  # promtool reads the first, ignores the rest
]


def promtool_accepts(path: Path) -> bool:
    proc = subprocess.run(["promtool", "check", "web-config", str(path)], capture_output=True, timeout=60, check=False)
    return proc.returncode == 0


def we_accept(path: Path) -> bool:
    try:
        load_web_config(path)
    except WebConfigError:
        return False
    return True


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize(("name", "text", "accepted"), WEB_CONFIGS, ids=[c[0] for c in WEB_CONFIGS])
def test_web_config_is_checked_as_promtool_checks_it(certs: Path, name: str, text: str, accepted: bool) -> None:
    path = certs / f"{name}.yml"
    path.write_text(text)
    assert promtool_accepts(path) is accepted, "the case's expectation is wrong: promtool decides"
    assert we_accept(path) is accepted


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize(("name", "text"), STRICTER, ids=[c[0] for c in STRICTER])
def test_web_config_refused_here_but_not_by_promtool(certs: Path, name: str, text: str) -> None:
    path = certs / f"{name}.yml"
    path.write_text(text)
    assert promtool_accepts(path) and not we_accept(path)


def test_a_bad_web_config_stops_serve_at_start_with_every_problem(certs: Path, host: Host) -> None:
    path = certs / "bad.yml"
    path.write_text(TLS + "  min_version: TLS99\n  bogus: 1\nbasic_auth_users:\n  alice: plain\n")
    (problem,) = problems_of(run(["serve", f"--web.config.file={path}", "--web.listen-address=127.0.0.1:0",
                                  *host.collect]))  # fmt: skip
    for needle in (str(path), "TLS99", "bogus", "alice"):
        assert needle in problem


# ---- a served exporter ----------------------------------------------------------------------------------


class Served:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen([*CLI, "serve", "--web.listen-address=127.0.0.1:0", "--log.format=json", *argv],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        serving = self.wait_event("serving")
        self.url = f"http://127.0.0.1:{serving['port']}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def wait_event(self, name: str, after: int = 0, seconds: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = [e for e in self.events[after:] if e["event"] == name]
            if found:
                return found[0]
            assert self.proc.poll() is None, f"serve exited {self.proc.returncode}: {self.events}"
            time.sleep(0.05)
        raise AssertionError(f"no {name} in {self.events}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def served(host: Host) -> Iterator[Served]:
    daemon = Served(host.collect)
    try:
        yield daemon
    finally:
        assert daemon.stop() == 0


def test_served_exporter_head_build_info_and_self_metrics(served: Served) -> None:
    head = requests.head(served.url + "/metrics", timeout=10)
    assert head.status_code == 200 and head.text == "" and head.headers["Content-Type"].startswith("text/plain")
    body = requests.get(served.url + "/metrics", timeout=10).text
    info = build_info()
    labels = f'branch="{info.branch}",pythonversion="{info.python_version}",revision="{info.revision}",version="0.1.0"'
    assert f"rocm_watchdog_build_info{{{labels}}} 1.0" in body
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info",
                   "python_gc_collections_total", "rocm_watchdog_scrape_duration_seconds_count"):  # fmt: skip
        assert f"\n{family}" in body, family
    time.sleep(VOLATILE_SECONDS + 0.1)  # the self-metrics are rendered at most once per VOLATILE_SECONDS
    again = requests.get(served.url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=10)
    count = re.search(r"^rocm_watchdog_scrape_duration_seconds_count (\S+)$", again.text, re.MULTILINE)
    assert count is not None and float(count.group(1)) >= 2  # the HEAD and the first GET were answered
    assert 'href="metrics"' in requests.get(served.url + "/", timeout=10).text


def test_once_writes_no_self_metrics(host: Host) -> None:
    # its textfile goes next to node_exporter's own process_* series
    proc = run(["once", *host.collect])
    assert proc.returncode == 0 and "rocm_watchdog_build_info{" in proc.stdout
    assert not re.search(r"^(# TYPE )?(process_|python_|rocm_watchdog_scrape_duration)", proc.stdout, re.MULTILINE)


def test_telemetry_path_and_disable_exporter_metrics(host: Host) -> None:
    daemon = Served([*host.collect, "--web.telemetry-path=/custom/metrics", "--web.disable-exporter-metrics"])
    try:
        body = requests.get(daemon.url + "/custom/metrics", timeout=10).text
        assert "rocm_watchdog_build_info{" in body
        assert not re.search(r"^(# TYPE )?(process_|python_|rocm_watchdog_scrape_duration)", body, re.MULTILINE)
        assert requests.head(daemon.url + "/custom/metrics", timeout=10).status_code == 200
        assert requests.get(daemon.url + "/metrics", timeout=10).status_code == 404
        assert 'href="custom/metrics"' in requests.get(daemon.url + "/", timeout=10).text
    finally:
        assert daemon.stop() == 0
    (problem,) = problems_of(run(["serve", "--web.telemetry-path=metrics", *host.collect]))
    assert problem.startswith("--web.telemetry-path: expected a path starting with /")


def test_sighup_reloads_the_config_file_web_config_and_rules(host: Host, tmp_path: Path) -> None:
    config, web, rules = tmp_path / "rocm-watchdog.yml", tmp_path / "web.yml", tmp_path / "rules.yml"
    shutil.copy(PROJECT / "exporter" / "data" / "kernel_log_rules.yml", rules)
    config.write_text("collector.devices.interval: 15s\n")
    daemon = Served([*host.collect, f"--config.file={config}", f"--kernel-log.rules={rules}"])
    try:
        deadline = time.monotonic() + 30
        while (
            'rocm_kernel_events_total{class="gpu_reset_begin",pci_bus="0000:03:00.0"} 1.0'
            not in requests.get(daemon.url + "/metrics", timeout=10).text
        ):
            assert time.monotonic() < deadline, "the kernel log was never read"
            time.sleep(0.1)
        # 1. valid: new interval, basic auth, no exporter metrics; the listen address needs a restart
        web.write_text(f"basic_auth_users:\n  alice: '{HASH}'\n")
        config.write_text(
            f"collector.devices.interval: 5s\nweb.config.file: {web}\nweb.disable-exporter-metrics: true\n"
            "web.max-requests: 7\n"
        )
        mark = len(daemon.events)
        daemon.proc.send_signal(signal.SIGHUP)
        reloaded = daemon.wait_event("config_reloaded", mark)
        assert reloaded["changed"] == [
            "collector.<name>.interval", "web.config.file", "web.disable-exporter-metrics"
        ] and reloaded["sources_restarted"] is True  # fmt: skip
        restart = daemon.wait_event("config_reload_needs_restart", mark)
        assert restart["settings"] == ["web.max-requests"]
        assert requests.get(daemon.url + "/metrics", timeout=10).status_code == 401
        body = requests.get(daemon.url + "/metrics", auth=("alice", "s3cret"), timeout=10).text
        assert "rocm_watchdog_build_info" in body and not re.search(r"^process_", body, re.MULTILINE)
        # the sources restarted: the kernel-log source saved its cursor first, so the one reset is still counted once
        reset = 'rocm_kernel_events_total{class="gpu_reset_begin",pci_bus="0000:03:00.0"} 1.0'
        for _ in range(10):
            assert reset in requests.get(daemon.url + "/metrics", auth=("alice", "s3cret"), timeout=10).text
            time.sleep(0.2)
        # 2. invalid: every problem logged, the running configuration kept
        config.write_text(f"collector.devices.interval: 1s1s\nbogus: 1\nweb.config.file: {web}\n")
        rules.write_text("version: 1\nrules:\n  - class: mine\n")
        mark = len(daemon.events)
        daemon.proc.send_signal(signal.SIGHUP)
        failed = daemon.wait_event("config_reload_failed", mark)
        text = " ".join(failed["problems"])
        assert "'bogus'" in text and "1s1s" in text and "--kernel-log.rules" in text
        assert requests.get(daemon.url + "/metrics", timeout=10).status_code == 401  # still the reloaded config
        assert requests.get(daemon.url + "/metrics", auth=("alice", "s3cret"), timeout=10).status_code == 200
        # 3. the kernel-log rules alone changed: the sources restart with them
        shutil.copy(PROJECT / "exporter" / "data" / "kernel_log_rules.yml", rules)
        with rules.open("a") as f:
            f.write("\n# edited\n")
        config.write_text(
            f"collector.devices.interval: 5s\nweb.config.file: {web}\nweb.disable-exporter-metrics: true\n"
        )
        mark = len(daemon.events)
        daemon.proc.send_signal(signal.SIGHUP)
        reloaded = daemon.wait_event("config_reloaded", mark)
        assert reloaded["changed"] == [] and reloaded["sources_restarted"] is True
    finally:
        assert daemon.stop() == 0


def test_serve_whose_log_reader_goes_away_keeps_serving(host: Host) -> None:
    proc = subprocess.Popen([*CLI, "serve", "--web.listen-address=127.0.0.1:0", "--log.format=json", *host.collect],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    try:
        assert proc.stderr is not None and proc.stdout is not None
        port = next(json.loads(line)["port"] for line in proc.stderr if '"serving"' in line)
        proc.stderr.close()  # the reader of its log goes away (`serve 2>&1 | head -1`)
        proc.stdout.close()
        proc.send_signal(signal.SIGHUP)  # logs to the closed pipe: reload_requested, config_reloaded
        time.sleep(0.5)
        assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- the exposition cache with a volatile tail ----------------------------------------------------------


class CountingMetrics(ExporterMetrics):
    """Deterministic 'self metrics': a new value on every build, like process_cpu_seconds_total."""

    def __init__(self) -> None:
        super().__init__()
        self.builds = 0

    def families(self) -> Iterator[Metric]:
        self.builds += 1
        family = GaugeMetricFamily("test_builds", "builds")
        family.add_metric([], self.builds)
        yield family


def test_gzip_of_a_volatile_tail_is_the_whole_body() -> None:
    store = SnapshotStore()
    store.register("sysfs", 15, 45)
    metrics = CountingMetrics()
    exposition = Exposition(RocmCollector(store, Config(nodename="n"), exporter_metrics=metrics))
    for openmetrics in (False, True):
        packed = exposition.get(openmetrics=openmetrics, gzip=True)
        plain = exposition.get(openmetrics=openmetrics)
        unpacked = gzip.decompress(packed)
        assert unpacked.replace(b"test_builds " + str(float(metrics.builds - 1)).encode(), b"X") == plain.replace(
            b"test_builds " + str(float(metrics.builds)).encode(), b"X"
        )
        assert unpacked.endswith(b"# EOF\n") is openmetrics
    assert metrics.builds == 4  # built on every scrape: volatile
