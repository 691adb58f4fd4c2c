"""Flags, the YAML config file, and one message listing every problem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kustomize
import pytest

from exporter.cli import ConfigError, build_config, build_parser


def config(*argv: str, command: str = "once"):  # type: ignore[no-untyped-def]
    return build_config(build_parser().parse_args([command, *argv]))


def test_defaults_follow_the_contract() -> None:
    c = config()
    assert c.listen_address == ":9862"
    assert (c.sysfs, c.devfs, c.procfs) == (Path("/sys"), Path("/dev"), Path("/proc"))
    assert c.kernel_log_path == Path("/dev/kmsg")
    assert c.state_dir == Path("/var/lib/rocm-watchdog")
    assert all(c.collectors.values())
    assert c.top_processes == 20


def test_rootfs_prefixes_only_paths_left_at_default() -> None:
    c = config("--path.rootfs", "/host", "--path.devfs", "/dev")
    assert c.sysfs == Path("/host/sys")
    assert c.procfs == Path("/host/proc")
    assert c.devfs == Path("/dev")


def test_collector_toggles_and_intervals() -> None:
    # Intervals are serve's only: once runs every source once (tests/test_cli_strict.py rejects them on once).
    c = config(
        "--no-collector.kernel-log",
        "--collector.sysfs.interval",
        "500ms",
        "--collector.rocm-smi.interval",
        "1m",
        command="serve",
    )
    assert c.collectors["kernel-log"] is False
    assert c.intervals_seconds["sysfs"] == 0.5
    assert c.intervals_seconds["rocm-smi"] == 60


def test_yaml_file_and_flags_win(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("web.listen-address: 127.0.0.1:1234\ncollector.amd-smi: false\nprocesses.top-n: 5\n")
    c = config("--config.file", str(f), "--processes.top-n", "7", command="serve")
    assert c.listen_address == "127.0.0.1:1234"
    assert c.collectors["amd-smi"] is False
    assert c.top_processes == 7


def test_every_problem_is_reported_together(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("bogus.key: 1\ncollector.sysfs: maybe\n")
    with pytest.raises(ConfigError) as err:
        argv = ("--config.file", str(f), "--collector.sysfs.interval", "soon", "--smi.backend", "nvidia-smi")
        config(*argv, command="serve")
    text = str(err.value)
    for needle in ("bogus.key", "collector.sysfs", "soon", "nvidia-smi"):
        assert needle in text


def test_bad_config_exits_2_with_one_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "once", "--collector.sysfs.interval=-1s", "--processes.top-n", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "invalid configuration" in proc.stderr
    assert "interval" in proc.stderr and "top-n" in proc.stderr
    assert "Traceback" not in proc.stderr


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_invalid_kernel_log_rules_stop_start_up_with_one_message(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text("version: 1\nrules:\n  - class: mine\n    severity: loud\n    anchors: ['(unclosed']\n")
    for command in ("once", "serve"):
        proc = run_cli(
            command,
            "--kernel-log.rules",
            str(rules),
            "--state.dir",
            str(tmp_path / "state"),
            "--web.listen-address",
            "127.0.0.1:0",
            "--no-collector.rocm-smi",
            "--no-collector.amd-smi",
        )
        assert proc.returncode == 2, proc.stderr
        assert "severity" in proc.stderr and "unclosed" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_once_output_that_cannot_be_written_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_cli(
        "once",
        "--output",
        str(blocker / "rocm.prom"),
        "--state.dir",
        str(tmp_path / "state"),
        "--path.rootfs",
        str(tmp_path),
        "--no-collector.rocm-smi",
        "--no-collector.amd-smi",
        "--no-collector.kernel-log",
    )
    assert proc.returncode == 2
    assert "--output" in proc.stderr and "Traceback" not in proc.stderr


def test_the_shipped_deployments_use_flags_the_cli_accepts() -> None:
    project = Path(__file__).resolve().parents[1]
    for overlay in kustomize.DAEMONSET_OVERLAYS:  # the DaemonSet as kustomize renders it (tests/test_kubernetes.py)
        exporter = kustomize.container(kustomize.render(overlay), "rocm-watchdog")
        c = build_config(build_parser().parse_args(exporter["args"]))
        assert c.rootfs == Path("/host") and c.sysfs == Path("/host/sys") and c.devfs == Path("/host/dev")
        assert not c.collectors["amd-smi"]
    unit = (project / "deploy" / "systemd" / "rocm-watchdog.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    args = exec_start.split()[1:]
    assert build_config(build_parser().parse_args(args)).state_dir == Path("/var/lib/rocm-watchdog")
    dockerfile = (project / "Dockerfile").read_text()
    cmd = json.loads(next(line for line in dockerfile.splitlines() if line.startswith("CMD "))[4:])
    assert build_config(build_parser().parse_args(cmd)).rootfs == Path("/host")


def test_command_options_come_from_the_file_too_and_counts_are_whole(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text(f"output: {tmp_path / 'rocm.prom'}\njson: true\n")
    assert config("--config.file", str(f)).once_output == tmp_path / "rocm.prom"
    assert config("--config.file", str(f)).check_json is False  # check's setting: ignored by once
    assert config("--config.file", str(f), command="check").check_json is True
    f.write_text("processes.top-n: 1.9\nbaseline.auto-accept-boots: true\njson: 'yes'\nkind: rocm-smi\n")
    with pytest.raises(ConfigError) as err:
        config("--config.file", str(f))
    text = str(err.value)
    for needle in ("top-n", "auto-accept-boots", "'kind'"):
        assert needle in text
    with pytest.raises(ConfigError) as err:
        config("--config.file", str(f), command="check")
    assert "--json" in str(err.value) and "top-n" not in str(err.value)  # once's settings are not check's
