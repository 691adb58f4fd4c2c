"""Merge what every GPU source says into one view per GPU, keyed by PCI address. Pure.

Precedence per field: sysfs (read every interval, cheapest, most current), then the tool reports in the
order given (the collector passes amd-smi before rocm-smi). A field no source knows stays None.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

import msgspec

from exporter.model.gpu import (
    GpuIdentity,
    GpuMetricsReading,
    GpuTelemetry,
    RasCount,
    SysfsReadErrors,
    SysfsSnapshot,
    XcpActivity,
)
from exporter.model.smi import SmiGpu, SmiReport
from exporter.parsers.common import normalize_bdf, unique_id_form
from exporter.store import StoreView

T = TypeVar("T")


class GpuView(msgspec.Struct, frozen=True):
    """One GPU as every source together knows it. ``driver`` is the driver version when a source knows it (the
    tools' "Driver version", sysfs ``module/amdgpu/version`` of a DKMS build), else the driver name."""

    pci_bus: str
    card: str | None = None
    render_node: str | None = None
    kfd_node: int | None = None
    gpu_id: int | None = None
    unique_id: str | None = None
    model: str | None = None
    device_id: str | None = None
    vbios: str | None = None
    driver: str | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    busy_ratio: float | None = None
    numa_node: int | None = None
    temperatures_celsius: tuple[tuple[str, float], ...] = ()
    power_watts: float | None = None
    pcie_link_speed_gts: float | None = None
    pcie_link_width: int | None = None
    ras: tuple[RasCount, ...] = ()
    # partition modes of a partitionable GPU, on its PCI function only (partitions share them)
    compute_partition: str | None = None
    memory_partition: str | None = None
    telemetry: GpuTelemetry = GpuTelemetry()  # sysfs only; partitions have none of their own
    gpu_metrics: GpuMetricsReading | None = None  # the PCI function's gpu_metrics table (sysfs only)
    xcp: XcpActivity | None = None  # the GPU's or partition's XCP activity from its physical GPU's table
    sysfs_read: str | None = None  # GpuIdentity.sysfs_read: ok, timeout, error; None when sysfs did not read it
    sysfs_read_errors: tuple[SysfsReadErrors, ...] = ()  # the sysfs source's counts for this GPU's files


class LinkView(msgspec.Struct, frozen=True):
    pci_bus: str
    peer_pci_bus: str
    link_type: str | None
    weight: int | None
    hops: int | None


def canonical_unique_id(value: str | None) -> str | None:
    """A tool's unique_id (``0x5A4A...``, or bare hex) in the form sysfs identities carry: ``hex(int)``."""
    return unique_id_form(value)


def _from_sysfs(gpu: GpuIdentity, driver_version: str | None, errors: tuple[SysfsReadErrors, ...]) -> GpuView:
    return GpuView(
        pci_bus=gpu.pci_bus,
        card=gpu.card.name if gpu.card else None,
        render_node=gpu.render.name if gpu.render else None,
        kfd_node=gpu.kfd_node,
        gpu_id=gpu.gpu_id,
        unique_id=gpu.unique_id,  # already canonical: parsers.sysfs
        model=gpu.model,
        device_id=gpu.device_id,
        vbios=gpu.vbios,
        driver=driver_version or gpu.driver,
        vram_total_bytes=gpu.vram_total_bytes,
        vram_used_bytes=gpu.vram_used_bytes,
        busy_ratio=gpu.busy_ratio,
        numa_node=gpu.numa_node,
        temperatures_celsius=gpu.temperatures_celsius,
        power_watts=gpu.power_watts,
        pcie_link_speed_gts=gpu.pcie_link_speed_gts,
        pcie_link_width=gpu.pcie_link_width,
        ras=gpu.ras,
        compute_partition=gpu.compute_partition if gpu.partition_device is None else None,
        memory_partition=gpu.memory_partition if gpu.partition_device is None else None,
        telemetry=gpu.telemetry,
        gpu_metrics=gpu.gpu_metrics,
        xcp=gpu.xcp,
        sysfs_read=gpu.sysfs_read,
        sysfs_read_errors=errors,
    )


def _first(current: T | None, new: T | None) -> T | None:
    return current if current is not None else new


def _fill(view: GpuView, smi: SmiGpu) -> GpuView:
    """Fill the fields ``view`` does not know from a tool's record."""
    return GpuView(
        pci_bus=view.pci_bus,
        card=view.card,
        render_node=view.render_node,
        kfd_node=view.kfd_node,
        gpu_id=view.gpu_id,
        unique_id=view.unique_id or canonical_unique_id(smi.unique_id),
        model=view.model or smi.model,
        device_id=view.device_id or smi.device_id,
        vbios=view.vbios or smi.vbios,
        driver=view.driver or smi.driver,
        vram_total_bytes=_first(view.vram_total_bytes, smi.vram_total_bytes),
        vram_used_bytes=_first(view.vram_used_bytes, smi.vram_used_bytes),
        busy_ratio=view.busy_ratio,
        numa_node=_first(view.numa_node, smi.numa_node),
        temperatures_celsius=view.temperatures_celsius,
        power_watts=view.power_watts,
        pcie_link_speed_gts=view.pcie_link_speed_gts,
        pcie_link_width=view.pcie_link_width,
        ras=view.ras,
        compute_partition=view.compute_partition,
        memory_partition=view.memory_partition,
        telemetry=view.telemetry,
        gpu_metrics=view.gpu_metrics,
        xcp=view.xcp,
        sysfs_read=view.sysfs_read,
        sysfs_read_errors=view.sysfs_read_errors,
    )


def merge_gpus(sysfs: SysfsSnapshot | None, reports: Sequence[SmiReport]) -> tuple[GpuView, ...]:
    # One amdgpu module drives every GPU of the host: its version, from whichever source knows it, goes on all.
    driver_version = next((g.driver for r in reports for g in r.gpus if g.driver), None) or (
        sysfs.driver_version if sysfs is not None else None
    )
    views: dict[str, GpuView] = {}
    if sysfs is not None:
        errors: dict[str, list[SysfsReadErrors]] = {}
        for e in sysfs.read_errors:
            errors.setdefault(e.pci_bus, []).append(e)
        for gpu in sysfs.gpus:
            views[gpu.pci_bus] = _from_sysfs(gpu, driver_version, tuple(errors.get(gpu.pci_bus, ())))
    for report in reports:
        for smi in report.gpus:
            bdf = normalize_bdf(smi.pci_bus)
            if bdf is None:
                continue  # a GPU the tool did not place on the bus cannot be keyed
            views[bdf] = _fill(views.get(bdf, GpuView(pci_bus=bdf, driver=driver_version)), smi)
    return tuple(views[k] for k in sorted(views))


def physical_gpu(pci_bus: str, known: Collection[str]) -> str:
    """The physical GPU of a partition: function 0 of its PCI device when that is a known GPU too (MI300-class
    partitions take the function bits of their GPU's address), else the address itself."""
    base = pci_bus[:-1] + "0"
    return base if base != pci_bus and base in known else pci_bus


def merge_links(reports: Sequence[SmiReport]) -> tuple[LinkView, ...]:
    """Every linked pair of physical GPUs in both directions, keyed by PCI address; the first report to name a
    pair wins. Partitions share their GPU's links: a CPX MI300X node lists 64 x 63 partition pairs, which say
    nothing the 8 x 7 pairs of the physical GPUs do not, so links are reported between physical GPUs only."""
    links: dict[tuple[str, str], LinkView] = {}
    for report in reports:
        by_index = {g.index: normalize_bdf(g.pci_bus) for g in report.gpus}
        known = {b for b in by_index.values() if b}
        pairs = []
        for link in report.links:
            a = normalize_bdf(link.a_pci_bus) or by_index.get(link.a)
            b = normalize_bdf(link.b_pci_bus) or by_index.get(link.b)
            if a is not None and b is not None:
                pa, pb = physical_gpu(a, known), physical_gpu(b, known)
                if pa != pb:
                    pairs.append(((pa, pb) != (a, b), pa, pb, link))
        # the link between the physical functions themselves first, then what partitions say
        for _, a, b, link in sorted(pairs, key=lambda p: p[0]):
            for x, y in ((a, b), (b, a)):
                links.setdefault((x, y), LinkView(x, y, link.type, link.weight, link.hops))
    return tuple(links[k] for k in sorted(links))


def tool_processes(reports: Sequence[SmiReport]) -> dict[int, tuple[str | None, int | None]]:
    """{pid: (name, VRAM bytes)} from the tools' process lists, in precedence order.

    Each pid is taken from the first tool that lists it (two tools listing one process must not double it);
    its VRAM is summed over the GPUs that tool lists it on (amd-smi and ``rocm-smi --showpids details`` give
    one entry per GPU), None when the tool printed no figure.
    """
    merged: dict[int, tuple[str | None, int | None]] = {}
    for report in reports:
        mine: dict[int, tuple[str | None, int | None]] = {}
        for p in report.processes:
            if p.pid in merged:
                continue
            name, vram = mine.get(p.pid, (None, None))
            if p.vram_used_bytes is not None:
                vram = (vram or 0) + p.vram_used_bytes
            mine[p.pid] = (name or p.name, vram)
        merged.update(mine)
    return merged


# Views of the snapshot store that the collector and the sources which follow others both need.

# Tools in order of precedence when both have data for a GPU.
SMI_SOURCES = ("amd-smi", "rocm-smi")


def smi_reports(view: StoreView) -> list[SmiReport]:
    return [r for name in SMI_SOURCES if isinstance(r := view.fresh_data(name), SmiReport)]


def gpu_inventory(view: StoreView) -> tuple[GpuView, ...] | None:
    """The merged GPUs, or None when no GPU source has fresh data (then no GPU series are exported)."""
    sysfs = view.fresh_data("sysfs")
    reports = smi_reports(view)
    if not isinstance(sysfs, SysfsSnapshot) and not reports:
        return None
    return merge_gpus(sysfs if isinstance(sysfs, SysfsSnapshot) else None, reports)


def known_gpus(view: StoreView) -> list[str]:
    """Every GPU any identity source has seen, fresh or not: kernel-log counters start at zero for each."""
    seen: set[str] = set()
    for entry in view.entries.values():
        if isinstance(entry.data, SysfsSnapshot):
            seen.update(g.pci_bus for g in entry.data.gpus)
        elif isinstance(entry.data, SmiReport):
            seen.update(g.pci_bus for g in entry.data.gpus if g.pci_bus)
    return sorted(seen)
