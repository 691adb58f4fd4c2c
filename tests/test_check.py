"""``rocm-watchdog check`` on fake roots, as root and as an unprivileged process.

The kernel probe is off here (``FakeRoot.config()``): the fake nodes (510:0, 226:N) have no driver on this machine,
so every open would answer ENXIO. tests/test_check_probe.py asks the kernel."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeRoot, build_root, two_gpu_root

from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import run_check, select_visible

A, B = "0000:03:00.0", "0000:83:00.0"
NOBODY = 65534
T0 = 1_700_000_000.0


def check(root: FakeRoot, as_json: bool = False, environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
        code = run_check(root.config(), as_json, environ or {})
    return code, out.getvalue()


def check_as(uid: int, gid: int, groups: list[int], fn: Callable[[], tuple[int, str]]) -> tuple[int, str]:
    """``fn`` in a forked child dropped to uid/gid/groups (the interpreter under /root is unreadable to
    nobody, so a fresh ``python -c`` cannot start)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            data = json.dumps(fn()).encode()
            status = 0
        except BaseException as e:
            data = json.dumps([-1, repr(e)]).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    os.waitpid(pid, 0)
    code, text = json.loads(raw)
    assert code != -1, text
    return int(code), str(text)


def test_healthy_host_as_root(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    code, text = check(root)
    assert code == 0, text
    assert text.startswith("rocm-watchdog check: OK")
    row = next(line.split() for line in text.splitlines() if line.startswith("  /dev/kfd "))
    assert row == ["/dev/kfd", "0660", "root:render", "(0:109)", "510:0", "yes", "ok", "-"]
    assert f"{A} card1 renderD128 KFD node 1 HIP index 0 GPU-5a4ad1c2a8ba3e1f" in text
    assert "no baseline at" in text
    assert os.listdir(root.state_dir) == [], "check never writes a baseline"


def test_unprivileged_process_is_told_the_numeric_gid(open_tmp: Path) -> None:
    root = two_gpu_root(open_tmp)
    code, text = check_as(NOBODY, NOBODY, [], lambda: check(root))
    assert code == 1
    assert (
        "  - this process (uid 65534, gid 65534, groups []) is in none of the groups of 3 nodes it needs read-write: "
        "/dev/kfd, /dev/dri/renderD128, /dev/dri/renderD129 are in render (gid 109)\n"
        "      fix: in a container: docker run --group-add 109 ..., Kubernetes: securityContext.supplementalGroups: "
        "[109]\n"
        "      fix: a host user: usermod -aG render USER (then log in again)\n"
    ) in text
    assert "kernel: not asked (--no-probe" in text
    code, raw = check_as(NOBODY, NOBODY, [], lambda: check(root, as_json=True))
    report = json.loads(raw)
    assert code == 1 and report["exit_code"] == 1 and not report["ok"]
    assert report["access"]["missing_gids"] == [109]
    assert report["access"]["kfd"] is False
    assert report["process"] == {"euid": NOBODY, "egid": NOBODY, "groups": []}

    # with the render group the process can use the GPUs (card nodes are not needed for compute)
    code, text = check_as(NOBODY, NOBODY, [109], lambda: check(root))
    assert code == 0, text


def test_kfd_and_render_in_different_groups_need_both(open_tmp: Path) -> None:
    root = two_gpu_root(open_tmp, groups={"kfd": "video"})
    code, raw = check_as(NOBODY, NOBODY, [], lambda: check(root, as_json=True))
    report = json.loads(raw)
    assert code == 1 and report["access"]["missing_gids"] == [44, 109]
    assert report["access"]["docker"] == "--group-add 44 --group-add 109"
    assert any(c["condition"] == "kfd_render_group_split" for c in report["conditions"])


def test_root_only_kfd_cannot_be_fixed_with_groups(open_tmp: Path) -> None:
    """Older systemd without the kfd rule: crw------- root root (ROCT-Thunk-Interface #36)."""
    root = two_gpu_root(open_tmp, modes={"kfd": 0o600}, groups={"kfd": "root"}, gids={"render": 109, "video": 44})
    code, text = check_as(NOBODY, NOBODY, [109], lambda: check(root))
    assert code == 1
    assert "no group can open /dev/kfd (0600 root:root): this process cannot open it read-write" in text
    assert "udevadm trigger" in text.split("no group can open /dev/kfd", 1)[1]
    assert "--group-add 0" not in text and "usermod" not in text


def test_visible_devices(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    cases: list[tuple[dict[str, str], list[str], int]] = [
        ({"ROCR_VISIBLE_DEVICES": "1"}, [B], 0),
        ({"ROCR_VISIBLE_DEVICES": "GPU-0000000000001234"}, [B], 0),
        ({"ROCR_VISIBLE_DEVICES": "1,0", "HIP_VISIBLE_DEVICES": "1"}, [A], 0),
        ({"CUDA_VISIBLE_DEVICES": "0"}, [A], 0),
        ({"HIP_VISIBLE_DEVICES": "0,7,1"}, [A], 1),  # like ROCr: an invalid entry ends the list
        ({"ROCR_VISIBLE_DEVICES": "gpu0"}, [], 1),
    ]
    for env, expected, exit_code in cases:
        code, raw = check(root, True, env)
        report = json.loads(raw)
        assert [s["pci_bus"] for s in report["visible_devices"]["selected"]] == expected, env
        assert code == exit_code, (env, report["problems"])
    code, text = check(root, False, {"HIP_VISIBLE_DEVICES": "1"})
    assert f"visible devices (HIP_VISIBLE_DEVICES=1): 0={B}" in text


def test_pinned_index_that_moved_is_flagged(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    with structlog.testing.capture_logs():
        DevicesSource(root.config(), clock=lambda: T0).collect()  # the daemon wrote the baseline
    root.gpu(A).kfd_node, root.gpu(B).kfd_node = 2, 1  # probe order changed at the next boot
    root.reboot()
    code, raw = check(root, True, {"HIP_VISIBLE_DEVICES": "0"})
    report = json.loads(raw)
    assert code == 1
    assert report["visible_devices"]["selected"][0]["pci_bus"] == B
    assert f"visible device 0 is {B} now but was {A} in the baseline" in " ".join(report["problems"])
    # a UUID pin follows the GPU: no index warning for it
    _, raw = check(root, True, {"ROCR_VISIBLE_DEVICES": "GPU-5a4ad1c2a8ba3e1f"})
    report = json.loads(raw)
    assert report["visible_devices"]["selected"][0]["pci_bus"] == A
    assert not any("visible device" in p for p in report["problems"])


def test_container_with_a_subset_of_the_gpus(tmp_path: Path) -> None:
    """A device plugin gave the pod /dev/kfd and renderD129 only; no by-path links, no baseline."""
    root = two_gpu_root(tmp_path, by_path=False)
    for name in ("dri/renderD128", "dri/card0", "dri/card1", "dri/card2"):
        root.remove_node(name)
    code, raw = check(root, True, {})
    report = json.loads(raw)
    assert code == 0, report["problems"]
    assert any("renderD128" in n for n in report["notes"])
    code, raw = check(root, True, {"HIP_VISIBLE_DEVICES": "0"})
    report = json.loads(raw)
    # ROCr skips the GPU whose render node it cannot open, so index 0 is the GPU this pod was given
    assert [s["pci_bus"] for s in report["visible_devices"]["selected"]] == [B]


def test_missing_kfd_is_a_problem(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, kfd_major=None)
    code, text = check(root)
    assert code == 1 and "/dev/kfd is absent" in text


def test_no_gpu(tmp_path: Path) -> None:
    root = build_root(tmp_path, [], kfd_major=None)
    code, text = check(root)
    assert code == 1 and "no amdgpu GPU in sysfs" in text


def test_cannot_check_without_sysfs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = two_gpu_root(tmp_path)
    config = root.config(sysfs=tmp_path / "nowhere")
    with structlog.testing.capture_logs():
        code = run_check(config, True, {})
    captured = capsys.readouterr()
    assert code == 2
    assert json.loads(captured.out)["exit_code"] == 2
    assert "cannot check" in captured.err


def test_corrupt_baseline_is_reported_not_moved(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    (root.state_dir / "baseline.json").write_text("garbage")
    code, text = check(root)
    assert code == 1 and "is corrupt" in text and "drift not checked" in text
    assert (root.state_dir / "baseline.json").read_text() == "garbage"


def test_select_visible_is_pure() -> None:
    ordered = [(A, "0xaa"), (B, "0xbb")]
    assert select_visible(ordered, {}) == (ordered, [])
    chosen, errors = select_visible(ordered, {"ROCR_VISIBLE_DEVICES": " 1 , 0 "})
    assert chosen == [(B, "0xbb"), (A, "0xaa")] and errors == []
    chosen, errors = select_visible(ordered, {"ROCR_VISIBLE_DEVICES": "GPU-00000000000000ff"})
    assert chosen == [] and errors and "no GPU has UUID" in errors[0]
