"""GPU state and process families from the merged inventory. Pure: records in, metric families out."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import Metric

from exporter.inventory import GpuView, LinkView
from exporter.metrics import names
from exporter.metrics.families import label, new_family
from exporter.model.processes import ProcessInfo


def gpu_families(gpus: Sequence[GpuView], links: Sequence[LinkView]) -> Iterator[Metric]:
    info = new_family(names.GPU_INFO)
    vram_total = new_family(names.GPU_VRAM_TOTAL)
    vram_used = new_family(names.GPU_VRAM_USED)
    busy = new_family(names.GPU_BUSY)
    numa = new_family(names.GPU_NUMA)
    temperature = new_family(names.GPU_TEMPERATURE)
    power = new_family(names.GPU_POWER)
    pcie_speed = new_family(names.GPU_PCIE_SPEED)
    pcie_width = new_family(names.GPU_PCIE_WIDTH)
    ras_ce = new_family(names.GPU_RAS_CORRECTABLE)
    ras_ue = new_family(names.GPU_RAS_UNCORRECTABLE)
    ras_de = new_family(names.GPU_RAS_DEFERRED)
    for gpu in gpus:
        bus = [gpu.pci_bus]
        info.add_metric(
            [
                gpu.pci_bus,
                label(gpu.card),
                label(gpu.render_node),
                label(gpu.kfd_node),
                label(gpu.gpu_id),
                label(gpu.unique_id),
                label(gpu.model),
                label(gpu.device_id),
                label(gpu.vbios),
                label(gpu.driver),
            ],
            1,
        )
        for family, value in (
            (vram_total, gpu.vram_total_bytes),
            (vram_used, gpu.vram_used_bytes),
            (busy, gpu.busy_ratio),
            (numa, gpu.numa_node),
            (power, gpu.power_watts),
            (pcie_speed, gpu.pcie_link_speed_gts),
            (pcie_width, gpu.pcie_link_width),
        ):
            if value is not None:
                family.add_metric(bus, value)
        for sensor, celsius in gpu.temperatures_celsius:
            temperature.add_metric([gpu.pci_bus, sensor], celsius)
        for ras in gpu.ras:
            for family, errors in ((ras_ce, ras.correctable), (ras_ue, ras.uncorrectable), (ras_de, ras.deferred)):
                if errors is not None:
                    family.add_metric([gpu.pci_bus, ras.block], errors)
    yield from (info, vram_total, vram_used, busy, numa, temperature, power, pcie_speed, pcie_width)
    yield from (ras_ce, ras_ue, ras_de)

    link_info = new_family(names.GPU_LINK_INFO)
    weight = new_family(names.GPU_LINK_WEIGHT)
    hops = new_family(names.GPU_LINK_HOPS)
    for link in links:
        pair = [link.pci_bus, link.peer_pci_bus]
        link_info.add_metric([*pair, label(link.link_type)], 1)
        if link.weight is not None:
            weight.add_metric(pair, link.weight)
        if link.hops is not None:
            hops.add_metric(pair, link.hops)
    yield from (link_info, weight, hops)

    present = new_family(names.GPUS)
    present.add_metric([], len(gpus))
    yield present


def process_families(processes: Iterable[ProcessInfo], top_n: int) -> Iterator[Metric]:
    """``rocm_processes`` counts every process; the VRAM series only the ``top_n`` largest."""
    every = list(processes)
    total = new_family(names.PROCESSES)
    total.add_metric([], len(every))
    yield total
    vram = new_family(names.PROCESS_VRAM)
    info = new_family(names.PROCESS_INFO)
    with_vram = [p for p in every if p.vram_used_bytes is not None]
    with_vram.sort(key=lambda p: (-(p.vram_used_bytes or 0), p.pid))
    for p in with_vram[:top_n]:
        vram.add_metric([str(p.pid), label(p.name)], p.vram_used_bytes or 0)
        # Enrichment in an info series of its own, so the VRAM series keep the contract's two labels.
        info.add_metric([str(p.pid), label(p.name), label(p.user), label(p.container_id), label(p.pod_uid)], 1)
    yield vram
    yield info
