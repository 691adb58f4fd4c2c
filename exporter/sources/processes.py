"""KFD processes: who uses the GPUs, enriched from procfs.

PIDs and per-GPU VRAM come from KFD's own sysfs (``class/kfd/kfd/proc/<pid>/vram_<gpu_id>``, bytes, what rocm-smi
itself reads) and from the process lists of the last rocm-smi / amd-smi runs. A KFD ``gpu_id`` names a GPU
through the KFD topology read in the same pass (``topology/nodes/<N>/gpu_id`` and the node's PCI location), so
the per-GPU figures are keyed by PCI address; amd-smi's per-GPU entries are placed through its own GPU list.
Enrichment reads the kernel's ``comm`` name, the start time (``stat`` starttime after ``/proc/stat`` btime: the
health verdict asks whether a process opened a render node before it was renumbered), the owner (named from the
host's ``etc/passwd`` under --path.rootfs, so a container sees host names) and the cgroup (container id, Kubernetes
pod UID, Slurm job and step). Never the command line or the environment: they hold secrets.

Every file is read with ``deadline.read_regular`` (``O_NONBLOCK``, regular files only), so a FIFO or device node
in place of a procfs or KFD file cannot block the source; a read that blocks inside a regular file (a process
stuck in the kernel, a hung GPU's KFD accounting) is the scheduler's deadline to bound (``exporter.scheduler``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from exporter.config import Config
from exporter.inventory import tool_processes
from exporter.model import ParseError
from exporter.model.processes import ProcessGpu, ProcessInfo, ProcessSnapshot
from exporter.model.smi import SmiReport
from exporter.parsers.common import normalize_bdf, parse_int
from exporter.parsers.host import parse_boot_time, parse_cgroup, parse_passwd_file, parse_stat_start_ticks
from exporter.parsers.slurm import parse_slurm_cgroup
from exporter.parsers.sysfs import kfd_node_from_properties, parse_kfd_properties
from exporter.sources import SourceError, deadline

_MAX_READ = 1 << 16  # comm, cgroup, a KFD vram_<gpu_id> or topology file: far less
_MAX_PASSWD_READ = 1 << 24  # etc/passwd of a host with many local users


def _read(path: Path, limit: int = _MAX_READ) -> str | None:
    """The file's text; None when it cannot be read (gone with its process, not a regular file) or is larger
    than ``limit`` (not what it should be)."""
    try:
        data = deadline.read_regular(path, limit)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace") if len(data) <= limit else None


def read_kfd_processes(sysfs: Path) -> dict[int, tuple[tuple[int, int | None], ...]]:
    """{pid: ((KFD gpu_id, VRAM bytes or None), ...)} from ``class/kfd/kfd/proc``, in gpu_id order."""
    found: dict[int, tuple[tuple[int, int | None], ...]] = {}
    proc_dir = sysfs / "class" / "kfd" / "kfd" / "proc"
    try:
        entries = list(os.scandir(proc_dir))
    except OSError:
        return found
    for entry in entries:
        pid = parse_int(entry.name)
        if pid is None:
            continue
        per_gpu: list[tuple[int, int | None]] = []
        try:
            files = list(os.scandir(entry.path))
        except OSError:
            continue  # the process exited between the two reads
        for f in files:
            if not f.name.startswith("vram_"):
                continue
            gpu_id = parse_int(f.name[len("vram_") :])
            if gpu_id is not None:
                per_gpu.append((gpu_id, parse_int(_read(Path(f.path)))))
        found[pid] = tuple(sorted(per_gpu))
    return found


def read_kfd_gpu_buses(sysfs: Path) -> dict[int, str]:
    """{KFD gpu_id: PCI address} of the GPU nodes of the KFD topology (a partition has its own function number).

    Read with the process list rather than taken from the sysfs source's last snapshot: a gpu_id names a GPU
    only in the topology of the same moment (a partition-mode change or a driver reload rebuilds it)."""
    buses: dict[int, str] = {}
    nodes = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"
    try:
        numbers = [n for n in os.listdir(nodes) if n.isdigit()]
    except OSError:
        return buses
    for number in numbers:
        gpu_id = parse_int((_read(nodes / number / "gpu_id") or "").strip())
        properties = _read(nodes / number / "properties")
        if not gpu_id or properties is None:
            continue  # CPU nodes have gpu_id 0
        try:
            node = kfd_node_from_properties(int(number), parse_kfd_properties(properties), gpu_id, None)
        except ParseError:
            continue  # the sysfs source reports a broken topology; here the GPU just stays unnamed
        if node is not None and node.pci_bus is not None:
            buses[gpu_id] = node.pci_bus
    return buses


def tool_process_gpus(reports: Sequence[SmiReport]) -> dict[int, tuple[ProcessGpu, ...]]:
    """{pid: per-GPU entries} from the tools' process lists where the tool says which GPU (amd-smi): the GPU
    index placed through the same report's GPU list. The first report that places a pid wins."""
    merged: dict[int, tuple[ProcessGpu, ...]] = {}
    for report in reports:
        bus_of = {g.index: normalize_bdf(g.pci_bus) for g in report.gpus}
        mine: dict[int, dict[str, int | None]] = {}
        for p in report.processes:
            bus = bus_of.get(p.gpu) if p.gpu is not None else None
            if bus is None or p.pid in merged:
                continue
            per_gpu = mine.setdefault(p.pid, {})
            old = per_gpu.get(bus)
            per_gpu[bus] = p.vram_used_bytes if old is None else old + (p.vram_used_bytes or 0)
        for pid, per_gpu in mine.items():
            merged[pid] = tuple(ProcessGpu(bus, vram) for bus, vram in sorted(per_gpu.items()))
    return merged


def _own_pid(procfs: Path) -> int:
    """This process's pid as the host's procfs numbers it (KFD names its processes by those): ``<procfs>/self``
    resolves in the pid namespace of that procfs, which is the host's when --path.procfs is the host's /proc."""
    try:
        return int(os.readlink(procfs / "self"))
    except (OSError, ValueError):
        return os.getpid()


class ProcessesSource:
    name = "processes"

    def __init__(self, config: Config, smi_reports: Callable[[], Sequence[SmiReport]]) -> None:
        self._sysfs = config.sysfs
        self._procfs = config.procfs
        self._passwd = config.rootfs / "etc" / "passwd"
        self._smi_reports = smi_reports
        # --devices.probe opens /dev/kfd every devices interval: a KFD process of the exporter's own, left out
        self._own_pid = _own_pid(config.procfs) if config.devices_probe else None
        self._clock_ticks = os.sysconf("SC_CLK_TCK")  # what /proc/<pid>/stat's starttime counts in

    def collect(self) -> ProcessSnapshot:
        if not self._procfs.is_dir():
            raise SourceError(f"procfs not found at {self._procfs}")
        kfd = read_kfd_processes(self._sysfs)
        buses = read_kfd_gpu_buses(self._sysfs) if kfd else {}
        reports = self._smi_reports()
        smi = tool_processes(reports)
        smi_gpus = tool_process_gpus(reports)
        users, _ = parse_passwd_file(_read(self._passwd, _MAX_PASSWD_READ) or "")
        boot = parse_boot_time(_read(self._procfs / "stat") or "") if kfd or smi else None
        infos = []
        for pid in sorted(set(kfd) | set(smi)):
            if pid == self._own_pid:
                continue
            per_gpu = kfd.get(pid, ())
            known = [vram for _, vram in per_gpu if vram is not None]
            kfd_vram = sum(known) if known else None
            on_kfd = [ProcessGpu(buses[gpu_id], vram) for gpu_id, vram in per_gpu if gpu_id in buses]
            gpus = tuple(sorted(on_kfd, key=lambda g: g.pci_bus)) or smi_gpus.get(pid, ())
            tool_name, smi_vram = smi.get(pid, (None, None))
            comm = _read(self._procfs / str(pid) / "comm")
            # the real uid from this procfs's status (not psutil's: its procfs path is global to the process)
            uid = _real_uid(_read(self._procfs / str(pid) / "status") or "")
            user: str | None = None if uid is None else users.get(uid, str(uid))
            cgroup = _read(self._procfs / str(pid) / "cgroup")
            container, pod = parse_cgroup(cgroup or "")
            job, step = parse_slurm_cgroup(cgroup or "")
            ticks = parse_stat_start_ticks(_read(self._procfs / str(pid) / "stat") or "")
            infos.append(
                ProcessInfo(
                    pid=pid,
                    name=comm.strip() if comm else tool_name,
                    user=user,
                    container_id=container,
                    pod_uid=pod,
                    vram_used_bytes=kfd_vram if kfd_vram is not None else smi_vram,
                    gpu_ids=tuple(gpu_id for gpu_id, _ in per_gpu),
                    gpus=gpus,
                    cgroup_known=cgroup is not None,
                    slurm_job_id=job,
                    slurm_step=step,
                    start_time=boot + ticks / self._clock_ticks if boot is not None and ticks is not None else None,
                )
            )
        return ProcessSnapshot(tuple(infos))

    def close(self) -> None:
        return None


def _real_uid(status: str) -> int | None:
    """The real uid of a ``/proc/<pid>/status`` (``Uid:`` real, effective, saved, filesystem); None when absent
    (gone, or another pid namespace)."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None
