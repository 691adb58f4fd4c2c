"""Write the synthetic rocm-smi samples of this folder (see PROVENANCE.md). Run from the repository root:

    .venv/bin/python tests/data/rocm-smi/generate.py

The helpers below re-implement the print format strings of rocm_smi.py (``printLogSpacer``, ``printLog``,
``print2DArray``, ``printTableRow``, ``formatJson``/``formatCsv``) as quoted in research/smi-formats.md, so each
sample is what that code prints for the values chosen here. The values are invented, not measured.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent

Matrix = Callable[[int, int], str]


def spacer(title: str | None = None, width: int = 90, spaced: bool = True, fill: str = "=") -> str:
    """printLogSpacer: an odd-length title gets one fill character appended, then it is centred."""
    if title is None:
        return fill * width
    text = f" {title} " if spaced else title
    if len(text) % 2:
        text += fill
    half = (width - len(text)) // 2
    return fill * half + text + fill * half


def gpu(index: int, key: str, value: object | None = None, xcp: int | None = None) -> str:
    """printLog: ``GPU[%s]\\t\\t: %s: %s``, ``GPU[%s] XCP[%s]\\t: ...``, or the key alone when value is None."""
    prefix = f"GPU[{index}]\t\t: " if xcp is None else f"GPU[{index}] XCP[{xcp}]\t: "
    return prefix + (key if value is None else f"{key}: {value}")


def pid_table(rows: Sequence[Sequence[str]], details: bool = False) -> list[str]:
    """print2DArray: every cell ljust to its column width, then a TAB (so each row ends with a TAB)."""
    header = ["PID", "PROCESS NAME", "GPU" if details else "GPU(s)", "VRAM USED", "SDMA USED", "CU OCCUPANCY"]
    table = [header, *[list(r) for r in rows]]
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    return ["".join(cell.ljust(widths[c]) + "\t" for c, cell in enumerate(row)) for row in table]


def matrix(indices: Sequence[int], cell: Matrix) -> list[str]:
    """printTableRow: 6 spaces + ' ', then '%-12s ' per GPU; rows '%-6s ' then '%-12s ' cells."""
    lines = ["      " + " " + "".join(f"{'GPU' + str(i):<12} " for i in indices)]
    for a in indices:
        cells = "".join(f"{'0' if a == b else cell(a, b):<12} " for b in indices)
        lines.append(f"{'GPU' + str(a):<6} " + cells)
    return lines


def topology(indices: Sequence[int], weight: Matrix, hops: Matrix, kind: Matrix, width: int) -> list[str]:
    """showHwTopology: Weight, empty line, Hops, empty line, Link Type, empty line, Numa Nodes."""
    out = [spacer("Weight between two GPUs", width), *matrix(indices, weight), ""]
    out += [spacer("Hops between two GPUs", width), *matrix(indices, hops), ""]
    out += [spacer("Link Type between two GPUs", width), *matrix(indices, kind), ""]
    return out


def write(
    name: str, lines: Sequence[str], expand_tabs: bool = False, strip_trailing: bool = False, crlf: bool = False
) -> None:
    text = "\n".join(lines) + "\n"
    if expand_tabs:
        text = text.expandtabs(8)
    if strip_trailing:
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    if crlf:
        text = text.replace("\n", "\r\n")
    (HERE / name).write_bytes(text.encode("utf-8"))


def mi300x() -> None:
    """ROCm 6.2-style text, 8 x MI300X on XGMI, real tabs, 90-column banners, the two leading blank lines."""
    n = range(8)
    buses = ["0000:0C:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5C:00.0"]
    buses += ["0000:9F:00.0", "0000:AF:00.0", "0000:BF:00.0", "0000:DF:00.0"]
    out = ["", "", spacer("ROCm System Management Interface"), spacer("Unique ID")]
    out += [gpu(i, "Unique ID", f"0x{0x18A0B1C2D3E4F500 + i:x}") for i in n] + [spacer()]
    out += [spacer("KFD Processes"), "KFD process information:"]
    out += pid_table([["3127", "python3", "8", "8589934592", "0", "0"], ["4410", "rccl-tests", "2", "0", "0", "0"]])
    out += [spacer(), spacer("PCI Bus ID")] + [gpu(i, "PCI Bus", buses[i]) for i in n] + [spacer()]
    out += [spacer("Memory Usage (Bytes)")]
    for i in n:
        out += [gpu(i, "VRAM Total Memory (B)", 206141652992), gpu(i, "VRAM Total Used Memory (B)", 293601280 + i)]
    out += [spacer(), spacer("Product Info")]
    for i in n:
        out += [
            gpu(i, "Card Series", "\t\tAMD Instinct MI300X"),
            gpu(i, "Card Model", "\t\t0x74a1"),
            gpu(i, "Card Vendor", "\t\tAdvanced Micro Devices, Inc. [AMD/ATI]"),
            gpu(i, "Card SKU", "\t\tM3000100"),
            gpu(i, "Subsystem ID", "\t0x74a1"),
            gpu(i, "Device Rev", "\t\t0x00"),
            gpu(i, "Node ID", f"\t\t{i + 2}"),
            gpu(i, "GUID", f"\t\t{11000 + i}"),
            gpu(i, "GFX Version", "\t\tgfx942"),
        ]
    out += [spacer()]
    out += topology(n, lambda a, b: "15", lambda a, b: "1", lambda a, b: "XGMI", 90)
    out += [spacer("Numa Nodes")]
    for i in n:
        out += [gpu(i, "(Topology) Numa Node", i // 4), gpu(i, "(Topology) Numa Affinity", i // 4)]
    out += [spacer("End of ROCm SMI Log")]
    write("text_mi300x-8gpu-xgmi_tabs_w90.txt", out)


def mi250() -> None:
    """ROCm 5.7-style text, 4 x MI250 = 8 GCDs, tabs expanded to spaces, 80 columns, ``--showpids details``."""
    n = range(8)

    def weight(a: int, b: int) -> str:
        return "15" if a // 2 == b // 2 else ("30" if abs(a // 2 - b // 2) == 1 else "45")

    out = ["", "", spacer("ROCm System Management Interface", 80), spacer("Unique ID", 80)]
    out += [gpu(i, "Unique ID", f"0x{0x7E00A1B2C3D4E500 + i:x}") for i in n] + [spacer(width=80)]
    out += [spacer("KFD Processes", 80), "KFD process information:"]
    out += pid_table(
        [
            ["20001", "pt_main_thread", "2", "17179869184", "1024", "55"],
            ["20001", "pt_main_thread", "2", "4294967296", "0", "UNKNOWN"],
            ["20077", "hipMemcpy", "1", "1048576", "0", "0"],
        ],
        details=True,
    )
    out += [spacer(width=80), spacer("PCI Bus ID", 80)]
    out += [gpu(i, "PCI Bus", f"0000:{0x29 + 0x10 * i:02X}:00.0") for i in n] + [spacer(width=80)]
    out += [spacer("Memory Usage (Bytes)", 80)]
    for i in n:
        out += [gpu(i, "VRAM Total Memory (B)", 68702699520), gpu(i, "VRAM Total Used Memory (B)", 10731520)]
    out += [spacer(width=80), spacer("Product Info", 80)]
    for i in n:
        out += [
            gpu(i, "Card series", "\t\tAldebaran/MI200 [Instinct MI250X/MI250]"),
            gpu(i, "Card model", "\t\t0x0b0c"),
            gpu(i, "Card vendor", "\t\tAdvanced Micro Devices, Inc. [AMD/ATI]"),
            gpu(i, "Card SKU", "\t\tD65209"),
        ]
    out += [spacer(width=80)]
    out += topology(n, weight, lambda a, b: "1", lambda a, b: "XGMI", 80)
    out += [spacer("Numa Nodes", 80)]
    for i in n:
        out += [gpu(i, "(Topology) Numa Node", 0 if i < 4 else 1), gpu(i, "(Topology) Numa Affinity", -1)]
    out += [spacer("End of ROCm SMI Log", 80)]
    write("text_mi250-8gcd_spaces_w80_details.txt", out, expand_tabs=True, strip_trailing=True)


def dual_socket() -> None:
    """ROCm 5.x-style text, 4 PCIe GPUs on two sockets, 84 columns; one pair unreadable, failed reads."""
    n = range(4)

    def weight(a: int, b: int) -> str:
        return "N/A" if {a, b} == {2, 3} else ("40" if a // 2 == b // 2 else "72")

    def hops(a: int, b: int) -> str:
        return "N/A" if {a, b} == {2, 3} else ("2" if a // 2 == b // 2 else "3")

    def kind(a: int, b: int) -> str:
        return "XXXX" if {a, b} == {2, 3} else "PCIE"

    out = ["", "", spacer("ROCm System Management Interface", 84), spacer("Unique ID", 84)]
    out += [gpu(0, "Unique ID", "0x2f048617326b1ea"), gpu(1, "Unique ID", "N/A")]
    out += [gpu(2, "Unique ID", "0x4edfb117a17a07d"), gpu(3, "Unique ID", "0x1b9dd972253c3736"), spacer(width=84)]
    out += [spacer("KFD Processes", 84)]
    out += ["get_compute_process_info_by_pid, Not supported on the given system"] * 2
    out += ["KFD process information"]
    out += pid_table(
        [
            ["5150", "ollama_llama_se", "1", "UNKNOWN", "UNKNOWN", "UNKNOWN"],
            ["5188", "UNKNOWN", "UNKNOWN", "0", "0", "0"],
        ]
    )
    out += [spacer(width=84), spacer("PCI Bus ID", 84)]
    out += [
        gpu(i, "PCI Bus", bus) for i, bus in enumerate(["0000:23:00.0", "0000:26:00.0", "0000:A3:00.0", "0000:A6:00.0"])
    ]
    out += [spacer(width=84), spacer("Memory Usage (Bytes)", 84)]
    for i in range(3):
        out += [gpu(i, "VRAM Total Memory (B)", 34342961152), gpu(i, "VRAM Total Used Memory (B)", 6750208)]
    out += [gpu(3, "VRAM Total Memory (B)", 34342961152), gpu(3, "VRAM Total Used Memory (B)")]
    out += [spacer(width=84), spacer("Product Info", 84)]
    for i in n:
        out += [gpu(i, "Card series", "\t\tRadeon Instinct MI50 32GB"), gpu(i, "Card model", "\t\t0x0834")]
        out += [gpu(i, "Card vendor", "\t\tAdvanced Micro Devices, Inc. [AMD/ATI]"), gpu(i, "Card SKU", "\t\tD16317")]
    out += [spacer(width=84)]
    out += ["ERROR: GPU[2]\t: Cannot read Link Weight: Not supported on this machine"]
    out += ["ERROR: GPU[3]\t: Cannot read Link Weight: Not supported on this machine"]
    out += topology(n, weight, hops, kind, 84)
    out += [spacer("Numa Nodes", 84)]
    for i in n:
        out += [gpu(i, "(Topology) Numa Node", i // 2), gpu(i, "(Topology) Numa Affinity", 4294967295)]
    out += [spacer("End of ROCm SMI Log", 84)]
    write("text_dual-socket-4gpu_na-xxxx_w84.txt", out)


def rocm33() -> None:
    """ROCm <= 3.x-style text: banners without spaces around the title, GPU ID / Card series, no PIDs."""
    out = ["", "", spacer("ROCm System Management Interface", 80, spaced=False)]
    out += [spacer("Unique ID", 80, spaced=False), gpu(0, "Unique ID", "N/A"), gpu(1, "Unique ID", "N/A")]
    out += [spacer(width=80), spacer("KFD Processes", 80, spaced=False), "No KFD PIDs currently running"]
    out += [spacer(width=80), spacer("PCI Bus ID", 80, spaced=False)]
    out += [gpu(0, "PCI Bus", "0000:03:00.0"), gpu(1, "PCI Bus", "0000:43:00.0"), spacer(width=80)]
    out += [spacer("Memory Usage (Bytes)", 80, spaced=False)]
    for i in range(2):
        out += [gpu(i, "VRAM Total Memory (B)", 8573157376), gpu(i, "VRAM Total Used Memory (B)", 12763136)]
    out += [spacer(width=80), spacer("Product Info", 80, spaced=False)]
    for i in range(2):
        out += [gpu(i, "GPU ID", "0x687f"), gpu(i, "Card series", "\t\tVega 10 XL/XT [Radeon RX Vega 56/64]")]
    out += [spacer(width=80)]
    out += topology(range(2), lambda a, b: "40", lambda a, b: "2", lambda a, b: "PCIE", 80)
    out += [spacer("Numa Nodes", 80, spaced=False)]
    for i in range(2):
        out += [gpu(i, "(Topology) Numa Node", 0), gpu(i, "(Topology) Numa Affinity", 4294967295)]
    out += [spacer("End of ROCm SMI Log", 80, spaced=False)]
    write("text_rocm33-2gpu_nospace-banner.txt", out)


def vllm() -> None:
    """A vLLM collect_env paste of ``rocm-smi --showtopo``: indented first line, trailing spaces lost, 1 GPU."""
    out = ["  " + spacer("ROCm System Management Interface", 90)]
    out += topology([0], lambda a, b: "0", lambda a, b: "0", lambda a, b: "0", 90)
    out += [spacer("Numa Nodes", 90), gpu(0, "(Topology) Numa Node", 0), gpu(0, "(Topology) Numa Affinity", -1)]
    out += [spacer("End of ROCm SMI Log", 90)]
    write("text_vllm-collect-env_1gpu-topo.txt", out, expand_tabs=True, strip_trailing=True)


def xcp() -> None:
    """ROCm 6.2-style text of a partitioned MI300X (CPX): ``GPU[n] XCP[m]`` lines and function-number BDFs."""
    out = ["", "", spacer("ROCm System Management Interface"), spacer("% time GPU is busy")]
    for i in range(2):
        out += [gpu(i, "GPU use (%)", 3 * i)]
        out += [gpu(i, "GFX Activity", 100 + x, xcp=x) for x in range(2)]
    out += [spacer(), spacer("PCI Bus ID"), gpu(0, "PCI Bus", "0000:0C:00.0"), gpu(1, "PCI Bus", "0000:0C:00.1")]
    out += [spacer(), spacer("Memory Usage (Bytes)")]
    for i in range(2):
        out += [gpu(i, "VRAM Total Memory (B)", 25769803776), gpu(i, "VRAM Total Used Memory (B)", 0)]
    out += [spacer(), spacer("End of ROCm SMI Log")]
    write("text_mi300x-cpx_xcp-lines.txt", out)


def json_oneline() -> None:
    """``--json`` as rocm-smi prints it (one line), behind a WARNING line, 2 x MI300X, PIDs and topology."""
    data: dict[str, dict[str, str]] = {}
    for i, bus in enumerate(["0000:0C:00.0", "0000:22:00.0"]):
        data[f"card{i}"] = {
            "Unique ID": f"0x{0x18A0B1C2D3E4F500 + i:x}",
            "PCI Bus": bus,
            "VRAM Total Memory (B)": "206141652992",
            "VRAM Total Used Memory (B)": str(293601280 + i),
            "Card Series": "AMD Instinct MI300X",
            "Card Model": "0x74a1",
            "Card Vendor": "Advanced Micro Devices Inc. [AMD/ATI]",
            "Card SKU": "M3000100",
            "(Topology) Numa Node": "0",
            "(Topology) Numa Affinity": "0",
        }
    data["system"] = {
        "PID3127": "python3, 2, 8589934592, 0, 0",
        "PID4410": "rccl-tests, 1, unknown, unknown, unknown",
        "(Topology) Weight between DRM devices 0 and 1": "15",
        "(Topology) Hops between DRM devices 0 and 1": "1",
        "(Topology) Link type between DRM devices 0 and 1": "XGMI",
    }
    warning = "WARNING: AMD GPUs visible, but data is inaccessible. Check power control/runtime_status"
    write("json_oneline_mi300x-2gpu_warning.txt", [warning, "", json.dumps(data)])


def json_mi300x_8gpu_topology() -> None:
    """``--json`` of the collector's whole query on 8 x MI300X (one XGMI hive, two NUMA nodes): every card's
    identity and VRAM, two PIDs and the full topology (weight, hops, link type of every pair, as rocm-smi names
    them ``a and b`` with a < b). What benchmarks/suite.py's /bin/sh stub prints for ``once``."""
    buses = ["0000:0C:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5C:00.0"]
    buses += ["0000:9F:00.0", "0000:AF:00.0", "0000:BF:00.0", "0000:DF:00.0"]
    data: dict[str, dict[str, str]] = {}
    for i, bus in enumerate(buses):
        data[f"card{i}"] = {
            "Unique ID": f"0x{0x28A0B1C2D3E4F500 + i:x}",
            "PCI Bus": bus,
            "VRAM Total Memory (B)": "206141652992",
            "VRAM Total Used Memory (B)": str(293601280 + i * 4096),
            "Card Series": "AMD Instinct MI300X",
            "Card Model": "0x74a1",
            "Card Vendor": "Advanced Micro Devices Inc. [AMD/ATI]",
            "Card SKU": "M3000100",
            "(Topology) Numa Node": str(i // 4),
            "(Topology) Numa Affinity": str(i // 4),
        }
    system = {"PID3127": "python3, 8, 68719476736, 0, 0", "PID4410": "rccl-tests, 8, unknown, unknown, unknown"}
    for a in range(8):
        for b in range(a + 1, 8):
            system[f"(Topology) Weight between DRM devices {a} and {b}"] = "15"
            system[f"(Topology) Hops between DRM devices {a} and {b}"] = "1"
            system[f"(Topology) Link type between DRM devices {a} and {b}"] = "XGMI"
    data["system"] = system
    write("json_oneline_mi300x-8gpu_topology.txt", [json.dumps(data)])


def csv_sample() -> None:
    """``--csv``: formatCsv drops commas inside values and writes N/A for a key a card lacks."""
    keys = ["Unique ID", "PCI Bus", "VRAM Total Memory (B)", "VRAM Total Used Memory (B)", "Card series"]
    keys += ["Card vendor", "(Topology) Numa Node", "(Topology) Numa Affinity"]
    rows = [
        ["card0", "0x79ccd55167a2124a", "0000:83:00.0", "34342961152", "6750208", "Arcturus GL-XL [Instinct MI100]"],
        ["card1", "N/A", "0000:A3:00.0", "34342961152", "N/A", "Arcturus GL-XL [Instinct MI100]"],
    ]
    rows[0] += ["Advanced Micro Devices Inc. [AMD/ATI]", "1", "1"]
    rows[1] += ["Advanced Micro Devices Inc. [AMD/ATI]", "1", "4294967295"]
    write("csv_mi100-2gpu.csv", [",".join(["device", *keys]), *[",".join(r) for r in rows]])


# --------------------------------------------------------------------------------------------------------
# Paste styles seen in public issue threads (PROVENANCE.md names the threads; the values here are invented).


def csv_fenced() -> None:
    """A CSV capture inside a Markdown fence, after a sentence and the ``$ rocm-smi ... --csv`` command line."""
    keys = ["GPU use (%)", "VRAM Total Memory (B)", "VRAM Total Used Memory (B)", "PCI Bus", "Card Series"]
    rows = [
        ["card0", "3", "25753026560", "1073741824", "0000:03:00.0", "Navi 31 [Radeon RX 7900 XTX]"],
        ["card1", "0", "536870912", "N/A", "0000:7A:00.0", "Phoenix1"],
    ]
    out = ["Here is what the node prints:", "```console", "$ rocm-smi --showuse --showmeminfo vram --showbus --csv"]
    out += [",".join(["device", *keys]), *[",".join(r) for r in rows], "```"]
    write("csv_fenced-prompt_2gpu.txt", out)


def json_fenced() -> None:
    """Pretty-printed JSON (as posters reformat it) in a ```json fence after a root prompt running sudo rocm-smi."""
    data = {
        "card0": {
            "Unique ID": "0x66c2a0e1d4b3f918",
            "PCI Bus": "0000:C3:00.0",
            "VRAM Total Memory (B)": "68702699520",
            "VRAM Total Used Memory (B)": "11927552",
            "Card Series": "AMD Instinct MI210",
        }
    }
    out = ["root@gpu-node:~# sudo rocm-smi --showuniqueid --showbus --showmeminfo vram --json", "```json"]
    out += [*json.dumps(data, indent=4).split("\n"), "```"]
    write("json_fenced-pretty_root-prompt.txt", out)


def rocm19_concise() -> None:
    """ROCm 1.9-3.x plain ``rocm-smi``: the concise table under an untitled spacer, header and rows indented."""
    out = [spacer("    ROCm System Management Interface    ", 80, spaced=False), spacer(width=80)]
    out += [" GPU  Temp    AvgPwr   SCLK     MCLK     Fan      Perf    SCLK OD    MCLK OD"]
    out += ["  0   N/A     N/A      N/A      N/A      0%       N/A       N/A        N/A"]
    out += ["  1   41c     21.0W    300Mhz   500Mhz   17.25%   auto      0%         0%"]
    out += ["  2   38c     19.0W    300Mhz   500Mhz   17.25%   auto      0%         0%"]
    out += [spacer(width=80), spacer("           End of ROCm SMI Log          ", 80, spaced=False)]
    write("text_rocm19-untitled-concise_indented.txt", out)


def allinfo() -> None:
    """A ``rocm-smi -a``-style capture: many sections this parser does not read, failure lines, --showpidgpus."""
    w = 84
    out = ["rocm-smi -a", "", "", spacer("ROCm System Management Interface", w)]
    out += [spacer("Version of System Component", w), "Driver version: 6.8.5", spacer(width=w)]
    out += [spacer("ID", w), gpu(0, "GPU ID", "0x15bf"), gpu(1, "GPU ID", "0x73df"), spacer(width=w)]
    out += [spacer("Unique ID", w), gpu(0, "Unique ID", "N/A"), gpu(1, "Unique ID", "0x3c5e8a9b7d1f2e40")]
    out += [spacer(width=w), spacer("Current Fan Metric", w), gpu(0, "Unable to detect fan speed for GPU 0")]
    out += [gpu(1, "Fan Level", "41 (16%)"), spacer(width=w), spacer("Power Cap", w)]
    out += [
        gpu(0, "get_power_cap, Not supported on the given system"),
        gpu(1, "Max Graphics Package Power (W)", "186.0"),
    ]
    out += [spacer(width=w), spacer("Supported clock frequencies", w)]
    for i in range(2):
        out += [gpu(i, f"Supported sclk frequencies on GPU{i}"), gpu(i, "0", "500Mhz"), gpu(i, "1", "2100Mhz *")]
        out += [gpu(i, "")]
    out += ["-" * w, spacer(width=w), spacer("GPU Memory clock frequencies and voltages", w)]
    out += [gpu(1, "OD_SCLK:"), gpu(1, "0", "500Mhz"), gpu(1, "OD_MCLK:"), gpu(1, "1", "1000MHz")]
    out += [spacer(width=w), spacer("Memory Usage (Bytes)", w)]
    out += [gpu(0, "VRAM Total Memory (B)", 536870912), gpu(0, "VRAM Total Used Memory (B)", 88686592)]
    out += [gpu(1, "VRAM Total Memory (B)", 12868124672), gpu(1, "VRAM Total Used Memory (B)", 1314775040)]
    out += [spacer(width=w), spacer("KFD Processes", w)]
    out += ["get_compute_process_info_by_pid, Not supported on the given system", "KFD process information:"]
    out += pid_table(
        [["41877", "UNKNOWN", "0", "UNKNOWN", "UNKNOWN", "UNKNOWN"], ["52011", "ollama", "2", "9663676416", "0", "0"]]
    )
    out += [spacer(width=w), spacer("GPUs Indexed by PID", w)]
    out += ["PID 41877 is using 0 DRM device(s)", "PID 52011 is using 2 DRM device(s):", "0 1 "]
    out += [
        spacer(width=w),
        spacer("PCI Bus ID", w),
        gpu(0, "PCI Bus", "0000:C5:00.0"),
        gpu(1, "PCI Bus", "0000:0B:00.0"),
    ]
    out += [spacer(width=w), spacer("Product Info", w)]
    out += [gpu(0, "Card series", "\t\t0x15bf"), gpu(1, "Card series", "\t\tNavi 22 [Radeon RX 6700/6700 XT/6750 XT]")]
    out += [spacer(width=w), spacer("Current Compute Partition", w), gpu(0, "Not supported on the given system")]
    out += [gpu(1, "Not supported on the given system"), spacer(width=w), spacer("End of ROCm SMI Log", w)]
    write("text_allinfo_pidgpus-subheadings_w84.txt", out)


def combined_crlf() -> None:
    """``$ rocm-smi && rocm-smi --showmeminfo vram`` pasted from a Windows client: two outputs, CRLF endings."""
    w = 122
    out = [
        "$ amd-smi version",
        "AMDSMI Tool: 99.0.0+0000000 | AMDSMI Library version: 99.0.0 | ROCm version: 6.4.1",
        "",
    ]
    out += ["$ rocm-smi && rocm-smi --showmeminfo vram", "", "", spacer("ROCm System Management Interface", w)]
    out += [spacer("Concise Info", w)]
    header = "Device  Node  IDs              Temp        Power     Partitions          SCLK    MCLK    Fan  Perf  "
    units = "              (DID,     GUID)  (Junction)  (Socket)  (Mem, Compute, ID)"
    out += [header + "PwrCap  VRAM%  GPU%  ", units + " " * 50, spacer(width=w)]
    for i in range(2):
        row = f"{i}       {i + 2}     0x74a1,   {31000 + i:<5}  43.0°C      140.0W    NPS1, SPX, 0        "
        out += [row + "132Mhz  900Mhz  0%   auto  750.0W  0%     0%    "]
    out += [spacer(width=w), spacer("End of ROCm SMI Log", w), "", "", ""]
    out += [spacer("ROCm System Management Interface", 90), spacer("Memory Usage (Bytes)", 90)]
    for i in range(2):
        out += [gpu(i, "VRAM Total Memory (B)", 206158430208), gpu(i, "VRAM Total Used Memory (B)", 295944192 + i)]
    out += [spacer(width=90), spacer("End of ROCm SMI Log", 90)]
    write("text_combined-prompts_concise-meminfo_crlf.txt", out, crlf=True)


def topo_wrapped() -> None:
    """``--showtopoweight`` alone, 8 GPUs, as an 80-column terminal wraps it: header and rows continue on the next
    line. The last row is cut short (the paste ended there), so its cells must not be guessed."""
    n = range(8)
    lines = spacer_lines = [spacer("ROCm System Management Interface", 90), spacer("Weight between two GPUs", 90)]
    table = matrix(n, lambda a, b: "15" if a // 4 == b // 4 else "30")
    wrapped: list[str] = []
    for line in table:
        wrapped += [line[:79].rstrip(), line[79:].rstrip()] if len(line) > 79 else [line]
    lines = [*spacer_lines, *wrapped[:-1]]  # the second half of GPU7's row is lost
    write("text_topoweight-8gpu_wrapped-cut.txt", lines)


if __name__ == "__main__":
    samples = (mi300x, mi250, dual_socket, rocm33, vllm, xcp, json_oneline, csv_sample, csv_fenced, json_fenced)
    for make in (*samples, rocm19_concise, allinfo, combined_crlf, topo_wrapped, json_mi300x_8gpu_topology):
        make()
