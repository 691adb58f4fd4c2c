"""Per-GPU process VRAM (KFD ``vram_<gpu_id>`` through the KFD topology, else amd-smi's per-GPU list) and the Slurm
job from the cgroup: source over a fake root, families with the per-process top-N bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeroot import FakeGpu, FakeXcp, build_root
from prometheus_client.core import Metric

from exporter.metrics import names
from exporter.metrics.gpu import process_families, process_gpu_families
from exporter.model.processes import ProcessGpu, ProcessInfo
from exporter.model.smi import SmiGpu, SmiProcess, SmiReport
from exporter.parsers.slurm import parse_slurm_cgroup
from exporter.sources.processes import ProcessesSource, read_kfd_gpu_buses, tool_process_gpus

GIB = 1 << 30


def kfd_process(sys: Path, pid: int, vram: dict[int, str]) -> None:
    """``class/kfd/kfd/proc/<pid>`` as KFD lays it out: vram_<gpu_id> and sdma_<gpu_id> beside pasid, and a
    stats_<gpu_id>/ directory per GPU (kfd_process.c: kfd_procfs_add_sysfs_files / _add_sysfs_stats)."""
    d = sys / "class" / "kfd" / "kfd" / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "pasid").write_text("32770\n")
    for gpu_id, text in vram.items():
        (d / f"vram_{gpu_id}").write_text(text)
        (d / f"sdma_{gpu_id}").write_text("0\n")
        (d / f"stats_{gpu_id}").mkdir()
        (d / f"stats_{gpu_id}" / "evicted_ms").write_text("0\n")
        (d / f"stats_{gpu_id}" / "cu_occupancy").write_text("0\n")


def host_process(proc: Path, pid: int, comm: str, cgroup: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(f"{comm}\n")
    (proc / str(pid) / "cgroup").write_text(cgroup)


def two_gpus_and_a_partition(tmp_path: Path):  # type: ignore[no-untyped-def]
    return build_root(
        tmp_path,
        [
            FakeGpu("0000:c1:00.0", card=1, render=128, kfd_node=1, gpu_id=11111),
            FakeGpu(
                "0000:c2:00.0",
                card=2,
                render=129,
                kfd_node=2,
                gpu_id=22222,
                compute_partition="DPX",
                partitions=(FakeXcp(xcp=3, index=1, card=3, render=130, kfd_node=3, gpu_id=33333),),
            ),
        ],
    )


def test_kfd_topology_names_gpu_ids_by_pci_address(tmp_path: Path) -> None:
    root = two_gpus_and_a_partition(tmp_path)
    # the CPU node (gpu_id 0) is not a GPU; the partition has its own function number
    assert read_kfd_gpu_buses(root.sys) == {11111: "0000:c1:00.0", 22222: "0000:c2:00.0", 33333: "0000:c2:00.1"}
    assert read_kfd_gpu_buses(tmp_path / "nowhere") == {}


def test_source_keys_kfd_vram_by_gpu_and_reads_the_slurm_job(tmp_path: Path) -> None:
    root = two_gpus_and_a_partition(tmp_path)
    # pid 700: a Slurm step on the host, on every GPU its cgroup allows (KFD creates a vram_ file for each),
    # holding VRAM on two of them; gpu_id 44444 is not in the topology (a GPU gone since): counted, not placed.
    kfd_process(root.sys, 700, {11111: "1073741824\n", 22222: "0\n", 33333: "2147483648\n", 44444: "5\n"})
    host_process(root.proc, 700, "python3", "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n")
    # pid 701: listed only by amd-smi (another pid namespace): placed by the tool's GPU index
    amd = SmiReport(
        "amd-smi",
        "json",
        gpus=(SmiGpu(0, pci_bus="0000:c1:00.0"), SmiGpu(1, pci_bus="0000:c2:00.0")),
        processes=(SmiProcess(701, "tool", gpu=1, vram_used_bytes=300), SmiProcess(701, "tool", gpu=0)),
    )
    snap = ProcessesSource(root.config(), lambda: [amd]).collect()
    by_pid = {p.pid: p for p in snap.processes}
    p = by_pid[700]
    assert p.vram_used_bytes == 3 * GIB + 5  # the per-process figure is unchanged: every vram_ file summed
    assert p.gpu_ids == (11111, 22222, 33333, 44444)
    assert p.gpus == (
        ProcessGpu("0000:c1:00.0", GIB),
        ProcessGpu("0000:c2:00.0", 0),
        ProcessGpu("0000:c2:00.1", 2 * GIB),
    )
    assert (p.slurm_job_id, p.slurm_step, p.cgroup_known, p.pod_uid) == ("1392969", "0", True, None)
    tool = by_pid[701]
    assert tool.gpus == (ProcessGpu("0000:c1:00.0", None), ProcessGpu("0000:c2:00.0", 300))
    assert (tool.cgroup_known, tool.slurm_job_id) == (False, None)


def test_tool_per_gpu_entries_first_tool_wins_and_unplaced_gpus_are_dropped() -> None:
    amd = SmiReport(
        "amd-smi",
        "json",
        gpus=(SmiGpu(0, pci_bus="0000:03:00.0"), SmiGpu(1)),  # GPU 1: the tool did not say where it is
        processes=(
            SmiProcess(1, gpu=0, vram_used_bytes=10),
            SmiProcess(1, gpu=0, vram_used_bytes=5),  # two entries for one GPU add up
            SmiProcess(1, gpu=1, vram_used_bytes=7),
            SmiProcess(2, gpu=None, vram_used_bytes=7),
        ),
    )
    later = SmiReport("amd-smi", "text", gpus=(SmiGpu(0, pci_bus="0000:04:00.0"),), processes=(SmiProcess(1, gpu=0),))
    assert tool_process_gpus([amd, later]) == {1: (ProcessGpu("0000:03:00.0", 15),)}


def _samples(families: list[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in families if f.name == name for s in f.samples]


def test_per_gpu_family_keeps_the_per_process_bound_and_skips_empty_gpus() -> None:
    processes = [
        ProcessInfo(
            pid=i,
            vram_used_bytes=i * GIB,
            gpus=(ProcessGpu("0000:c1:00.0", i * GIB), ProcessGpu("0000:c2:00.0", 0), ProcessGpu("0000:c3:00.0")),
            slurm_job_id=str(1000 + i) if i % 2 else None,
            slurm_step="batch",
        )
        for i in range(1, 8)
    ]
    top = [s.labels["pid"] for f in process_families(processes, top_n=3) for s in f.samples if "pid" in s.labels]
    families = list(process_gpu_families(processes, top_n=3))
    assert [f.name for f in families] == [names.PROCESS_GPU_VRAM.name, "rocm_process_slurm_job_info"]
    vram = _samples(families, names.PROCESS_GPU_VRAM.name)
    # only the processes the per-process family exports, and only GPUs with VRAM on them
    assert vram == [({"pid": pid, "pci_bus": "0000:c1:00.0"}, int(pid) * GIB) for pid in ("7", "6", "5")]
    assert {labels["pid"] for labels, _ in vram} <= set(top)
    assert _samples(families, "rocm_process_slurm_job_info") == [
        ({"pid": "7", "job_id": "1007", "step": "batch"}, 1),
        ({"pid": "5", "job_id": "1005", "step": "batch"}, 1),
    ]


def test_per_gpu_families_are_left_out_when_empty() -> None:
    # no GPU placed, no Slurm job: the exposition does not change for hosts without either
    assert list(process_gpu_families([ProcessInfo(pid=1, vram_used_bytes=1)], top_n=20)) == []


@pytest.mark.parametrize(
    ("cgroup", "job", "step"),
    [
        # cgroup/v2 (Slurm >= 22.05)
        ("0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n", "1392969", "0"),
        ("0::/system.slice/slurmstepd.scope/job_42/step_extern/user\n", "42", "extern"),
        # several slurmd on one host: <nodename>_slurmstepd.scope
        ("0::/system.slice/gpu01_slurmstepd.scope/job_5/step_batch/user/task_special\n", "5", "batch"),
        # cgroup/v1, under every controller
        ("12:memory:/slurm/uid_2101171/job_280678/step_interactive/task_0\n", "280678", "interactive"),
        ("10:devices:/slurm_gpu01/uid_0/job_9/step_3/task_1\n4:cpuset:/slurm_gpu01/uid_0/job_9/step_3\n", "9", "3"),
        ("4:freezer:/slurm/uid_1000/job_77\n", "77", None),
        # slurmstepd's own cgroup, a Kubernetes pod, a user session: no job
        ("0::/system.slice/slurmstepd.scope/system\n", None, None),
        ("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope\n", None, None),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None),
        ("0::/job_1/step_0\n", None, None),
        ("", None, None),
    ],
)
def test_parse_slurm_cgroup(cgroup: str, job: str | None, step: str | None) -> None:
    assert parse_slurm_cgroup(cgroup) == (job, step)
