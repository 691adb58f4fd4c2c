"""One cause, one condition: on an 8-GPU fake host, each change a person makes is one root condition, and
what it forces on other GPUs and nodes is reported under it (``Condition.cause``), never as separate alerts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root, capture_gpus

from exporter.model.devices import Condition, DeviceWatchState
from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import run_check
from exporter.watchdog.conditions import KINDS

T0 = 1_700_000_000.0
BUSES = [0x03, 0x13, 0x23, 0x33, 0x83, 0x93, 0xA3, 0xB3]
BDFS = [f"0000:{b:02x}:00.0" for b in BUSES]


def eight_gpus(tmp_path: Path) -> FakeRoot:
    gpus = [
        FakeGpu(bdf, card=i + 1, render=128 + i, kfd_node=i + 1, unique_id=0x1000 + i) for i, bdf in enumerate(BDFS)
    ]
    return build_root(tmp_path, gpus, others=[FakeOther.bmc("0000:c2:00.0", card=0)])


def collect(src: DevicesSource) -> DeviceWatchState:
    with structlog.testing.capture_logs():
        return src.collect()


def roots(state: DeviceWatchState, with_info: bool = False) -> set[tuple[str, str]]:
    return {c.key for c in state.active() if c.cause is None and (with_info or c.severity != "info")}


def consequences(state: DeviceWatchState) -> list[Condition]:
    return [c for c in state.active() if c.cause is not None]


def remove_first_gpu(root: FakeRoot) -> None:
    """The first GPU is gone after a reboot: the kernel hands its numbers to the GPUs after it."""
    root.gpus.pop(0)
    for i, gpu in enumerate(root.gpus):
        gpu.card, gpu.render, gpu.kfd_node = i + 1, 128 + i, i + 1
    root.reboot()


@pytest.fixture
def host(tmp_path: Path) -> tuple[FakeRoot, DevicesSource]:
    root = eight_gpus(tmp_path)
    src = DevicesSource(root.config(), clock=lambda: T0)
    first = collect(src)
    assert first.baseline_created and first.active() == ()
    return root, src


@pytest.mark.parametrize("relabel", [True, False], ids=["nodes-follow", "nodes-keep-old-gid"])
def test_group_gid_change_is_one_condition_on_the_group(host: tuple[FakeRoot, DevicesSource], relabel: bool) -> None:
    root, src = host
    root.set_gid("render", 110, relabel=relabel)
    state = collect(src)
    assert roots(state) == {("group_gid_drift", "render")}
    group = next(c for c in state.active() if c.kind == "group_gid_drift")
    nodes = dict(group.details)["nodes"].split(",")
    assert "/dev/kfd" in nodes and "/dev/dri/renderD135" in nodes  # the affected nodes, listed on the cause
    assert consequences(state), "the nodes' own conditions are still reported, under their cause"
    assert {c.cause for c in consequences(state)} == {("group_gid_drift", "render")}


def test_missing_gpu_is_one_condition_and_the_renumbering_its_consequence(
    host: tuple[FakeRoot, DevicesSource],
) -> None:
    root, src = host
    remove_first_gpu(root)
    state = collect(src)
    assert roots(state) == {("gpu_missing", BDFS[0])}
    moved = {c.key for c in consequences(state)}
    assert {("render_renumbered", b) for b in BDFS[1:]} <= moved
    assert {("card_renumbered", b) for b in BDFS[1:]} <= moved
    assert all(c.cause == ("gpu_missing", BDFS[0]) for c in consequences(state))
    # renderD135 is gone only because every GPU moved down by one: not "missing"
    assert not [c for c in state.active() if c.kind == "node_missing"]
    for c in consequences(state):
        assert c.pci_bus in BDFS[1:]


def test_the_log_warns_once_per_cause(host: tuple[FakeRoot, DevicesSource]) -> None:
    root, src = host
    remove_first_gpu(root)
    with structlog.testing.capture_logs() as logs:
        src.collect()
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["condition"], e["subject"]) for e in warnings] == [("gpu_missing", BDFS[0])]
    moved = [e for e in logs if e.get("condition") == "render_renumbered"]
    assert len(moved) == 7 and all(e["log_level"] == "info" and e["cause"] == "gpu_missing" for e in moved)
    assert {e["pci_bus"] for e in moved} == set(BDFS[1:])


def test_kfd_world_writable_is_one_condition(host: tuple[FakeRoot, DevicesSource]) -> None:
    root, src = host
    root.chmod("kfd", 0o666)
    state = collect(src)
    assert roots(state) == {("mode_drift", "/dev/kfd")}
    assert roots(state, with_info=True) == {("mode_drift", "/dev/kfd"), ("world_writable", "/dev/kfd")}


def test_the_three_changes_together_are_three_conditions(host: tuple[FakeRoot, DevicesSource]) -> None:
    root, src = host
    root.set_gid("render", 110)
    root.chmod("kfd", 0o666)
    remove_first_gpu(root)
    state = collect(src)
    assert roots(state) == {("group_gid_drift", "render"), ("gpu_missing", BDFS[0]), ("mode_drift", "/dev/kfd")}


def test_one_lost_udev_rule_on_every_render_node_is_one_condition(host: tuple[FakeRoot, DevicesSource]) -> None:
    root, src = host
    for i in range(8):
        root.chmod(f"dri/renderD{128 + i}", 0o600)
    state = collect(src)
    assert roots(state) == {("mode_drift", "/dev/dri/renderD128")}
    assert len(dict(next(c for c in state.active() if c.cause is None).details)["nodes"].split(",")) == 8


def test_partition_mode_change_is_one_condition_per_gpu(tmp_path: Path) -> None:
    gpus = capture_gpus("mi300x-cpx-8gpu")
    root = build_root(tmp_path, gpus, others=[FakeOther.bmc("0000:c2:00.0", card=0)])
    src = DevicesSource(root.config(), clock=lambda: T0)
    assert collect(src).active() == ()
    for gpu in root.gpus:  # CPX -> SPX: KFD lists one node per GPU, the partitions' nodes stay as spares
        gpu.compute_partition = "SPX"
        for part in gpu.partitions:
            part.kfd_node = None
    root.reboot()
    state = collect(src)
    assert roots(state) == {("partition_mode_changed", g.bdf) for g in root.gpus}
    assert not [c for c in consequences(state) if c.cause is None or c.cause[0] != "partition_mode_changed"]


def test_check_prints_one_line_per_cause_with_its_fix(
    host: tuple[FakeRoot, DevicesSource], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = host
    root.set_gid("render", 110)
    remove_first_gpu(root)
    assert run_check(root.config(), False, {}) == 1
    out = capsys.readouterr().out
    problems = out.split("problems:\n", 1)[1].split("notes:")[0]
    top = [line for line in problems.splitlines() if line.startswith("  - ")]
    assert len(top) == 2, problems
    assert "--group-add 110" in problems and "supplementalGroups: [110]" in problems
    assert "baseline accept" in problems
    assert f"render_renumbered {BDFS[1]}" not in problems  # folded: counted, listed only with --verbose
    assert run_check(root.config(), False, {}, verbose=True) == 1
    verbose = capsys.readouterr().out
    assert f"render_renumbered {BDFS[1]}" in verbose

    assert run_check(root.config(), True, {}) == 1
    report = json.loads(capsys.readouterr().out)
    causes = {(c["condition"], c["subject"]): c for c in report["causes"]}
    assert set(causes) == {("group_gid_drift", "render"), ("gpu_missing", BDFS[0])}
    assert {k for k, _ in ((x["condition"], x["subject"]) for x in causes[("gpu_missing", BDFS[0])]["consequences"])}
    assert causes[("gpu_missing", BDFS[0])]["severity"] == KINDS["gpu_missing"].severity


def test_severity_of_every_condition_comes_from_the_table(host: tuple[FakeRoot, DevicesSource]) -> None:
    root, src = host
    root.set_gid("render", 110)
    root.chmod("kfd", 0o666)
    remove_first_gpu(root)
    for c in collect(src).active():
        assert c.severity == KINDS[c.kind].severity


def pod_dev(root: FakeRoot, keep: set[str]) -> None:
    """The /dev a container gets with `--device`: only the given nodes, no udev by-path links."""
    import shutil

    shutil.rmtree(root.dev / "dri" / "by-path")
    for path in sorted((root.dev / "dri").iterdir()):
        if f"dri/{path.name}" not in keep:
            path.unlink()


def test_check_in_a_pod_judges_only_what_the_pod_was_given(
    host: tuple[FakeRoot, DevicesSource], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = host
    pod_dev(root, {"dri/renderD130"})
    assert run_check(root.config(), True, {}) == 0, capsys.readouterr().out
    report = json.loads(capsys.readouterr().out)
    assert not [c for c in report["conditions"] if c["condition"] == "node_missing"]
    assert any("not given to this container" in n and "/dev/dri/renderD128" in n for n in report["notes"])


def test_check_in_a_pod_on_a_partitioned_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = build_root(tmp_path, capture_gpus("mi300x-cpx-8gpu"), others=[FakeOther.bmc("0000:c2:00.0", card=0)])
    collect(DevicesSource(root.config(), clock=lambda: T0))  # the daemon's baseline, every node of the host
    pod_dev(root, {"dri/renderD128"})
    assert run_check(root.config(), False, {}) == 0, capsys.readouterr().out


def test_check_in_a_pod_still_reports_a_node_gone_from_the_host(
    host: tuple[FakeRoot, DevicesSource], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = host
    root.remove_gpu(BDFS[-1])  # the last GPU: nothing renumbers, its nodes are gone from sysfs and /dev
    pod_dev(root, {"dri/renderD128"})
    assert run_check(root.config(), True, {}) == 1
    report = json.loads(capsys.readouterr().out)
    assert {c["condition"] for c in report["causes"] if c["severity"] != "info"} == {"gpu_missing"}
