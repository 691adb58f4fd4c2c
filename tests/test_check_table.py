"""``check``'s node table and advice on real fake roots (mknod'ed device nodes, sysfs as the kernel lays it out):
"can open" and "policy" are separate verdicts, a node of the baseline that is gone is listed as gone, the advice
never contradicts what is seen, ``--json`` only gains fields, and docs/check.md shows the real output.

Access is judged for given credentials, so the kernel probe is not run (and ``FakeRoot.config()`` has it off: the
fake nodes have no driver here); docs/check.md's probe examples run ``check`` in a child (tests/check_examples.py)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import check_examples
import pytest
import structlog
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root, two_gpu_root

from exporter.model.devices import ProcessCreds
from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import run_check

A, B = "0000:03:00.0", "0000:83:00.0"
T0 = 1_700_000_000.0
USER = ProcessCreds(1000, 1000, (1000, 109))  # an unprivileged user in the host's render group

# Every field `check --json` had before the table grew columns: consumers rely on them.
NODE_FIELDS = {"path", "present", "char_device", "mode", "owner", "group", "uid", "gid", "major", "minor", "acl"}
NODE_FIELDS |= {"accessible", "grant_gids"}
REPORT_FIELDS = {"ok", "exit_code", "process", "nodes", "gpus", "access", "baseline", "causes", "conditions"}
REPORT_FIELDS |= {"visible_devices", "problems", "notes", "host_config", "udev"}
BASELINE_FIELDS = {"path", "present", "created", "boot_id", "same_boot", "corrupt"}


def check(
    root: FakeRoot, creds: ProcessCreds = USER, environ: Mapping[str, str] | None = None
) -> tuple[int, str, dict[str, Any]]:
    """The text report, and the JSON one, for ``creds``."""
    out, raw = io.StringIO(), io.StringIO()
    with structlog.testing.capture_logs():
        with contextlib.redirect_stdout(out):
            code = run_check(root.config(), False, environ or {}, creds=creds)
        with contextlib.redirect_stdout(raw):
            assert run_check(root.config(), True, environ or {}, creds=creds) == code
    return code, out.getvalue(), json.loads(raw.getvalue())


def table(text: str) -> dict[str, list[str]]:
    """The node table's rows by path, split on the column gaps (two spaces or more)."""
    lines = text.split("device nodes", 1)[1].split("\nGPUs:", 1)[0].splitlines()[1:]
    header = re.split(r" {2,}", lines[0].strip())
    assert header == ["path", "mode", "owner:group (uid:gid)", "device", "can open", "policy", "baseline"]
    rows = {}
    for line in lines[1:]:
        cells = re.split(r" {2,}", line.strip())
        rows[cells[0]] = cells[1:]
    return rows


def node(report: dict[str, Any], path: str) -> dict[str, Any]:
    return next(n for n in report["nodes"] if n["path"] == path)


def daemon_baseline(root: FakeRoot) -> None:
    with structlog.testing.capture_logs():
        DevicesSource(root.config(), clock=lambda: T0).collect()


def test_world_writable_kfd_can_be_opened_and_still_breaks_the_policy(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    daemon_baseline(root)
    root.chmod("kfd", 0o666)
    code, text, report = check(root)
    rows = table(text)
    assert rows["/dev/kfd"] == [
        "0666",
        "root:render (0:109)",
        "510:0",
        "yes",
        "world_writable",
        "changed: was mode 0660",
    ]
    assert rows["/dev/dri/renderD128"][3:] == ["yes", "ok", "same"]
    assert rows["/dev/dri/card1"][3:] == ["no (not needed)", "ok", "same"]
    kfd = node(report, "/dev/kfd")
    assert kfd["accessible"] is True and kfd["policy"] == ["world_writable"] and kfd["policy_ok"] is False
    assert kfd["baseline_state"] == "changed" and kfd["drift"] == ["mode"] and kfd["baseline_node"]["mode"] == "0660"
    assert code == 1  # the mode drift is a problem; world-writable alone is a note
    assert "/dev/kfd is writable by everyone (0666)" in report["notes"]


def test_world_writable_kfd_without_drift_is_a_note(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, modes={"kfd": 0o666})
    code, text, report = check(root)
    assert code == 0, report["problems"]
    assert table(text)["/dev/kfd"][3:] == ["yes", "world_writable", "-"]
    assert node(report, "/dev/kfd")["baseline_state"] is None


def test_policy_column_names_every_rule_a_node_breaks(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, groups={"kfd": "video"})  # /dev/kfd video, render nodes render
    root.chown("dri/renderD129", gid=28)  # a gid without a name on the host
    _, text, report = check(root)
    rows = table(text)
    assert rows["/dev/kfd"][4] == "kfd_render_group_split"
    assert rows["/dev/dri/renderD129"][4].startswith("gid_has_no_name, ")
    assert "group_not_render_or_video" in rows["/dev/dri/renderD129"][4]
    assert rows["/dev/dri/renderD129"][3] == "no"  # uid 1000 with gid 109 cannot, and compute needs it
    assert node(report, "/dev/dri/card1")["policy_ok"] is True


def test_a_gone_gpus_nodes_are_listed_as_gone(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    daemon_baseline(root)
    root.gpus.pop(1)
    root.reboot()
    code, text, report = check(root)
    assert code == 1
    rows = table(text)
    assert rows["/dev/dri/renderD129"] == ["gone", "-", "-", "-", "-", "was 0660 0:109 226:129"]
    assert rows["/dev/dri/card2"][0] == "gone"
    gone = node(report, "/dev/dri/renderD129")
    assert gone["state"] == "gone" and gone["present"] is False and gone["baseline_state"] == "gone"
    assert gone["baseline_node"] == {"mode": "0660", "uid": 0, "gid": 109, "major": 226, "minor": 129, "acl": False}
    assert [c["condition"] for c in report["causes"]] == ["gpu_missing"]
    assert {c["condition"] for c in report["causes"][0]["consequences"]} == {"node_missing"}


def test_a_gone_node_whose_gpu_is_still_there(tmp_path: Path) -> None:
    """udev lost renderD129 on a host: sysfs still has it, so it is absent (a problem), not gone."""
    root = two_gpu_root(tmp_path)
    daemon_baseline(root)
    root.remove_node("dri/renderD129")
    _, text, report = check(root)
    assert table(text)["/dev/dri/renderD129"][0] == "absent"
    assert node(report, "/dev/dri/renderD129")["baseline_state"] == "gone"


def test_kfd_without_gpus_gives_no_device_advice(tmp_path: Path) -> None:
    gpus = [FakeGpu(A, card=1, render=128, kfd_node=None), FakeGpu(B, card=2, render=129, kfd_node=None)]
    root = build_root(tmp_path, gpus, others=[FakeOther.bmc("0000:63:00.0", card=0)])
    code, text, report = check(root)
    assert code == 1
    assert "--device" not in text
    assert report["problems"][0].startswith("KFD lists no GPU: the amdgpu driver did not register compute")
    first = report["causes"][0]
    assert first["condition"] == "kfd_lists_no_gpu" and "dmesg" in first["fix"]
    assert "partition mode with no KFD node" in first["fix"]
    assert sorted(c["subject"] for c in first["consequences"]) == [A, B]  # render_without_kfd, folded
    assert not [c for c in report["causes"] if c["condition"] == "render_without_kfd"]
    assert len(report["problems"]) == 1
    assert table(text)["/dev/dri/renderD128"][3] == "yes"  # the render nodes are there and open fine


def test_a_host_without_kfd_at_all(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, kfd_major=None)
    code, text, report = check(root)
    assert code == 1 and "--device" not in text
    assert report["causes"][0]["condition"] == "kfd_not_registered"
    assert "/dev/kfd is absent and the host has no KFD" in report["problems"][0]


def test_a_container_without_dev_kfd_is_told_to_pass_it(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, by_path=False)
    root.remove_node("kfd")
    _, _, report = check(root)
    assert any(
        "/dev/kfd is absent though the host's KFD is registered (510:0 in sysfs): in a container pass --device /dev/kfd"
        in p
        for p in report["problems"]
    )


def test_a_container_without_render_nodes_is_told_which(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, by_path=False)
    for name in ("dri/renderD128", "dri/renderD129"):
        root.remove_node(name)
    _, text, report = check(root)
    advice = [p for p in report["problems"] if "none of the render nodes KFD lists" in p]
    assert advice and "pass --device /dev/dri/renderD128" in advice[0]
    assert "renderD<N>" not in text
    assert table(text)["/dev/dri/renderD129"][0] == "absent"


def test_docs_check_md_lists_the_preflight_kinds() -> None:
    blocks = check_examples.KINDS_BLOCK.search(check_examples.DOC.read_text())
    assert blocks is not None, "docs/check.md has no <!-- check-kinds --> block"
    assert blocks.group(2) == check_examples.kinds_table(), "run `.venv/bin/python tests/check_examples.py`"


def test_json_only_gains_fields(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    daemon_baseline(root)
    root.chmod("kfd", 0o666)
    _, _, report = check(root)
    assert set(report) >= REPORT_FIELDS
    assert set(report["baseline"]) >= BASELINE_FIELDS
    for n in report["nodes"]:
        assert set(n) >= NODE_FIELDS, n["path"]
    assert report["baseline"]["drift_checked"] is True and report["baseline"]["unreadable"] is None
    for cause in report["causes"]:
        assert {"condition", "subject", "severity", "message", "fix", "consequences"} <= set(cause)


def test_unreadable_and_corrupt_baselines_are_told_apart(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    path = root.state_dir / "baseline.json"
    path.mkdir()  # EISDIR: exists, cannot be read
    code, text, report = check(root)
    assert code == 1
    assert report["baseline"]["unreadable"] and report["baseline"]["corrupt"] is None
    assert report["baseline"]["drift_checked"] is False
    assert "Is a directory: drift not checked" in text and "is corrupt" not in text
    path.rmdir()
    path.write_text("{torn")
    code, text, report = check(root)
    assert code == 1 and report["baseline"]["corrupt"] and report["baseline"]["unreadable"] is None
    assert "is corrupt" in text and path.read_text() == "{torn"  # check never moves it


@pytest.mark.parametrize("name", sorted(check_examples.EXAMPLES) + sorted(check_examples.CHILD_EXAMPLES))
def test_docs_check_md_shows_the_real_output(name: str) -> None:
    if name in check_examples.CHILD_EXAMPLES and check_examples.child_missing(name) is not None:
        pytest.skip(str(check_examples.child_missing(name)))
    blocks = check_examples.blocks(check_examples.DOC.read_text())
    assert name in blocks, f"docs/check.md has no <!-- check-example: {name} --> block"
    assert blocks[name] == check_examples.run(name), (
        f"docs/check.md's {name} example is stale: run `.venv/bin/python tests/check_examples.py`"
    )
