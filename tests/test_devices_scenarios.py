"""Every drift scenario on a fake root, end to end: detected by the source, shown in the metrics and in
``check``, and (for drift against the baseline) cleared by ``baseline accept``. ``check`` runs with the kernel probe
off (``FakeRoot.config()``: the fake nodes have no driver here)."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root, capture_gpus
from prometheus_client import generate_latest

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.model.devices import DeviceWatchState
from exporter.sources.devices import DevicesSource
from exporter.store import SnapshotStore
from exporter.watchdog.check import run_check
from exporter.watchdog.commands import baseline_accept
from exporter.watchdog.conditions import BASELINE_KINDS
from exporter.watchdog.drift import KINDS

A, B, C = "0000:03:00.0", "0000:83:00.0", "0000:c3:00.0"
T0 = 1_700_000_000.0
BMC = FakeOther.bmc("0000:63:00.0", card=0)


def line(name: str, value: float, **labels: str) -> str:
    """One exposition line as client_python writes it (labels sorted by name)."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} {value}"


def host(base: Path) -> FakeRoot:
    return build_root(
        base,
        [
            FakeGpu(A, card=1, render=128, kfd_node=1, compute_partition="SPX", memory_partition="NPS1"),
            FakeGpu(B, card=2, render=129, kfd_node=2, unique_id=0x1234),
        ],
        others=[BMC],
    )


def scrape(state: DeviceWatchState | None) -> str:
    """The exposition of the real collector with this devices state in its store."""
    store = SnapshotStore()
    store.register("devices", 15, 45)
    if state is not None:
        store.record_success("devices", state, 0.01, time.time())
    return generate_latest(make_registry(store, Config())).decode()


def acl(root: FakeRoot) -> None:
    entries = ((0x01, 6, None), (0x02, 6, 1000), (0x04, 6, None), (0x10, 6, None), (0x20, 0, None))
    data = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", t, p, 0xFFFFFFFF if i is None else i) for t, p, i in entries
    )
    os.setxattr(root.dev / "dri" / "renderD128", "system.posix_acl_access", data)


def not_char(root: FakeRoot) -> None:
    root.remove_node("dri/renderD128")
    (root.dev / "dri" / "renderD128").write_text("")


def swap_kfd(root: FakeRoot) -> None:
    root.gpu(A).kfd_node, root.gpu(B).kfd_node = 2, 1
    root.reboot()


def relink(name: str, target: str | None) -> Callable[[FakeRoot], None]:
    def run(root: FakeRoot) -> None:
        link = root.dev / "dri" / "by-path" / name
        link.unlink()
        if target is not None:
            os.symlink(target, link)

    return run


def field(bdf: str, **values: object) -> Callable[[FakeRoot], None]:
    def run(root: FakeRoot) -> None:
        for k, v in values.items():
            setattr(root.gpu(bdf), k, v)
        root.reboot()

    return run


@dataclass
class Scenario:
    id: str
    mutate: Callable[[FakeRoot], object]
    kind: str
    subject: str | None  # None: whatever subject (computed by the sysfs source, e.g. a platform device name)
    sample: str | None = None  # an exposition line that must appear

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.kind, self.subject)


SCENARIOS = [
    Scenario(
        "render_renumbered",
        lambda r: r.renumber(A, card=3, render=130),
        "render_renumbered",
        A,
        line("rocm_render_node_renumbered", 1.0, pci_bus=A),
    ),
    Scenario(
        "card_renumbered",
        lambda r: r.renumber(A, card=5),
        "card_renumbered",
        A,
        line(
            "rocm_device_condition",
            1.0,
            condition="card_renumbered",
            subject=A,
            severity="warning",
            pci_bus=A,
            cause="",
        ),
    ),
    Scenario("kfd_node_swap", swap_kfd, "kfd_node_changed", A),
    Scenario("gpu_missing", lambda r: r.remove_gpu(B), "gpu_missing", B, line("rocm_gpu_missing", 1.0, pci_bus=B)),
    Scenario("gpu_new", lambda r: r.add_gpu(FakeGpu(C, card=3, render=130, kfd_node=3, unique_id=0x77)), "gpu_new", C),
    Scenario("unique_id_swap", field(A, unique_id=0x99), "unique_id_changed", A),
    Scenario("drm_added", lambda r: r.add_other(FakeOther.simpledrm(card=9)), "drm_device_added", None),
    Scenario("drm_removed", lambda r: r.remove_other(BMC), "drm_device_removed", None),
    Scenario("render_without_kfd", field(B, kfd_node=None), "render_without_kfd", B),
    Scenario(
        "kfd_render_without_node",
        lambda r: r.remove_node("dri/renderD129"),
        "kfd_render_without_node",
        "/dev/dri/renderD129",
        line("rocm_device_node_present", 0.0, path="/dev/dri/renderD129", pci_bus=B),
    ),
    Scenario(
        "by_path_missing",
        relink(f"pci-{A}-render", None),
        "by_path_missing",
        "/dev/dri/renderD128",
        line("rocm_device_node_policy_violation", 1.0, path="/dev/dri/renderD128", rule="by_path_missing", pci_bus=A),
    ),
    Scenario("by_path_dangling", relink(f"pci-{A}-render", "../renderD200"), "by_path_dangling", "/dev/dri/renderD128"),
    Scenario("by_path_mismatch", relink(f"pci-{A}-render", "../renderD129"), "by_path_mismatch", "/dev/dri/renderD128"),
    Scenario(
        "rdev_mismatch",
        lambda r: r.mknod("dri/renderD128", 226, 140, gid=109),
        "rdev_mismatch",
        "/dev/dri/renderD128",
        line("rocm_device_node_drift", 1.0, path="/dev/dri/renderD128", attribute="rdev", pci_bus=A),
    ),
    Scenario(
        "kfd_mode",
        lambda r: r.chmod("kfd", 0o600),
        "mode_drift",
        "/dev/kfd",
        line("rocm_device_node_drift", 1.0, path="/dev/kfd", attribute="mode", pci_bus=""),
    ),
    Scenario("kfd_owner", lambda r: r.chown("kfd", uid=65534), "uid_drift", "/dev/kfd"),
    Scenario(
        "kfd_group",
        lambda r: r.chgrp("kfd", "video"),
        "gid_drift",
        "/dev/kfd",
        line("rocm_device_node_policy_violation", 1.0, path="/dev/kfd", rule="kfd_render_group_split", pci_bus=""),
    ),
    Scenario(
        "world_writable",
        lambda r: r.chmod("dri/renderD128", 0o666),
        "world_writable",
        "/dev/dri/renderD128",
        line("rocm_device_node_policy_violation", 1.0, path="/dev/dri/renderD128", rule="world_writable", pci_bus=A),
    ),
    Scenario("acl_added", acl, "acl_drift", "/dev/dri/renderD128"),
    Scenario(
        "render_gid_changed",
        lambda r: r.set_gid("render", 110),
        "group_gid_drift",
        "render",
        line("rocm_group_gid_drift", 1.0, group="render"),
    ),
    Scenario(
        "gid_without_name",
        lambda r: r.chgrp("dri/renderD128", 28),
        "gid_has_no_name",
        "/dev/dri/renderD128",
        line(
            "rocm_device_node_info",
            1.0,
            path="/dev/dri/renderD128",
            mode="0660",
            owner="root",
            group="",
            uid="0",
            gid="28",
            major="226",
            minor="128",
            pci_bus=A,
        ),
    ),
    Scenario("kfd_major", lambda r: r.set_kfd_major(234), "kfd_major_changed", "/dev/kfd"),
    Scenario("partition_mode", lambda r: r.set_partition(A, "CPX"), "partition_mode_changed", A),
    Scenario(
        "minor_192",
        lambda r: r.add_gpu(FakeGpu(C, card=192, render=193, kfd_node=3, unique_id=0x77)),
        "minor_extended",
        "/dev/dri/renderD193",
    ),
    Scenario("not_char_device", not_char, "not_char_device", "/dev/dri/renderD128"),
]


def test_scenarios_cover_the_kinds() -> None:
    """Every kind but the ones these roots raise as side effects (node_missing on renumbering, rdev_drift on
    rdev_mismatch, mode/group_inconsistent, group_not_render_or_video, kfd_render_group_split) has its own."""
    side_effects = {"node_missing", "rdev_drift", "mode_inconsistent", "group_inconsistent"}
    side_effects |= {"group_not_render_or_video", "kfd_render_group_split"}
    # needs a real process and the host's /proc: end to end in test_hostconfig.py (source, check and alert)
    side_effects |= {"process_lost_group"}
    assert set(KINDS) - {s.kind for s in SCENARIOS} == side_effects


def _matches(state: DeviceWatchState, sc: Scenario) -> bool:
    return any(c.kind == sc.kind and (sc.subject is None or c.subject == sc.subject) for c in state.active())


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_scenario_end_to_end(tmp_path: Path, sc: Scenario, capsys: pytest.CaptureFixture[str]) -> None:
    root = host(tmp_path)
    src = DevicesSource(root.config(), clock=lambda: T0)
    with structlog.testing.capture_logs():
        first = src.collect()
    assert first.baseline_created and first.active() == ()
    assert run_check(root.config(), False, {}) == 0
    capsys.readouterr()

    sc.mutate(root)
    with structlog.testing.capture_logs() as logs:
        state = src.collect()
    assert _matches(state, sc), [c.key for c in state.active()]
    cond = next(c for c in state.active() if c.kind == sc.kind and (sc.subject is None or c.subject == sc.subject))
    starts = [e for e in logs if e.get("condition") == sc.kind and e["subject"] == cond.subject]
    assert len(starts) == 1
    assert starts[0]["event"] in ("device_condition_started", "gpu_hardware_changed")

    text = scrape(state)
    active_line = line(
        "rocm_device_condition",
        1.0,
        condition=sc.kind,
        subject=cond.subject,
        severity=cond.severity,
        pci_bus=cond.pci_bus or "",
        cause=cond.cause[0] if cond.cause else "",
    )
    assert active_line in text
    if sc.sample:
        assert sc.sample in text, text

    code = run_check(root.config(), False, {})
    out = capsys.readouterr().out
    assert cond.message in out
    only_info = all(c.severity == "info" for c in state.active())
    assert code == (0 if only_info else 1)

    with structlog.testing.capture_logs():
        assert baseline_accept(root.config(), now=T0 + 10) == 0
        after = src.collect()
    capsys.readouterr()
    if sc.kind in BASELINE_KINDS:
        assert not _matches(after, sc)
        assert active_line not in scrape(after)
        run_check(root.config(), False, {})
        assert cond.message not in capsys.readouterr().out
    else:  # a broken rule is not drift: accepting the state does not make it right
        assert _matches(after, sc)
    assert not any(c.kind in BASELINE_KINDS for c in after.active()), [c.key for c in after.active()]


def test_reboot_renumbering_with_state_dir_surviving(tmp_path: Path) -> None:
    """A reboot with an iGPU enabled in the BIOS: it probes first, and every amdgpu number moves by one."""
    root = host(tmp_path)
    with structlog.testing.capture_logs():
        DevicesSource(root.config(), clock=lambda: T0).collect()
    root.others = [BMC, FakeOther.igpu("0000:00:02.0", card=1, render=128)]
    root.gpu(A).card, root.gpu(A).render = 2, 129
    root.gpu(B).card, root.gpu(B).render = 3, 130
    root.reboot("11111111-2222-3333-4444-555555555555")
    with structlog.testing.capture_logs():
        state = DevicesSource(root.config(), clock=lambda: T0 + 600).collect()  # a new daemon process
    keys = {c.key for c in state.active()}
    assert {("render_renumbered", A), ("render_renumbered", B), ("card_renumbered", A)} <= keys
    assert ("drm_device_added", "i915@0000:00:02.0") in keys
    assert state.devices.boot_id == "11111111-2222-3333-4444-555555555555"
    text = scrape(state)
    assert line("rocm_render_node_minor", 129.0, pci_bus=A) in text
    assert line("rocm_card_minor", 3.0, pci_bus=B) in text
    assert "rocm_baseline_gpus 2.0" in text


def test_metrics_of_a_healthy_host(tmp_path: Path) -> None:
    root = host(tmp_path)
    with structlog.testing.capture_logs():
        state = DevicesSource(root.config(), clock=lambda: T0).collect()
    text = scrape(state)
    info = dict(path="/dev/kfd", mode="0660", owner="root", group="render", uid="0", gid="109", major="510")
    assert line("rocm_device_node_info", 1.0, **info, minor="0", pci_bus="") in text
    assert line("rocm_device_node_accessible", 1.0, path="/dev/kfd", pci_bus="") in text  # the tests run as root
    assert line("rocm_device_node_accessible", 1.0, path="/dev/dri/renderD129", pci_bus=B) in text
    # the 0/1 state families are served only while 1 (CONTRACT section 4): a healthy host has none of them, and
    # rocm_watchdog_drift_evaluated says drift was looked at; present nodes have their info, not a present 1
    for family in (
        "rocm_device_node_drift",
        "rocm_device_node_policy_violation",
        "rocm_render_node_renumbered",
        "rocm_gpu_missing",
        "rocm_group_gid_drift",
        "rocm_device_node_present",
        "rocm_watchdog_state_file_corrupt",
    ):
        assert f"\n{family}{{" not in text, family
    assert "rocm_watchdog_drift_evaluated 1.0" in text
    assert f"rocm_baseline_timestamp_seconds {T0}" in text.replace("1.7e+09", str(T0))
    assert "rocm_device_condition{" not in text
    assert "rocm_device" not in scrape(None)


def test_corrupt_baseline_metric(tmp_path: Path) -> None:
    root = host(tmp_path)
    (root.state_dir / "baseline.json").write_text("{not json")
    with structlog.testing.capture_logs():
        state = DevicesSource(root.config(), clock=lambda: T0).collect()
    text = scrape(state)
    assert line("rocm_watchdog_state_file_corrupt", 1.0, file="baseline.json") in text
    assert "rocm_baseline_gpus" not in text.replace("# HELP rocm_baseline_gpus", "").replace(
        "# TYPE rocm_baseline_gpus", ""
    )


@pytest.mark.parametrize("capture", ["mi210-8gpu-xgmi-pcie", "mi300x-cpx-8gpu", "mi308x-cpx-2socket"])
def test_real_layouts_have_no_false_alarm(tmp_path: Path, capture: str) -> None:
    root = build_root(tmp_path, capture_gpus(capture), others=[FakeOther.bmc("0000:c2:00.0", card=0)])
    with structlog.testing.capture_logs():
        state = DevicesSource(root.config(), clock=lambda: T0).collect()
    assert state.active() == ()
    assert state.baseline is not None and len(state.baseline.gpus) == len(state.sysfs.gpus)
    # the render node every GPU has in the baseline is the one KFD lists for it
    kfd_render = {k.node: k.render_minor for k in state.sysfs.kfd_nodes}
    for g in state.baseline.gpus:
        assert g.kfd_node is not None and g.render == kfd_render[g.kfd_node]
