"""The amd-smi layouts of ROCm 6.4-7.x over the real outputs kept in tests/data/amd-smi (PROVENANCE.md there,
docs/amd-smi-formats.md), and unique ids in every form the tools print (tests/data/rocm-smi too)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.inventory import canonical_unique_id
from exporter.model.smi import SmiGpu
from exporter.parsers.amd_smi import merge_amd_smi_reports, parse_amd_smi
from exporter.parsers.common import unique_id_form
from exporter.parsers.rocm_smi import parse_rocm_smi
from exporter.parsers.sysfs import canonical_unique_id as sysfs_unique_id
from exporter.parsers.sysfs import unique_id_from_kfd

PROJECT = Path(__file__).resolve().parents[1]
DATA = PROJECT / "tests" / "data"
AMD = DATA / "amd-smi"
MIB = 1024 * 1024
GIB = 1024 * MIB


def parse(name: str) -> tuple[list[SmiGpu], tuple[str, ...]]:
    report = parse_amd_smi((AMD / name).read_text(encoding="utf-8"))
    return list(report.gpus), report.warnings


def modes(gpus: list[SmiGpu]) -> list[tuple[int, int | None, str | None, str | None]]:
    return [(g.index, g.partition_id, g.compute_partition, g.memory_partition) for g in gpus]


def test_partition_of_rocm_640_on_4_mi300a_with_text_blocks_between_tables() -> None:
    """legacy-rocm-build#4477: the CURRENT_PARTITION table, GPU: N / MEMORY_PARTITION blocks, a profiles table."""
    gpus, warnings = parse("partition_text_mi300a-4gpu-NA-blocks-between_rocm640_legacy-rocm-build-4477.txt")
    assert modes(gpus) == [(i, None, None, "NPS1") for i in range(4)]
    assert warnings == ()


def test_partition_debug_lines_before_and_between_tables_are_warnings() -> None:
    gpus, warnings = parse("partition_text_mi300a-4gpu-debug-lines_rocm640_legacy-rocm-build-4477.txt")
    assert modes(gpus) == [(i, None, None, "NPS1") for i in range(4)]
    assert len(warnings) == 8 and all(w.startswith("DEBUG: Failed to get accelerator partition") for w in warnings)


def test_partition_current_and_memory_tables_of_the_fixed_layout() -> None:
    gpus, warnings = parse("partition_text_mi300a-4gpu-spx-memory-table_preview_legacy-rocm-build-4477.txt")
    assert modes(gpus) == [(i, 0, "SPX", "NPS1") for i in range(4)]
    assert warnings == ()


def test_partition_current_with_a_comma_list_cell() -> None:
    """Up to ROCm 6.4.0 a physical GPU's first partition listed every id (0,1,...,7), the others N/A."""
    gpus, warnings = parse("partition-current_text_cpx-list-cell_changelog-rocm641-previous.txt")
    assert modes(gpus) == [(i, 0 if i in (0, 8) else None, "CPX", "NPS1") for i in range(11)]
    assert warnings == ("line 15: cannot place: ...",)  # the CHANGELOG's elision


def test_partition_current_with_an_id_per_partition() -> None:
    gpus, _ = parse("partition-current_text_cpx-per-partition-id_changelog-rocm641.txt")
    assert [g.partition_id for g in gpus] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2]


def test_partition_accelerator_behind_a_star_box_without_root() -> None:
    """Every GPU_ID N/A: the GPUs are numbered by position and say nothing; the box is one warning."""
    gpus, warnings = parse("partition-accelerator_text_warning-box-8NA_changelog-rocm641.txt")
    assert [g.index for g in gpus] == list(range(8))
    assert all(g == SmiGpu(index=g.index) for g in gpus)  # PARTITION_ID reads 0 on every row: not taken
    assert warnings[0] == (
        "WARNING: ACCELERATOR_PARTITION_PROFILES requires sudo/root permissions to run. Please run the command with "
        "sudo permissions to get accurate results."
    )
    assert "8 row(s) without a GPU_ID" in warnings[1] and len(warnings) == 2


def test_partition_accelerator_continuation_rows_and_the_current_profile() -> None:
    """amdsmi#132 (ROCm 7.0.2): blank GPU_ID/PROFILE_INDEX cells on resource rows; DPX* is the current profile."""
    gpus, warnings = parse("partition-accelerator_text_dpx-continuation-rows_rocm702_amdsmi-132.txt")
    assert modes(gpus) == [(0, 0, "DPX", None)]
    assert warnings == ()


def test_a_star_box_between_tables_and_a_legend() -> None:
    text = (AMD / "partition-accelerator_text_warning-box-8NA_changelog-rocm641.txt").read_text()
    current = (AMD / "partition-current_text_cpx-per-partition-id_changelog-rocm641.txt").read_text()
    report = parse_amd_smi(current.replace("...\n", "") + "\n" + text)
    assert [g.compute_partition for g in report.gpus] == ["CPX"] * 11
    assert report.warnings[0].startswith("WARNING: ACCELERATOR_PARTITION_PROFILES requires sudo")


def test_partitions_at_function_1_are_gpus_of_their_own() -> None:
    gpus, _ = parse("default_text_box_dpx-partition-fn1_rocm701_k8s-gpu-dra-driver-20.txt")
    assert [(g.index, g.pci_bus, g.vram_total_bytes) for g in gpus] == [
        (0, "0000:07:00.0", 196592 * MIB),
        (1, "0000:07:00.1", 98296 * MIB),
    ]
    for name in ("list-e_text_cpx-partition-fn1_changelog-rocm641.txt",
                 "list-e_text_cpx-partition-fn1-render-NA_changelog-rocm641-previous.txt"):  # fmt: skip
        gpus, _ = parse(name)
        assert [(g.index, g.pci_bus, g.partition_id, g.kfd_id) for g in gpus] == [
            (0, "0000:0c:00.0", 0, 18421),
            (1, "0000:0c:00.1", 1, 48116),
        ]
        assert all(g.uuid is None for g in gpus)  # <Redacted>
    gpus, _ = parse("list-e_text_1gpu-uuid-X_changelog-rocm640.txt")
    assert [(g.pci_bus, g.kfd_id, g.node_id) for g in gpus] == [("0000:23:00.0", 45412, 1)]


def test_monitor_of_a_cpx_gpu_reads_each_partition() -> None:
    gpus, _ = parse("monitor_text_cpx-partitions-NA_changelog-rocm641.txt")
    assert [g.index for g in gpus] == list(range(9))
    assert gpus[0].vram_total_bytes == round(192.0 * GIB) and gpus[1].vram_total_bytes == 24 * GIB
    assert gpus[1].vram_used_bytes == round(0.5 * GIB)


def test_monitor_q_keeps_a_unit_after_na_in_its_cell() -> None:
    """The CHANGELOG's ROCm 6.2.0 example: ``N/A Mb/s`` is one cell, so the row has its 18 cells."""
    report = parse_amd_smi((AMD / "monitor-q_text_NA-Mbps-last-cell_1gpu-1proc_changelog-rocm620.txt").read_text())
    assert [(g.index, g.vram_used_bytes, g.vram_total_bytes) for g in report.gpus] == [(0, 1235 * MIB, 16335 * MIB)]
    assert [(p.pid, p.name, p.gpu) for p in report.processes] == [(1564865, "rvs", 0)]
    assert report.warnings == ()


def test_static_partition_block() -> None:
    gpus, _ = parse("static-partition_text_cpx-nps4_changelog-rocm630.txt")
    assert modes(gpus) == [(0, 0, "CPX", "NPS4")]
    doc = [{"gpu": 3, "partition": {"compute_partition": "DPX", "memory_partition": "NPS1", "partition_id": 1}}]
    assert modes(list(parse_amd_smi(json.dumps(doc)).gpus)) == [(3, 1, "DPX", "NPS1")]


def test_partition_merges_with_list_by_index() -> None:
    listed = parse_amd_smi((AMD / "list-e_text_cpx-partition-fn1_changelog-rocm641.txt").read_text())
    current = parse_amd_smi((AMD / "partition-current_text_cpx-per-partition-id_changelog-rocm641.txt").read_text())
    merged = merge_amd_smi_reports([listed, current])
    assert [(g.index, g.pci_bus, g.partition_id, g.compute_partition) for g in merged.gpus[:2]] == [
        (0, "0000:0c:00.0", 0, "CPX"),
        (1, "0000:0c:00.1", 1, "CPX"),
    ]


# --------------------------------------------------------------------------- unique ids


@pytest.mark.parametrize(
    "printed",
    ["0x5a4ad1c2a8ba3e1f", "0x5A4AD1C2A8BA3E1F", "5a4ad1c2a8ba3e1f", "5A4AD1C2A8BA3E1F", " 0X5a4ad1c2a8ba3e1f\n"],
)
def test_every_printed_form_is_the_canonical_one(printed: str) -> None:
    assert unique_id_form(printed) == "0x5a4ad1c2a8ba3e1f" == canonical_unique_id(printed)
    assert unique_id_form(printed) == sysfs_unique_id("5a4ad1c2a8ba3e1f\n") == unique_id_from_kfd(0x5A4AD1C2A8BA3E1F)


def test_leading_zeros_none_and_garbage() -> None:
    assert unique_id_form("0012ab") == "0x12ab" == sysfs_unique_id("00000000000012ab\n")
    for missing in ("N/A", "", "0", "0x0", "0000000000000000", "not-hex", "0x" + "f" * 17, None):
        assert unique_id_form(missing) is None


def test_rocm_smi_bare_hex_unique_ids_keep_their_gpu() -> None:
    """microsoft/pai's job-exporter data (an older rocm-smi on Vega 20): ``"Unique ID": "7c96610172fc1a8d"``."""
    text = (DATA / "rocm-smi" / "json_vega20-2gpu_bare-hex-unique-id_microsoft-pai.json").read_text()
    report = parse_rocm_smi(text)
    assert [(g.index, g.pci_bus, g.unique_id) for g in report.gpus] == [
        (1, "0000:03:00.0", "0x7c96610172fc1a8d"),
        (2, "0000:06:00.0", "0x249220e172fc1a88"),
    ]
    assert not [w for w in report.warnings if "hex id" in w]


def test_rocm_smi_and_amd_smi_upper_case_ids_are_canonical() -> None:
    doc = {"card0": {"PCI Bus": "0000:03:00.0", "Unique ID": "0x00AB12CD34EF5678"}}
    assert parse_rocm_smi(json.dumps(doc)).gpus[0].unique_id == "0xab12cd34ef5678"
    amd = [{"gpu": 0, "asic": {"asic_serial": "0x5A4AD1C2A8BA3E1F"}}, {"gpu": 1, "asic": {"asic_serial": "N/A"}}]
    assert [g.unique_id for g in parse_amd_smi(json.dumps(amd)).gpus] == ["0x5a4ad1c2a8ba3e1f", None]
    bad = parse_rocm_smi(json.dumps({"card0": {"PCI Bus": "0000:03:00.0", "Unique ID": "zz-not-an-id"}}))
    assert bad.gpus[0].unique_id is None and any("is not a hex id" in w for w in bad.warnings)


def test_parse_cli_reads_the_partition_captures() -> None:
    name = AMD / "partition_text_mi300a-4gpu-NA-blocks-between_rocm640_legacy-rocm-build-4477.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "parse", "amd-smi", str(name)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert [g["memory_partition"] for g in json.loads(proc.stdout)["gpus"]] == ["NPS1"] * 4


def test_rocm_gpu_info_carries_the_canonical_id_of_a_bare_hex_tool(tmp_path: Path) -> None:
    """No sysfs: the id comes from the tool, in the form sysfs and the baseline use."""
    sys.path.insert(0, str(PROJECT / "tests"))
    from stubs import rocm_smi_stub

    capture = DATA / "rocm-smi" / "json_vega20-2gpu_bare-hex-unique-id_microsoft-pai.json"
    stub = rocm_smi_stub(tmp_path / "bin", capture)
    (tmp_path / "state").mkdir()
    argv = [
        sys.executable, "-m", "exporter", "once",
        "--path.rootfs", str(tmp_path), "--state.dir", str(tmp_path / "state"),
        "--smi.backend", "rocm-smi", "--rocm-smi.path", str(stub.path), "--amd-smi.path", str(tmp_path / "none"),
        "--no-collector.sysfs", "--no-collector.devices", "--no-collector.kernel-log", "--no-collector.processes",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    ids = sorted(set(re.findall(r'rocm_gpu_info\{[^}]*unique_id="([^"]*)"', proc.stdout)))
    assert ids == ["0x249220e172fc1a88", "0x7c96610172fc1a8d"], proc.stdout[:2000]


_MODES = st.sampled_from(["SPX", "DPX", "TPX", "QPX", "CPX"])
_NPS = st.sampled_from(["NPS1", "NPS2", "NPS4", "NPS8"])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(_NPS, _MODES, st.integers(0, 7) | st.none()), min_size=1, max_size=12),
    gap=st.integers(2, 9),
    warn=st.booleans(),
)
def test_current_partition_tables_of_any_width(rows: list[tuple[str, str, int | None]], gap: int, warn: bool) -> None:
    """The table amd-smi pads to its widest cell, with any padding, after a star box or not: the same GPUs."""
    header = ["GPU_ID", "MEMORY", "ACCELERATOR_TYPE", "ACCELERATOR_PROFILE_INDEX", "PARTITION_ID"]
    cells = [[str(i), nps, mode, "3", "N/A" if pid is None else str(pid)] for i, (nps, mode, pid) in enumerate(rows)]
    widths = [max(len(r[k]) for r in [header, *cells]) + gap for k in range(len(header))]
    lines = ["CURRENT_PARTITION:"]
    if warn:
        lines += ["", "*" * 30, "** WARNING: something   **", "*" * 30, ""]
    lines += ["".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *cells]]
    report = parse_amd_smi("\n".join(lines) + "\n")
    expected = [(i, pid, mode, nps) for i, (nps, mode, pid) in enumerate(rows)]
    assert modes(list(report.gpus)) == expected
    assert list(report.warnings) == (["WARNING: something"] if warn else [])
