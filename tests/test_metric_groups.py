"""Metric groups (issue 10 item 5): every family has a known group, the alerts each group feeds, the flags and
config keys that switch groups (strict, with "did you mean"), and a collector that leaves disabled groups out of
the exposition without rendering them, cached and uncached alike."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeRoot, build_root, mi300x_gpu
from paths import PROJECT
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from promtool import check_metrics
from test_exposition import assert_same

from exporter.cli import ConfigError, build_config, build_parser, load_config, parse_command_line
from exporter.config import Config
from exporter.metrics import collector as collector_module
from exporter.metrics import names
from exporter.metrics.collector import RocmCollector, make_registry
from exporter.metrics.exposition import Exposition
from exporter.metrics.groups import (
    CORE,
    DEFAULT_OFF,
    GROUPS,
    SWITCHABLE,
    disabled_groups,
    expand,
    families_of,
    hidden_family_names,
    selectors,
)
from exporter.metrics.reference import alerts_by_group
from exporter.model.kernel import ZERO_INITIALISED_CLASSES, KernelLogState
from exporter.model.processes import DeviceAllocation, PodResourcesSnapshot, ProcessGpu, ProcessInfo, ProcessSnapshot
from exporter.sources.devices import DevicesSource
from exporter.sources.sysfs import read_sysfs
from exporter.store import SnapshotStore
from exporter.watchdog.conditions import KINDS

NOW = 1_800_000_000.0
BUS = "0000:05:00.0"
SPECS = [s for s in vars(names).values() if isinstance(s, names.Spec)]
GIB = 1 << 30


# ---- every family has a group ---------------------------------------------------------------------------------


def test_every_family_has_a_known_group() -> None:
    unknown = {s.name: s.group for s in SPECS if s.group not in GROUPS}
    assert not unknown, (
        f"families with no known group: {unknown}; set group= on the Spec, or add a rule to names.GROUP_RULES "
        "(and describe a new group in exporter/metrics/groups.py)"
    )


def test_every_group_has_families() -> None:
    for name in GROUPS:
        assert families_of([name]), f"group {name} has no family"


def test_a_family_takes_its_group_from_its_name_unless_it_says() -> None:
    assert names.Spec("rocm_gpu_xgmi_crc_errors_total", "h", ("pci_bus",), "counter").group == "gpu.xgmi"
    assert names.Spec("rocm_gpu_xcp_violation_ticks_total", "h").group == "gpu.throttle"
    assert names.Spec("rocm_gpu_vcn_activity_ratio", "h").group == "gpu.activity"
    assert names.Spec("rocm_watchdog_anything", "h").group == CORE
    assert names.Spec("rocm_gpu_widget", "h").group == ""  # no rule: test_every_family_has_a_known_group fails
    assert names.Spec("rocm_gpu_widget", "h", group="gpu.power").group == "gpu.power"


def test_self_health_and_the_conditions_the_alerts_need_are_core() -> None:
    core = {s.name for s in SPECS if s.group == CORE}
    assert {s.name for s in SPECS if s.name.startswith("rocm_watchdog_")} <= core
    assert core - {s.name for s in SPECS if s.name.startswith("rocm_watchdog_")} == {
        "rocm_device_condition",
        "rocm_device_condition_since_timestamp_seconds",
        "rocm_baseline_gpus",  # RocmWatchdogBaselineMissing fires on its absence
        "rocm_baseline_timestamp_seconds",
        "rocm_gpu_sysfs_readable",
        "rocm_gpu_sysfs_read_errors_total",
        # the health verdict: what remediation, node-problem-detector and its alerts read
        "rocm_gpu_health",
        "rocm_gpu_health_reason",
        "rocm_node_gpus_unhealthy",
    }
    assert CORE not in SWITCHABLE and not GROUPS[CORE].switchable


# ---- the alerts each group feeds ------------------------------------------------------------------------------

# Per switchable group, the shipped alerts that read one of its families: they lose (part of) their input when
# the group is off. A new alert over a switchable group shows up here first.
ALERTS_FED = {
    "gpu.ras": ("RocmRasUncorrectableError", "RocmRasCorrectableErrorsHigh"),
    "kernel": (
        "RocmGpuReset",
        "RocmGpuResetFailed",
        "RocmVramLost",
        "RocmRingTimeout",
        "RocmRasUncorrectableError",
        "RocmGpuInitFailed",
        "RocmRingTimeoutSoft",
        "RocmSmuError",
        "RocmKfdEvictionFailed",
        "RocmFirmwareLoadFailed",
        "RocmFenceFallback",
        "RocmIllegalInstruction",
        "RocmDisplayTimeout",
        "RocmGpuPageFaultStorm",
        "RocmRasCorrectableErrorsHigh",
        "RocmPcieAerUncorrected",
        "RocmPcieAerCorrectedErrorsHigh",
        "RocmKernelLogRecordsLost",
    ),
}


def test_the_alerts_that_lose_their_input_per_group() -> None:
    fed = alerts_by_group()
    assert {g: a for g, a in fed.items() if g != CORE} == ALERTS_FED
    # the groups the alerts read are the ones --metrics.enable-only keeps
    assert {name for name, g in GROUPS.items() if g.alerting} == set(fed)


def test_every_watchdog_condition_alert_reads_core_only() -> None:
    """Drift alerts (exporter/watchdog/conditions.py) and the exporter's own alerts never depend on a group a user
    can switch off."""
    groups_of: dict[str, set[str]] = {}
    for group, alerts in alerts_by_group().items():
        for alert in alerts:
            groups_of.setdefault(alert, set()).add(group)
    condition_alerts = {k.alert for k in KINDS.values() if k.alert}
    assert condition_alerts <= set(groups_of)
    for alert in condition_alerts | {a for a in groups_of if a.startswith("RocmWatchdog")}:
        assert groups_of[alert] == {CORE}, alert


# ---- selection ------------------------------------------------------------------------------------------------


def test_selectors_are_groups_and_their_prefixes() -> None:
    assert set(selectors()) == set(SWITCHABLE) | {"gpu"}
    # a prefix names the groups under it but those off by default, unless it opts in (--metrics.enable)
    assert expand("gpu") == tuple(g for g in SWITCHABLE if g.startswith("gpu.") and g not in DEFAULT_OFF)
    assert expand("gpu", opt_in=True) == tuple(g for g in SWITCHABLE if g.startswith("gpu."))
    assert expand("gpu.topology") == ("gpu.topology",)
    assert expand("gpu.topology.pairs") == ("gpu.topology.pairs",)
    assert expand("processes") == ("processes", "processes.gpu")
    assert expand("processes.gpu") == ("processes.gpu",)
    assert expand(CORE) == ()


def test_disable_and_enable_only() -> None:
    assert {"gpu.topology.pairs"} == DEFAULT_OFF
    assert disabled_groups() == DEFAULT_OFF == Config().metric_groups_disabled
    assert disabled_groups(enable=["gpu.topology.pairs"]) == frozenset()
    assert disabled_groups(["gpu.clocks", "processes"]) == {
        "gpu.clocks",
        "processes",
        "processes.gpu",
        "gpu.topology.pairs",
    }
    assert disabled_groups(["gpu.topology"], enable=["gpu.topology.pairs"]) == {"gpu.topology"}
    # enable-only keeps the groups the alerts read...
    assert disabled_groups(enable_only=["gpu.power"]) == set(SWITCHABLE) - {"gpu.power", "gpu.ras", "kernel"}
    assert disabled_groups(enable_only=[]) == set(SWITCHABLE) - {"gpu.ras", "kernel"}
    # ...unless disable names them explicitly
    assert disabled_groups(["kernel"], ["gpu.power"]) == set(SWITCHABLE) - {"gpu.power", "gpu.ras"}
    assert hidden_family_names(["kernel"]) == {
        "rocm_kernel_events",
        "rocm_kernel_event_last_timestamp_seconds",
        "rocm_kernel_pcie_aer_errors",
        "rocm_kernel_log_records_lost",
    }


# ---- flags and config file ------------------------------------------------------------------------------------


def config(*argv: str, command: str = "once") -> Config:
    return build_config(build_parser().parse_args([command, *argv]))


def problems(*argv: str, command: str = "once") -> list[str]:
    with pytest.raises(ConfigError) as exc:
        config(*argv, command=command)
    return exc.value.problems


def test_flags_for_serve_and_once() -> None:
    assert config().metric_groups_disabled == DEFAULT_OFF
    assert config("--metrics.enable=gpu.topology.pairs").metric_groups_disabled == frozenset()
    assert config("--metrics.disable=gpu.clocks,gpu.voltage").metric_groups_disabled == {
        "gpu.clocks",
        "gpu.voltage",
        *DEFAULT_OFF,
    }
    repeated = config("--metrics.disable", "gpu", "--metrics.disable", "processes", command="serve")
    assert repeated.metric_groups_disabled == {*expand("gpu"), "processes", "processes.gpu", *DEFAULT_OFF}
    only = config("--metrics.enable-only=gpu.memory, gpu.power")
    assert only.metric_groups_disabled == set(SWITCHABLE) - {"gpu.memory", "gpu.power", "gpu.ras", "kernel"}
    both = config("--metrics.enable-only=gpu.memory", "--metrics.disable=kernel")
    assert both.metric_groups_disabled == set(SWITCHABLE) - {"gpu.memory", "gpu.ras"}
    assert config("--metrics.enable-only=core").metric_groups_disabled == set(SWITCHABLE) - {"gpu.ras", "kernel"}


def test_bad_groups_are_refused_with_what_was_meant() -> None:
    assert problems("--metrics.disable=gpu.powr,gpu_clocks,core,bogus") == [
        "--metrics.disable: unknown metric group 'gpu.powr' (did you mean 'gpu.power'?)",
        "--metrics.disable: unknown metric group 'gpu_clocks' (did you mean 'gpu.clocks'?)",
        "--metrics.disable: 'core' cannot be disabled: the exporter's health and the device-watchdog conditions the "
        "alerts read are always exported",
        f"--metrics.disable: unknown metric group 'bogus' (groups: {', '.join(SWITCHABLE)})",
    ]
    assert problems("--metrics.enable-only=gpu.power,processes", "--metrics.disable=gpu") == [
        "--metrics.enable-only: 'gpu.power' is disabled by --metrics.disable too"
    ]


def test_config_file_keys(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("metrics.disable: [gpu.clocks, devices]\nmetrics.enable-only: gpu, kernel\n")
    c = config(f"--config.file={f}")
    assert c.metric_groups_disabled == set(SWITCHABLE) - set(expand("gpu")) - {"kernel"} | {"gpu.clocks", "devices"}
    # a flag replaces the file's list
    assert config(f"--config.file={f}", "--metrics.disable=gpu.xgmi").metric_groups_disabled == (
        set(SWITCHABLE) - set(expand("gpu")) - {"kernel"} | {"gpu.xgmi"}
    )
    f.write_text("metrics.disable: [gpu.clocks, 3]\nmetrics.disabled: [gpu.clocks]\n")
    assert problems(f"--config.file={f}") == [
        f"--config.file {f}: unknown setting 'metrics.disabled' (did you mean 'metrics.disable'?)",
        f"--metrics.disable (in {f}): expected metric group names (a list, or comma-separated), got 3",
    ]


def test_only_serve_and_once_take_them(tmp_path: Path) -> None:
    args, found = parse_command_line(["check", "--metrics.disable=gpu"])
    assert found == ["--metrics.disable: not a flag of check; it applies to capture, once and serve"]
    f = tmp_path / "shared.yml"
    f.write_text("metrics.disable: gpu.clocks\n")
    args, found = parse_command_line(["check", f"--config.file={f}"])
    assert args is not None and not found
    _, ignored = load_config(args, check_files=False)
    assert ignored == ["metrics.disable"]  # a shared file's setting for serve and once


# ---- the collector --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> FakeRoot:
    return build_root(tmp_path_factory.mktemp("groups"), [mi300x_gpu(BUS)])


def full_store(root: FakeRoot) -> SnapshotStore:
    """Every source with data for every group a fake host can feed: sysfs (with its gpu_metrics-free MI300X files),
    devices, the kernel log, a process with per-GPU VRAM in a Slurm job and in a pod, the kubelet's allocation."""
    store = SnapshotStore()
    for name in ("sysfs", "devices", "kernel-log", "processes", "kubernetes"):
        store.register(name, 15, 65)
    with structlog.testing.capture_logs():
        devices = DevicesSource(root.config(), clock=lambda: NOW).collect()
    process = ProcessInfo(
        pid=4242,
        name="python3",
        vram_used_bytes=GIB,
        pod_uid="0f1e2d3c-0000-4000-8000-000000000001",
        cgroup_known=True,
        gpus=(ProcessGpu(BUS, GIB),),
        slurm_job_id="77",
        slurm_step="0",
    )
    pods = PodResourcesSnapshot((DeviceAllocation("ml", "train-0", "main", "amd.com/gpu", BUS),))
    for name, data in (
        ("sysfs", read_sysfs(root.sys)),
        ("devices", devices),
        ("kernel-log", KernelLogState(counts={(BUS, "gpu_reset_begin"): 1})),
        ("processes", ProcessSnapshot((process,))),
        ("kubernetes", pods),
    ):
        store.record_success(name, data, 0.01, NOW - 1)
    return store


def families(text: bytes) -> dict[str, list[tuple[str, tuple[tuple[str, str], ...], float]]]:
    return {
        f.name: [(s.name, tuple(sorted(s.labels.items())), s.value) for s in f.samples]
        for f in text_string_to_metric_families(text.decode())
    }


def exposition(store: SnapshotStore, disabled: frozenset[str] = frozenset()) -> bytes:
    return generate_latest(make_registry(store, Config(nodename="n", metric_groups_disabled=disabled), lambda: NOW))


def group_of_family(name: str) -> str:
    return next(s.group for s in SPECS if name in (s.name, s.name.removesuffix("_total")))


def test_the_full_store_feeds_the_groups_a_host_has(root: FakeRoot) -> None:
    present = {group_of_family(name) for name, samples in families(exposition(full_store(root))).items() if samples}
    # topology comes from the tools, voltages from hwmon rails an MI300X lacks, the rest from gpu_metrics
    assert present == set(GROUPS) - {"gpu.topology", "gpu.topology.pairs", "gpu.voltage", "gpu.xgmi", "gpu.throttle"}


@pytest.mark.parametrize("group", SWITCHABLE)
def test_a_disabled_group_is_left_out_and_nothing_else_changes(root: FakeRoot, group: str) -> None:
    store = full_store(root)
    everything = families(exposition(store))
    disabled = frozenset({group})
    hidden = hidden_family_names(disabled)
    kept = families(exposition(store, disabled))
    assert not hidden & set(kept)
    # everything else as it was, but the health of the sources (the same here) and nothing more
    assert kept == {name: samples for name, samples in everything.items() if name not in hidden}
    # the rendering cache serves the same bytes
    assert_same(store, lambda: NOW, Config(nodename="n", metric_groups_disabled=disabled))


def test_every_group_off_leaves_core_and_cache_equality(root: FakeRoot) -> None:
    store = full_store(root)
    disabled = frozenset(SWITCHABLE)
    kept = families(exposition(store, disabled))
    assert {group_of_family(name) for name in kept} == {CORE}
    assert "rocm_watchdog_source_up" in kept and "rocm_gpu_sysfs_readable" in kept
    assert_same(store, lambda: NOW, Config(nodename="n", metric_groups_disabled=disabled))


def test_disabled_groups_are_never_built(root: FakeRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    """A section of disabled groups is not in the exposition at all, and the families of a disabled group in a
    mixed section are dropped before the exposition functions see them (not filtered out of rendered text)."""

    def boom(*_args: object, **_kw: object) -> Iterator[object]:
        raise AssertionError("built a disabled group's families")

    for builder in ("kernel_families", "pod_families", "process_families", "process_gpu_families"):
        monkeypatch.setattr(collector_module, builder, boom)
    config = Config(metric_groups_disabled=frozenset({"kernel", "processes", "processes.gpu", "attribution", "gpu"}))
    collector = RocmCollector(full_store(root), config, lambda: NOW)
    assert [s.name for s in collector.sections()] == ["gpus", "devices", "health-verdict", "state-files", "health"]
    built = {f.name for f in collector.collect()}
    assert not built & hidden_family_names(config.metric_groups_disabled)
    assert {"rocm_gpu_sysfs_readable", "rocm_device_condition", "rocm_watchdog_source_up"} <= built


def test_enable_only_keeps_the_zero_initialised_counters_the_alerts_need(root: FakeRoot) -> None:
    store = full_store(root)
    zero = ("rocm_kernel_events_total", (("class", "ring_timeout"), ("pci_bus", BUS)), 0.0)
    only = families(exposition(store, config("--metrics.enable-only=gpu.memory").metric_groups_disabled))
    assert zero in only["rocm_kernel_events"]
    # the GPU and "unknown", every class an alert reads with increase()
    assert len(only["rocm_kernel_events"]) == 2 * len(ZERO_INITIALISED_CLASSES)
    assert "rocm_gpu_ras_uncorrectable_errors" in only and "rocm_gpu_vram_used_bytes" in only
    assert "rocm_gpu_info" not in only and "rocm_device_node_info" not in only
    # every gpu.* group off: the counters still start at zero for each GPU the inventory knows
    no_gpu = families(exposition(store, config("--metrics.disable=gpu").metric_groups_disabled))
    assert zero in no_gpu["rocm_kernel_events"]
    # disabled explicitly: gone
    explicit = config("--metrics.enable-only=gpu.memory", "--metrics.disable=kernel").metric_groups_disabled
    assert "rocm_kernel_events" not in families(exposition(store, explicit))


def test_a_reload_switches_groups_from_the_next_scrape(root: FakeRoot) -> None:
    store = full_store(root)
    collector = RocmCollector(store, Config(nodename="n"), lambda: NOW)
    cached = Exposition(collector)
    assert b"rocm_gpu_clock_hertz{" in cached.get()
    collector.reconfigure(Config(nodename="n", metric_groups_disabled=frozenset({"gpu.clocks"})), None)
    cached.invalidate()
    assert b"rocm_gpu_clock_hertz" not in cached.get()
    assert cached.get() == exposition(store, frozenset({"gpu.clocks"}))


def test_once_with_groups_disabled(root: FakeRoot, tmp_path: Path) -> None:
    kern_log = tmp_path / "kern.log"
    kern_log.write_text("")
    argv = [
        sys.executable, "-m", "exporter", "once", f"--path.rootfs={root.root}", f"--state.dir={tmp_path}",
        f"--kernel-log.path={kern_log}", "--no-collector.rocm-smi", "--no-collector.amd-smi",
        "--metrics.disable=gpu.thermal,devices,gpu.clocks",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=PROJECT, check=False)
    assert proc.returncode == 0, proc.stderr
    check_metrics(proc.stdout)
    present = {f.name for f in text_string_to_metric_families(proc.stdout)}
    assert not present & hidden_family_names({"gpu.thermal", "devices", "gpu.clocks"})
    assert {"rocm_gpu_info", "rocm_gpu_power_watts", "rocm_kernel_events", "rocm_watchdog_source_up"} <= present
