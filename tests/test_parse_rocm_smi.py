"""rocm-smi parser: every shared capture, the synthetic variants of smi-formats.md section 5, and fuzzing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import FIXTURES

from exporter.model import ParseError
from exporter.model.smi import SmiLink, SmiProcess, SmiReport
from exporter.parsers.rocm_smi import completeness, parse_rocm_smi, supports_json

SHARED = FIXTURES / "smi"
DATA = Path(__file__).resolve().parent / "data" / "rocm-smi"


def _captures(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*") if p.is_file() and p.suffix != ".md")


SHARED_CAPTURES = _captures(SHARED / "rocm-smi")
AMD_SMI_CAPTURES = _captures(SHARED / "amd-smi")
SYNTHETIC = sorted(p for p in DATA.glob("*") if p.suffix in (".txt", ".csv", ".json"))
ALL_CAPTURES = SHARED_CAPTURES + SYNTHETIC

BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _parse(path: Path) -> SmiReport:
    return parse_rocm_smi(path.read_text(encoding="utf-8"))


def _synthetic(name: str) -> SmiReport:
    return _parse(DATA / name)


def test_captures_are_found() -> None:
    # The glob below must not silently shrink to nothing (a moved folder would make every test pass).
    assert len(SHARED_CAPTURES) >= 8
    assert len(AMD_SMI_CAPTURES) >= 1
    assert len(SYNTHETIC) >= 8


# --------------------------------------------------------------------------------------------------------
# Contract invariants, for every capture (new captures dropped in the folders are picked up by the glob)


def check_contract(report: SmiReport) -> None:
    assert report.tool == "rocm-smi"
    assert report.format in ("json", "text", "csv")
    indices = [g.index for g in report.gpus]
    assert indices == sorted(set(indices))
    for g in report.gpus:
        assert g.index >= 0
        assert g.pci_bus is None or BDF.match(g.pci_bus), g.pci_bus
        for size in (g.vram_total_bytes, g.vram_used_bytes):
            assert size is None or (isinstance(size, int) and size >= 0)
        assert g.numa_node is None or g.numa_node >= -1
        assert g.numa_affinity is None or g.numa_affinity >= -1
        assert g.unique_id is None or re.match(r"^0x[0-9a-f]+$", g.unique_id)
        assert g.device_id is None or re.match(r"^0x[0-9a-f]+$", g.device_id)
        assert g.model is None or (g.model.strip() == g.model != "" and not re.fullmatch(r"0x[0-9a-f]+", g.model))
    pairs = [(link.a, link.b) for link in report.links]
    assert pairs == sorted(set(pairs))
    for link in report.links:
        assert 0 <= link.a < link.b
        assert link.type is None or link.type in ("PCIE", "XGMI")
        assert link.weight is None or link.weight >= 0
        assert link.hops is None or link.hops >= 0
    for p in report.processes:
        assert p.pid > 0
        assert p.gpu is None  # rocm-smi never says which GPU
        assert p.name is None or p.name.strip() == p.name != ""
        for value in (p.gpu_count, p.vram_used_bytes, p.sdma_used, p.cu_occupancy):
            assert value is None or value >= 0
    assert all(isinstance(w, str) and w and "\n" not in w for w in report.warnings)
    out = report.to_json()
    assert json.loads(json.dumps(out)) == out
    assert set(out) == {"tool", "format", "gpus", "processes", "links", "warnings"}


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_every_capture_meets_the_contract(path: Path) -> None:
    report = _parse(path)
    check_contract(report)
    assert report.gpus, "every capture names at least one GPU"


def _raw_json(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    # raw_decode: a pasted capture may go on after the object (a closing code fence).
    data, _ = json.JSONDecoder().raw_decode(text, text.index("{"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("path", [p for p in ALL_CAPTURES if "{" in p.read_text()], ids=lambda p: p.name)
def test_json_values_match_the_raw_keys(path: Path) -> None:
    """For any JSON capture, each GPU field is the value of its rocm-smi key (N/A -> None)."""
    raw = _raw_json(path)
    report = _parse(path)
    assert report.format == "json"
    cards = {int(k[4:]): v for k, v in raw.items() if re.fullmatch(r"card\d+", k)}
    assert [g.index for g in report.gpus] == sorted(cards)

    def number(value: str | None) -> int | None:
        return None if value in (None, "N/A") else int(value)

    for g in report.gpus:
        # keys as any release printed them: older rocm-smi wrote "vram Total Memory (B)" (microsoft/pai's capture)
        lower = {k.lower(): v for k, v in cards[g.index].items()}
        keys = ["PCI Bus", "VRAM Total Memory (B)", "VRAM Total Used Memory (B)"]
        keys += ["(Topology) Numa Node", "(Topology) Numa Affinity"]
        card = {k: lower[k.lower()] for k in keys if k.lower() in lower}
        assert g.pci_bus == card["PCI Bus"].lower()
        assert g.vram_total_bytes == number(card.get("VRAM Total Memory (B)"))
        assert g.vram_used_bytes == number(card.get("VRAM Total Used Memory (B)"))
        assert g.numa_node == number(card.get("(Topology) Numa Node"))
        affinity = number(card.get("(Topology) Numa Affinity"))
        assert g.numa_affinity == (-1 if affinity == 4294967295 else affinity)
    system = raw.get("system", {})
    pids = sorted(int(k[3:]) for k in system if re.fullmatch(r"PID\d+", k))  # not "PIDs for KFD processes"
    assert sorted(p.pid for p in report.processes) == pids
    weights = {k for k in system if k.startswith("(Topology) Weight between")}
    assert len(report.links) == len(weights)


# --------------------------------------------------------------------------------------------------------
# Exact values of the shared captures


MI100_571_BUSES = ["0000:1e:00.0", "0000:22:00.0", "0000:3f:00.0", "0000:43:00.0", "0000:46:00.0", "0000:49:00.0"]
MI100_602_UIDS = ["0x79ccd55167a2124a", "0x4edfb117a17a07d", "0xd4a9ec48d03d261d", "0x1b9dd972253c3736"]

SHARED_EXPECTED: dict[str, dict[str, Any]] = {
    "telegraf-mi100_rocm571.json": {
        "bdf": MI100_571_BUSES,
        "vram": [(34342961152, 6782976)] * 6,
        "numa": [(0, 0)] * 6,
        "unique_id": [None] * 6,
        "model": "Arcturus GL-XL [Instinct MI100]",
        "device_id": "0x738c",
        "vbios": "113-D3430400-037",
        "driver": "6.2.4",
        "processes": [SmiProcess(104225, "mlir-cpu-runner", None, 0, 0, 0, 0)],
        "links": 15,
        "sample_links": [SmiLink(0, 1, 40, 2, "PCIE", "0000:1e:00.0", "0000:22:00.0"), SmiLink(4, 5, 40, 2, "PCIE")],
    },
    "telegraf-mi100_rocm602.json": {
        "bdf": ["0000:83:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:e3:00.0"],
        "vram": [(34342961152, 6750208)] * 4,
        "numa": [(1, 1)] * 4,
        "unique_id": MI100_602_UIDS,
        "model": "Arcturus GL-XL [Instinct MI100]",
        "device_id": "0x738c",  # "Device ID" since ROCm 6.0
        "vbios": "113-D3431401-101",
        "driver": "6.3.6",
        "processes": [],
        "links": 6,
        "sample_links": [SmiLink(2, 3, 40, 2, "PCIE", "0000:c3:00.0", "0000:e3:00.0")],
    },
    "telegraf-rx6700xt_rocm430.json": {
        "bdf": ["0000:07:00.0"],
        "vram": [(12868124672, 1622728704)],
        "numa": [(0, -1)],  # 4294967295 normalised
        "unique_id": [None],
        "model": None,  # "Card series": "0x1002" is the ROCm 4.3 bug, not a name
        "device_id": "0x73df",
        "vbios": "113-67XA6SSB1-D01",
        "driver": "6.3.6",
        "processes": [],
        "links": 0,
        "sample_links": [],
    },
    "telegraf-rx6700xt_rocm571.json": {
        "bdf": ["0000:07:00.0"],
        "vram": [(12868124672, 1564491776)],
        "numa": [(0, -1)],
        "unique_id": [None],
        "model": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",
        "device_id": "0x73df",
        "vbios": "113-67XA6SSB1-D01",
        "driver": "6.3.6",
        "processes": [],
        "links": 0,
        "sample_links": [],
    },
    "telegraf-rx6700xt_rocm602.json": {
        "bdf": ["0000:07:00.0"],
        "vram": [(12868124672, 1572757504)],
        "numa": [(0, -1)],
        "unique_id": [None],
        "model": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",
        "device_id": "0x73df",
        "vbios": "113-67XA6SSB1-D01",
        "driver": "6.3.6",
        "processes": [],
        "links": 0,
        "sample_links": [],
    },
    "telegraf-rx6700xt_rocm612.json": {
        "bdf": ["0000:07:00.0"],
        "vram": [(12868124672, 1572745216)],
        "numa": [(0, -1)],
        "unique_id": [None],
        "model": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",  # "Card Series" (capitalised in 6.1)
        "device_id": "0x73df",
        "vbios": "113-67XA6SSB1-D01",
        "driver": "6.3.6",
        "processes": [],
        "links": 0,
        "sample_links": [],
    },
    "telegraf-vega-10-XT.json": {
        "bdf": ["0000:04:00.0"],
        "vram": [(17163091968, 17776640)],
        "numa": [(0, 0)],
        "unique_id": ["0x2150e7d042a1124"],
        "model": None,  # no "Card series" key in this capture
        "device_id": "0x6861",
        "vbios": "113-D0510100-106",
        "driver": "5.9.25",
        "processes": [],
        "links": 0,
        "sample_links": [],
    },
    "telegraf-vega-20-WKS-GL-XE.json": {
        "bdf": ["0000:63:00.0"],
        "vram": [(34342961152, 10850304)],
        "numa": [(0, 0)],
        "unique_id": ["0x2f048617326b1ea"],
        "model": "Radeon Instinct MI50 32GB",
        "device_id": "0x66a1",
        "vbios": "113-D1631700-111",
        "driver": "5.9.17",
        "processes": [],
        # 28 pairs of 8 DRM devices although only card0 was kept (PROVENANCE: trimmed)
        "links": 28,
        "sample_links": [
            SmiLink(0, 1, 40, 2, "PCIE", "0000:63:00.0", None),
            SmiLink(0, 4, 72, 3, "PCIE", "0000:63:00.0", None),
            SmiLink(3, 7, 72, 3, "PCIE"),
            SmiLink(6, 7, 40, 2, "PCIE"),
        ],
    },
}


def test_every_shared_capture_has_expectations() -> None:
    assert sorted(p.name for p in SHARED_CAPTURES) == sorted(SHARED_EXPECTED)


@pytest.mark.parametrize("name", sorted(SHARED_EXPECTED))
def test_shared_capture_values(name: str) -> None:
    expected = SHARED_EXPECTED[name]
    report = _parse(SHARED / "rocm-smi" / name)
    assert report.format == "json"
    assert report.warnings == ()
    assert [g.index for g in report.gpus] == list(range(len(expected["bdf"])))
    assert [g.pci_bus for g in report.gpus] == expected["bdf"]
    assert [(g.vram_total_bytes, g.vram_used_bytes) for g in report.gpus] == expected["vram"]
    assert [(g.numa_node, g.numa_affinity) for g in report.gpus] == expected["numa"]
    assert [g.unique_id for g in report.gpus] == expected["unique_id"]
    for g in report.gpus:
        assert (g.model, g.device_id, g.vbios, g.driver) == (
            expected["model"],
            expected["device_id"],
            expected["vbios"],
            expected["driver"],
        )
    assert list(report.processes) == expected["processes"]
    assert len(report.links) == expected["links"]
    by_pair = {(link.a, link.b): link for link in report.links}
    for sample in expected["sample_links"]:
        got = by_pair[(sample.a, sample.b)]
        assert (got.weight, got.hops, got.type) == (sample.weight, sample.hops, sample.type)
        if sample.a_pci_bus or sample.b_pci_bus:
            assert (got.a_pci_bus, got.b_pci_bus) == (sample.a_pci_bus, sample.b_pci_bus)
    assert completeness(report) == []


def test_leading_blank_line_before_json() -> None:
    # telegraf mi100_rocm571 and rx6700xt_rocm612 start with an empty line before the "{".
    text = (SHARED / "rocm-smi" / "telegraf-rx6700xt_rocm612.json").read_text()
    assert text.startswith("\n")
    assert parse_rocm_smi(text).gpus[0].pci_bus == "0000:07:00.0"


def test_pretty_and_one_line_json_give_the_same_report() -> None:
    for path in SHARED_CAPTURES:
        one_line = json.dumps(_raw_json(path))
        assert "\n" not in one_line
        assert parse_rocm_smi(one_line) == _parse(path)


# --------------------------------------------------------------------------------------------------------
# Synthetic variants (smi-formats.md section 5; see tests/data/rocm-smi/PROVENANCE.md)


def test_text_mi300x_tabs_w90() -> None:
    report = _synthetic("text_mi300x-8gpu-xgmi_tabs_w90.txt")
    assert report.format == "text"
    assert report.warnings == ()
    assert [g.index for g in report.gpus] == list(range(8))
    assert [g.pci_bus for g in report.gpus] == [
        "0000:0c:00.0",
        "0000:22:00.0",
        "0000:38:00.0",
        "0000:5c:00.0",
        "0000:9f:00.0",
        "0000:af:00.0",
        "0000:bf:00.0",
        "0000:df:00.0",
    ]
    assert [g.vram_used_bytes for g in report.gpus] == [293601280 + i for i in range(8)]
    assert {g.vram_total_bytes for g in report.gpus} == {206141652992}
    assert [g.numa_node for g in report.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.numa_affinity for g in report.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert report.gpus[3].unique_id == "0x18a0b1c2d3e4f503"
    assert {g.model for g in report.gpus} == {"AMD Instinct MI300X"}  # "\t\t" before the value is stripped
    assert {g.device_id for g in report.gpus} == {None}  # "Card Model" is not the device id
    assert list(report.processes) == [
        SmiProcess(3127, "python3", None, 8, 8589934592, 0, 0),
        SmiProcess(4410, "rccl-tests", None, 2, 0, 0, 0),
    ]
    assert len(report.links) == 28
    assert {(link.weight, link.hops, link.type) for link in report.links} == {(15, 1, "XGMI")}
    assert report.links[-1] == SmiLink(6, 7, 15, 1, "XGMI", "0000:bf:00.0", "0000:df:00.0")
    assert completeness(report) == []


def test_text_mi250_spaces_details_w80() -> None:
    report = _synthetic("text_mi250-8gcd_spaces_w80_details.txt")
    assert "\t" not in (DATA / "text_mi250-8gcd_spaces_w80_details.txt").read_text()
    assert report.warnings == ()
    assert [g.pci_bus for g in report.gpus] == [f"0000:{0x29 + 0x10 * i:02x}:00.0" for i in range(8)]
    assert {g.model for g in report.gpus} == {"Aldebaran/MI200 [Instinct MI250X/MI250]"}  # "Card series"
    assert [g.numa_node for g in report.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.numa_affinity for g in report.gpus} == {-1}
    # details mode: one row per (PID, GPU); the GPU column is a count (rocm-systems#4405)
    assert list(report.processes) == [
        SmiProcess(20001, "pt_main_thread", None, 2, 17179869184, 1024, 55),
        SmiProcess(20001, "pt_main_thread", None, 2, 4294967296, 0, None),
        SmiProcess(20077, "hipMemcpy", None, 1, 1048576, 0, 0),
    ]
    weights = {(link.a, link.b): link.weight for link in report.links}
    assert len(weights) == 28
    assert (weights[(0, 1)], weights[(0, 2)], weights[(0, 7)], weights[(4, 5)], weights[(2, 5)]) == (15, 30, 45, 15, 30)
    assert {link.hops for link in report.links} == {1}
    assert completeness(report) == []


def test_text_dual_socket_na_xxxx_w84() -> None:
    report = _synthetic("text_dual-socket-4gpu_na-xxxx_w84.txt")
    assert [g.pci_bus for g in report.gpus] == ["0000:23:00.0", "0000:26:00.0", "0000:a3:00.0", "0000:a6:00.0"]
    assert [g.unique_id for g in report.gpus] == ["0x2f048617326b1ea", None, "0x4edfb117a17a07d", "0x1b9dd972253c3736"]
    # GPU 3's used VRAM was printed as the key alone (failed read): None, not 0
    assert [g.vram_used_bytes for g in report.gpus] == [6750208, 6750208, 6750208, None]
    assert [(g.numa_node, g.numa_affinity) for g in report.gpus] == [(0, -1), (0, -1), (1, -1), (1, -1)]
    assert list(report.processes) == [
        SmiProcess(5150, "ollama_llama_se", None, 1, None, None, None),
        SmiProcess(5188, None, None, None, 0, 0, 0),
    ]
    links = {(link.a, link.b): (link.weight, link.hops, link.type) for link in report.links}
    assert links == {
        (0, 1): (40, 2, "PCIE"),
        (0, 2): (72, 3, "PCIE"),
        (0, 3): (72, 3, "PCIE"),
        (1, 2): (72, 3, "PCIE"),
        (1, 3): (72, 3, "PCIE"),
        (2, 3): (None, None, None),  # N/A, N/A, XXXX
    }
    assert report.warnings == (
        "get_compute_process_info_by_pid, Not supported on the given system",
        "get_compute_process_info_by_pid, Not supported on the given system",
        "ERROR: GPU[2]\t: Cannot read Link Weight: Not supported on this machine",
        "ERROR: GPU[3]\t: Cannot read Link Weight: Not supported on this machine",
    )
    assert completeness(report) == ["GPU 3: no VRAM used", "topology missing for 1 of 6 GPU pairs"]


def test_text_rocm33_banner_without_spaces() -> None:
    text = (DATA / "text_rocm33-2gpu_nospace-banner.txt").read_text()
    assert "=ROCm System Management Interface=" in text
    report = parse_rocm_smi(text)
    assert report.warnings == ()
    assert report.processes == ()  # "No KFD PIDs currently running"
    assert [(g.pci_bus, g.device_id, g.numa_affinity) for g in report.gpus] == [
        ("0000:03:00.0", "0x687f", -1),
        ("0000:43:00.0", "0x687f", -1),
    ]
    assert report.gpus[1].model == "Vega 10 XL/XT [Radeon RX Vega 56/64]"
    assert report.links == (SmiLink(0, 1, 40, 2, "PCIE", "0000:03:00.0", "0000:43:00.0"),)


def test_text_vllm_indented_single_gpu_topology() -> None:
    report = _synthetic("text_vllm-collect-env_1gpu-topo.txt")
    assert report.warnings == ()
    assert report.links == ()  # one GPU: only the diagonal
    assert [(g.index, g.numa_node, g.numa_affinity, g.pci_bus) for g in report.gpus] == [(0, 0, -1, None)]
    assert completeness(report) == ["GPU 0: no PCI bus", "GPU 0: no VRAM total", "GPU 0: no VRAM used"]
    assert completeness(report, expect_topology=False) == completeness(report)


def test_text_xcp_partition_lines() -> None:
    report = _synthetic("text_mi300x-cpx_xcp-lines.txt")
    assert report.warnings == ()
    assert [(g.index, g.pci_bus, g.vram_total_bytes, g.vram_used_bytes) for g in report.gpus] == [
        (0, "0000:0c:00.0", 25769803776, 0),
        (1, "0000:0c:00.1", 25769803776, 0),
    ]
    assert completeness(report, expect_topology=False) == []
    assert "topology missing for 1 of 1 GPU pairs" in completeness(report)


def test_json_one_line_after_warning() -> None:
    report = _synthetic("json_oneline_mi300x-2gpu_warning.txt")
    assert report.format == "json"
    assert report.warnings == (
        "WARNING: AMD GPUs visible, but data is inaccessible. Check power control/runtime_status",
    )
    assert [(g.pci_bus, g.vram_used_bytes, g.unique_id) for g in report.gpus] == [
        ("0000:0c:00.0", 293601280, "0x18a0b1c2d3e4f500"),
        ("0000:22:00.0", 293601281, "0x18a0b1c2d3e4f501"),
    ]
    assert list(report.processes) == [
        SmiProcess(3127, "python3", None, 2, 8589934592, 0, 0),
        SmiProcess(4410, "rccl-tests", None, 1, None, None, None),  # lower-cased "unknown"
    ]
    assert report.links == (SmiLink(0, 1, 15, 1, "XGMI", "0000:0c:00.0", "0000:22:00.0"),)


def test_csv() -> None:
    report = _synthetic("csv_mi100-2gpu.csv")
    assert report.format == "csv"
    assert report.warnings == ()
    assert [(g.index, g.pci_bus, g.vram_total_bytes, g.vram_used_bytes) for g in report.gpus] == [
        (0, "0000:83:00.0", 34342961152, 6750208),
        (1, "0000:a3:00.0", 34342961152, None),
    ]
    assert [(g.unique_id, g.numa_node, g.numa_affinity) for g in report.gpus] == [
        ("0x79ccd55167a2124a", 1, 1),
        (None, 1, -1),
    ]
    assert {g.model for g in report.gpus} == {"Arcturus GL-XL [Instinct MI100]"}
    assert completeness(report) == ["GPU 1: no VRAM used"]  # no topology expected from CSV


def test_csv_system_block_and_name_value_form() -> None:
    text = (
        "device,Driver version,PID42,(Topology) Weight between DRM devices 0 and 1\n"
        "cardsystem,6.8.5,python3 1 2048 0 0,15\n"
        "\n"
        "device,PCI Bus,VRAM Total Memory (B),VRAM Total Used Memory (B)\n"
        "card0,0000:0C:00.0,100,10\n"
        "card1,0000:22:00.0,100,N/A\n"
    )
    report = parse_rocm_smi(text)
    assert report.warnings == ()
    assert [(g.index, g.pci_bus, g.vram_used_bytes, g.driver) for g in report.gpus] == [
        (0, "0000:0c:00.0", 10, "6.8.5"),
        (1, "0000:22:00.0", None, "6.8.5"),
    ]
    assert report.processes == (SmiProcess(42, "python3", None, 1, 2048, 0, 0),)
    assert report.links == (SmiLink(0, 1, 15, None, None, "0000:0c:00.0", "0000:22:00.0"),)
    name_value = 'name, value\n"Driver version", "6.8.5"\n"PID7", "rocminfo, 1, 0, 0, 0"\n'
    nv = parse_rocm_smi(name_value)
    assert nv.processes == (SmiProcess(7, "rocminfo", None, 1, 0, 0, 0),)
    assert nv.gpus == ()


def test_csv_row_of_the_wrong_width_is_a_warning() -> None:
    report = parse_rocm_smi("device,PCI Bus,VRAM Total Memory (B)\ncard0,0000:03:00.0,100\ncard1,0000:04:00.0\n")
    assert [g.index for g in report.gpus] == [0]
    assert report.warnings == ("CSV row with 2 cells under a 3-column header: card1,0000:04:00.0",)


# --------------------------------------------------------------------------------------------------------
# Smaller text variants written inline (each checks one rule)

BANNER = "=" * 20 + " ROCm System Management Interface " + "=" * 20
FOOTER = "=" * 24 + " End of ROCm SMI Log " + "=" * 25


def _text(*body: str) -> str:
    return "\n".join(["", "", BANNER, *body, FOOTER]) + "\n"


@pytest.mark.parametrize("width", [80, 84, 90, 120])
@pytest.mark.parametrize("spaced", [True, False])
def test_banners_of_any_width(width: int, spaced: bool) -> None:
    def spacer(title: str) -> str:
        text = f" {title} " if spaced else title
        half = (width - len(text)) // 2
        return "=" * half + text + "=" * (width - half - len(text))

    text = "\n".join(
        [
            spacer("ROCm System Management Interface"),
            spacer("PCI Bus ID"),
            "GPU[0]\t\t: PCI Bus: 0000:03:00.0",
            "=" * width,
            spacer("End of ROCm SMI Log"),
        ]
    )
    report = parse_rocm_smi(text)
    assert [(g.index, g.pci_bus) for g in report.gpus] == [(0, "0000:03:00.0")]
    assert report.warnings == ()


@pytest.mark.parametrize("sep", ["\t\t: ", "          : ", " \t\t: ", ": ", "\t: "])
def test_gpu_line_separators(sep: str) -> None:
    report = parse_rocm_smi(_text(f"GPU[3]{sep}VRAM Total Memory (B): 4278190080"))
    assert [(g.index, g.vram_total_bytes) for g in report.gpus] == [(3, 4278190080)]


def test_key_renames_and_model_choice() -> None:
    report = parse_rocm_smi(
        _text(
            "GPU[0]\t\t: GPU ID: 0x66AF",
            "GPU[0]\t\t: Card series: \t\tVega 20",
            "GPU[1]\t\t: Device ID: 0x740F",
            "GPU[1]\t\t: Card Series: \t\tN/A",
            "GPU[1]\t\t: Device Name: \t\tAMD Instinct MI210",
            "GPU[2]\t\t: Card series: 0x1002",
            "GPU[2]\t\t: Card SKU: 67XA6S",
        )
    )
    assert [(g.device_id, g.model) for g in report.gpus] == [
        ("0x66af", "Vega 20"),
        ("0x740f", "AMD Instinct MI210"),
        (None, None),  # a hex "series" is not a name, and the SKU is not a model
    ]


def test_na_unknown_and_missing_are_none_never_zero() -> None:
    report = parse_rocm_smi(
        _text(
            "GPU[0]\t\t: PCI Bus: N/A",
            "GPU[0]\t\t: VRAM Total Memory (B): None",
            "GPU[0]\t\t: VRAM Total Used Memory (B)",
            "GPU[0]\t\t: Unique ID: N/A",
            "GPU[0]\t\t: (Topology) Numa Node: N/A",
        )
    )
    gpu = report.gpus[0]
    assert (gpu.pci_bus, gpu.vram_total_bytes, gpu.vram_used_bytes, gpu.unique_id, gpu.numa_node) == (None,) * 5
    assert report.warnings == ()


def test_garbage_values_are_warnings_not_zero() -> None:
    report = parse_rocm_smi(
        _text(
            "GPU[0]\t\t: PCI Bus: 03:00",
            "GPU[0]\t\t: VRAM Total Memory (B): lots",
            "GPU[0]\t\t: VRAM Total Used Memory (B): -5",
            "GPU[0]\t\t: Unique ID: zz",
        )
    )
    gpu = report.gpus[0]
    assert (gpu.pci_bus, gpu.vram_total_bytes, gpu.vram_used_bytes, gpu.unique_id) == (None,) * 4
    assert len(report.warnings) == 4
    assert any("'lots'" in w for w in report.warnings)
    assert any("03:00" in w for w in report.warnings)


def test_short_bdf_and_lower_case_are_normalised() -> None:
    report = parse_rocm_smi(_text("GPU[0]\t\t: PCI Bus: 1E:00.0", "GPU[1]\t\t: PCI Bus: 0000:c1:00.0"))
    assert [g.pci_bus for g in report.gpus] == ["0000:1e:00.0", "0000:c1:00.0"]


def test_warning_and_unplaced_lines_go_to_warnings() -> None:
    report = parse_rocm_smi(
        "WARNING: User is missing the following required groups: render, video.\n"
        + _text(
            "ERROR: GPU[0] \t\t: Unable to get GPU memory use.",
            "GPU[0]\t\t: PCI Bus: 0000:03:00.0",
            "this line means nothing",
            "GPU[0]\t\t: Not supported on the given system",
            "GPU[0]\t\t: Max Graphics Package Power (W): 300.0",
        )
    )
    assert report.warnings == (
        "WARNING: User is missing the following required groups: render, video.",
        "ERROR: GPU[0] \t\t: Unable to get GPU memory use.",
        "this line means nothing",
        "GPU[0]\t\t: Not supported on the given system",
    )
    assert [g.pci_bus for g in report.gpus] == ["0000:03:00.0"]


def test_conflicting_values_keep_the_first_and_warn() -> None:
    report = parse_rocm_smi(_text("GPU[0]\t\t: PCI Bus: 0000:03:00.0", "GPU[0]\t\t: PCI Bus: 0000:04:00.0"))
    assert report.gpus[0].pci_bus == "0000:03:00.0"
    assert len(report.warnings) == 1 and "0000:04:00.0" in report.warnings[0]


def test_no_kfd_pids() -> None:
    report = parse_rocm_smi(
        _text(
            "=" * 33 + " KFD Processes " + "=" * 32,
            "No KFD PIDs currently running",
            "=" * 80,
            "GPU[0]\t\t: PCI Bus: 0000:03:00.0",
        )
    )
    assert report.processes == ()
    assert report.warnings == ()


def test_kfd_table_collapsed_spaces_and_name_with_space() -> None:
    report = parse_rocm_smi(
        _text(
            "=" * 33 + " KFD Processes " + "=" * 32,
            "KFD process information:",
            "PID PROCESS NAME GPU(s) VRAM USED SDMA USED CU OCCUPANCY",
            "77 my worker 1 4096 0 12",
            "78 1 2 3 4",
            "x y",
        )
    )
    assert list(report.processes) == [
        SmiProcess(77, "my worker", None, 1, 4096, 0, 12),
        SmiProcess(78, None, None, 1, 2, 3, 4),
    ]
    assert report.warnings == ("KFD process row does not match its header: x y",)


def test_kfd_row_with_unreadable_pid_is_a_warning() -> None:
    report = parse_rocm_smi(
        _text(
            "=" * 33 + " KFD Processes " + "=" * 32,
            "KFD process information:",
            "PID\tPROCESS NAME\tGPU(s)\tVRAM USED\tSDMA USED\tCU OCCUPANCY\t",
            "abc\tpython3\t1\t0\t0\t0\t",
        )
    )
    assert report.processes == ()
    assert report.warnings == ("KFD process with unreadable PID 'abc' skipped",)


def test_topology_matrix_rows_that_do_not_match_are_warnings() -> None:
    report = parse_rocm_smi(
        _text(
            "=" * 28 + " Weight between two GPUs " + "=" * 27,
            "       GPU0         GPU1         ",
            "GPU0   0            40           ",
            "GPU1   40",
            "",
            "=" * 28 + " Link Type between two GPUs " + "=" * 24,
            "       GPU0         GPU1",
            "GPU0   0            PCIE",
            "GPU1   XGMI         0",
            "",
            "=" * 28 + " Hops between two GPUs " + "=" * 29,
            "       GPU0         GPU1         GPU2",
            "GPU0   0            1            1",
            "GPU1   1            0            1",
            "GPU2   1            1            0",
            "=" * 28 + " Link Type between two GPUs " + "=" * 24,
            "       GPU0         GPU1         GPU2",
            "GPU0   0            PCIE         PCIF",
            "GPU1   PCIE         0            XXXX",
            "GPU2   PCIF         XXXX         0",
        )
    )
    # the weight comes from the upper triangle; for the type the upper cell wins over a disagreeing lower one
    assert report.links == (SmiLink(0, 1, 40, 1, "PCIE"), SmiLink(0, 2, None, 1, None), SmiLink(1, 2, None, 1, None))
    assert report.warnings == (
        "topology row does not match its header: GPU1   40",
        "topology link type GPU0-GPU2: cannot read 'PCIF'",
        "topology link type GPU0-GPU2: cannot read 'PCIF'",
    )


def test_lower_triangle_is_used_when_the_upper_cell_is_unreadable() -> None:
    report = parse_rocm_smi(
        _text(
            "=" * 28 + " Hops between two GPUs " + "=" * 29,
            "       GPU2         GPU5",
            "GPU2   0            N/A",
            "GPU5   3            0",
        )
    )
    assert report.links == (SmiLink(2, 5, None, 3, None),)


def test_numa_text_lines() -> None:
    report = parse_rocm_smi(
        _text(
            "=" * 35 + " Numa Nodes " + "=" * 35,
            "GPU[0]\t\t: (Topology) Numa Node: 0",
            "GPU[0]\t\t: (Topology) Numa Affinity: 4294967295",
            "GPU[1]\t\t: (Topology) Numa Node: 1",
            "GPU[1]\t\t: (Topology) Numa Affinity: -1",
            "GPU[2]\t\t: (Topology) Numa Node: 3",
            "GPU[2]\t\t: (Topology) Numa Affinity: 3",
        )
    )
    assert [(g.numa_node, g.numa_affinity) for g in report.gpus] == [(0, -1), (1, -1), (3, 3)]


def test_concise_table_gives_indices_and_bus() -> None:
    text = "\n".join(
        [
            "========================ROCm System Management Interface========================",
            "================================= Concise Info =================================",
            "GPU  Temp   AvgPwr  SCLK    MCLK    Fan     Perf  PwrCap  VRAM%  GPU%",
            "0    29.0c  N/A     852Mhz  167Mhz  14.9%   auto  N/A     N/A    0%",
            "1    31.0c  N/A     852Mhz  167Mhz  14.9%   auto  N/A     N/A    0%",
            "================================================================================",
            "============================ Concise Hardware Info =============================",
            "GPU  NODE  DID     GUID   GFX VER  GFX RAS  SDMA RAS  UMC RAS  VBIOS  BUS           PARTITION ID",
            "0    2     0x740f  12345  gfx90a   ENABLED  ENABLED   ENABLED  N/A    0000:03:00.0  0",
            "========================End of ROCm SMI Log========================",
        ]
    )
    report = parse_rocm_smi(text)
    assert [(g.index, g.pci_bus, g.vram_total_bytes) for g in report.gpus] == [
        (0, "0000:03:00.0", None),
        (1, None, None),
    ]
    assert report.warnings == ()


def test_tool_messages_alone_are_a_report_without_gpus() -> None:
    report = parse_rocm_smi("WARNING: No JSON data to report\n")
    assert report.gpus == ()
    assert report.warnings == ("WARNING: No JSON data to report",)
    assert completeness(report) == ["no GPUs in the output"]
    driver = parse_rocm_smi("ERROR: Driver not initialized (amdgpu not found in modules)\n")
    assert driver.warnings == ("ERROR: Driver not initialized (amdgpu not found in modules)",)


def test_driver_version_line() -> None:
    report = parse_rocm_smi(_text("Driver version: 6.8.5", "GPU[0]\t\t: PCI Bus: 0000:03:00.0"))
    assert report.gpus[0].driver == "6.8.5"
    assert report.warnings == ()


# --------------------------------------------------------------------------------------------------------
# Paste styles of public issue threads (synthetic samples; PROVENANCE.md names the threads that showed them)


def test_csv_after_a_sentence_a_fence_and_the_command_line() -> None:
    report = _synthetic("csv_fenced-prompt_2gpu.txt")
    assert report.format == "csv"
    assert [(g.index, g.pci_bus, g.vram_total_bytes, g.vram_used_bytes, g.model) for g in report.gpus] == [
        (0, "0000:03:00.0", 25753026560, 1073741824, "Navi 31 [Radeon RX 7900 XTX]"),
        (1, "0000:7a:00.0", 536870912, None, "Phoenix1"),
    ]
    # The sentence is not rocm-smi output and is not placed; the fences and the command line are placed.
    assert report.warnings == ("Here is what the node prints:",)


def test_pretty_json_in_a_fence_after_a_root_prompt() -> None:
    report = _synthetic("json_fenced-pretty_root-prompt.txt")
    assert report.format == "json"
    (g,) = report.gpus
    assert (g.index, g.pci_bus, g.unique_id, g.vram_total_bytes, g.vram_used_bytes, g.model) == (
        0,
        "0000:c3:00.0",
        "0x66c2a0e1d4b3f918",
        68702699520,
        11927552,
        "AMD Instinct MI210",
    )
    assert report.warnings == ()


@pytest.mark.parametrize(
    "command",
    [
        "$ rocm-smi --showbus --csv",
        "user@node:~$ rocm-smi --showbus --csv",
        "(venv) user@node:~/work$ /opt/rocm/bin/rocm-smi --showbus --csv",
        "root@node:/# sudo -E rocm-smi --showbus --csv",
        "rocm-smi --showbus --csv",
        "% rocm_smi.py --showbus --csv",
        "(Mon Mar 02 09:15:07) alice@gpu-box ~$ /opt/rocm/bin/rocm-smi --showbus --csv",
        "`$ rocm-smi --showbus --csv",
    ],
)
def test_command_lines_are_placed(command: str) -> None:
    text = f"{command}\n```\ndevice,PCI Bus\ncard0,0000:0C:00.0\n```\n`\n"
    report = parse_rocm_smi(text)
    assert report.format == "csv"
    assert [(g.index, g.pci_bus) for g in report.gpus] == [(0, "0000:0c:00.0")]
    assert report.warnings == ()


def test_a_prompt_for_another_tool_is_a_warning() -> None:
    text = "$ amd-smi version\nAMDSMI Tool: 1.0\n$ rocm-smi --json\n" + json.dumps(
        {"card0": {"PCI Bus": "0000:0C:00.0"}}
    )
    report = parse_rocm_smi(text)
    assert report.format == "json"
    assert report.warnings == ("$ amd-smi version", "AMDSMI Tool: 1.0")


def test_prose_only_is_still_not_rocm_smi() -> None:
    with pytest.raises(ParseError):
        parse_rocm_smi("$ rocm-smi --showbus\nbash: rocm-smi: command not found\n")


def test_a_sentence_naming_rocm_smi_is_not_a_command_line() -> None:
    report = parse_rocm_smi(_text("Then run `sudo rocm-smi --showbus` again:", "GPU[0]\t\t: PCI Bus: 0000:03:00.0"))
    assert report.warnings == ("Then run `sudo rocm-smi --showbus` again:",)


def test_untitled_indented_concise_table_of_rocm_1_9() -> None:
    report = _synthetic("text_rocm19-untitled-concise_indented.txt")
    assert [g.index for g in report.gpus] == [0, 1, 2]
    # GPU 0 is all N/A (a non-AMD DRM device rocm-smi 1.9 listed): present, every field None.
    assert all(getattr(report.gpus[0], f) is None for f in ("pci_bus", "vram_total_bytes", "model"))
    assert report.warnings == ()


def test_concise_header_of_rocm_3_3_without_a_section_title() -> None:
    text = "\n".join(
        [
            "=" * 24 + "ROCm System Management Interface" + "=" * 25,
            "=" * 80,
            "GPU  Temp   AvgPwr  SCLK    MCLK    Fan    Perf  PwrCap  VRAM%  GPU%",
            "3    31.0c  12.0W   852Mhz  167Mhz  14.9%  auto  170.0W  N/A    0%",
            "=" * 80,
            "=" * 30 + "End of ROCm SMI Log " + "=" * 30,
        ]
    )
    report = parse_rocm_smi(text)
    assert [g.index for g in report.gpus] == [3]
    assert report.warnings == ()


def test_allinfo_sections_pidgpus_and_subheadings() -> None:
    report = _synthetic("text_allinfo_pidgpus-subheadings_w84.txt")
    assert report.format == "text"
    g0, g1 = report.gpus
    assert (g0.pci_bus, g0.vram_total_bytes, g0.vram_used_bytes, g0.device_id, g0.unique_id) == (
        "0000:c5:00.0",
        536870912,
        88686592,
        "0x15bf",
        None,
    )
    assert g0.model is None  # "Card series: 0x15bf" is a hex id, not a name
    assert (g1.pci_bus, g1.vram_total_bytes, g1.vram_used_bytes, g1.device_id, g1.unique_id) == (
        "0000:0b:00.0",
        12868124672,
        1314775040,
        "0x73df",
        "0x3c5e8a9b7d1f2e40",
    )
    assert g1.model == "Navi 22 [Radeon RX 6700/6700 XT/6750 XT]"
    assert {g0.driver, g1.driver} == {"6.8.5"}
    assert report.processes == (
        SmiProcess(pid=41877, name=None, gpu=None, gpu_count=0),
        SmiProcess(
            pid=52011, name="ollama", gpu=None, gpu_count=2, vram_used_bytes=9663676416, sdma_used=0, cu_occupancy=0
        ),
    )
    # Failures the tool reported are warnings; sub-headings, list items and --showpidgpus lines are placed.
    assert report.warnings == (
        "GPU[0]\t\t: Unable to detect fan speed for GPU 0",
        "GPU[0]\t\t: get_power_cap, Not supported on the given system",
        "get_compute_process_info_by_pid, Not supported on the given system",
        "GPU[0]\t\t: Not supported on the given system",
        "GPU[1]\t\t: Not supported on the given system",
    )


@pytest.mark.parametrize(
    "line", ["OD_SCLK:", "Supported mclk frequencies on GPU0", "", "0: 2600Mhz *", "Fan Level: 41 (16%)"]
)
def test_gpu_lines_of_unread_metrics_are_placed(line: str) -> None:
    report = parse_rocm_smi(_text(f"GPU[0]\t\t: {line}"))
    assert [g.index for g in report.gpus] == [0]
    assert report.warnings == ()


@pytest.mark.parametrize(
    "line",
    [
        "Unable to get voltage curve",
        "get_od_volt, Requested function is not implemented on this setup",
        "Not supported",
        "get_gpu_metrics, Unexpected data received",
        "% Energy Counter, Unexpected data received",
    ],
)
def test_gpu_lines_saying_a_query_failed_are_warnings(line: str) -> None:
    report = parse_rocm_smi(_text(f"GPU[0]\t\t: {line}"))
    assert report.warnings == (f"GPU[0]\t\t: {line}",)


def test_pidgpus_lines_outside_their_section_are_warnings() -> None:
    report = parse_rocm_smi(_text("GPU[0]\t\t: PCI Bus: 0000:03:00.0", "PID 7 is using 1 DRM device(s):"))
    assert report.warnings == ("PID 7 is using 1 DRM device(s):",)


def test_two_outputs_joined_by_a_prompt_with_crlf_endings() -> None:
    raw = (DATA / "text_combined-prompts_concise-meminfo_crlf.txt").read_bytes()
    assert b"\r\n" in raw  # the sample really has Windows line endings
    report = _synthetic("text_combined-prompts_concise-meminfo_crlf.txt")
    assert [(g.index, g.vram_total_bytes, g.vram_used_bytes) for g in report.gpus] == [
        (0, 206158430208, 295944192),
        (1, 206158430208, 295944193),
    ]
    assert report.warnings == (
        "$ amd-smi version",
        "AMDSMI Tool: 99.0.0+0000000 | AMDSMI Library version: 99.0.0 | ROCm version: 6.4.1",
    )


def test_wrapped_topology_header_and_rows_and_a_cut_last_row() -> None:
    report = _synthetic("text_topoweight-8gpu_wrapped-cut.txt")
    assert [g.index for g in report.gpus] == list(range(8))  # the matrix labels name the GPUs
    assert len(report.links) == 28
    for link in report.links:
        assert link.weight == (15 if link.a // 4 == link.b // 4 else 30), link
        assert (link.hops, link.type) == (None, None)
    # GPU7's row lost its second half: a warning; its pairs are read from the upper triangle instead.
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith("topology row does not match its header: GPU7 ")


def test_matrix_row_without_header_is_a_warning() -> None:
    report = parse_rocm_smi(_text("=" * 20 + " Hops between two GPUs " + "=" * 20, "GPU0   0   1", "GPU1   1   0"))
    assert report.links == ()
    assert report.warnings == (
        "topology row without a header: GPU0   0   1",
        "topology row without a header: GPU1   1   0",
    )


def test_matrix_with_collapsed_spaces() -> None:
    weight = "=" * 20 + " Weight between two GPUs " + "=" * 20
    report = parse_rocm_smi(_text(weight, "GPU0 GPU1 GPU2", "GPU0 0 15 30", "GPU1 15 0 15", "GPU2 30 15 0"))
    assert [(link.a, link.b, link.weight) for link in report.links] == [(0, 1, 15), (0, 2, 30), (1, 2, 15)]
    assert report.warnings == ()


# --------------------------------------------------------------------------------------------------------
# Not rocm-smi output


@pytest.mark.parametrize("path", AMD_SMI_CAPTURES, ids=lambda p: p.name)
def test_amd_smi_captures_are_rejected(path: Path) -> None:
    with pytest.raises(ParseError):
        _parse(path)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n   \n",
        "hello world\nthis is not a tool output\n",
        "GPU: 0\n    BDF: 0000:03:00.0\n",
        '[{"gpu": 0, "bdf": "0000:03:00.0"}]',
        '{"gpu_data": [{"gpu": 0}]}',
        "WARNING: something unrelated\n",
    ],
)
def test_not_rocm_smi_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_rocm_smi(text)


def test_truncated_json_raises_with_the_line() -> None:
    text = (SHARED / "rocm-smi" / "telegraf-mi100_rocm602.json").read_text()
    lines = text.splitlines()
    with pytest.raises(ParseError) as info:
        parse_rocm_smi("\n".join(lines[:40]))
    assert info.value.line is not None and 1 <= info.value.line <= 41


def test_json_with_unknown_top_level_key_and_bad_card() -> None:
    report = parse_rocm_smi('{"card0": {"PCI Bus": "0000:03:00.0"}, "card1": "oops", "extra": {}}')
    assert [g.index for g in report.gpus] == [0, 1]
    assert len(report.warnings) == 2


# --------------------------------------------------------------------------------------------------------
# supports_json / completeness

NEW_HELP = """usage: rocm-smi [-h] [-V] [-d DEVICE [DEVICE ...]] [--alldevices] [--showhw] [-a] [-i] [-v]
Output options:
  --loglevel LEVEL                          How much output will be printed for what program is doing
  --json                                    Print output in JSON format
  --csv                                     Print output in CSV format
"""
OLD_HELP = """usage: rocm-smi [-h] [-d DEVICE] [-i] [-v] [--showhw] [-t] [-c] [-g] [-f] [-p] [-P] [-o] [-m] [-M] [-l]
  --showpids            Show current running KFD PIDs
  --showbus             Show PCI bus number
  --showjsonfile        (not a json flag)
"""


def test_supports_json() -> None:
    assert supports_json(NEW_HELP) is True
    assert supports_json("usage: rocm-smi [-h] [--json] [--csv]") is True
    assert supports_json(OLD_HELP) is False
    assert supports_json("") is False


def test_completeness_names_what_is_missing() -> None:
    report = parse_rocm_smi(
        _text(
            "GPU[0]\t\t: PCI Bus: 0000:03:00.0",
            "GPU[0]\t\t: VRAM Total Memory (B): 100",
            "GPU[0]\t\t: VRAM Total Used Memory (B): 1",
            "GPU[0]\t\t: (Topology) Numa Node: 0",
            "GPU[1]\t\t: (Topology) Numa Node: 0",
        )
    )
    assert completeness(report) == [
        "GPU 1: no PCI bus",
        "GPU 1: no VRAM total",
        "GPU 1: no VRAM used",
        "topology missing for 1 of 1 GPU pairs",
    ]
    assert completeness(report, expect_topology=False) == completeness(report)[:3]


# --------------------------------------------------------------------------------------------------------
# Fuzzing: any input gives a report or one ParseError, nothing else

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _report_or_parse_error(text: str) -> None:
    try:
        report = parse_rocm_smi(text)
    except ParseError as exc:
        assert exc.line is None or exc.line >= 1
        return
    check_contract(report)


@FUZZ
@given(st.text())
def test_any_text(text: str) -> None:
    _report_or_parse_error(text)


RS_TOKENS = ["GPU[0]", "GPU[1]", "\t\t: ", ": ", "PCI Bus", "N/A", "=====", " KFD Processes ", "PID", "0x1", "\n"]
RS_TOKENS += ["{", "}", '"card0"', '"system"', "GPU0", "XGMI", "Weight between two GPUs", "device,", "card0,", " "]
RS_ALPHABET = st.sampled_from([*RS_TOKENS, "4294967295"])


@FUZZ
@given(st.lists(RS_ALPHABET, max_size=60).map("".join))
def test_rocm_smi_like_tokens(text: str) -> None:
    _report_or_parse_error(text)


@FUZZ
@given(
    path=st.sampled_from(ALL_CAPTURES),
    cut=st.floats(min_value=0.0, max_value=1.0),
    drops=st.lists(st.integers(min_value=0, max_value=10_000), max_size=5),
    flips=st.lists(st.tuples(st.integers(min_value=0, max_value=100_000), st.characters()), max_size=5),
)
def test_mutated_captures(path: Path, cut: float, drops: list[int], flips: list[tuple[int, str]]) -> None:
    text = path.read_text(encoding="utf-8")
    text = text[: int(len(text) * cut)] if cut < 1.0 else text
    lines = text.splitlines(keepends=True)
    for drop in drops:
        if lines:
            del lines[drop % len(lines)]
    chars = list("".join(lines))
    for position, char in flips:
        if chars:
            chars[position % len(chars)] = char
    _report_or_parse_error("".join(chars))


def test_json_pid_key_with_a_space_is_still_a_process() -> None:
    # Third-party fixtures write "PID 123" for rocm-smi's "PID123"; neither is silently dropped.
    text = json.dumps({"card0": {"PCI Bus": "0000:0C:00.0"}, "system": {"PID 123": "python, 1, 4096, 0, 0"}})
    (process,) = parse_rocm_smi(text).processes
    assert (process.pid, process.name, process.gpu_count, process.vram_used_bytes) == (123, "python", 1, 4096)
