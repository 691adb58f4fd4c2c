"""``check`` reads the host's configuration (issue 19): ROCm settings against the GPUs, ROCm user space against the
driver, workloads that lost their group after a gid change, /dev/shm, and the amd-smi source's needs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from fakeroot import FakeGpu, build_root, two_gpu_root
from test_check import check_as

from exporter.config import Config
from exporter.sinks.alertmanager import alert_for, alerting
from exporter.sources.devices import DevicesSource
from exporter.watchdog.check import run_check
from exporter.watchdog.hostconfig import gfx_name, override_target, version_causes

A, B = "0000:03:00.0", "0000:83:00.0"
T0 = 1_700_000_000.0
NOBODY = 65534


def run(config: Config, environ: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
        code = run_check(config, True, environ or {})
    report = json.loads(out.getvalue())
    out = io.StringIO()
    with contextlib.redirect_stdout(out), structlog.testing.capture_logs():
        run_check(config, False, environ or {})
    return code, report, out.getvalue()


def kinds(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["condition"]: c for c in report["host_config"]["causes"]}


# ---- ROCm settings against the GPUs --------------------------------------------------------------------------


def test_gfx_names() -> None:
    assert gfx_name(90010) == "gfx90a" and gfx_name(100301) == "gfx1031" and gfx_name(90402) == "gfx942"
    assert override_target("9.0.0") == "gfx900" and override_target("10.3.0") == "gfx1030"
    assert override_target("11.0") is None and override_target("gfx90a") is None


def test_a_gfx900_override_on_mi210_is_a_problem_naming_gfx90a(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)  # MI210: gfx_target_version 90010
    code, report, text = run(root.config(), {"HSA_OVERRIDE_GFX_VERSION": "9.0.0"})
    assert code == 1
    line = next(p for p in report["problems"] if p.startswith("HSA_OVERRIDE_GFX_VERSION=9.0.0"))
    assert "(gfx90a) as gfx900" in line and A in line and B in line
    assert kinds(report)["gfx_override_mismatch"]["severity"] == "critical"
    assert report["host_config"]["gfx_targets"] == {A: "gfx90a", B: "gfx90a"}
    assert "fix: unset HSA_OVERRIDE_GFX_VERSION" in text
    # only the GPUs selected are judged
    _, report, _ = run(root.config(), {"HSA_OVERRIDE_GFX_VERSION": "9.0.0", "ROCR_VISIBLE_DEVICES": "1"})
    line = next(p for p in report["problems"] if p.startswith("HSA_OVERRIDE_GFX_VERSION"))
    assert B in line and A not in line


def test_the_same_family_workaround_is_a_note(tmp_path: Path) -> None:
    gpu = FakeGpu(A, card=1, render=128, kfd_node=1, gfx_target_version=100301, product_name="AMD Radeon RX 6700 XT")
    root = build_root(tmp_path, [gpu])
    code, report, _ = run(root.config(), {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"})
    assert code == 0, report["problems"]
    note = next(n for n in report["notes"] if n.startswith("HSA_OVERRIDE_GFX_VERSION=10.3.0"))
    assert "gfx1030 code objects on" in note and "gfx1031" in note and "gfx10-3-generic" in note
    # 11.0.0 on the same RDNA2 part is another family: a problem
    code, report, _ = run(root.config(), {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    assert code == 1 and any("(gfx1031) as gfx1100" in p for p in report["problems"])
    mismatch = kinds(report)["gfx_override_mismatch"]
    assert mismatch["fixes"][-1] == "within gfx1031's family the override is 10.3.0"
    assert mismatch["details"] == {"gfx": "gfx1031", "target": "gfx1100", "family_base": "10.3.0"}


def test_gpu_device_ordinal_out_of_range_and_contradictions(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    code, report, _ = run(root.config(), {"GPU_DEVICE_ORDINAL": "2"})
    assert code == 1
    assert "GPU_DEVICE_ORDINAL: index 2 is out of range (2 GPUs): it and what follows are ignored" in report["problems"]
    # counted after ROCR_VISIBLE_DEVICES, like HIP_VISIBLE_DEVICES: one GPU kept, so index 1 is out of range
    code, report, _ = run(root.config(), {"ROCR_VISIBLE_DEVICES": "1", "GPU_DEVICE_ORDINAL": "1"})
    assert code == 1
    assert any(p.startswith("GPU_DEVICE_ORDINAL: index 1 is out of range (1 GPUs)") for p in report["problems"])
    code, report, _ = run(root.config(), {"GPU_DEVICE_ORDINAL": "0,1"})
    assert code == 0, report["problems"]
    # without HIP_VISIBLE_DEVICES it is HIP's selection too
    code, report, text = run(root.config(), {"GPU_DEVICE_ORDINAL": "1"})
    assert code == 0 and [s["pci_bus"] for s in report["visible_devices"]["selected"]] == [B]
    assert f"visible devices (GPU_DEVICE_ORDINAL=1): 0={B}" in text
    # beside it, GPU_DEVICE_ORDINAL still selects for OpenCL: out of range there is a problem of its own
    code, report, _ = run(root.config(), {"HIP_VISIBLE_DEVICES": "0", "GPU_DEVICE_ORDINAL": "5"})
    assert code == 1
    assert (
        "GPU_DEVICE_ORDINAL: index 5 is out of range (2 GPUs): it and what follows are ignored (OpenCL)"
        in (report["problems"])
    )
    code, report, _ = run(root.config(), {"HIP_VISIBLE_DEVICES": "0", "GPU_DEVICE_ORDINAL": "1"})
    assert code == 1
    line = next(p for p in report["problems"] if "GPU_DEVICE_ORDINAL=1 selects" in p)
    assert line.startswith(f"HIP_VISIBLE_DEVICES=0 selects {A} but GPU_DEVICE_ORDINAL=1 selects {B}")
    code, report, _ = run(root.config(), {"CUDA_VISIBLE_DEVICES": "1", "GPU_DEVICE_ORDINAL": "1"})
    assert code == 0, report["problems"]


def test_sdma_off_is_a_note_with_its_cost(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    code, report, _ = run(root.config(), {"HSA_ENABLE_SDMA": "0"})
    assert code == 0
    assert any(n.startswith("HSA_ENABLE_SDMA=0") and "blit kernels" in n for n in report["notes"])


# ---- ROCm user space against the driver ----------------------------------------------------------------------


def test_a_pair_outside_the_matrix_is_a_warning_naming_both(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.driver_version = "6.0.5"  # amdgpu-dkms of ROCm 5.5
    root.rebuild()
    root.write_file("/opt/rocm/.info/version", "6.4.0-47\n")
    code, report, text = run(root.config())
    assert code == 1
    cause = kinds(report)["rocm_driver_mismatch"]
    assert cause["severity"] == "warning"
    assert "ROCm 6.4.0-47 user space" in cause["message"]
    assert "amdgpu-dkms 6.0.5 (ROCm 5.5's driver)" in cause["message"]
    assert "5.3, 5.4, 5.5, 5.6, 5.7" in cause["message"]
    assert report["host_config"]["versions"]["judged"] is True
    assert "ROCm user space: 6.4.0-47; amdgpu driver: 6.0.5 (amdgpu-dkms of ROCm 5.5)" in text
    # a supported pair says nothing
    root.driver_version = "6.12.12"  # ROCm 6.4's
    root.rebuild()
    code, report, _ = run(root.config())
    assert code == 0 and "rocm_driver_mismatch" not in kinds(report)


def test_an_in_tree_driver_cannot_be_judged(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.write_file("/opt/rocm/.info/version", "6.2.4\n")
    code, report, _ = run(root.config())
    assert code == 0
    assert any("in-tree amdgpu driver" in n and "cannot be judged" in n for n in report["notes"])


def test_the_version_table_only_judges_what_it_knows() -> None:
    shown, found = version_causes("7.0.1", "/opt/rocm/.info/version", "6.16.99")
    assert shown["amdgpu_driver_release"] is None and found[0].kind == "rocm_driver_unjudged"
    shown, found = version_causes("6.1.3", "/opt/rocm/.info/version", "6.8.5")  # ROCm 6.2's driver, 6.1 user space
    assert shown["judged"] is True and found == []


# ---- /dev/shm --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[None]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_64mib_dev_shm_with_two_gpus_is_a_warning(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    with tmpfs(root.dev / "shm", "64m"):
        code, report, _ = run(root.config())
        cause = kinds(report)["shm_too_small"]
        assert code == 1 and cause["severity"] == "warning"
        assert cause["message"].startswith("/dev/shm is 64 MiB with 2 GPUs visible")
        assert "--ipc=host" in cause["fix"] and "--shm-size" in cause["fix"] and "medium: Memory" in cause["fix"]
        # one GPU selected: no collectives across GPUs, no warning
        code, report, _ = run(root.config(), {"ROCR_VISIBLE_DEVICES": "0"})
        assert code == 0 and "shm_too_small" not in kinds(report)
    with tmpfs(root.dev / "shm", "2g"):
        code, report, _ = run(root.config())
        assert code == 0 and report["host_config"]["shm_bytes"] == 2 << 30


# ---- amd-smi -----------------------------------------------------------------------------------------------------


def test_amd_smi_on_without_the_card_nodes_will_fail(open_tmp: Path) -> None:
    root = two_gpu_root(open_tmp)
    config = root.config(smi_backend="amd-smi")
    code, raw = check_as(1000, 1000, [109], lambda: (run(config)[0], json.dumps(run(config)[1])))
    report = json.loads(raw)
    assert code == 1
    cause = kinds(report)["amd_smi_cannot_open_cards"]
    assert "amd-smi opens them and will fail" in cause["message"] and "group video" in cause["message"]
    assert "--group-add 44" in cause["fix"] and "supplementalGroups: [44]" in cause["fix"]
    # with the video group too, or with the source off, nothing to say
    code, _ = check_as(1000, 1000, [109, 44], lambda: (run(config)[0], ""))
    assert code == 0
    off = root.config(smi_backend="amd-smi", collectors={"amd-smi": False, "devices": True, "sysfs": True})
    code, _ = check_as(1000, 1000, [109], lambda: (run(off)[0], ""))
    assert code == 0


def test_amd_smi_on_with_card_nodes_no_group_opens(open_tmp: Path) -> None:
    """Card nodes root:root 0600: no group to add, so the fix is root or the udev rule, and the kind says so."""
    root = two_gpu_root(open_tmp)
    for name in ("dri/card0", "dri/card1", "dri/card2"):
        root.chgrp(name, 0)
        root.chmod(name, 0o600)
    config = root.config(smi_backend="amd-smi")
    code, raw = check_as(1000, 1000, [109, 44], lambda: (run(config)[0], json.dumps(run(config)[1])))
    report = json.loads(raw)
    assert code == 1 and "amd_smi_cannot_open_cards" not in kinds(report)
    cause = kinds(report)["amd_smi_cards_no_group"]
    assert cause["fixes"] == [
        "no group grants them: run as root, or fix the udev rule for card nodes",
        "or turn the source off (--no-collector.amd-smi)",
    ]


def test_amd_smi_on_with_no_card_node_given(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, by_path=False)
    for name in ("dri/card0", "dri/card1", "dri/card2"):
        root.remove_node(name)
    code, report, _ = run(root.config(smi_backend="both"))
    assert code == 1 and "amd_smi_no_card_nodes" in kinds(report)


# ---- workloads that lost their group ------------------------------------------------------------------------------


def _wait_exec(pid: int, comm: str) -> None:
    """Until setpriv has set the groups and exec'd: a guard against a hang, not a sleep for the result."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/comm").read_text().strip() != comm:
        assert time.monotonic() < deadline, f"pid {pid} never became {comm}"
        time.sleep(0.01)


@contextlib.contextmanager
def gpu_process(groups: list[int], pod: str | None = None) -> Iterator[int]:
    """A real process with these supplementary groups (setpriv), in a Kubernetes-like pids cgroup when ``pod``."""
    child = subprocess.Popen(
        ["setpriv", "--reuid", "1000", "--regid", "1000", "--groups", ",".join(map(str, groups)), "sleep", "60"]
    )
    top = Path("/sys/fs/cgroup/pids") / f"rocm-watchdog-test-{uuid.uuid4().hex[:8]}"  # ours alone, removed after
    made: list[Path] = []
    try:
        _wait_exec(child.pid, "sleep")
        if pod is not None:
            cgroup = top / "kubepods" / "besteffort" / f"pod{pod}" / ("c" * 64)
            for d in reversed([cgroup, *cgroup.parents]):
                if d == top or top in d.parents:
                    d.mkdir()
                    made.append(d)
            (cgroup / "cgroup.procs").write_text(str(child.pid))
        yield child.pid
    finally:
        child.kill()
        child.wait()
        for d in reversed(made):  # a cgroup can be removed once its last process has exited
            d.rmdir()


@pytest.mark.skipif(not os.path.exists("/sys/fs/cgroup/pids"), reason="needs the cgroup v1 pids controller")
def test_a_process_that_kept_the_old_render_gid_is_named(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    with structlog.testing.capture_logs():
        DevicesSource(root.config(), clock=lambda: T0).collect()  # the baseline: render is 109
    pod = str(uuid.uuid4())
    with gpu_process([109], pod=pod) as stale, gpu_process([110]) as fresh:
        root.set_gid("render", 110)  # an OS reinstall renumbered render; udev relabelled the nodes
        root.add_kfd_process(stale, {1: 1 << 20})
        root.add_kfd_process(fresh, {1: 1 << 20})
        config = root.config(procfs=Path("/proc"))  # the host's /proc: KFD's pids are host pids

        code, report, text = run(config)
        assert code == 1
        drift = next(c for c in report["causes"] if c["condition"] == "group_gid_drift")
        lost = [c for c in drift["consequences"] if c["condition"] == "process_lost_group"]
        assert [c["subject"] for c in lost] == [f"pid {stale}"]
        assert lost[0]["details"]["pod_uid"] == pod and lost[0]["details"]["name"] == "sleep"
        assert f"pid {stale} (sleep, pod {pod})" in drift["message"]
        assert "it still has the old gid 109" in lost[0]["message"]
        assert report["host_config"]["procfs_is_host"] is True
        assert "process_lost_group" in text  # folded under the gid change: "+ N consequence(s)"

        # the daemon: a consequence of the gid change, never an alert of its own; the alert names the process
        with structlog.testing.capture_logs():
            state = DevicesSource(config, clock=lambda: T0 + 60).collect()
        cond = next(c for c in state.active() if c.kind == "process_lost_group")
        assert cond.subject == f"pid {stale}" and cond.cause == ("group_gid_drift", "render")
        assert not alerting(cond)
        root_cond = next(c for c in state.active() if c.kind == "group_gid_drift")
        alert = alert_for(root_cond, T0 + 300, config)
        summary = dict(alert.annotations)["summary"]
        assert f"pid {stale} (sleep, pod {pod})" in summary and str(fresh) not in summary
        fix = next(c for c in drift["consequences"] if c["condition"] == "process_lost_group")
        assert fix["severity"] == "critical"

    # without the host's /proc the processes are not looked up, and check says so
    code, report, _ = run(root.config())
    assert any("--path.procfs is not the host's /proc" in n for n in report["notes"])


def test_the_fix_says_restart_with_the_new_gid() -> None:
    from exporter.watchdog.conditions import fix_text

    text = fix_text("process_lost_group", "pid 7", {"pid": "7", "name": "python3", "gid": "110"})
    assert text.startswith("restart the workload (pid 7, python3) with the new gid: `docker run --group-add 110`")


def test_no_gid_change_reads_no_process(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    with structlog.testing.capture_logs():
        DevicesSource(root.config(), clock=lambda: T0).collect()
    root.add_kfd_process(os.getpid())
    with structlog.testing.capture_logs():
        state = DevicesSource(root.config(procfs=Path("/proc")), clock=lambda: T0 + 30).collect()
    assert state.devices.kfd_processes == ()
