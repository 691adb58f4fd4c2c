"""Topology links are reported between physical GPUs: partitions share their GPU's links (issue 9's series
diet: a CPX MI300X node listed 64 x 63 partition pairs per family)."""

from __future__ import annotations

from itertools import combinations

from exporter.inventory import merge_links, physical_gpu
from exporter.model.smi import SmiGpu, SmiLink, SmiReport

BUSES = ("0c", "22", "38", "5c")


def cpx_report() -> SmiReport:
    """4 GPUs in CPX mode, 8 partitions each (function bits 0-7), every pair linked as the tools list them."""
    gpus = tuple(SmiGpu(index=i * 8 + p, pci_bus=f"0000:{bus}:00.{p}") for i, bus in enumerate(BUSES) for p in range(8))
    links = tuple(
        SmiLink(a.index, b.index, weight=15 if a.index // 8 != b.index // 8 else 0, hops=1, type="XGMI")
        for a, b in combinations(gpus, 2)
    )
    return SmiReport(tool="amd-smi", format="json", gpus=gpus, links=links)


def test_partitions_share_their_gpus_links() -> None:
    links = merge_links([cpx_report()])
    physical = {f"0000:{bus}:00.0" for bus in BUSES}
    assert {(x.pci_bus, x.peer_pci_bus) for x in links} == {(a, b) for a in physical for b in physical if a != b}
    assert all(x.weight == 15 and x.link_type == "XGMI" for x in links)


def test_unpartitioned_gpus_keep_every_link() -> None:
    gpus = tuple(SmiGpu(index=i, pci_bus=f"0000:{bus}:00.0") for i, bus in enumerate(BUSES))
    links = tuple(SmiLink(a, b, weight=a + b, type="XGMI") for a, b in combinations(range(4), 2))
    merged = merge_links([SmiReport(tool="rocm-smi", format="json", gpus=gpus, links=links)])
    assert len(merged) == 12


def test_a_function_whose_function_0_is_no_gpu_is_its_own_gpu() -> None:
    assert physical_gpu("0000:0c:00.1", {"0000:0c:00.1"}) == "0000:0c:00.1"
    assert physical_gpu("0000:0c:00.1", {"0000:0c:00.0", "0000:0c:00.1"}) == "0000:0c:00.0"
