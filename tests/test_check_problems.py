"""``check``'s problems: one line per cause, its fixes under it, its consequences folded; the right numbers and
names; the table of preflight kinds agrees with what ``check`` reports and with docs/check.md.

Access is judged for fixed credentials (uid 1000), so the kernel probe is not run (it answers only for the process
that opens; tests/test_check_probe.py asks it)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import structlog
from fakeroot import FakeOther, FakeRoot, build_root, capture_gpus, two_gpu_root

from exporter.model.devices import ProcessCreds
from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import HOST_CHECKS, run_check
from exporter.watchdog.preflight import PREFLIGHT_KINDS, Problem, known_kind, problem

T0 = 1_700_000_000.0
USER = ProcessCreds(1000, 1000, (1000, 109))
OUTSIDER = ProcessCreds(1000, 1000, (1000,))
DOC = Path(__file__).resolve().parents[1] / "docs" / "check.md"


def eight(base: Path, baseline: bool = True) -> FakeRoot:
    root = build_root(base, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc("0000:c2:00.0", card=0)])
    if baseline:
        with structlog.testing.capture_logs():
            DevicesSource(root.config(), clock=lambda: T0).collect()
    return root


def check(root: FakeRoot, creds: ProcessCreds, verbose: bool = False) -> tuple[int, str, dict[str, Any]]:
    out, raw = io.StringIO(), io.StringIO()
    with structlog.testing.capture_logs():
        with contextlib.redirect_stdout(out):
            code = run_check(root.config(), False, {}, verbose, creds)
        with contextlib.redirect_stdout(raw):
            run_check(root.config(), True, {}, verbose, creds)
    return code, out.getvalue(), json.loads(raw.getvalue())


def section(text: str) -> str:
    return text.split("problems:\n", 1)[1].split("\nnotes:", 1)[0]


def top_lines(text: str) -> list[str]:
    return [line for line in section(text).splitlines() if line.startswith("  - ")]


def test_chgrp_root_of_one_render_node_is_one_problem_with_one_udev_fix(tmp_path: Path) -> None:
    root = eight(tmp_path)
    root.chgrp("dri/renderD130", 0)
    code, text, report = check(root, USER)
    assert code == 1
    assert top_lines(text) == ["  - /dev/dri/renderD130: group gid 109 in the baseline, now 0 (root)"]
    problems = section(text)
    assert problems.count("fix:") == 1 and problems.count("udevadm trigger") == 1
    assert "--group-add 0" not in text and "supplementalGroups: [0" not in text and "usermod" not in text
    (cause,) = [c for c in report["causes"] if c["severity"] != "info"]
    assert cause["condition"] == "gid_drift"
    folded = {(c["condition"], c["subject"]) for c in cause["consequences"]}
    assert folded == {
        ("group_not_render_or_video", "/dev/dri/renderD130"),
        ("group_inconsistent", "/dev/dri/renderD130"),
        ("kfd_render_group_split", "/dev/kfd"),
        ("cannot_open", "/dev/dri/renderD130"),
    }
    split = next(c for c in cause["consequences"] if c["condition"] == "kfd_render_group_split")
    assert "render nodes have: 7 of 8 gid 109 (render), 1 of 8 gid 0 (root)" in split["message"]
    assert report["access"]["missing_gids"] == []


def test_chgrp_root_without_a_baseline_is_one_problem_too(tmp_path: Path) -> None:
    root = eight(tmp_path, baseline=False)
    root.chgrp("dri/renderD130", 0)
    code, text, _ = check(root, USER)
    assert code == 1
    assert top_lines(text) == ["  - /dev/dri/renderD130: group root is neither render nor video"]
    assert "--group-add 0" not in text and section(text).count("fix:") == 1


def test_an_outsider_beside_a_wrong_node_is_told_the_render_gid_never_root(tmp_path: Path) -> None:
    root = eight(tmp_path)
    root.chgrp("dri/renderD130", 0)
    code, text, report = check(root, OUTSIDER)
    assert code == 1
    assert report["access"]["missing_gids"] == [109]
    kinds = [c["condition"] for c in report["causes"] if c["severity"] != "info"]
    assert sorted(kinds) == ["gid_drift", "not_in_gpu_group"]
    group = next(c for c in report["causes"] if c["condition"] == "not_in_gpu_group")
    assert "8 nodes it needs" in group["message"] and "/dev/dri/renderD130" not in group["message"]
    assert "are in render (gid 109)" in group["message"]
    assert "--group-add 0" not in text


def test_a_process_in_no_gpu_group_gets_the_container_and_host_fixes_under_the_problem(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, groups={"kfd": "video"})
    code, text, _ = check(root, OUTSIDER)
    assert code == 1
    lines = section(text).splitlines()
    at = next(i for i, line in enumerate(lines) if "is in none of the groups" in line)
    assert lines[at] == (
        "  - this process (uid 1000, gid 1000, groups [1000]) is in none of the groups of 3 nodes it needs "
        "read-write: /dev/kfd is in video (gid 44); /dev/dri/renderD128, /dev/dri/renderD129 are in render (gid 109)"
    )
    assert lines[at + 1] == (
        "      fix: in a container: docker run --group-add 44 --group-add 109 ..., Kubernetes: "
        "securityContext.supplementalGroups: [44, 109]"
    )
    assert lines[at + 2] == "      fix: a host user: usermod -aG video,render USER (then log in again)"
    assert "to open the nodes add the groups" not in text  # no longer printed apart from the problem


def test_every_kind_check_reports_is_in_a_table_and_documented(tmp_path: Path) -> None:
    root = eight(tmp_path)
    root.chgrp("dri/renderD130", 0)
    root.chmod("kfd", 0o600)
    _, _, report = check(root, OUTSIDER)
    for cause in report["causes"]:
        assert known_kind(cause["condition"]), cause["condition"]
    doc = DOC.read_text()
    for kind, spec in PREFLIGHT_KINDS.items():
        assert f"`{kind}`" in doc, f"docs/check.md does not list the preflight kind {kind}"
        assert spec.what, kind


class _ShmCheck:
    """A host check as another module would plug one in: a problem of a table kind, or an OSError."""

    name = "shm"

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def __call__(self, config: object, sysfs: object, devices: object, environ: object) -> list[Problem]:
        if self.fail:
            raise PermissionError(13, "Permission denied")
        return [problem("no_gpu", "/dev/shm", "a host check's problem")]


def test_a_host_check_plugs_in_as_one_more_problem(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    for fail in (False, True):
        HOST_CHECKS.append(_ShmCheck(fail))
        try:
            code, text, report = check(root, USER)
        finally:
            HOST_CHECKS.pop()
        if fail:
            assert code == 0 and "shm: not checked (Permission denied)" in report["notes"]
        else:
            assert code == 1 and top_lines(text) == ["  - a host check's problem"]
            assert report["causes"][0]["subject"] == "/dev/shm"


def test_a_fix_that_names_a_detail_not_given_is_left_out() -> None:
    """A table fix that applies only with a detail: given, it is formatted; not given, it is not printed (never a
    template with its braces)."""
    with_base = problem("gfx_override_mismatch", "", "m", gfx="gfx1031", target="gfx1100", family_base="10.3.0")
    assert with_base.fixes[-1] == "within gfx1031's family the override is 10.3.0"
    without = problem("gfx_override_mismatch", "", "m", gfx="gfx1031", target="gfx1100")
    assert len(without.fixes) == 1 and "{" not in without.fixes[0] and "gfx1031 needs no override" in without.fixes[0]
