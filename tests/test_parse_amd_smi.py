"""Tests for exporter.parsers.amd_smi over the shared captures, the synthetic samples and random input."""

from __future__ import annotations

import json
import random
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import fields, replace
from paths import FIXTURES

from exporter.model import ParseError
from exporter.model.smi import SmiGpu, SmiLink, SmiProcess, SmiReport
from exporter.parsers.amd_smi import (
    AmdSmiHelp,
    amd_smi_commands,
    merge_amd_smi_reports,
    parse_amd_smi,
    parse_amd_smi_help,
)
from exporter.parsers.common import normalize_bdf

SHARED = FIXTURES / "smi"
DATA = Path(__file__).parent / "data" / "amd-smi"
SHARED_CAPTURES = sorted(p for p in (SHARED / "amd-smi").glob("*") if p.is_file() and p.name != "PROVENANCE.md")
SYNTHETIC = sorted(p for p in DATA.glob("*") if p.is_file() and p.name != "PROVENANCE.md")
ROCM_SMI_CAPTURES = sorted(p for p in (SHARED / "rocm-smi").glob("*") if p.is_file() and p.name != "PROVENANCE.md")

MIB = 1024 * 1024
GIB = 1024 * MIB
XGMI_8 = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0"]
XGMI_8 += ["0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0"]
GROUPS_WARNING = (
    "WARNING: User is missing the following required groups: render, video. Please add user to these groups."
)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def capture(name: str) -> SmiReport:
    return parse_amd_smi(read(SHARED / "amd-smi" / name))


def sample(name: str) -> SmiReport:
    return parse_amd_smi(read(DATA / name))


def check_invariants(report: SmiReport) -> None:
    """What holds for every report, whatever the input."""
    assert report.tool == "amd-smi"
    assert report.format in ("json", "text")
    indices = [g.index for g in report.gpus]
    assert indices == sorted(set(indices))
    for gpu in report.gpus:
        assert gpu.pci_bus is None or normalize_bdf(gpu.pci_bus) == gpu.pci_bus
        for size in (gpu.vram_total_bytes, gpu.vram_used_bytes):
            assert size is None or (isinstance(size, int) and size >= 0)
    pairs = [(link.a, link.b) for link in report.links]
    assert len(pairs) == len(set(pairs))
    bus = {g.index: g.pci_bus for g in report.gpus}
    for link in report.links:
        assert link.a < link.b
        assert link.type != "SELF"
        assert link.a in bus and link.b in bus
        assert link.a_pci_bus == bus[link.a] or bus[link.a] is None
        assert link.b_pci_bus == bus[link.b] or bus[link.b] is None
    keys = [(p.pid, p.gpu) for p in report.processes]
    assert len(keys) == len(set(keys))
    for process in report.processes:
        assert process.gpu in bus
        assert process.name is None or (process.name.strip() and process.name.upper() != "N/A")
        for size in (process.vram_used_bytes, process.gtt_used_bytes, process.cpu_used_bytes):
            assert size is None or (isinstance(size, int) and size >= 0)
    assert all(isinstance(w, str) and w for w in report.warnings)
    json.dumps(report.to_json())


# --------------------------------------------------------------------------- every capture


def test_the_shared_captures_are_there() -> None:
    assert len(SHARED_CAPTURES) >= 7
    assert len(SYNTHETIC) >= 15


@pytest.mark.parametrize("path", SHARED_CAPTURES + SYNTHETIC, ids=lambda p: p.name)
def test_every_capture_parses_with_invariants(path: Path) -> None:
    report = parse_amd_smi(read(path))
    check_invariants(report)
    assert report.format == ("json" if "_json" in path.name else "text")
    if "no-gpu" in path.name:  # amd-smi output that names only other devices
        assert not report.gpus
        assert report.warnings[-1].startswith("amd-smi output with no GPU")
        return
    assert report.gpus, "every amd-smi output names at least one GPU"
    # Tool messages are kept verbatim; nothing else in these files is unplaceable (but a name amd-smi cut).
    # Real captures from public threads and the CHANGELOG add the tool's DEBUG lines, the editor's "..." elision and
    # the rows amd-smi printed without a GPU_ID (tests/test_amd_smi_layouts.py checks each of them in full).
    assert all(
        w.startswith(("WARNING:", "Fail to open", "'CTRL' + 'C'", "DEBUG:"))
        or "name cut" in w
        or w.endswith("cannot place: ...")
        or "numbered by position" in w
        for w in report.warnings
    )


@pytest.mark.parametrize("path", SHARED_CAPTURES + SYNTHETIC, ids=lambda p: p.name)
def test_windows_line_endings_and_a_bom_change_nothing(path: Path) -> None:
    text = read(path)
    assert parse_amd_smi("\ufeff" + text.replace("\n", "\r\n")) == parse_amd_smi(text)


# --------------------------------------------------------------------------- shared captures, exact


def test_topology_text_8gpu_xgmi() -> None:
    report = capture("amdsmi-changelog-rocm610_topology_text_8gpu-xgmi.txt")
    assert report.format == "text"
    assert report.gpus == tuple(SmiGpu(index=i, pci_bus=bdf) for i, bdf in enumerate(XGMI_8))
    assert report.links == tuple(
        SmiLink(a=a, b=b, weight=15, hops=1, type="XGMI", a_pci_bus=XGMI_8[a], b_pci_bus=XGMI_8[b])
        for a, b in combinations(range(8), 2)
    )
    assert report.processes == ()
    assert report.warnings == ()


def test_topology_text_cndz_tables_give_pairs_without_weights() -> None:
    report = capture("amdsmi-changelog-rocm630_topology-cndz_text_8gpu-mi300x.txt")
    assert report.gpus == tuple(SmiGpu(index=i, pci_bus=bdf) for i, bdf in enumerate(XGMI_8))
    # Coherency/atomics/DMA/bi-directional tables say the pairs exist, not their weight, hops or type.
    assert report.links == tuple(
        SmiLink(a=a, b=b, a_pci_bus=XGMI_8[a], b_pci_bus=XGMI_8[b]) for a, b in combinations(range(8), 2)
    )
    assert report.warnings == ()


def test_topology_json_new_format_access_and_type_only() -> None:
    report = capture("amdsmi-changelog-rocm611_topology-a-t_json_2gpu-pcie.json")
    assert report.format == "json"
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:08:00.0"), SmiGpu(index=1, pci_bus="0000:44:00.0"))
    assert report.links == (
        SmiLink(a=0, b=1, weight=None, hops=None, type="PCIE", a_pci_bus="0000:08:00.0", b_pci_bus="0000:44:00.0"),
    )
    assert report.warnings == ()


def test_topology_json_previous_format() -> None:
    report = capture("amdsmi-changelog-rocm611_topology_json_previous-format_2gpu.json")
    assert report.gpus == (SmiGpu(index=0), SmiGpu(index=1))
    assert report.links == (SmiLink(a=0, b=1, weight=40, hops=2, type="PCIE"),)
    assert report.warnings == ()


@pytest.mark.parametrize(
    ("name", "process_name"),
    [
        ("amdsmi-changelog-rocm620_process_text_name-NA.txt", None),
        ("amdsmi-changelog-rocm620_process_text_sudo.txt", "TransferBench"),
    ],
)
def test_process_text(name: str, process_name: str | None) -> None:
    report = capture(name)
    assert report.format == "text"
    assert report.gpus == (SmiGpu(index=0),)
    assert report.processes == (
        SmiProcess(
            pid=1693982,
            name=process_name,
            gpu=0,
            vram_used_bytes=10_844_792_422,  # "10.1 GB" with a 1024 base, as printed (one decimal)
            gtt_used_bytes=0,
            cpu_used_bytes=0,
        ),
    )
    assert report.links == ()
    assert report.warnings == ()


def test_list_text_2gpu() -> None:
    report = capture("amdsmi-changelog-rocm630_list_text_2gpu-uuid-redacted.txt")
    assert report.gpus == (
        SmiGpu(index=0, pci_bus="0000:23:00.0", uuid=None, kfd_id=45412, node_id=1, partition_id=0),
        SmiGpu(index=1, pci_bus="0000:26:00.0", uuid=None, kfd_id=59881, node_id=2, partition_id=0),
    )
    assert report.processes == () and report.links == () and report.warnings == ()


# --------------------------------------------------------------------------- synthetic variants, exact


def test_mem_usage_json_value_unit_mb_is_mib() -> None:
    report = sample("metric-mem-usage_json_value-unit_2gpu.json")
    assert report.format == "json"
    assert report.gpus == (
        SmiGpu(index=0, vram_total_bytes=196592 * MIB, vram_used_bytes=283 * MIB),
        SmiGpu(index=1, vram_total_bytes=196592 * MIB, vram_used_bytes=None),  # "N/A", never 0
    )
    assert report.warnings == ()


@pytest.mark.parametrize(
    "name", ["metric-mem-usage_json_plain-mb_oneline_rocm60.json", "metric-mem-usage_text_2gpu.txt"]
)
def test_mem_usage_plain_numbers_and_text(name: str) -> None:
    report = sample(name)
    assert report.gpus[0] == SmiGpu(index=0, vram_total_bytes=65520 * MIB, vram_used_bytes=10 * MIB)
    if len(report.gpus) > 1:
        assert report.gpus[1] == SmiGpu(index=1, vram_total_bytes=65520 * MIB, vram_used_bytes=None)
    assert report.format == ("text" if name.endswith(".txt") else "json")


def test_list_json_one_line_with_na() -> None:
    report = sample("list_json_oneline_2gpu-kfd-NA.json")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:0c:00.0",
            uuid="a4ff74a5-0000-1000-80ea-a3a5e61ce5c5",
            kfd_id=45412,
            node_id=2,
            partition_id=0,
        ),
        SmiGpu(index=1, pci_bus="0000:22:00.0", uuid="2cff74a5-0000-1000-8064-d6f1a1b2c3d4", partition_id=0),
    )


def test_list_text_with_enumeration_keys() -> None:
    report = sample("list_text_enumeration_1gpu.txt")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:03:00.0",
            uuid="5cff740f-0000-1000-8033-5a4ad1c2a8ba",
            kfd_id=12345,
            node_id=1,
            partition_id=0,
        ),
    )
    assert report.warnings == ()


def test_list_text_warning_before_data_and_all_na() -> None:
    report = sample("list_text_warning-before_1gpu.txt")
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:c1:00.0"),)
    assert report.warnings == (GROUPS_WARNING,)


PYTHON3 = SmiProcess(
    pid=3127, name="python3", gpu=0, vram_used_bytes=10 * GIB, gtt_used_bytes=2 * MIB, cpu_used_bytes=4096
)
HIDDEN = SmiProcess(pid=4242, name=None, gpu=0, vram_used_bytes=0, gtt_used_bytes=None, cpu_used_bytes=None)


@pytest.mark.parametrize("name", ["process_json_value-unit_2gpu.json", "process_text_2proc_2gpu.txt"])
def test_process_two_processes_and_an_idle_gpu(name: str) -> None:
    report = sample(name)
    assert report.gpus == (SmiGpu(index=0), SmiGpu(index=1))
    assert report.processes == (PYTHON3, HIDDEN)
    assert report.warnings == ()


def test_process_json_after_two_tool_messages() -> None:
    report = sample("process_json_warnings-before_rocm640.txt")
    assert report.format == "json"
    assert report.warnings == (
        GROUPS_WARNING,
        "Fail to open libdrm_amdgpu.so.1: libdrm_amdgpu.so.1: cannot open shared object file: "
        "No such file or directory",
    )
    assert report.processes == (
        SmiProcess(pid=2202, name=None, gpu=0, vram_used_bytes=MIB, gtt_used_bytes=0, cpu_used_bytes=0),
    )


def test_static_json_gpu_data_wrapper() -> None:
    report = sample("static_json_gpu-data-wrapper_amdsmi26.json")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:0c:00.0",
            numa_node=0,
            numa_affinity=0,
            unique_id="0x5a4ad1c2a8ba3e1f",
            model="AMD Instinct MI300X",
            device_id="0x74a1",
        ),
        SmiGpu(
            index=1,
            pci_bus="0000:22:00.0",
            numa_node=1,
            numa_affinity=-1,
            model="AMD Instinct MI300X",
            device_id="0x74a1",
        ),
    )
    assert report.warnings == ()


def test_static_text_numa_none_is_minus_one() -> None:
    report = sample("static_text_numa-bus_2gpu.txt")
    assert report.gpus == (
        SmiGpu(index=0, pci_bus="0000:03:00.0", numa_node=0, numa_affinity=0),
        SmiGpu(index=1, pci_bus="0000:83:00.0", numa_node=None, numa_affinity=-1),
    )


def test_topology_json_new_format_full() -> None:
    report = sample("topology_json_new-full_4gpu.json")
    bdfs = ["0000:29:00.0", "0000:2a:00.0", "0000:a9:00.0", "0000:aa:00.0"]
    assert report.gpus == tuple(SmiGpu(index=i, pci_bus=b) for i, b in enumerate(bdfs))
    expected = {(0, 1): (15, 1, "XGMI"), (0, 2): (30, 1, "XGMI"), (0, 3): (45, 3, "PCIE")}
    expected |= {(1, 2): (45, 3, "PCIE"), (1, 3): (30, 1, "XGMI"), (2, 3): (15, 1, "XGMI")}
    assert report.links == tuple(
        SmiLink(a=a, b=b, weight=w, hops=h, type=t, a_pci_bus=bdfs[a], b_pci_bus=bdfs[b])
        for (a, b), (w, h, t) in sorted(expected.items())
    )
    assert report.warnings == ()


LLAMA = SmiProcess(pid=777, name="llama-server", gpu=1, vram_used_bytes=4 * GIB, gtt_used_bytes=0, cpu_used_bytes=8192)
GPU_03 = SmiGpu(
    index=-1,
    pci_bus="0000:03:00.0",
    uuid="5cff740f-0000-1000-8033-5a4ad1c2a8ba",
    kfd_id=12345,
    node_id=1,
    partition_id=0,
)
GPU_83 = SmiGpu(
    index=-1,
    pci_bus="0000:83:00.0",
    uuid="e1ff740f-0000-1000-80c2-1b2c3d4e5f60",
    kfd_id=23456,
    node_id=2,
    partition_id=0,
)


def test_several_json_outputs_in_one_capture() -> None:
    report = sample("several-outputs_json_list-metric-process-topology_2gpu.txt")
    assert report.format == "json"
    assert report.gpus == (
        replace(GPU_03, index=0, vram_total_bytes=65520 * MIB, vram_used_bytes=10 * MIB),
        replace(GPU_83, index=1, vram_total_bytes=65520 * MIB, vram_used_bytes=4106 * MIB),
    )
    assert report.processes == (LLAMA,)
    assert report.links == (
        SmiLink(a=0, b=1, weight=72, hops=3, type="PCIE", a_pci_bus="0000:03:00.0", b_pci_bus="0000:83:00.0"),
    )
    assert report.warnings == (GROUPS_WARNING,)


def test_two_json_documents_on_one_line() -> None:
    report = sample("several-outputs_json_same-line-no-newline_1gpu.json")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:03:00.0",
            kfd_id=1,
            node_id=1,
            partition_id=0,
            vram_total_bytes=16368 * MIB,
            vram_used_bytes=0,
        ),
    )


def test_several_text_outputs_and_topology_columns_follow_the_bdf() -> None:
    """The table lists 03 before 83, but ``list`` says GPU 0 is 83: the BDF decides the index."""
    report = sample("several-outputs_text_list-metric-process-topology_2gpu.txt")
    assert report.format == "text"
    assert report.gpus == (
        replace(GPU_83, index=0, vram_total_bytes=65520 * MIB, vram_used_bytes=4106 * MIB),
        replace(GPU_03, index=1, vram_total_bytes=65520 * MIB, vram_used_bytes=10 * MIB),
    )
    assert report.processes == (replace(LLAMA, gpu=0),)
    assert report.links == (
        SmiLink(a=0, b=1, weight=72, hops=3, type="PCIE", a_pci_bus="0000:83:00.0", b_pci_bus="0000:03:00.0"),
    )
    assert report.warnings == ()


# --------------------------------------------------------------------------- garbage, warnings, errors


def test_garbage_lines_are_warnings_with_line_numbers() -> None:
    text = "GPU: 0\n    BDF: 0000:03:00.0\n    this line has no colon\nrandom trailer\n"
    report = parse_amd_smi(text)
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:03:00.0"),)
    assert report.warnings == ("line 3: cannot place: this line has no colon", "line 4: cannot place: random trailer")


def test_unreadable_values_are_none_and_warned_never_zero() -> None:
    doc = [
        {"gpu": 0, "bdf": "not-a-bdf", "mem_usage": {"total_vram": {"value": 1, "unit": "parsecs"}, "used_vram": "x"}}
    ]
    report = parse_amd_smi(json.dumps(doc))
    assert report.gpus == (SmiGpu(index=0),)
    assert report.warnings == (
        "GPU 0: not a PCI address: 'not-a-bdf'",
        "GPU 0 total_vram: unknown unit 'parsecs'",
        "GPU 0 used_vram: not a size: 'x'",
    )


def test_invalid_json_is_a_warning_when_other_data_is_there() -> None:
    text = '[{"gpu": 0, "bdf": \n' + json.dumps([{"gpu": 0, "bdf": "0000:03:00.0"}]) + "\n"
    report = parse_amd_smi(text)
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:03:00.0"),)
    assert len(report.warnings) == 1 and report.warnings[0].startswith("line 1: invalid JSON")


def test_a_truncated_json_document_is_one_warning_and_the_next_output_still_counts() -> None:
    pretty = read(DATA / "metric-mem-usage_json_value-unit_2gpu.json")
    cut = pretty[: pretty.index('"gpu": 1')]
    text = cut + "\n" + read(DATA / "list_json_oneline_2gpu-kfd-NA.json")
    report = parse_amd_smi(text)
    assert [g.pci_bus for g in report.gpus] == ["0000:0c:00.0", "0000:22:00.0"]
    assert report.gpus[0].vram_total_bytes is None  # the cut document is not half-used
    skipped_to = cut.count("\n") + 1
    assert report.warnings == (
        f"line 1: invalid JSON (Expecting property name enclosed in double quotes); skipped lines 1-{skipped_to}: [",
    )


def test_conflicting_values_keep_the_first_and_warn() -> None:
    text = "GPU: 0\n    BDF: 0000:03:00.0\n\nGPU: 0\n    BDF: 0000:04:00.0\n"
    report = parse_amd_smi(text)
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:03:00.0"),)
    assert len(report.warnings) == 1 and "pci_bus differs" in report.warnings[0]


def test_unexpected_process_info_string_is_a_warning() -> None:
    report = parse_amd_smi("GPU: 0\n    PROCESS_INFO: Permission denied\n")
    assert report.processes == ()
    assert report.warnings == ("GPU 0: process_info: Permission denied",)


def test_cpu_blocks_of_an_apu_are_skipped() -> None:
    report = parse_amd_smi("CPU: 0\n    SMU:\n        FW_VERSION: 1.2.3\n\nGPU: 0\n    BDF: 0000:c1:00.0\n")
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:c1:00.0"),)
    assert report.warnings == ()


def test_old_topology_with_na_cells() -> None:
    doc = [
        {
            "gpu": 0,
            "weight": {"gpu_0": 0, "gpu_1": "N/A"},
            "hops": {"gpu_0": 0, "gpu_1": "N/A"},
            "link_type": {"gpu_1": "N/A"},
        },
        {"gpu": 1, "weight": {"gpu_0": "N/A", "gpu_1": 0}},
    ]
    report = parse_amd_smi(json.dumps(doc))
    assert report.links == (SmiLink(a=0, b=1),)
    assert report.warnings == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "hello world\n",
        "[]",
        "{}",
        '{"card0": {"VRAM Total Memory (B)": "1"}}',
        "GPU[0]\t\t: VRAM Total Memory (B): 4278190080\n",
        "ERROR: Unable to detect any GPU devices, check amdgpu version and module status (sudo modprobe amdgpu)\n",
        "GPU: 99999999999999999999\n",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    ],
)
def test_not_amd_smi_output_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_amd_smi(text)


@pytest.mark.parametrize("path", ROCM_SMI_CAPTURES, ids=lambda p: p.name)
def test_rocm_smi_captures_are_not_amd_smi(path: Path) -> None:
    with pytest.raises(ParseError):
        parse_amd_smi(read(path))


def test_error_names_the_tool_message() -> None:
    with pytest.raises(ParseError, match="Unable to detect any GPU devices") as info:
        parse_amd_smi("ERROR: Unable to detect any GPU devices\n")
    assert info.value.line == 1


# --------------------------------------------------------------------------- merge


def test_merging_separate_runs_equals_parsing_them_together() -> None:
    combined = read(DATA / "several-outputs_json_list-metric-process-topology_2gpu.txt").splitlines()
    separate = [parse_amd_smi(line) for line in combined if line.startswith("[{")]
    metric = read(DATA / "several-outputs_json_list-metric-process-topology_2gpu.txt")
    start = metric.index("[\n")
    pretty = metric[start : metric.index("\n]\n", start) + 2]
    separate.insert(1, parse_amd_smi(pretty))
    merged = merge_amd_smi_reports(separate)
    together = sample("several-outputs_json_list-metric-process-topology_2gpu.txt")
    assert (merged.gpus, merged.processes, merged.links) == (together.gpus, together.processes, together.links)
    assert merged.warnings == ()
    check_invariants(merged)


def test_merge_renumbers_a_later_report_by_bdf() -> None:
    listed = SmiReport(
        tool="amd-smi",
        format="json",
        gpus=(SmiGpu(index=0, pci_bus="0000:03:00.0"), SmiGpu(index=1, pci_bus="0000:83:00.0")),
    )
    swapped = SmiReport(
        tool="amd-smi",
        format="json",
        gpus=(SmiGpu(index=0, pci_bus="0000:83:00.0", vram_used_bytes=5), SmiGpu(index=1, pci_bus="0000:03:00.0")),
        processes=(SmiProcess(pid=9, gpu=0),),
        links=(SmiLink(a=0, b=1, weight=7, a_pci_bus="0000:83:00.0", b_pci_bus="0000:03:00.0"),),
        warnings=("WARNING: x",),
    )
    merged = merge_amd_smi_reports([listed, swapped])
    assert merged.gpus == (
        SmiGpu(index=0, pci_bus="0000:03:00.0"),
        SmiGpu(index=1, pci_bus="0000:83:00.0", vram_used_bytes=5),
    )
    assert merged.processes == (SmiProcess(pid=9, gpu=1),)
    assert merged.links == (SmiLink(a=0, b=1, weight=7, a_pci_bus="0000:03:00.0", b_pci_bus="0000:83:00.0"),)
    assert merged.warnings == ("WARNING: x",)


def test_merge_fills_missing_fields_and_warns_on_conflicts() -> None:
    first = SmiReport(tool="amd-smi", format="json", gpus=(SmiGpu(index=0, vram_total_bytes=10),))
    second = SmiReport(
        tool="amd-smi",
        format="text",
        gpus=(SmiGpu(index=0, vram_total_bytes=11, vram_used_bytes=1, pci_bus="0000:03:00.0"),),
        processes=(SmiProcess(pid=1, gpu=0), SmiProcess(pid=1, gpu=0, name="a")),
    )
    merged = merge_amd_smi_reports([first, second])
    assert merged.format == "json"
    assert merged.gpus == (SmiGpu(index=0, pci_bus="0000:03:00.0", vram_total_bytes=10, vram_used_bytes=1),)
    assert merged.processes == (SmiProcess(pid=1, gpu=0, name="a"),)
    assert merged.warnings == ("GPU 0: vram_total_bytes differs between outputs (10, 11); kept the first",)


def test_merge_of_nothing_is_an_empty_report() -> None:
    assert merge_amd_smi_reports([]) == SmiReport(tool="amd-smi", format="json")


# --------------------------------------------------------------------------- --help


def help_of(name: str) -> AmdSmiHelp:
    return parse_amd_smi_help(read(DATA / "help" / name))


def test_top_level_help() -> None:
    top = help_of("top_rocm622.txt")
    assert top.command is None
    assert (top.version, top.rocm_version) == ("24.6.4.0", "6.2.2")
    assert top.commands == {
        "version", "list", "static", "firmware", "ucode", "bad-pages", "metric", "process",
        "event", "topology", "set", "reset", "monitor", "dmon", "xgmi",
    }  # fmt: skip
    assert top.options == {"-h", "--help"}


def test_subcommand_help_options() -> None:
    metric = help_of("metric_rocm622.txt")
    assert metric.command == "metric"
    assert metric.supports("--mem-usage") and metric.supports("-m") and metric.supports("--json")
    assert not metric.supports("--numa")
    static = help_of("static_rocm622.txt")
    assert static.command == "static"
    assert {"-u", "--numa", "-b", "--bus", "-a", "--asic", "--json"} <= static.options
    assert help_of("list_rocm622.txt").command == "list"


def test_commands_to_run_for_a_full_version() -> None:
    helps = [help_of(n) for n in ("top_rocm622.txt", "list_rocm622.txt", "metric_rocm622.txt", "static_rocm622.txt")]
    assert amd_smi_commands(helps) == (
        ("list", "--json"),
        ("metric", "--mem-usage", "--json"),
        ("process", "--json"),
        ("topology", "--json"),
        ("static", "--numa", "--bus", "--asic", "--json"),
    )


def test_commands_to_run_for_an_old_version_without_topology() -> None:
    top = help_of("top_old-no-topology.txt")
    assert (top.version, top.rocm_version) == ("23.0.1", "5.7.0")
    assert "topology" not in top.commands
    no_mem = AmdSmiHelp(command="metric", options=frozenset({"-h", "--json", "-u"}))
    assert amd_smi_commands([top, no_mem]) == (("list", "--json"), ("process", "--json"))


@pytest.mark.parametrize(
    "text", ["", "usage: rocm-smi [-h] [-d DEVICE [DEVICE ...]]\n", "AMD System Management Interface\n"]
)
def test_help_that_is_not_amd_smi_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_amd_smi_help(text)


# --------------------------------------------------------------------------- hypothesis


def parse_or_error(text: str) -> None:
    try:
        report = parse_amd_smi(text)
    except ParseError:
        return
    check_invariants(report)


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_any_text_gives_a_report_or_a_parse_error(text: str) -> None:
    parse_or_error(text)


ALL_TEXTS = [read(p) for p in SHARED_CAPTURES + SYNTHETIC]
LINE = st.sampled_from(
    [
        "",
        "GPU: 0",
        "GPU: 1",
        "    BDF: 0000:03:00.0",
        "    PROCESS_INFO:",
        "        PID: x",
        "WEIGHT TABLE:",
        "[",
        "{",
        "]",
    ]
) | st.text(max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ALL_TEXTS), st.integers(min_value=0, max_value=2**32), st.lists(LINE, max_size=5))
def test_mutated_captures_give_a_report_or_a_parse_error(text: str, seed: int, inserts: list[str]) -> None:
    rng = random.Random(seed)
    lines = text.splitlines()
    for _ in range(rng.randint(1, 6)):  # bounded
        op = rng.randrange(5)
        at = rng.randrange(len(lines) + 1)
        if op == 0 and lines:
            del lines[min(at, len(lines) - 1)]
        elif op == 1:
            lines.insert(at, inserts[at % len(inserts)] if inserts else "garbage")
        elif op == 2 and lines:
            j = min(at, len(lines) - 1)
            cut = rng.randrange(len(lines[j]) + 1)
            lines[j] = lines[j][:cut]
        elif op == 3 and lines:
            j = min(at, len(lines) - 1)
            lines.insert(j, lines[j])
        else:
            chars = list("\n".join(lines))
            if chars:
                chars[rng.randrange(len(chars))] = rng.choice('{}[]:,"0 \tN/A-')
            lines = "".join(chars).splitlines()
    parse_or_error("\n".join(lines))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
JSON_CAPTURES = [
    json.loads(read(p)) for p in SHARED_CAPTURES + SYNTHETIC if p.suffix == ".json" and "several" not in p.name
]
KEYS = ["gpu", "bdf", "mem_usage", "process_list", "links", "weight", "hops", "link_type", "numa", "asic", "uuid"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(JSON_CAPTURES), st.sampled_from(KEYS), JSON_VALUES, st.integers(min_value=0, max_value=50))
def test_json_with_a_field_replaced_gives_a_report_or_a_parse_error(
    doc: object, key: str, value: object, at: int
) -> None:
    items = doc["gpu_data"] if isinstance(doc, dict) else doc
    assert isinstance(items, list)
    copied = json.loads(json.dumps(items))
    copied[at % len(copied)][key] = value
    parse_or_error(json.dumps(copied))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_help_parser_gives_a_result_or_a_parse_error(text: str) -> None:
    for candidate in (text, "usage: amd-smi " + text):
        try:
            result = parse_amd_smi_help(candidate)
        except ParseError:
            continue
        assert isinstance(result, AmdSmiHelp)
        amd_smi_commands([result])


# --------------------------------------------------------------------------- formats seen in public pastes


def test_monitor_watch_table_last_sample_wins_and_usage_with_padded_total() -> None:
    report = sample("monitor_text_watch-timestamp_2gpu.txt")
    assert report.format == "text"
    assert [g.index for g in report.gpus] == [0, 1]
    gpu0, gpu1 = report.gpus
    assert gpu0.vram_used_bytes == round(6.5 * GIB)
    assert gpu0.vram_total_bytes == 64 * GIB
    assert gpu1.vram_used_bytes is None  # the last sample printed N/A: never 0, never the older sample
    assert gpu1.vram_total_bytes is None
    assert report.warnings == (GROUPS_WARNING, "'CTRL' + 'C' to stop watching output:")


def test_monitor_xcp_rows_and_gtt_usage_are_not_vram() -> None:
    report = sample("monitor_text_xcp-gtt-usage_2gpu.txt")
    assert report.gpus == (SmiGpu(index=0), SmiGpu(index=1))
    assert report.warnings == ()


def test_monitor_process_table() -> None:
    report = sample("monitor-process_text_2proc_1gpu.txt")
    assert report.gpus == (SmiGpu(index=0, vram_total_bytes=128 * GIB, vram_used_bytes=12 * GIB),)
    assert report.processes == (
        SmiProcess(
            pid=41001,
            name="trainer",
            gpu=0,
            vram_used_bytes=round(10.5 * GIB),
            gtt_used_bytes=2 * MIB,
            cpu_used_bytes=8 * 1024,
        ),
        SmiProcess(pid=41002, name=None, gpu=0, vram_used_bytes=512 * MIB, gtt_used_bytes=0, cpu_used_bytes=0),
    )
    assert report.warnings == ()


def test_monitor_row_that_does_not_fit_the_header_is_a_warning() -> None:
    text = "GPU  POWER   GPU_T      VRAM_USAGE\n  0  100 W   40 °C    1.0/8.0 GB\n  1  100 W   1.0/8.0 GB\n"
    report = parse_amd_smi(text)
    assert report.gpus == (SmiGpu(index=0, vram_total_bytes=8 * GIB, vram_used_bytes=GIB),)
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith("line 3: monitor row has 3 cells for 4 columns")


def test_list_with_an_ai_nic_block_keeps_the_gpu_and_skips_the_nic() -> None:
    report = sample("list_text_ai-nic-block-after-gpu_1gpu.txt")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:41:00.0",
            uuid="11ff22aa-0000-1000-8000-0123456789ab",
            kfd_id=1234,
            node_id=1,
            partition_id=0,
        ),
    )
    assert report.warnings == ()


def test_a_list_value_folded_over_lines_is_not_a_warning() -> None:
    report = sample("metric_text_folded-list_1gpu.txt")
    assert report.gpus == (SmiGpu(index=0, vram_total_bytes=24560 * MIB, vram_used_bytes=1200 * MIB),)
    assert report.warnings == ()


# --------------------------------------------------------------------------- default view (plain ``amd-smi``)

BOX_CHARACTERS = set("|+═│─┼")


def assert_no_box_characters(report: SmiReport) -> None:
    records: list[SmiGpu | SmiProcess] = [*report.gpus, *report.processes]
    for record in records:
        for value in (getattr(record, field.name) for field in fields(record)):
            assert not (isinstance(value, str) and BOX_CHARACTERS & set(value)), value


def test_default_view_two_gpus_and_two_processes() -> None:
    report = sample("default_text_box_2gpu-2proc.txt")
    assert report.format == "text"
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:1a:00.0",
            model="AMD Instinct MI250X",
            vram_used_bytes=30000 * MIB,
            vram_total_bytes=65504 * MIB,
        ),
        # no market name: amd-smi prints the device ID; N/A used stays None, never 0
        SmiGpu(index=1, pci_bus="0000:2b:00.0", device_id="0x74a5", vram_total_bytes=512 * MIB),
    )
    assert report.processes == (
        SmiProcess(pid=2200001, name="train.py", gpu=0, vram_used_bytes=round(12.5 * GIB), gtt_used_bytes=4 * MIB),
        SmiProcess(pid=31337, name=None, gpu=1, vram_used_bytes=64 * 1024, gtt_used_bytes=0),
    )
    assert report.warnings == ()
    assert_no_box_characters(report)


def test_default_view_indented_wide_header_and_no_processes() -> None:
    report = sample("default_text_box_indented-wide-header-no-procs_1gpu.txt")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:c3:00.0",
            model="AMD Radeon PRO W7800",
            vram_used_bytes=100 * MIB,
            vram_total_bytes=32752 * MIB,
        ),
    )
    assert report.processes == ()
    assert report.warnings == ()


def test_default_view_cut_name_and_cut_border() -> None:
    report = sample("default_text_box_cut-name-and-border_1gpu.txt")
    assert report.gpus == (
        SmiGpu(
            index=0,
            pci_bus="0000:9a:00.0",
            model="...nstinct MI325X OAM1",
            vram_used_bytes=GIB,
            vram_total_bytes=32 * GIB,
        ),
    )
    assert report.warnings == ("line 7: GPU 0 name cut by amd-smi: ...nstinct MI325X OAM1",)


def test_default_view_processes_box_alone() -> None:
    report = sample("default_text_box_processes-only_2gpu.txt")
    assert report.gpus == (SmiGpu(index=0), SmiGpu(index=1))
    assert report.processes == (
        SmiProcess(pid=4100, name="vllm-worker", gpu=0, vram_used_bytes=round(1.5 * GIB), gtt_used_bytes=8 * MIB),
        SmiProcess(pid=4100, name="vllm-worker", gpu=1, vram_used_bytes=512 * 1024, gtt_used_bytes=8 * MIB),
        SmiProcess(pid=4222, name="hipcc", gpu=1, vram_used_bytes=0, gtt_used_bytes=0),
    )
    assert report.warnings == ()


def test_default_view_drawn_with_unicode_box_characters_reads_the_same() -> None:
    text = read(DATA / "default_text_box_2gpu-2proc.txt")
    redrawn = text.replace("|", "│").replace("=", "═").replace("+-", "┼-").replace("-+", "-┤")
    assert parse_amd_smi(redrawn) == sample("default_text_box_2gpu-2proc.txt")


def test_default_view_with_prompt_lines_warns_about_them_only() -> None:
    text = "user@node:~$ amd-smi\n" + read(DATA / "default_text_box_2gpu-2proc.txt") + "$ uname -r\n6.8.0\n"
    report = parse_amd_smi(text)
    assert report.gpus == sample("default_text_box_2gpu-2proc.txt").gpus
    assert report.warnings == (
        "line 1: cannot place: user@node:~$ amd-smi",
        "line 23: cannot place: $ uname -r",
        "line 24: cannot place: 6.8.0",
    )


def test_default_view_merges_with_list_by_bdf() -> None:
    listed = parse_amd_smi("GPU: 0\n    BDF: 0000:1A:00.0\n    UUID: 1234\n")
    merged = merge_amd_smi_reports([listed, sample("default_text_box_2gpu-2proc.txt")])
    assert merged.gpus[0].uuid == "1234"
    assert merged.gpus[0].model == "AMD Instinct MI250X"


def test_a_box_that_is_not_amd_smi_is_not_amd_smi_output() -> None:
    with pytest.raises(ParseError):
        parse_amd_smi("+-------+\n| hello |\n| 1 | 2 |\n+-------+\n")


def test_a_default_view_header_without_gpus_is_an_empty_report() -> None:
    text = "+----+\n| AMD-SMI 26.9.1+0a1b2c3d      amdgpu version: 6.20.1   ROCm version: 7.9.1 |\n+----+\n"
    report = parse_amd_smi(text)
    assert (report.gpus, report.processes) == ((), ())
    assert report.warnings == ("amd-smi output with no GPU: no GPU entry",)


def test_a_gpu_entry_missing_its_second_line_is_a_warning() -> None:
    text = read(DATA / "default_text_box_2gpu-2proc.txt").splitlines(keepends=True)
    del text[9]  # GPU 0's index line
    report = parse_amd_smi("".join(text))
    assert [g.index for g in report.gpus] == [0, 1]  # GPU 0 still exists through its process row
    assert report.gpus[1].pci_bus == "0000:2b:00.0"
    assert report.gpus[0].pci_bus is None
    assert "line 9: GPU entry without its second line" in report.warnings


# --------------------------------------------------------------------------- no GPU, redacted values


def test_nic_only_list_is_amd_smi_output_with_no_gpu() -> None:
    report = sample("list_text_nic-only_no-gpu.txt")
    assert (report.format, report.gpus, report.processes, report.links) == ("text", (), (), ())
    assert report.warnings == ("amd-smi output with no GPU: only other devices (AI_NIC)",)


def test_nic_only_json_is_amd_smi_output_with_no_gpu() -> None:
    report = sample("list_json_nic-only_no-gpu.json")
    assert (report.format, report.gpus) == ("json", ())
    assert report.warnings == ("amd-smi output with no GPU: only other devices (NIC)",)


@pytest.mark.parametrize("text", ["AI_NIC: 0\n", "NOTE: 5\nsome text\n", "CPU: 0\nnot indented: 1\n"])
def test_a_device_header_without_a_block_is_not_amd_smi_output(text: str) -> None:
    with pytest.raises(ParseError):
        parse_amd_smi(text)


def test_redacted_serial_and_uuid_are_none() -> None:
    report = sample("static_text_redacted-serial-uuid_1gpu.txt")
    assert report.gpus == (SmiGpu(index=0, pci_bus="0000:5e:00.0", model="AMD Instinct MI300X", device_id="0x74a1"),)
    assert report.warnings == ()


def test_redacted_values_in_json_are_none_and_not_warnings() -> None:
    doc = [{"gpu": 0, "bdf": "<REDACTED>", "uuid": "<redacted>", "asic": {"asic_serial": "[redacted]"}}]
    report = parse_amd_smi(json.dumps(doc))
    assert report.gpus == (SmiGpu(index=0),)
    assert report.warnings == ()
