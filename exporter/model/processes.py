"""KFD processes enriched with what the host knows about them (never their command line or environment), and
what the kubelet says about which container got which device (workload attribution)."""

from __future__ import annotations

import msgspec


class ProcessGpu(msgspec.Struct, frozen=True):
    """A process on one GPU (or partition), keyed by the GPU's PCI address like every GPU series."""

    pci_bus: str
    vram_used_bytes: int | None = None  # KFD ``vram_<gpu_id>``, else amd-smi's figure for that GPU


class ProcessInfo(msgspec.Struct, frozen=True):
    pid: int
    name: str | None = None  # the kernel's comm, or the tool's name when the process is gone
    user: str | None = None  # host user name, or the numeric uid when it has no name
    container_id: str | None = None
    pod_uid: str | None = None
    vram_used_bytes: int | None = None
    gpu_ids: tuple[int, ...] = ()  # KFD gpu_id of every GPU the process has opened
    # The GPUs the process has opened whose PCI address is known (KFD gpu_id through the KFD topology, or the
    # GPU index of an amd-smi process list), in pci_bus order. KFD lists every GPU the process's device cgroup
    # allows, so a process on a bare-metal host lists every GPU, most of them with 0 bytes.
    gpus: tuple[ProcessGpu, ...] = ()
    cgroup_known: bool = False  # /proc/<pid>/cgroup was read: no pod_uid then means "not in a Kubernetes pod"
    slurm_job_id: str | None = None  # from the cgroup path slurmstepd put the process in
    slurm_step: str | None = None  # "0", "batch", "extern", "interactive"...
    start_time: float | None = None  # Unix time it started (procfs stat starttime + btime); None: not known


class ProcessSnapshot(msgspec.Struct, frozen=True):
    processes: tuple[ProcessInfo, ...] = ()


class DeviceAllocation(msgspec.Struct, frozen=True):
    """One device the kubelet allocated to a container (pod-resources v1 ``List``). The API has no pod UID and no
    container id: pods are named by namespace and name, containers by name."""

    namespace: str
    pod: str
    container: str
    resource_name: str  # "amd.com/gpu", or a partition resource of the AMD device plugin ("amd.com/cpx_nps4")
    device_id: str  # what the device plugin advertised: a PCI address, or "amdgpu_xcp.N" for a partition


class PodResourcesSnapshot(msgspec.Struct, frozen=True):
    allocations: tuple[DeviceAllocation, ...] = ()
