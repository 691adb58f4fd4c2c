"""Pure parser for rocm-smi output: JSON, text and CSV, any ROCm version, several sections in one capture.

The collector runs one invocation (``--showmeminfo vram --showpids --showbus --showtopo --showproductname
--showuniqueid [--json]``); this module turns whatever it printed into a ``SmiReport``. Format facts and the
rocm-smi source lines they come from are in ``research/smi-formats.md`` section 1.

Field choices (documented here because the tool offers several candidates):

- ``index``: ``cardN`` (JSON/CSV) or ``GPU[n]`` (text), the tool's own DRM index.
- ``model``: ``Card Series`` (ROCm >= 6.1) / ``Card series`` (older), else ``Device Name`` (``--showid``,
  ROCm >= 6.1). A value that is only a hex number is not a name (ROCm 4.3 printed ``0x1002``, the vendor id,
  for the series) and is skipped. ``Card SKU`` is a board part number, not a model, and is never used.
- ``device_id``: ``GPU ID`` (ROCm < 6.0) / ``Device ID`` (ROCm >= 6.0), the PCI device id. ``Card Model``
  is not used: it is the subsystem id before ROCm 6.1 and the device id after.
- ``numa_node`` / ``numa_affinity``: ``4294967295`` (an unsigned -1, ROCm <= 5.7) is normalised to -1.
- ``driver``: the system-wide ``Driver version`` when the capture has one, on every GPU.
- Processes: one record per table row or JSON ``PID<n>`` key. ``gpu`` stays None because rocm-smi never says
  which GPU: the ``GPU(s)`` column (and, in ``--showpids details``, the ``GPU`` column, rocm-systems#4405)
  is a count and goes to ``gpu_count``. JSON lower-cases process names (rocm-smi's own ``.lower()``).
- Links: one per unordered pair ``a < b`` that any topology matrix or JSON key mentions; the value is read
  from the upper triangle and, when that cell is unreadable, from the lower one. ``N/A``/``XXXX`` are None;
  a link type other than ``PCIE``/``XGMI`` (the only two rsmi reports) is None plus a warning.

- GPUs: every index the capture names (a ``GPU[n]`` line, a ``cardN`` key, a concise-table row, a topology
  matrix label) is a GPU, even when nothing else is known about it.

A value the tool printed as N/A / UNKNOWN / None, or did not print, is None. A value of a known field that
cannot be read (garbage) is None plus a warning. Every WARNING/ERROR line and every line that cannot be
placed goes to ``warnings``; per-GPU lines of metrics this parser does not use are placed and ignored, except
lines where the tool says a query failed (``get_power_cap, Not supported ...``), which are warnings.

Captures pasted into issue threads (the held-out test material) carry framing the tool never printed: the
command line with or without a shell prompt, Markdown fences, a sentence before the data, several commands'
outputs one after another, CRLF endings, tabs expanded or whitespace collapsed, wide matrices wrapped by a
terminal. Command lines and fences are placed; a command line starts a new output; other foreign lines are
warnings; the format is decided by the first line that can decide it, not by the first line.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Mapping

import msgspec

from exporter.model import ParseError
from exporter.model.smi import SmiFormat, SmiGpu, SmiLink, SmiProcess, SmiReport
from exporter.parsers.common import is_missing, normalize_bdf, parse_int, unique_id_form

__all__ = ["completeness", "parse_rocm_smi", "supports_json"]

_UINT32_MINUS_ONE = 0xFFFFFFFF

_LOG_LINE = re.compile(r"^(?:WARNING|ERROR|CRITICAL|INFO|DEBUG|NOT_SUPPORTED)\s*:", re.IGNORECASE)
_SPACER = re.compile(r"^[=_\-]{3,}$")
_BANNER = re.compile(r"^=+\s*(?P<title>[^=\s][^=]*?)\s*=+$")
_GPU_LINE = re.compile(r"^GPU\[(?P<idx>\d{1,9})\](?:\s*XCP\[(?P<xcp>\d{1,9})\])?\s*:\s?(?P<rest>.*)$")
_MATRIX_LABEL = re.compile(r"^GPU(\d{1,9})$")
_CARD_KEY = re.compile(r"^card(\d{1,9})$")
_PID_KEY = re.compile(r"^pid ?(\d{1,12})$", re.IGNORECASE)
_TOPO_KEY = re.compile(
    r"^\(topology\) (?P<metric>weight|hops|link type|link accessibility)"
    r" between drm devices (?P<a>\d{1,9}) and (?P<b>\d{1,9})$"
)
_PID_COLUMN = re.compile(r"PROCESS NAME|CU OCCUPANCY|VRAM USED|SDMA USED|GPU\(s\)|GPU|PID")
_CONCISE_ROW = re.compile(r"^(\d{1,9})\s")
_HEX = re.compile(r"^0x[0-9a-f]+$")
_ZERO_ID = re.compile(r"^(?:0[xX])?0+$")
_LINK_TYPES = frozenset({"PCIE", "XGMI"})  # rsmi_topo_get_link_type: 1 and 2; anything else prints XXXX
_DRIVER_LINE = re.compile(r"^Driver version:\s*(?P<value>.*)$", re.IGNORECASE)
_CSV_START = ("device,", "system,", "name,")
# Paste framing around a capture (issue threads, chat, docs): the command line that ran rocm-smi, with or
# without a shell prompt (``$ rocm-smi --showpids``, ``root@host:~# sudo rocm-smi -a``, ``rocm-smi -a``), and
# Markdown code fences. They are placed (not tool output, not unplaceable); a prompt line starts a new output.
_COMMAND_LINE = re.compile(
    r"^(?:[^$#%>]{0,80}?[$#%>]\s*)?(?:sudo\s+(?:-\S+\s+)*)?(?:\S*/)?rocm[-_]smi(?:\.py)?(?:\s.*)?$"
)
_FENCE = re.compile(r"^(?:(?:```|~~~)[\w+-]*|`)$")  # a lone backtick: inline code spread over lines
# The concise table's header (plain ``rocm-smi``). ROCm <= 3.x printed it under an untitled spacer, and
# ROCm 1.9 indented it by one space, so it is recognised by its columns, not by a section title.
_CONCISE_HEADER = re.compile(r"^(?:GPU|Device)\s+(?:Node\s+|IDs\s+)*(?:Temp|AvgPwr|Power|SCLK)\b")
# --showpidgpus (also in ``rocm-smi -a``): "PID <n> is using <k> DRM device(s):" then the device indices.
_PIDGPUS_LINE = re.compile(r"^PID \d{1,12} is using \d{1,9} DRM device\(s\):?$")
_INDEX_LIST = re.compile(r"^\d{1,9}(?:\s+\d{1,9})*$")
# A GPU[n] line without "key: value" is a sub-heading or list item of a metric this parser does not read
# (``OD_SCLK:``, ``Supported sclk frequencies on GPU0``), or the tool saying a query failed: the latter are warnings.
# rsmi_ret_ok() prints failures as "<query>, <rsmi status text>" (``get_gpu_metrics, Unexpected data received``).
_GPU_COMPLAINT = re.compile(
    r",\s|not supported|unsupported|unable|not implemented|unexpected|error|fail|cannot|can't|invalid|denied"
    r"|permission|insufficient|busy|not found|timeout|timed out",
    re.IGNORECASE,
)

# Messages only rocm-smi prints; a capture holding nothing else is still a rocm-smi capture (with no data).
_TOOL_MESSAGES = (
    "no json data to report",
    "driver not initialized (amdgpu not found in modules)",
    "rocm smi returned",
    "no drm devices available",
    "no amd gpus specified",
)

# Section titles (banner text, lower-case) -> what the lines under them are.
_MATRIX_SECTIONS = {
    "weight between two gpus": "weight",
    "hops between two gpus": "hops",
    "link type between two gpus": "link type",
    "link accessibility between two gpus": "link accessibility",
    "bandwidth": "bandwidth",
}
_KNOWN_SECTIONS = frozenset(
    {
        "rocm system management interface",
        "end of rocm smi log",
        "kfd processes",
        "pci bus id",
        "memory usage (bytes)",
        "unique id",
        "product info",
        "numa nodes",
        "concise info",
        "concise hardware info",
    }
)
_BANDWIDTH_NOTES = ("format: min-max", '"0-0" min-max', "non-xgmi links detected")


def _norm_key(key: str) -> str:
    return " ".join(key.split()).lower().rstrip(":").rstrip()


# Normalised per-GPU keys this parser reads.
_K_BUS = "pci bus"
_K_VRAM_TOTAL = "vram total memory (b)"
_K_VRAM_USED = "vram total used memory (b)"
_K_NUMA_NODE = "(topology) numa node"
_K_NUMA_AFFINITY = "(topology) numa affinity"
_K_UNIQUE_ID = "unique id"
_K_SERIES = "card series"
_K_DEVICE_NAME = "device name"
_K_GPU_ID = "gpu id"
_K_DEVICE_ID = "device id"
_K_VBIOS = "vbios version"
_KNOWN_GPU_KEYS = frozenset(
    {
        _K_BUS,
        _K_VRAM_TOTAL,
        _K_VRAM_USED,
        _K_NUMA_NODE,
        _K_NUMA_AFFINITY,
        _K_UNIQUE_ID,
        _K_SERIES,
        _K_DEVICE_NAME,
        _K_GPU_ID,
        _K_DEVICE_ID,
        _K_VBIOS,
    }
)


class _PidTable(msgspec.Struct):
    columns: list[str]
    details: bool


class _Matrix(msgspec.Struct):
    """One topology matrix being read: its GPU columns and a row the issue renderer may have wrapped."""

    columns: list[int]
    rows: int = 0
    pending: tuple[int, list[str], str] | None = None  # row label, cells so far, text so far


class _State(msgspec.Struct):
    """What the parse has gathered so far (mutable, private; the result is frozen)."""

    gpus: dict[int, dict[str, str | None]] = msgspec.field(default_factory=dict)
    processes: list[SmiProcess] = msgspec.field(default_factory=list)
    matrices: dict[str, dict[tuple[int, int], str]] = msgspec.field(default_factory=dict)
    driver: str | None = None
    warnings: list[str] = msgspec.field(default_factory=list)

    def gpu(self, index: int) -> dict[str, str | None]:
        return self.gpus.setdefault(index, {})

    def set_gpu_value(self, index: int, key: str, value: str | None) -> None:
        """Record one per-GPU value; the first readable value wins, a different later one is a warning."""
        values = self.gpu(index)
        nkey = _norm_key(key)
        if nkey not in _KNOWN_GPU_KEYS:
            return
        value = None if value is None else value.strip()
        old = values.get(nkey)
        if nkey not in values or (is_missing(old) and not is_missing(value)):
            values[nkey] = value
        elif not is_missing(value) and old != value:
            self.warnings.append(f"GPU[{index}] {key.strip()}: {value!r} ignored, already read {old!r}")

    def set_cell(self, metric: str, a: int, b: int, value: str) -> None:
        self.matrices.setdefault(metric, {}).setdefault((a, b), value)

    def add_system(self, key: str, value: str | None) -> None:
        """One ``system`` entry of the JSON/CSV output: PIDs, topology pairs, driver version."""
        nkey = _norm_key(key)
        text = "" if value is None else value.strip()
        pid_match = _PID_KEY.match(nkey)
        if pid_match:
            self._add_json_process(pid_match.group(1), text)
            return
        topo = _TOPO_KEY.match(nkey)
        if topo:
            self.set_cell(topo["metric"], int(topo["a"]), int(topo["b"]), text)
            return
        if nkey == "driver version" and not is_missing(text):
            self.driver = text

    def _add_json_process(self, pid_text: str, value: str) -> None:
        # "<name>, <gpus>, <vram>, <sdma>, <cu>"; CSV drops the commas, so split on commas and whitespace.
        parts = [p for p in re.split(r"[,\s]+", value) if p]
        if len(parts) < 4:
            self.warnings.append(f"PID{pid_text}: cannot read process entry {value!r}")
            return
        name = " ".join(parts[:-4]) or None
        self.add_process(pid_text, name, *parts[-4:])

    def add_process(self, pid_text: str, name: str | None, gpus: str, vram: str, sdma: str, cu: str) -> None:
        pid = parse_int(pid_text)
        if pid is None or pid <= 0:
            self.warnings.append(f"KFD process with unreadable PID {pid_text!r} skipped")
            return
        label = f"PID {pid}"
        self.processes.append(
            SmiProcess(
                pid=pid,
                name=None if name is None or is_missing(name) else name,
                gpu=None,
                gpu_count=self.count(gpus, f"{label} GPU(s)"),
                vram_used_bytes=self.count(vram, f"{label} VRAM USED"),
                sdma_used=self.count(sdma, f"{label} SDMA USED"),
                cu_occupancy=self.count(cu, f"{label} CU OCCUPANCY"),
            )
        )

    def count(self, value: str | None, what: str) -> int | None:
        """A non-negative integer; None for missing; None plus a warning for anything else."""
        if value is None or is_missing(value):
            return None
        number = parse_int(value)
        if number is None or number < 0:
            self.warnings.append(f"{what}: cannot read {value.strip()!r}")
            return None
        return number


# --------------------------------------------------------------------------------------------------------
# Public API


def parse_rocm_smi(text: str) -> SmiReport:
    """Parse any rocm-smi output (JSON, text or CSV, auto-detected). Raises ParseError for anything else."""
    if not isinstance(text, str):
        raise ParseError("input is not text")
    lines = text.splitlines()
    first = _first_data_line(lines)
    if first is None:
        if any(line.strip() for line in lines) and _has_tool_message(lines):
            state = _State()
            _ingest_free_lines(state, lines)
            return _build(state, "text")
        raise ParseError("empty input: no rocm-smi output", 1)
    lineno, kind = _detect(lines, first[0])
    if kind == "json":
        return _parse_json(text, lines, lineno)
    if kind == "array":
        raise ParseError("a JSON array is not rocm-smi output (amd-smi prints arrays)", lineno + 1)
    if kind == "csv":
        return _parse_csv(lines, lineno)
    return _parse_text(lines)


def supports_json(help_text: str) -> bool:
    """True when ``rocm-smi --help`` lists ``--json`` (the oldest ROC-smi releases only print text)."""
    return re.search(r"(?:^|[\s,\[|])--json\b", help_text) is not None


def completeness(report: SmiReport, *, expect_topology: bool = True) -> list[str]:
    """What a full collection (VRAM, bus, topology) is missing; empty when nothing is.

    rocm-smi exits 0 even when its queries fail, so the source judges success from this list.
    Unique ID, model and processes are not checked: many healthy GPUs report them as N/A or have none.
    Topology is not checked for CSV, which rocm-smi prints without the system-wide topology entries.
    """
    if not report.gpus:
        return ["no GPUs in the output"]
    problems: list[str] = []
    check_topology = expect_topology and report.format != "csv"
    for gpu in report.gpus:
        if gpu.pci_bus is None:
            problems.append(f"GPU {gpu.index}: no PCI bus")
        if gpu.vram_total_bytes is None:
            problems.append(f"GPU {gpu.index}: no VRAM total")
        if gpu.vram_used_bytes is None:
            problems.append(f"GPU {gpu.index}: no VRAM used")
        if check_topology and gpu.numa_node is None:
            problems.append(f"GPU {gpu.index}: no NUMA node")
    if check_topology and len(report.gpus) > 1:
        indices = sorted(g.index for g in report.gpus)
        readable = {(link.a, link.b) for link in report.links if link.weight is not None or link.type is not None}
        pairs = [(a, b) for i, a in enumerate(indices) for b in indices[i + 1 :]]
        missing = [pair for pair in pairs if pair not in readable]
        if missing:
            problems.append(f"topology missing for {len(missing)} of {len(pairs)} GPU pairs")
    return problems


# --------------------------------------------------------------------------------------------------------
# Detection helpers


def _first_data_line(lines: list[str]) -> tuple[int, str] | None:
    """The first line that is neither blank, a log line nor paste framing (0-based index, stripped text)."""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not _LOG_LINE.match(stripped) and not _is_framing(stripped):
            return i, stripped
    return None


def _is_framing(stripped: str) -> bool:
    return _FENCE.match(stripped) is not None or _COMMAND_LINE.match(stripped) is not None


def _detect(lines: list[str], start: int) -> tuple[int, str]:
    """The format, from the first line that decides it: a JSON object, a CSV header, or text framing.

    Lines that decide nothing (a sentence before the paste, the command with its prompt, a code fence) are
    skipped, so a paste's preamble does not turn a JSON or CSV capture into unreadable text.
    """
    for i in range(start, len(lines)):
        stripped = lines[i].strip()
        if not stripped or _LOG_LINE.match(stripped) or _is_framing(stripped):
            continue
        if stripped.startswith("{"):
            return i, "json"
        if stripped == "[" or stripped.startswith(("[{", "[ {")):
            return i, "array"
        if stripped.lower().replace(" ", "").startswith(_CSV_START):
            return i, "csv"
        if _SPACER.match(stripped) or _BANNER.match(stripped) or _GPU_LINE.match(stripped):
            return i, "text"
    return start, "text"


def _has_tool_message(lines: Iterable[str]) -> bool:
    return any(message in line.lower() for line in lines for message in _TOOL_MESSAGES)


def _ingest_free_lines(state: _State, lines: Iterable[str]) -> None:
    """Lines around the JSON/CSV data: blank lines and banners are placed, the rest are warnings."""
    for line in lines:
        stripped = line.strip()
        if not stripped or _SPACER.match(stripped) or _BANNER.match(stripped) or _is_framing(stripped):
            continue
        state.warnings.append(stripped)


# --------------------------------------------------------------------------------------------------------
# JSON


def _parse_json(text: str, lines: list[str], lineno: int) -> SmiReport:
    start = sum(len(line) for line in text.splitlines(keepends=True)[:lineno]) + text.splitlines()[lineno].index("{")
    try:
        data, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON: {exc.msg}", exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"invalid JSON: {exc}", lineno + 1) from None
    if not isinstance(data, dict):
        raise ParseError("JSON top level is not an object", lineno + 1)
    state = _State()
    _ingest_free_lines(state, lines[:lineno])
    cards = 0
    for key, value in data.items():
        card = _CARD_KEY.match(str(key))
        if card:
            cards += 1
            mapping = _json_mapping(state, str(key), value)
            state.gpu(int(card.group(1)))
            for k, v in mapping.items():
                state.set_gpu_value(int(card.group(1)), k, v)
        elif key == "system":
            cards += 1
            for k, v in _json_mapping(state, "system", value).items():
                state.add_system(k, v)
        else:
            state.warnings.append(f"JSON key {str(key)!r} is not a rocm-smi device or system entry")
    if cards == 0:
        raise ParseError("JSON object has no cardN or system entries: not rocm-smi output", lineno + 1)
    _ingest_free_lines(state, text[end:].splitlines())
    return _build(state, "json")


def _json_mapping(state: _State, where: str, value: object) -> dict[str, str | None]:
    if not isinstance(value, dict):
        state.warnings.append(f"JSON {where}: expected an object, got {type(value).__name__}")
        return {}
    out: dict[str, str | None] = {}
    for k, v in value.items():
        if v is None or isinstance(v, str):
            out[str(k)] = v
        elif isinstance(v, (bool, dict, list)):
            state.warnings.append(f"JSON {where} {str(k)!r}: unexpected value {v!r}")
        else:
            out[str(k)] = str(v)
    return out


# --------------------------------------------------------------------------------------------------------
# CSV


def _parse_csv(lines: list[str], lineno: int) -> SmiReport:
    state = _State()
    _ingest_free_lines(state, lines[:lineno])
    header: list[str] | None = None
    name_value = False
    for i in range(lineno, len(lines)):
        raw = lines[i]
        stripped = raw.strip()
        if not stripped:
            header = None
            continue
        if _LOG_LINE.match(stripped):
            state.warnings.append(stripped)
            continue
        if _is_framing(stripped):
            header = None
            continue
        try:
            cells = next(csv.reader([stripped], skipinitialspace=True))
        except (csv.Error, StopIteration):
            state.warnings.append(stripped)
            continue
        first = cells[0].strip().lower() if cells else ""
        # A blank line separates rocm-smi's system block from its device block; each has its own header.
        starts_block = header is None or first == "device" or (first == "name" and len(cells) == 2)
        if starts_block and first in ("device", "system", "name"):
            header = [c.strip() for c in cells]
            name_value = first == "name"
            continue
        if header is None:
            state.warnings.append(stripped)
            continue
        if name_value:
            if len(cells) != 2:
                state.warnings.append(stripped)
                continue
            state.add_system(cells[0], cells[1])
            continue
        if len(cells) != len(header):
            state.warnings.append(f"CSV row with {len(cells)} cells under a {len(header)}-column header: {stripped}")
            continue
        row = dict(zip(header[1:], cells[1:], strict=True))
        card = _CARD_KEY.match(first)
        if card:
            index = int(card.group(1))
            state.gpu(index)
            for k, v in row.items():
                state.set_gpu_value(index, k, v)
        elif first in ("system", "cardsystem"):
            for k, v in row.items():
                state.add_system(k, v)
        else:
            state.warnings.append(stripped)
    if not state.gpus and not state.processes and not state.matrices and state.driver is None:
        raise ParseError("CSV without rocm-smi device or system rows", lineno + 1)
    return _build(state, "csv")


# --------------------------------------------------------------------------------------------------------
# Text


def _parse_text(lines: list[str]) -> SmiReport:
    state = _State()
    recognised = False
    section = ""
    matrix: _Matrix | None = None
    pid_table: _PidTable | None = None
    for raw in lines:
        stripped = raw.strip()
        if not stripped:
            pid_table = None
            continue
        if _LOG_LINE.match(stripped):
            state.warnings.append(stripped)
            recognised = recognised or _has_tool_message([stripped])
            continue
        if _is_framing(stripped):
            # The next command's output starts here (``$ rocm-smi && rocm-smi --showmeminfo vram``).
            _end_matrix(state, matrix)
            section, matrix, pid_table = "", None, None
            continue
        if _SPACER.match(stripped):
            pid_table = None
            continue
        banner = _BANNER.match(stripped)
        if banner:
            _end_matrix(state, matrix)
            section = _norm_key(banner["title"])
            recognised = recognised or section in _KNOWN_SECTIONS or section in _MATRIX_SECTIONS
            matrix = None
            pid_table = None
            continue
        gpu_line = _GPU_LINE.match(stripped)
        if gpu_line:
            recognised = True
            _text_gpu_line(state, int(gpu_line["idx"]), gpu_line["rest"], stripped)
            continue
        if section == "kfd processes":
            recognised = True
            pid_table = _text_pid_line(state, raw, stripped, pid_table)
            continue
        if section in _MATRIX_SECTIONS:
            matrix = _text_matrix_line(state, _MATRIX_SECTIONS[section], stripped, matrix)
            continue
        if section == "gpus indexed by pid" and _is_pidgpus_line(stripped):
            continue
        if _CONCISE_HEADER.match(stripped) and not section.startswith("concise"):
            section = "concise info"
            recognised = True
            continue
        if section.startswith("concise") and _text_concise_line(state, stripped):
            continue
        driver = _DRIVER_LINE.match(stripped)
        if driver:
            if not is_missing(driver["value"]):
                state.driver = driver["value"].strip()
            continue
        if _has_tool_message([stripped]):
            recognised = True
        state.warnings.append(stripped)
    _end_matrix(state, matrix)
    if not recognised:
        raise ParseError("no rocm-smi banner, GPU[n] line or KFD process section: not rocm-smi output", 1)
    return _build(state, "text")


def _is_pidgpus_line(stripped: str) -> bool:
    return (
        _PIDGPUS_LINE.match(stripped) is not None
        or _INDEX_LIST.match(stripped) is not None
        or stripped.lower() == "no kfd pids currently running"
    )


def _text_gpu_line(state: _State, index: int, rest: str, line: str) -> None:
    state.gpu(index)
    if ": " in rest:
        key, value = rest.split(": ", 1)
        state.set_gpu_value(index, key, value)
        return
    key = rest.strip().rstrip(":")
    if _norm_key(key) in _KNOWN_GPU_KEYS:
        # printLog(device, name, None) prints the name alone when the query failed.
        state.set_gpu_value(index, key, None)
    elif _GPU_COMPLAINT.search(key):
        state.warnings.append(line)
    # Anything else is a heading or list item of a metric this parser does not read (placed, ignored).


def _text_pid_line(state: _State, raw: str, stripped: str, table: _PidTable | None) -> _PidTable | None:
    lowered = stripped.lower()
    if lowered == "no kfd pids currently running" or lowered.rstrip(":") == "kfd process information":
        return None
    if stripped.startswith("PID") and "PROCESS NAME" in stripped:
        columns = [m.group(0) for m in _PID_COLUMN.finditer(stripped)]
        return _PidTable(columns=columns, details="GPU" in columns and "GPU(s)" not in columns)
    if table is None:
        state.warnings.append(stripped)
        return None
    cells = _pid_cells(raw, table.columns)
    if cells is None:
        state.warnings.append(f"KFD process row does not match its header: {stripped}")
        return table
    by_name = dict(zip(table.columns, cells, strict=True))
    state.add_process(
        by_name.get("PID", ""),
        by_name.get("PROCESS NAME"),
        by_name.get("GPU(s)", by_name.get("GPU", "")),
        by_name.get("VRAM USED", ""),
        by_name.get("SDMA USED", ""),
        by_name.get("CU OCCUPANCY", ""),
    )
    return table


def _pid_cells(raw: str, columns: list[str]) -> list[str] | None:
    """Cells of one KFD table row: TAB-separated as printed, or by position when tabs became spaces."""
    if "\t" in raw:
        cells = [c.strip() for c in raw.strip().split("\t")]
        cells = [c for c in cells if c] if len(cells) != len(columns) else cells
        if len(cells) == len(columns):
            return cells
    tokens = raw.split()
    if len(columns) >= 2 and columns[:2] == ["PID", "PROCESS NAME"]:
        tail = len(columns) - 2
        if len(tokens) < tail + 1:
            return None
        name = " ".join(tokens[1 : len(tokens) - tail])
        return [tokens[0], name, *tokens[len(tokens) - tail :]]
    return tokens if len(tokens) == len(columns) else None


def _text_matrix_line(state: _State, metric: str, stripped: str, matrix: _Matrix | None) -> _Matrix | None:
    tokens = stripped.split()
    labels = [_MATRIX_LABEL.match(t) for t in tokens]
    if all(labels):
        indices = [int(m.group(1)) for m in labels if m]
        for index in indices:
            state.gpu(index)
        if matrix is not None and matrix.rows == 0 and matrix.pending is None and indices[0] not in matrix.columns:
            # The issue renderer wrapped a wide header: this line continues it.
            matrix.columns.extend(indices)
            return matrix
        _end_matrix(state, matrix)
        return _Matrix(columns=indices)
    row = labels[0]
    if row is None:
        if matrix is not None and matrix.pending is not None:
            label, cells, text = matrix.pending
            matrix.pending = None
            _matrix_row(state, metric, matrix, label, cells + tokens, f"{text} {stripped}")
        elif not (metric == "bandwidth" and stripped.lower().startswith(_BANDWIDTH_NOTES)):
            state.warnings.append(stripped)
        return matrix
    if matrix is None:
        state.warnings.append(f"topology row without a header: {stripped}")
        return None
    _end_matrix(state, matrix)
    _matrix_row(state, metric, matrix, int(row.group(1)), tokens[1:], stripped)
    return matrix


def _matrix_row(state: _State, metric: str, matrix: _Matrix, a: int, cells: list[str], text: str) -> None:
    """Store one row, or keep it pending when it is shorter than the header (a wrapped line)."""
    if len(cells) < len(matrix.columns):
        matrix.pending = (a, cells, text)
        return
    if len(cells) > len(matrix.columns):
        state.warnings.append(f"topology row does not match its header: {text}")
        return
    matrix.rows += 1
    state.gpu(a)
    for b, cell in zip(matrix.columns, cells, strict=True):
        if a != b:
            state.set_cell(metric, a, b, cell)


def _end_matrix(state: _State, matrix: _Matrix | None) -> None:
    """A row still pending when the matrix ends was cut short: a warning, its cells are not guessed."""
    if matrix is not None and matrix.pending is not None:
        state.warnings.append(f"topology row does not match its header: {matrix.pending[2]}")
        matrix.pending = None


def _text_concise_line(state: _State, stripped: str) -> bool:
    """Rows of the concise tables (plain ``rocm-smi`` / ``--showhw``): the index and a BDF if shown."""
    if stripped.startswith(("GPU", "Device", "(")):
        return True
    row = _CONCISE_ROW.match(stripped)
    if row is None:
        return False
    index = int(row.group(1))
    state.gpu(index)
    for token in stripped.split()[1:]:
        if normalize_bdf(token):
            state.set_gpu_value(index, _K_BUS, token)
    return True


# --------------------------------------------------------------------------------------------------------
# Building the frozen report


def _build(state: _State, fmt: SmiFormat) -> SmiReport:
    gpus = tuple(_build_gpu(state, index, state.gpus[index]) for index in sorted(state.gpus))
    bdf = {g.index: g.pci_bus for g in gpus}
    links = _build_links(state, bdf)
    return SmiReport(
        tool="rocm-smi",
        format=fmt,
        gpus=gpus,
        processes=tuple(state.processes),
        links=links,
        warnings=tuple(state.warnings),
    )


def _build_gpu(state: _State, index: int, values: Mapping[str, str | None]) -> SmiGpu:
    label = f"GPU[{index}]"
    raw_bus = values.get(_K_BUS)
    pci_bus = None if is_missing(raw_bus) else normalize_bdf(raw_bus)
    if pci_bus is None and not is_missing(raw_bus):
        state.warnings.append(f"{label} PCI Bus: {raw_bus!r} is not a PCI address")
    return SmiGpu(
        index=index,
        pci_bus=pci_bus,
        vram_total_bytes=state.count(values.get(_K_VRAM_TOTAL), f"{label} VRAM Total Memory (B)"),
        vram_used_bytes=state.count(values.get(_K_VRAM_USED), f"{label} VRAM Total Used Memory (B)"),
        numa_node=_numa(state, values.get(_K_NUMA_NODE), f"{label} Numa Node"),
        numa_affinity=_numa(state, values.get(_K_NUMA_AFFINITY), f"{label} Numa Affinity"),
        unique_id=_unique_id(state, values.get(_K_UNIQUE_ID), f"{label} Unique ID"),
        model=_model(values),
        device_id=_hex_id(state, values.get(_K_DEVICE_ID) or values.get(_K_GPU_ID), f"{label} Device ID"),
        vbios=None if is_missing(values.get(_K_VBIOS)) else values.get(_K_VBIOS),
        driver=state.driver,
    )


def _numa(state: _State, value: str | None, what: str) -> int | None:
    if value is None or is_missing(value):
        return None
    number = parse_int(value)
    if number is None or number < -1 or (number > 0xFFFF and number != _UINT32_MINUS_ONE):
        state.warnings.append(f"{what}: cannot read {value.strip()!r}")
        return None
    return -1 if number == _UINT32_MINUS_ONE else number


def _hex_id(state: _State, value: str | None, what: str) -> str | None:
    if value is None or is_missing(value):
        return None
    text = value.strip().lower()
    if not _HEX.match(text):
        state.warnings.append(f"{what}: {value.strip()!r} is not a hex id")
        return None
    return text


def _unique_id(state: _State, value: str | None, what: str) -> str | None:
    """``0x...``, bare hex (older rocm-smi JSON: ``7c96610172fc1a8d``) or upper case -> ``unique_id_form``."""
    if value is None or is_missing(value):
        return None
    canonical = unique_id_form(value)
    if canonical is None and not _ZERO_ID.match(value.strip()):  # 0 is "none", not garbage
        state.warnings.append(f"{what}: {value.strip()!r} is not a hex id")
    return canonical


def _model(values: Mapping[str, str | None]) -> str | None:
    for key in (_K_SERIES, _K_DEVICE_NAME):
        value = values.get(key)
        if value is not None and not is_missing(value) and not _HEX.match(value.strip().lower()):
            return value.strip()
    return None


def _build_links(state: _State, bdf: Mapping[int, str | None]) -> tuple[SmiLink, ...]:
    pairs = sorted({(min(a, b), max(a, b)) for cells in state.matrices.values() for (a, b) in cells if a != b})
    links = []
    for a, b in pairs:
        weight = _link_number(state, "weight", a, b)
        hops = _link_number(state, "hops", a, b)
        link_type = _link_type(state, a, b)
        links.append(
            SmiLink(a=a, b=b, weight=weight, hops=hops, type=link_type, a_pci_bus=bdf.get(a), b_pci_bus=bdf.get(b))
        )
    return tuple(links)


def _link_cells(state: _State, metric: str, a: int, b: int) -> list[str]:
    cells = state.matrices.get(metric, {})
    return [cells[key] for key in ((a, b), (b, a)) if key in cells]


def _link_number(state: _State, metric: str, a: int, b: int) -> int | None:
    for cell in _link_cells(state, metric, a, b):
        number = state.count(cell, f"topology {metric} GPU{a}-GPU{b}")
        if number is not None:
            return number
    return None


def _link_type(state: _State, a: int, b: int) -> str | None:
    for cell in _link_cells(state, "link type", a, b):
        text = cell.strip().upper()
        if is_missing(text):
            continue
        if text in _LINK_TYPES:
            return text
        state.warnings.append(f"topology link type GPU{a}-GPU{b}: cannot read {cell.strip()!r}")
    return None
