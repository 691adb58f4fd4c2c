"""Records parsed from rocm-smi and amd-smi output (contract section 2)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

SmiTool = Literal["rocm-smi", "amd-smi"]
SmiFormat = Literal["json", "text", "csv"]


class SmiGpu(msgspec.Struct, frozen=True):
    """One GPU as a tool reports it. ``None`` means the tool printed N/A / UNKNOWN or left it out."""

    index: int
    pci_bus: str | None = None  # always lower-case dddd:bb:dd.f
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    numa_node: int | None = None
    numa_affinity: int | None = None  # -1 when none (4294967295 on ROCm <= 5.7 is normalised to -1)
    unique_id: str | None = None  # canonical_unique_id: "0x..." lower-case hex(int), whatever form the tool printed
    model: str | None = None
    device_id: str | None = None  # "0x740f"
    vbios: str | None = None
    driver: str | None = None
    # amd-smi list (ROCm >= 6.3)
    uuid: str | None = None
    kfd_id: int | None = None
    node_id: int | None = None
    partition_id: int | None = None
    # amd-smi partition / static --partition (ROCm >= 6.4): "SPX".."CPX" and "NPS1"/"NPS4" as printed
    compute_partition: str | None = None
    memory_partition: str | None = None


class SmiProcess(msgspec.Struct, frozen=True):
    """One KFD process (per GPU for amd-smi and rocm-smi details mode)."""

    pid: int
    name: str | None = None
    gpu: int | None = None  # GPU index when the tool says which GPU (amd-smi), else None
    gpu_count: int | None = None  # rocm-smi "GPU(s)" column: how many GPUs the PID uses
    vram_used_bytes: int | None = None
    sdma_used: int | None = None
    cu_occupancy: int | None = None
    gtt_used_bytes: int | None = None
    cpu_used_bytes: int | None = None


class SmiLink(msgspec.Struct, frozen=True):
    """One unordered GPU pair, ``a < b``, never the diagonal."""

    a: int
    b: int
    weight: int | None = None
    hops: int | None = None
    type: str | None = None  # "XGMI" | "PCIE" as printed (upper-case)
    a_pci_bus: str | None = None
    b_pci_bus: str | None = None


class SmiReport(msgspec.Struct, frozen=True):
    tool: SmiTool
    format: SmiFormat
    gpus: tuple[SmiGpu, ...] = ()
    processes: tuple[SmiProcess, ...] = ()
    links: tuple[SmiLink, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The contract's ``parse`` JSON object."""
        return {
            "tool": self.tool,
            "format": self.format,
            "gpus": [msgspec.structs.asdict(g) for g in self.gpus],
            "processes": [msgspec.structs.asdict(p) for p in self.processes],
            "links": [msgspec.structs.asdict(link) for link in self.links],
            "warnings": list(self.warnings),
        }
