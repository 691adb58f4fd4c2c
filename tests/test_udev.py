"""udev rules read, not guessed: the rule semantics (exporter.parsers.udev) on real files in fake roots, and what
``check`` says for each case (issue 19)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from fakeroot import FakeRoot, two_gpu_root

from exporter.parsers.udev import SysfsDevice, evaluate_node, order_files, parse_rules
from exporter.sources.devices import UDEV_REFRESH_SECONDS, DevicesSource
from exporter.sources.hostconfig import device_chain, read_rules
from exporter.watchdog.check import run_check

KFD = (SysfsDevice("kfd", "kfd", devpath="/devices/virtual/kfd/kfd"),)
RENDER = (
    SysfsDevice("renderD128", "drm", devpath="/devices/pci0000:00/0000:03:00.0/drm/renderD128"),
    SysfsDevice("0000:03:00.0", "pci", "amdgpu", attrs=(("vendor", "0x1002"),)),
    SysfsDevice("pci0000:00", None),
)


def rules(text: str, path: str = "/etc/udev/rules.d/70-test.rules") -> Any:
    return parse_rules(text, path)


def check(root: FakeRoot, environ: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
        code = run_check(root.config(), True, environ or {})
    report = json.loads(out.getvalue())
    out = io.StringIO()
    with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
        run_check(root.config(), False, environ or {})
    return code, report, out.getvalue()


# ---- the semantics, pure ---------------------------------------------------------------------------------------


def test_assignments_matches_and_final_values() -> None:
    f = rules(
        'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0666"\n'
        'KERNEL=="kfd", GROUP:="render", MODE:="0660"\n'
        'KERNEL=="kfd", GROUP="video", MODE="0666"\n'
        "# a comment\n"
        'KERNEL=="card*|renderD*", DRIVERS=="amdgpu", ATTRS{vendor}=="0x1002", OWNER="gpu"\n'
    )
    v = evaluate_node([f], KFD)
    assert (v.group, v.mode, v.group_from, v.mode_from) == ("render", 0o660, f"{f.path}:2", f"{f.path}:2")
    v = evaluate_node([f], RENDER)
    assert (v.owner, v.group, v.mode) == ("gpu", "render", 0o666)
    assert v.owner_from == f"{f.path}:5" and v.mode_from == f"{f.path}:1"


def test_parent_keys_match_on_one_parent() -> None:
    f = rules('KERNEL=="renderD*", DRIVERS=="amdgpu", SUBSYSTEMS=="drm", GROUP="render"\n')
    # DRIVERS holds on the PCI function, SUBSYSTEMS=="drm" on the node: not the same device, so no match
    assert not evaluate_node([f], RENDER).set_by_rules
    f = rules('KERNEL=="renderD*", DRIVERS=="amdgpu", SUBSYSTEMS=="pci", GROUP="render"\n')
    assert evaluate_node([f], RENDER).group == "render"
    f = rules('KERNEL=="renderD*", ATTRS{vendor}=="0x10de", GROUP="render"\n')
    assert not evaluate_node([f], RENDER).set_by_rules


def test_goto_skips_to_its_label_and_a_group_alone_gives_0660() -> None:
    f = rules(
        'ACTION!="add", GOTO="end"\n'
        'KERNEL!="kfd", GOTO="end"\n'
        'GROUP="render"\n'
        'LABEL="end"\n'
        'KERNEL=="kfd", ACTION=="remove", MODE="0666"\n'
    )
    v = evaluate_node([f], KFD)
    assert (v.group, v.mode, v.mode_from) == ("render", 0o660, None)
    assert not evaluate_node([f], RENDER).set_by_rules  # jumped over the GROUP


def test_undecidable_rules_are_named_never_guessed() -> None:
    f = rules(
        'KERNEL=="kfd", \\\n  PROGRAM=="/usr/bin/is-gpu-host", GROUP="video"\n'
        'KERNEL=="kfd", ENV{ID_SEAT}=="x"\n'
        'SUBSYSTEM=="usb", ENV{DEVTYPE}=="usb_device", MODE="0664"\n'
        'KERNEL=="kfd", IMPORT{program}="/usr/bin/gpu-id %k", MODE="0666"\n'
    )
    v = evaluate_node([f], KFD)
    # the ENV rule assigns nothing and the usb one does not match: neither can matter
    assert v.undecidable == (f"{f.path}:1 (PROGRAM)", f"{f.path}:5 (IMPORT)")  # line 1 continues on 2
    assert (v.group, v.mode) == ("root", 0o600)


def test_no_rule_is_devtmpfs_root_0600_and_bad_lines_are_skipped() -> None:
    f = rules('KERNEL=="kfd" GROUP="render"\nKERNEL=="kfd", MODE="0606"\n')
    assert f.errors and f.errors[0].startswith(f"{f.path}:1:")
    v = evaluate_node([f], KFD)
    assert (v.owner, v.group, v.mode, v.mode_from) == ("root", "root", 0o606, f"{f.path}:2")
    assert evaluate_node([], KFD).mode == 0o600


def test_files_sorted_by_name_higher_directories_mask() -> None:
    found = {
        "/usr/lib/udev/rules.d": [("50-udev-default.rules", False), ("60-drm.rules", False), ("README", False)],
        "/etc/udev/rules.d": [("50-udev-default.rules", False), ("70-kfd.rules", False)],
        "/run/udev/rules.d": [("60-drm.rules", True)],
        "/lib/udev/rules.d": [("10-early.rules", False)],
    }
    paths, masked = order_files(found)
    assert paths == [
        "/lib/udev/rules.d/10-early.rules",
        "/etc/udev/rules.d/50-udev-default.rules",
        "/etc/udev/rules.d/70-kfd.rules",
    ]
    assert masked == ["60-drm.rules"]


# ---- real files in fake roots, through check ------------------------------------------------------------------

DEFAULT = "/usr/lib/udev/rules.d/50-udev-default.rules"
SITE = "/etc/udev/rules.d/70-kfd.rules"


def node(report: Mapping[str, Any], path: str = "/dev/kfd") -> dict[str, Any]:
    return dict(report["udev"]["nodes"][path])


def test_no_rule_names_the_files_read(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, modes={"kfd": 0o600}, groups={"kfd": 0})
    root.write_file(DEFAULT, 'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"\n')
    code, report, text = check(root)
    n = node(report)
    assert (n["owner"], n["group"], n["mode"], n["cause"]) == ("root", "root", "0600", "no_rule")
    assert n["group_from"] is None and n["mode_from"] is None
    assert report["udev"]["files"] == [DEFAULT]
    line = next(p for p in report["problems"] if p.startswith("udev: no rule sets the group or mode of /dev/kfd"))
    assert f"(read: {DEFAULT})" in line and "root:root 0600" in line
    assert code == 1
    assert "fix: add /etc/udev/rules.d/70-amdgpu.rules" in text
    r = node(report, "/dev/dri/renderD128")
    assert (r["group"], r["mode"], r["group_from"], r["cause"]) == ("render", "0660", f"{DEFAULT}:1", "applied")


def test_a_rule_not_applied_says_udevadm_trigger(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, modes={"kfd": 0o600}, groups={"kfd": 0})
    root.write_file(SITE, '# site rule\nKERNEL=="kfd", GROUP="render", MODE="0660"\n')
    code, report, _ = check(root)
    n = node(report)
    assert (n["group"], n["mode"], n["group_from"], n["mode_from"]) == ("render", "0660", f"{SITE}:2", f"{SITE}:2")
    assert n["cause"] == "not_applied" and n["node"] == "root:root 0600"
    line = next(p for p in report["problems"] if "udev: the rules give /dev/kfd" in p)
    assert f"group, mode from {SITE}:2" in line and "udev has not re-run" in line
    cause = next(c for c in report["host_config"]["causes"] if c["condition"] == "udev_rule_not_applied")
    assert "udevadm trigger" in cause["fix"] and cause["severity"] == "warning"
    assert code == 1


def test_a_0666_rule_is_named(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, modes={"render": 0o666})
    root.write_file(DEFAULT, 'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0666"\n')
    _, report, _ = check(root)
    n = node(report, "/dev/dri/renderD129")
    assert (n["group"], n["mode"], n["mode_from"], n["cause"]) == ("render", "0666", f"{DEFAULT}:1", "world_writable")
    line = next(x for x in report["notes"] if "writable by everyone (MODE 0666)" in x)
    assert line.startswith(f"udev: {DEFAULT}:1 makes 2 nodes (/dev/dri/renderD128, /dev/dri/renderD129)")


def test_a_same_named_file_in_etc_overrides_usr_lib(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.write_file(DEFAULT, 'KERNEL=="kfd", GROUP="video", MODE="0666"\n')
    etc = "/etc/udev/rules.d/50-udev-default.rules"
    root.write_file(etc, 'KERNEL=="kfd", GROUP="render", MODE="0660"\n')
    _, report, text = check(root)
    n = node(report)
    assert (n["group"], n["mode"], n["group_from"], n["cause"]) == ("render", "0660", f"{etc}:1", "applied")
    assert report["udev"]["files"] == [etc]
    assert f"/dev/kfd: udev gives root:render 0660 (group, mode from {etc}:1); node root:render 0660" in text


def test_a_dev_null_symlink_masks_the_file(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, modes={"kfd": 0o600}, groups={"kfd": 0})
    root.write_file(DEFAULT, 'KERNEL=="kfd", GROUP="render", MODE="0660"\n')
    root.mask("/etc/udev/rules.d/50-udev-default.rules")
    _, report, _ = check(root)
    n = node(report)
    assert (n["owner"], n["group"], n["mode"], n["cause"]) == ("root", "root", "0600", "no_rule")
    assert report["udev"]["masked"] == ["50-udev-default.rules"] and report["udev"]["files"] == []
    assert any("udev: no rule sets the group or mode of /dev/kfd (read: no files)" in p for p in report["problems"])


def test_a_final_assignment_a_later_rule_cannot_change(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    first = "/etc/udev/rules.d/10-gpu.rules"
    root.write_file(first, 'KERNEL=="kfd", GROUP:="render", MODE:="0660"\n')
    root.write_file("/usr/lib/udev/rules.d/99-late.rules", 'KERNEL=="kfd", GROUP="video", MODE="0666"\n')
    _, report, _ = check(root)
    n = node(report)
    assert (n["group"], n["mode"], n["group_from"], n["mode_from"]) == ("render", "0660", f"{first}:1", f"{first}:1")
    assert n["cause"] == "applied"
    assert not any("/dev/kfd" in p and "udev" in p for p in report["problems"] + report["notes"])


def test_a_program_rule_is_undecidable_with_its_file_and_line(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.write_file(DEFAULT, 'KERNEL=="kfd", GROUP="render", MODE="0660"\n')
    site = "/etc/udev/rules.d/80-seat.rules"
    root.write_file(site, '\n\nKERNEL=="kfd", PROGRAM=="/usr/local/bin/gpu-owner %k", GROUP="video"\n')
    _, report, _ = check(root)
    n = node(report)
    assert n["undecidable"] == [f"{site}:3 (PROGRAM)"] and n["cause"] == "undecidable"
    assert (n["group"], n["mode"], n["group_from"]) == ("render", "0660", f"{DEFAULT}:1")  # without it
    assert any(f"{site}:3 (PROGRAM)" in x and "cannot be judged" in x for x in report["notes"])


def test_a_container_without_the_hosts_rules_says_so(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    _, report, _ = check(root)
    assert report["udev"]["read"] is False and report["udev"]["nodes"] == {}
    assert any(x.startswith("udev rules could not be read: none of /etc/udev/rules.d") for x in report["notes"])


def test_the_source_reads_lib_through_a_merged_usr_link_and_the_sysfs_chain(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.write_file(DEFAULT, 'KERNEL=="renderD*", DRIVERS=="amdgpu", ATTRS{vendor}=="0x1002", GROUP="render"\n')
    (root.root / "lib").symlink_to("usr/lib")
    dirs, files, masked, errors = read_rules(root.root)
    assert masked == [] and errors == []
    assert dirs == ("/usr/lib/udev/rules.d", "/lib/udev/rules.d") and [f.path for f in files] == [DEFAULT]
    chain = device_chain(root.sys, "drm", "renderD128", {"vendor"})
    assert chain[0].kernel == "renderD128" and chain[0].subsystem == "drm"
    pci = next(d for d in chain if d.kernel == "0000:03:00.0")
    assert pci.driver == "amdgpu" and pci.attr("vendor") == "0x1002"
    assert evaluate_node(files, chain).group_from == f"{DEFAULT}:1"


def test_the_daemons_conditions_name_the_rule(tmp_path: Path) -> None:
    """The devices source reads the rules only while a node's mode, owner or group is wrong, and the condition
    (its message, the pushed alert's summary, check's line) says which rule gives what."""
    root = two_gpu_root(tmp_path)
    root.write_file(SITE, 'KERNEL=="kfd", GROUP="render", MODE="0660"\n')
    now = [1_700_000_000.0]
    src = DevicesSource(root.config(), clock=lambda: now[0])
    with structlog.testing.capture_logs():
        first = src.collect()
    assert first.devices.udev == ()  # nothing wrong: the rules were not read
    root.chmod("kfd", 0o600)
    with structlog.testing.capture_logs():
        state = src.collect()
    drift = next(c for c in state.active() if c.kind == "mode_drift" and c.subject == "/dev/kfd")
    details = dict(drift.details)
    assert details["udev_rule"] == f"group, mode from {SITE}:1" and details["udev_cause"] == "not_applied"
    assert drift.message.endswith(
        f"(udev: the rules give root:render 0660 (group, mode from {SITE}:1) but udev has not applied them: "
        "`udevadm trigger`)"
    )
    _, report, text = check(root)
    assert drift.message in text
    assert report["udev"]["nodes"]["/dev/kfd"]["cause"] == "not_applied"

    # the same nodes still wrong: the verdict is kept, the rules are read again only after UDEV_REFRESH_SECONDS
    root.write_file(SITE, 'KERNEL=="kfd", GROUP="render", MODE="0600"\n')  # the site now wants 0600
    now[0] += 30
    with structlog.testing.capture_logs():
        kept = src.collect()
    assert dict(next(c for c in kept.active() if c.kind == "mode_drift").details)["udev_cause"] == "not_applied"
    now[0] += UDEV_REFRESH_SECONDS
    with structlog.testing.capture_logs():
        later = src.collect()
    again = next(c for c in later.active() if c.kind == "mode_drift")
    assert dict(again.details)["udev_cause"] == "applied" and f"group, mode from {SITE}:1" in again.message
    assert again.since == drift.since  # the same condition, a better message


def test_a_containers_own_root_is_not_read_as_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    from exporter.config import Config
    from exporter.model.devices import DevicesSnapshot
    from exporter.sources.hostconfig import read_udev

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    udev = read_udev(Config(), DevicesSnapshot())
    assert udev.container_root and udev.files == ()
    from exporter.model.hostconfig import HostInputs
    from exporter.watchdog.hostconfig import udev_section

    section, found = udev_section(HostInputs(udev=udev), DevicesSnapshot())
    assert section["read"] is False and "the rules under / are the image's, not the host's" in found[0].message
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    if not os.path.exists("/.dockerenv") and not os.path.exists("/run/.containerenv"):
        assert not read_udev(Config(), DevicesSnapshot()).container_root


def test_bad_lines_and_a_fifo_are_skipped_and_said(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.write_file(DEFAULT, 'KERNEL=="kfd" GROUP="render"\nKERNEL=="kfd", GROUP="render", MODE="0660"\n')
    (root.root / "etc" / "udev" / "rules.d").mkdir(parents=True)
    os.mkfifo(root.root / "etc" / "udev" / "rules.d" / "90-fifo.rules")  # would block a plain open()
    code, report, _ = check(root)
    assert code == 0, report["problems"]  # the good line still decides /dev/kfd
    assert node(report)["group_from"] == f"{DEFAULT}:2"
    note = next(n for n in report["notes"] if n.startswith("udev: 2 rule line(s) or file(s) skipped"))
    assert f"{DEFAULT}:1:" in note and "/etc/udev/rules.d/90-fifo.rules: not a regular file" in note
