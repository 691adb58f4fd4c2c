"""KFD processes: who uses the GPUs, enriched from procfs.

PIDs and per-GPU VRAM come from KFD's own sysfs (``class/kfd/kfd/proc/<pid>/vram_<gpu_id>``, what rocm-smi
itself reads) and from the process lists of the last rocm-smi / amd-smi runs. Enrichment reads the kernel's
``comm`` name, the owner (named from the host's ``etc/passwd`` under --path.rootfs, so a container sees host
names) and the cgroup (container id, Kubernetes pod UID). Never the command line or the environment: they
hold secrets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from exporter.config import Config
from exporter.inventory import tool_processes
from exporter.model.processes import ProcessInfo, ProcessSnapshot
from exporter.model.smi import SmiReport
from exporter.parsers.common import parse_int
from exporter.parsers.host import parse_cgroup, parse_passwd_file
from exporter.sources import SourceError


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def read_kfd_processes(sysfs: Path) -> dict[int, tuple[int | None, tuple[int, ...]]]:
    """{pid: (VRAM bytes summed over GPUs or None, KFD gpu_ids)} from ``class/kfd/kfd/proc``."""
    found: dict[int, tuple[int | None, tuple[int, ...]]] = {}
    proc_dir = sysfs / "class" / "kfd" / "kfd" / "proc"
    try:
        entries = list(os.scandir(proc_dir))
    except OSError:
        return found
    for entry in entries:
        pid = parse_int(entry.name)
        if pid is None:
            continue
        total: int | None = None
        gpu_ids: list[int] = []
        try:
            files = list(os.scandir(entry.path))
        except OSError:
            continue  # the process exited between the two reads
        for f in files:
            if not f.name.startswith("vram_"):
                continue
            gpu_id = parse_int(f.name[len("vram_") :])
            value = parse_int(_read(Path(f.path)))
            if gpu_id is not None:
                gpu_ids.append(gpu_id)
            if value is not None:
                total = (total or 0) + value
        found[pid] = (total, tuple(sorted(gpu_ids)))
    return found


class ProcessesSource:
    name = "processes"

    def __init__(self, config: Config, smi_reports: Callable[[], Sequence[SmiReport]]) -> None:
        self._sysfs = config.sysfs
        self._procfs = config.procfs
        self._passwd = config.rootfs / "etc" / "passwd"
        self._smi_reports = smi_reports
        psutil.PROCFS_PATH = str(config.procfs)

    def collect(self) -> ProcessSnapshot:
        if not self._procfs.is_dir():
            raise SourceError(f"procfs not found at {self._procfs}")
        kfd = read_kfd_processes(self._sysfs)
        smi = tool_processes(self._smi_reports())
        users, _ = parse_passwd_file(_read(self._passwd) or "")
        infos = []
        for pid in sorted(set(kfd) | set(smi)):
            kfd_vram, gpu_ids = kfd.get(pid, (None, ()))
            tool_name, smi_vram = smi.get(pid, (None, None))
            comm = _read(self._procfs / str(pid) / "comm")
            user: str | None = None
            try:
                uid = psutil.Process(pid).uids().real
                user = users.get(uid, str(uid))
            except (psutil.Error, OSError):
                pass  # gone, or another pid namespace: keep what the tools said
            container, pod = parse_cgroup(_read(self._procfs / str(pid) / "cgroup") or "")
            infos.append(
                ProcessInfo(
                    pid=pid,
                    name=comm.strip() if comm else tool_name,
                    user=user,
                    container_id=container,
                    pod_uid=pod,
                    vram_used_bytes=kfd_vram if kfd_vram is not None else smi_vram,
                    gpu_ids=gpu_ids,
                )
            )
        return ProcessSnapshot(tuple(infos))

    def close(self) -> None:
        return None
