"""KFD process discovery and enrichment over a fake procfs/sysfs, and the pure procfs parsers."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from msgspec.structs import replace

from exporter.config import Config
from exporter.inventory import tool_processes
from exporter.metrics.gpu import process_families
from exporter.model.processes import ProcessInfo
from exporter.model.smi import SmiProcess, SmiReport
from exporter.parsers.host import parse_boot_time, parse_cgroup, parse_stat_start_ticks
from exporter.sources import SourceError
from exporter.sources.processes import ProcessesSource

POD = "0b9a6c8e-3f5d-4c1a-9e2b-7d4f6a8c0e12"
CID = "4f1c2d3e" * 8


@pytest.mark.parametrize(
    ("cgroup", "container", "pod"),
    [
        # cgroup v2, systemd driver, containerd under Kubernetes
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n",
            CID,
            POD,
        ),
        # cgroup v1, cgroupfs driver
        (f"12:devices:/kubepods/besteffort/pod{POD}/{CID}\n11:cpu:/kubepods/besteffort/pod{POD}/{CID}\n", CID, POD),
        # plain Docker, cgroup v2 and v1
        (f"0::/system.slice/docker-{CID}.scope\n", CID, None),
        (f"4:memory:/docker/{CID}\n", CID, None),
        # podman
        (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container\n", CID, None),
        # not in a container
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None),
        ("", None, None),
    ],
)
def test_parse_cgroup(cgroup: str, container: str | None, pod: str | None) -> None:
    assert parse_cgroup(cgroup) == (container, pod)


def fake_host(tmp_path: Path) -> Config:
    sysfs, procfs, etc = tmp_path / "sys", tmp_path / "proc", tmp_path / "etc"
    kfd = sysfs / "class" / "kfd" / "kfd" / "proc"
    # pid 4242: KFD knows it on two GPUs; procfs has it, in a Kubernetes pod.
    (kfd / "4242").mkdir(parents=True)
    (kfd / "4242" / "vram_11111").write_text("1048576\n")
    (kfd / "4242" / "vram_22222").write_text("2097152\n")
    (kfd / "4242" / "pasid").write_text("32770\n")
    (procfs / "4242").mkdir(parents=True)
    (procfs / "4242" / "comm").write_text("python3\n")
    (procfs / "4242" / "cmdline").write_text("python3\0--token=SECRET\0")
    (procfs / "4242" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{POD}/{CID}\n")
    # pid 5151: only the tool lists it (another pid namespace): its name comes from the tool.
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return replace(Config(), rootfs=tmp_path, sysfs=sysfs, procfs=procfs)


def test_processes_from_kfd_sysfs_and_tools(tmp_path: Path) -> None:
    config = fake_host(tmp_path)
    tool = [
        SmiProcess(pid=5151, name="tool-name", gpu=0, vram_used_bytes=300),
        SmiProcess(pid=5151, name="tool-name", gpu=1, vram_used_bytes=200),
        SmiProcess(pid=4242, name="ignored-tool-name", vram_used_bytes=1),
    ]
    snapshot = ProcessesSource(config, lambda: [SmiReport("amd-smi", "json", processes=tuple(tool))]).collect()
    by_pid = {p.pid: p for p in snapshot.processes}
    assert set(by_pid) == {4242, 5151}
    p = by_pid[4242]
    assert p.name == "python3"
    assert p.vram_used_bytes == 3 * 1048576  # KFD sysfs wins over the tool's figure
    assert p.gpu_ids == (11111, 22222)
    assert (p.container_id, p.pod_uid) == (CID, POD)
    assert by_pid[5151].name == "tool-name"
    assert by_pid[5151].vram_used_bytes == 500
    assert all("SECRET" not in repr(q) for q in snapshot.processes)


def test_own_process_gets_a_user_name_from_the_hosts_passwd(tmp_path: Path) -> None:
    config = replace(fake_host(tmp_path), procfs=Path("/proc"))
    snapshot = ProcessesSource(
        config, lambda: [SmiReport("rocm-smi", "json", processes=(SmiProcess(os.getpid()),))]
    ).collect()
    me = next(p for p in snapshot.processes if p.pid == os.getpid())
    expected = "root" if os.getuid() == 0 else str(os.getuid())
    assert me.user == expected
    assert me.name == Path("/proc/self/comm").read_text().strip()


def test_missing_procfs_is_a_source_error(tmp_path: Path) -> None:
    config = replace(Config(), procfs=tmp_path / "nope", sysfs=tmp_path)
    with pytest.raises(SourceError, match="procfs"):
        ProcessesSource(config, list).collect()


def test_top_n_keeps_the_largest_and_counts_all() -> None:
    processes = [ProcessInfo(pid=i, name=f"p{i}", vram_used_bytes=i * 10) for i in range(1, 31)]
    processes.append(ProcessInfo(pid=99, name="no-vram-known"))
    total, vram, info = list(process_families(processes, top_n=3))
    assert total.samples[0].value == 31
    assert [s.labels["pid"] for s in vram.samples] == ["30", "29", "28"]
    assert set(vram.samples[0].labels) == {"pid", "process_name"}  # the contract's labels, no more
    assert [s.labels["pid"] for s in info.samples] == ["30", "29", "28"]


def test_two_tools_listing_one_process_do_not_double_its_vram() -> None:
    gib = 1 << 30
    amd = SmiReport(
        "amd-smi",
        "json",
        processes=(
            SmiProcess(42, "python3", gpu=0, vram_used_bytes=gib),
            SmiProcess(42, "python3", gpu=1, vram_used_bytes=gib),
        ),
    )
    rocm = SmiReport(
        "rocm-smi",
        "json",
        processes=(SmiProcess(42, "python3", vram_used_bytes=2 * gib), SmiProcess(7, "other", vram_used_bytes=None)),
    )
    assert tool_processes([amd, rocm]) == {42: ("python3", 2 * gib), 7: ("other", None)}


def test_start_time_from_stat_and_btime(tmp_path: Path) -> None:
    """The health verdict compares it with a renumbering: btime + starttime / CLK_TCK, what psutil says too."""
    config = replace(fake_host(tmp_path), procfs=Path("/proc"))
    snapshot = ProcessesSource(
        config, lambda: [SmiReport("rocm-smi", "json", processes=(SmiProcess(os.getpid()),))]
    ).collect()
    me = next(p for p in snapshot.processes if p.pid == os.getpid())
    assert me.start_time is not None and abs(me.start_time - psutil.Process().create_time()) < 1.0
    # a fake procfs: a command name with spaces and parentheses, and a host that booted at 1700000000
    config = fake_host(tmp_path / "fake")
    fields = ["S", *["0"] * 18, "250", *["0"] * 30]  # fields 3..52: starttime (22) is 250 ticks after boot
    (config.procfs / "4242" / "stat").write_text(f"4242 (py (odd) name) {' '.join(fields)}\n")
    (config.procfs / "stat").write_text("cpu  1 2 3\nbtime 1700000000\n")
    [p] = ProcessesSource(config, lambda: []).collect().processes
    assert p.start_time == 1700000000 + 250 / os.sysconf("SC_CLK_TCK")
    assert parse_stat_start_ticks("garbage") is None and parse_stat_start_ticks("1 (a) S 0") is None
    assert parse_boot_time("cpu 1\n") is None
