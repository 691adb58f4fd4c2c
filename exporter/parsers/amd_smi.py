"""Pure parser for ``amd-smi`` output: ``list``, ``metric --mem-usage``, ``process``, ``topology`` and
``static --numa/--bus/--asic``, in JSON or human-readable text, any ROCm version seen (6.0 .. 7.x).

Formats (``research/smi-formats.md`` section 2, and the captures in ``fixtures/smi/amd-smi``):

- JSON: a list of per-GPU objects ``{"gpu": N, ...}`` (pretty or one-line), or the same list under a
  top-level ``gpu_data`` key (amd-smi >= 26). Numbers are plain or ``{"value": N, "unit": "..."}``.
- Text: YAML-like blocks, ``GPU: N`` at column 0 then indented ``KEY: value`` / ``KEY:`` sub-blocks, and
  for ``topology`` (ROCm >= 6.1) ``<NAME> TABLE:`` matrices whose rows and columns are BDFs, plus a Legend.
- The default view of plain ``amd-smi`` (amd-smi >= 26, ROCm 7): box-drawn tables, a two-line entry per GPU
  (BDF and name; index and ``used/total MB``) and a ``Processes:`` box; borders never reach a value.
- Either may be preceded by tool messages (``WARNING: User is missing ...``, ``Fail to open libdrm...``),
  and one capture may hold several outputs one after another.

No GPU: an amd-smi output that names only other devices (``amd-smi list --nic``: ``AI_NIC: 0`` blocks with
indented keys; JSON items keyed ``nic``/``cpu``/``core``) or a default-view box with no GPU entry is still
amd-smi output: the result is an empty report with the warning ``amd-smi output with no GPU: ...`` (the source
then judges "no GPU" a failure). Input with no amd-smi data at all raises :class:`ParseError`.

Redacted values (``<redacted>``, as in amd-smi's own documented outputs) are None, like N/A.
Shell prompt lines in pastes (``$ amd-smi``, ``user@host:~$ ...``) are not amd-smi output: "cannot place".

Units: the ``mem_usage`` "MB" of amd-smi are MiB (``bytes // 2**20``), so MB values are multiplied by
1048576 (the default view's ``Mem-Usage`` ``285/196288 MB`` too); human-readable text sizes (``10.1 GB``,
``0.0 B``) use a 1024 base and are approximate (one decimal).
"N/A" is None, never 0.

Text topology tables name GPUs only by BDF; their index is the column position (amd-smi prints devices in
index order). When the same capture, or a report merged with :func:`merge_amd_smi_reports`, also holds
GPUs with a real index for that BDF (``list``, ``static``, JSON topology), the real index wins.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
from msgspec.structs import replace

from exporter.model import ParseError
from exporter.model.smi import SmiFormat, SmiGpu, SmiLink, SmiProcess, SmiReport
from exporter.parsers.common import is_missing, normalize_bdf

__all__ = [
    "AmdSmiHelp",
    "amd_smi_commands",
    "merge_amd_smi_reports",
    "parse_amd_smi",
    "parse_amd_smi_help",
]

_MIB = 1024 * 1024
_UNIT_BYTES: dict[str, int] = {
    "b": 1,
    "kb": 1024,
    "kib": 1024,
    "mb": _MIB,
    "mib": _MIB,
    "gb": 1024**3,
    "gib": 1024**3,
    "tb": 1024**4,
    "tib": 1024**4,
    "pb": 1024**5,
    "pib": 1024**5,
    "eb": 1024**6,  # seen as a wrapped-around MEM_USAGE (``16.0 EB``): a value, however absurd
    "eib": 1024**6,
}
_SIZE = re.compile(r"^\s*(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]+)?\s*$")
_INT_WITH_UNIT = re.compile(r"^\s*(?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|\d+))(?:\s+[A-Za-z%/]+)?\s*$")
_REDACTED = re.compile(r"^\s*[<\[(]\s*redacted\s*[>\])]\s*$", re.IGNORECASE)
_GPU_HEADER = re.compile(r"^GPU:\s*(?P<index>[0-9]{1,9})\s*$")
# Blocks of other device kinds (``CPU: 0``, ``CORE: 3``, ``AI_NIC: 0`` of amd-smi >= 26, ``SWITCH: 1``): amd-smi
# data, but not about GPUs.
_OTHER_HEADER = re.compile(r"^(?!GPU:)[A-Z][A-Z0-9_]*:\s*\d{1,9}\s*$")
_BLOCK_KEY = re.compile(r"^[ \t]+[A-Z][A-Z0-9_]*:")  # an indented ``KEY:`` line of a text block
_TABLE_TITLE = re.compile(r"^(?P<name>[A-Z][A-Z0-9 /_-]*?)\s+TABLE:\s*$")
_GPU_KEY = re.compile(r"^gpu_(?P<index>[0-9]{1,9})$")
_NO_PROCESSES = "no running processes detected"
_LINK_FIELDS = ("weight", "hops", "type")
_MAX_INDEX = 1 << 20  # a GPU index above this is garbage, not a GPU


class _Multi(list[Any]):
    """A key that a text block repeated (``PROCESS_INFO:`` once per process)."""


def _size_bytes(value: object, default_unit: str, warn: Callable[[str], None], what: str) -> int | None:
    """Bytes from ``{"value": N, "unit": U}``, a plain number in ``default_unit``, or text ``"10.1 GB"``."""
    unit = default_unit
    if isinstance(value, Mapping):
        unit_value = value.get("unit")
        if isinstance(unit_value, str) and unit_value.strip():
            unit = unit_value.strip()
        value = value.get("value")
    if is_missing(value):
        return None
    number: float
    if isinstance(value, bool):
        warn(f"{what}: not a size: {value!r}")
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        m = _SIZE.match(value)
        if m is None:
            warn(f"{what}: not a size: {value!r}")
            return None
        number = float(m["num"])
        if m["unit"]:
            unit = m["unit"]
    else:
        warn(f"{what}: not a size: {value!r}")
        return None
    factor = _UNIT_BYTES.get(unit.lower())
    if factor is None:
        warn(f"{what}: unknown unit {unit!r}")
        return None
    result = number * factor
    if result != result or result in (float("inf"), float("-inf")) or result < 0:
        warn(f"{what}: not a size: {value!r}")
        return None
    return round(result)


def _integer(value: object, warn: Callable[[str], None], what: str) -> int | None:
    """An integer from a plain number, ``{"value": N}``, ``"15"``, ``"0x1f"`` or ``"0 ns"``; None for N/A."""
    if isinstance(value, Mapping):
        value = value.get("value")
    if is_missing(value):
        return None
    if isinstance(value, bool):
        warn(f"{what}: not an integer: {value!r}")
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        m = _INT_WITH_UNIT.match(value)
        if m is not None:
            text = m["num"]
            try:
                return int(text, 16) if text.lower().lstrip("+-").startswith("0x") else int(text, 10)
            except ValueError:
                pass
    warn(f"{what}: not an integer: {value!r}")
    return None


def _text(value: object) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("value")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str) or is_missing(value) or _is_redacted(value):
        return None
    return value.strip()


def _is_redacted(value: object) -> bool:
    """``<redacted>`` (the form amd-smi's own docs and pasted outputs use for hidden serials and UUIDs)."""
    return isinstance(value, str) and _REDACTED.match(value) is not None


def _hex_id(value: object) -> str | None:
    text = _text(value)
    if text is None:
        return None
    return text.lower() if text.lower().startswith("0x") else text


class _Builder:
    """Collects what one output (one JSON document, one text block run) says, then freezes it."""

    def __init__(self, fmt: SmiFormat, warnings: list[str]) -> None:
        self.format: SmiFormat = fmt
        self.warnings = warnings
        self.gpus: dict[int, dict[str, Any]] = {}
        self.processes: list[SmiProcess] = []
        self.links: dict[tuple[int, int], dict[str, Any]] = {}
        self.other_devices: list[str] = []  # kinds of non-GPU devices seen (``AI_NIC``, ``CPU``)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def gpu(self, index: int) -> dict[str, Any]:
        return self.gpus.setdefault(index, {})

    def set_gpu(self, index: int, field: str, value: object) -> None:
        if value is None:
            return
        record = self.gpu(index)
        old = record.get(field)
        if old is None:
            record[field] = value
        elif old != value:
            self.warn(f"GPU {index}: {field} given twice ({old!r}, then {value!r}); kept the first")

    def set_link(self, i: int, j: int, field: str | None, value: object) -> None:
        """Record that GPUs ``i`` and ``j`` are a pair; ``field`` (weight/hops/type) when one is known."""
        if i == j:
            return
        self.gpu(i)  # a topology that names a peer says that GPU exists
        self.gpu(j)
        key = (min(i, j), max(i, j))
        record = self.links.setdefault(key, {})
        if field is None or value is None:
            return
        old = record.get(field)
        if old is None:
            record[field] = value
        elif old != value:
            self.warn(f"GPUs {key[0]}-{key[1]}: link {field} differs by direction ({old!r}, {value!r}); kept the first")

    def report(self) -> SmiReport:
        gpus = tuple(SmiGpu(index=index, **fields) for index, fields in sorted(self.gpus.items()))
        bus = {g.index: g.pci_bus for g in gpus}
        links = tuple(
            SmiLink(a=a, b=b, a_pci_bus=bus.get(a), b_pci_bus=bus.get(b), **fields)
            for (a, b), fields in sorted(self.links.items())
        )
        return SmiReport(tool="amd-smi", format=self.format, gpus=gpus, processes=tuple(self.processes), links=links)


# --------------------------------------------------------------------------- one GPU object (JSON or text)


def _interpret_gpu(obj: Mapping[str, Any], index: int, out: _Builder) -> None:
    """Everything this module knows about one ``{"gpu": N, ...}`` object (keys lower-case)."""
    out.gpu(index)
    where = f"GPU {index}"

    warn = out.warn

    bdf_raw = obj.get("bdf", obj.get("gpu_bdf"))
    bus = obj.get("bus")
    if bdf_raw is None and isinstance(bus, Mapping):
        bdf_raw = bus.get("bdf")
    _set_bdf(out, index, bdf_raw, where)

    out.set_gpu(index, "uuid", _text(obj.get("uuid", obj.get("gpu_uuid"))))
    for field in ("kfd_id", "node_id", "partition_id"):
        if field in obj:
            out.set_gpu(index, field, _integer(obj[field], warn, f"{where} {field}"))

    mem = obj.get("mem_usage")
    if isinstance(mem, Mapping):
        out.set_gpu(index, "vram_total_bytes", _size_bytes(mem.get("total_vram"), "MB", warn, f"{where} total_vram"))
        out.set_gpu(index, "vram_used_bytes", _size_bytes(mem.get("used_vram"), "MB", warn, f"{where} used_vram"))
    vram = obj.get("vram")
    if isinstance(vram, Mapping) and "size" in vram and not isinstance(mem, Mapping):
        out.set_gpu(index, "vram_total_bytes", _size_bytes(vram.get("size"), "MB", warn, f"{where} vram size"))

    numa = obj.get("numa")
    if isinstance(numa, Mapping):
        out.set_gpu(index, "numa_node", _integer(numa.get("node"), warn, f"{where} numa node"))
        affinity = numa.get("affinity")
        if isinstance(affinity, str) and affinity.strip().upper() == "NONE":
            out.set_gpu(index, "numa_affinity", -1)  # text prints -1 ("no NUMA affinity") as NONE
        else:
            value = _integer(affinity, warn, f"{where} numa affinity")
            out.set_gpu(index, "numa_affinity", -1 if value == 0xFFFFFFFF else value)

    asic = obj.get("asic")
    if isinstance(asic, Mapping):
        out.set_gpu(index, "model", _text(asic.get("market_name")))
        out.set_gpu(index, "device_id", _hex_id(asic.get("device_id")))
        serial = _hex_id(asic.get("asic_serial"))
        out.set_gpu(index, "unique_id", serial)
    vbios = obj.get("vbios")
    if isinstance(vbios, Mapping):
        out.set_gpu(index, "vbios", _text(vbios.get("version")))
    driver = obj.get("driver")
    if isinstance(driver, Mapping):
        out.set_gpu(index, "driver", _text(driver.get("version")))

    if "process_list" in obj:
        _interpret_processes(obj["process_list"], index, out)
    elif "process_info" in obj:  # text: PROCESS_INFO once per process
        info = obj["process_info"]
        entries = list(info) if isinstance(info, _Multi) else [info]
        _interpret_processes([{"process_info": e} for e in entries], index, out)

    _interpret_old_topology(obj, index, out)
    links = obj.get("links")
    if isinstance(links, list):
        _interpret_links(links, index, out)


def _set_bdf(out: _Builder, index: int, raw: object, where: str) -> None:
    if raw is None or is_missing(raw) or _is_redacted(raw):
        return
    bdf = normalize_bdf(raw) if isinstance(raw, str) else None
    if bdf is None:
        out.warn(f"{where}: not a PCI address: {raw!r}")
        return
    out.set_gpu(index, "pci_bus", bdf)


def _interpret_processes(entries: object, index: int, out: _Builder) -> None:
    where = f"GPU {index}"
    if not isinstance(entries, list):
        out.warn(f"{where}: process_list is not a list: {entries!r}")
        return

    warn = out.warn

    for entry in entries:
        info: object = entry
        if isinstance(entry, Mapping) and "process_info" in entry:
            info = entry["process_info"]
        if isinstance(info, str):
            if info.strip().lower() != _NO_PROCESSES:
                out.warn(f"{where}: process_info: {info.strip()}")
            continue
        if not isinstance(info, Mapping):
            out.warn(f"{where}: unreadable process entry: {entry!r}")
            continue
        pid = _integer(info.get("pid"), warn, f"{where} process pid")
        if pid is None:
            out.warn(f"{where}: process without a PID: {dict(info)!r}")
            continue
        name = _text(info.get("name"))
        usage = info.get("memory_usage")
        vram = gtt = cpu = None
        if isinstance(usage, Mapping):
            vram = _size_bytes(usage.get("vram_mem"), "B", warn, f"{where} pid {pid} vram_mem")
            gtt = _size_bytes(usage.get("gtt_mem"), "B", warn, f"{where} pid {pid} gtt_mem")
            cpu = _size_bytes(usage.get("cpu_mem"), "B", warn, f"{where} pid {pid} cpu_mem")
        cu = _integer(info["cu_occupancy"], warn, f"{where} pid {pid} cu_occupancy") if "cu_occupancy" in info else None
        out.processes.append(
            SmiProcess(
                pid=pid,
                name=name or None,
                gpu=index,
                vram_used_bytes=vram,
                gtt_used_bytes=gtt,
                cpu_used_bytes=cpu,
                cu_occupancy=cu,
            )
        )


def _interpret_old_topology(obj: Mapping[str, Any], index: int, out: _Builder) -> None:
    """ROCm 6.0/6.1 ``topology --json``: ``weight``/``hops``/``link_type``/... maps keyed ``gpu_N``."""

    warn = out.warn

    maps = {
        "weight": obj.get("weight"),
        "hops": obj.get("hops"),
        "type": obj.get("link_type"),
        None: obj.get("link_accessibility"),
    }
    for field, table in maps.items():
        if not isinstance(table, Mapping):
            continue
        for key, raw in table.items():
            m = _GPU_KEY.match(str(key).lower())
            if m is None:
                out.warn(f"GPU {index}: topology key is not gpu_N: {key!r}")
                continue
            peer = int(m["index"])
            if peer == index or peer > _MAX_INDEX:
                continue
            value: object = None
            if field == "type":
                value = _link_type(raw)
                if value == "SELF":
                    continue
            elif field is not None:
                value = _integer(raw, warn, f"GPU {index} {field} to gpu_{peer}")
            out.set_link(index, peer, field, value)
    bandwidth = obj.get("numa_bandwidth")
    if isinstance(bandwidth, Mapping):
        for key in bandwidth:
            m = _GPU_KEY.match(str(key).lower())
            if m is not None and int(m["index"]) != index and int(m["index"]) <= _MAX_INDEX:
                out.set_link(index, int(m["index"]), None, None)


def _link_type(raw: object) -> str | None:
    text = _text(raw)
    return text.upper() if text is not None else None


def _interpret_links(links: list[Any], index: int, out: _Builder) -> None:
    """ROCm >= 6.1.1 ``topology --json``: ``links: [{"gpu", "bdf", "weight", "num_hops", "link_type", ...}]``."""

    warn = out.warn

    for link in links:
        if not isinstance(link, Mapping):
            out.warn(f"GPU {index}: unreadable link: {link!r}")
            continue
        peer = _integer(link.get("gpu"), warn, f"GPU {index} link gpu")
        if peer is None or peer < 0 or peer > _MAX_INDEX:
            if peer is not None:
                out.warn(f"GPU {index}: link to impossible GPU {peer}")
            continue
        _set_bdf(out, peer, link.get("bdf"), f"GPU {peer}")
        kind = _link_type(link.get("link_type"))
        if peer == index or kind == "SELF":
            continue
        out.set_link(index, peer, None, None)
        if "weight" in link:
            out.set_link(index, peer, "weight", _integer(link["weight"], warn, f"GPU {index} weight to {peer}"))
        hops = link.get("num_hops", link.get("hops"))
        if hops is not None:
            out.set_link(index, peer, "hops", _integer(hops, warn, f"GPU {index} hops to {peer}"))
        out.set_link(index, peer, "type", kind)


def _gpu_index(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"[0-9]{1,9}", raw.strip()):
        value = int(raw.strip())
    else:
        return None
    return value if 0 <= value <= _MAX_INDEX else None


# --------------------------------------------------------------------------- JSON


# Device kinds other than GPUs that amd-smi >= 26 lists (``list --cpu``, ``--core``, ``--nic``): amd-smi data.
_OTHER_KINDS = frozenset({"cpu", "core", "nic", "ai_nic", "switch", "brcm_nic", "brcm_switch"})


def _interpret_json(doc: object, line: int, out: _Builder) -> bool:
    """One JSON document; False when it is not amd-smi's shape at all."""
    items: object = doc
    if isinstance(doc, Mapping):
        if "gpu_data" in doc:
            items = doc["gpu_data"]
        elif "gpu" in doc:
            items = [doc]
    if not isinstance(items, list):
        out.warn(f"line {line}: JSON document is not an amd-smi device list")
        return False
    found = False
    for item in items:
        if not isinstance(item, Mapping):
            out.warn(f"line {line}: JSON item is not an object: {item!r}")
            continue
        lowered = {str(k).lower(): v for k, v in item.items()}
        if "gpu" not in lowered:
            kinds = sorted(k for k in _OTHER_KINDS & lowered.keys() if _gpu_index(lowered[k]) is not None)
            if kinds:
                out.other_devices.append(kinds[0].upper())
            else:
                out.warn(f"line {line}: JSON item without a GPU index: {_short(item)}")
            continue
        index = _gpu_index(lowered["gpu"])
        if index is None:
            out.warn(f"line {line}: JSON item with an unreadable GPU index: {lowered['gpu']!r}")
            continue
        _interpret_gpu(lowered, index, out)
        found = True
    return found


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- text


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip(" "))


def _parse_block(lines: Sequence[tuple[int, str]], out: _Builder) -> dict[str, Any]:
    """Indented ``KEY: value`` / ``KEY:`` lines (under a ``GPU: N`` header) as nested dicts, keys lower-case."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    open_value: tuple[dict[str, Any], str] | None = None
    for number, line in lines:
        content = line.strip()
        if not content:
            continue
        indent = _indent(line)
        if open_value is not None:  # a ``[a, b,`` list the YAML dump folded over several lines
            node_, key_ = open_value
            node_[key_] = f"{node_[key_]} {content}"
            if "]" in content:
                open_value = None
            continue
        key, sep, value = content.partition(":")
        key = key.strip().lower()
        if not sep or not key:
            out.warn(f"line {number}: cannot place: {content}")
            continue
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        node = stack[-1][1]
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        child: object = value or {}
        if key in node:
            existing = node[key]
            if not isinstance(existing, _Multi):
                existing = _Multi([existing])
                node[key] = existing
            existing.append(child)
        else:
            node[key] = child
        if isinstance(child, dict):
            stack.append((indent, child))
        elif (
            isinstance(child, str) and child.startswith("[") and "]" not in child and not isinstance(node[key], _Multi)
        ):
            open_value = (node, key)
    return root


_Table = tuple[int, str, list[str], list[tuple[int, str, list[str]]]]  # title line, name, header, rows


def _interpret_tables(tables: Sequence[_Table], out: _Builder) -> bool:
    """``<NAME> TABLE:`` matrices. Index = column position; every labelled pair becomes a link."""
    found = False
    for line, name, header, rows in tables:
        columns: list[str] = []
        for label in header:
            bdf = normalize_bdf(label)
            if bdf is None:
                out.warn(f"line {line + 1}: {name} TABLE column is not a PCI address: {label}")
                columns = []
                break
            columns.append(bdf)
        if not columns:
            continue
        found = True
        for position, bdf in enumerate(columns):
            out.set_gpu(position, "pci_bus", bdf)
        field = {"WEIGHT": "weight", "HOPS": "hops", "LINK TYPE": "type"}.get(name)
        for number, label, cells in rows:
            row_bdf = normalize_bdf(label)
            if row_bdf is None or row_bdf not in columns:
                out.warn(f"line {number}: {name} TABLE row is not one of the columns: {label}")
                continue
            if len(cells) != len(columns):
                out.warn(f"line {number}: {name} TABLE row has {len(cells)} cells for {len(columns)} columns")
                continue
            i = columns.index(row_bdf)
            for j, cell in enumerate(cells):
                if i == j or cell.upper() == "SELF":
                    continue
                value: object = None
                if field == "type":
                    value = _link_type(cell)
                elif field is not None:
                    value = _integer(cell, out.warn, f"line {number} {name} {row_bdf}->{columns[j]}")
                out.set_link(i, j, field, value)
    return found


# --------------------------------------------------------------------------- monitor tables

# ``amd-smi monitor`` (``GPU  [XCP]  POWER ... VRAM_USAGE``, ``TIMESTAMP`` first under ``--watch``) and the
# ``PROCESS INFO:`` table of ``monitor --process``: right-aligned columns whose cells hold a value and its unit
# (``305 W``, ``97 %``, ``3.0/191.7 GB``, ``2.9/ 15.9 GB``, ``0 ns``). Cells are read as value+unit tokens.
_MONITOR_HEADER = re.compile(r"^\s*(?:TIMESTAMP\s+)?GPU(?:\s+[A-Z][A-Z0-9_]*%?){2,}\s*$")
_UNITS = r"(?:W|mW|kW|°C|C|°F|MHz|GHz|%|B|KB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB|ns|us|ms|s|mV|V|GT/s|RPM)"
_CELL = re.compile(
    r"(?P<usage>\d+(?:\.\d+)?/\s*\d+(?:\.\d+)?(?:\s+" + _UNITS + r")?(?!\S))"
    r"|(?P<plain>\S+(?:\s+" + _UNITS + r"(?!\S))?)"
)
_USED_TOTAL = re.compile(r"^(?P<used>\d+(?:\.\d+)?)/\s*(?P<total>\d+(?:\.\d+)?)(?:\s+(?P<unit>\S+))?$")


def _cells(line: str) -> list[str]:
    return [m.group(0) for m in _CELL.finditer(line.expandtabs(8))]


def _scan_monitor(lines: Sequence[str], i: int, out: _Builder, title: str | None) -> int:
    """One monitor table whose header is on line ``i``; returns the first line after its rows."""
    header = lines[i].split()
    columns = {name: position for position, name in enumerate(header)}
    number = i + 1
    i += 1
    latest: dict[int, tuple[int, dict[str, str]]] = {}  # --watch repeats rows: the last sample wins
    while i < len(lines) and lines[i].strip():
        cells = _cells(lines[i])
        if not cells or not (
            cells[0].isdigit() or (header[0] == "TIMESTAMP" and len(cells) > 1 and cells[1].isdigit())
        ):
            break
        if len(cells) != len(header):
            out.warn(f"line {i + 1}: monitor row has {len(cells)} cells for {len(header)} columns: {lines[i].strip()}")
            i += 1
            continue
        row = dict(zip(header, cells, strict=True))
        index = _gpu_index(row["GPU"])
        if index is None:
            out.warn(f"line {i + 1}: monitor row with an unreadable GPU index: {lines[i].strip()}")
        elif title == "PROCESS INFO":
            _monitor_process(row, index, i + 1, out)
        elif is_missing(row.get("XCP")) or _integer(row.get("XCP"), out.warn, f"line {i + 1} XCP") == 0:
            latest[index] = (i + 1, row)  # XCP > 0 rows repeat the GPU for its other partitions' engines
        else:
            out.gpu(index)
        i += 1
    if title is None and not latest and "GPU" in columns:
        out.warn(f"line {number}: monitor table without rows")
    for index, (row_line, row) in sorted(latest.items()):
        out.gpu(index)
        where = f"line {row_line} GPU {index}"
        usage = row.get("VRAM_USAGE")
        if usage is not None and not is_missing(usage):
            m = _USED_TOTAL.match(usage)
            if m is None:
                out.warn(f"{where}: VRAM_USAGE is not used/total: {usage!r}")
            else:
                unit = m["unit"] or "MB"
                out.set_gpu(index, "vram_used_bytes", _size_bytes(f"{m['used']} {unit}", "MB", out.warn, where))
                out.set_gpu(index, "vram_total_bytes", _size_bytes(f"{m['total']} {unit}", "MB", out.warn, where))
        for column, field in (("VRAM_USED", "vram_used_bytes"), ("VRAM_TOTAL", "vram_total_bytes")):
            if column in row:
                out.set_gpu(index, field, _size_bytes(row[column], "MB", out.warn, f"{where} {column}"))
    return i


def _monitor_process(row: Mapping[str, str], index: int, line: int, out: _Builder) -> None:
    where = f"line {line} GPU {index}"
    pid = _integer(row.get("PID"), out.warn, f"{where} PID")
    if pid is None:
        out.warn(f"{where}: process without a PID: {dict(row)!r}")
        return
    out.gpu(index)
    name = _text(row.get("NAME"))

    def size(column: str) -> int | None:
        return _size_bytes(row[column], "B", out.warn, f"{where} pid {pid} {column}") if column in row else None

    out.processes.append(
        SmiProcess(
            pid=pid,
            name=name or None,
            gpu=index,
            vram_used_bytes=size("VRAM_MEM"),
            gtt_used_bytes=size("GTT_MEM"),
            cpu_used_bytes=size("CPU_MEM"),
        )
    )


# --------------------------------------------------------------------------- default view (box tables)

# Plain ``amd-smi`` (amd-smi >= 26, ROCm 7) draws an nvidia-smi-like summary: a box with the versions, one
# two-line entry per GPU (``| <BDF> <GPU-Name> | <Mem-Uti> <Temp> <UEC> <Power-Usage> |`` then
# ``| <GPU> <HIP-ID> <OAM-ID> <Partition-Mode> | <GFX-Uti> <Fan> <used>/<total> MB |``), then a ``Processes:``
# box (``GPU PID Process Name GTT_MEM VRAM_MEM MEM_USAGE CU %``). The Mem-Usage "MB" are MiB like every other
# amd-smi "MB" (a 192 GiB MI300X shows ``/196592 MB``, a 24 GiB card ``/24560 MB``); process sizes are human
# text (``38.5 GB``, ``62.5 KB``) with a 1024 base, approximate to one decimal.
_BOX_BORDER = re.compile(r"^[+|][-=+| ]*$")
_BOX_USAGE = re.compile(
    r"(?:^|\s)(?P<used>\d+(?:\.\d+)?|N/A)\s*/\s*(?P<total>\d+(?:\.\d+)?|N/A)\s+(?P<unit>[A-Za-z]+)\s*$"
)
_BOX_HEADER = re.compile(r"^(?:AMD-SMI\s+\S+|VBIOS version:|Platform:|AMDSMI Tool:)", re.IGNORECASE)


# Unicode box drawing (a terminal or a renderer may redraw the ASCII box with it) read as the ASCII amd-smi prints.
_BOX_ASCII = str.maketrans(
    {**dict.fromkeys("│┃║", "|"), **dict.fromkeys("─━", "-"), "═": "=", **dict.fromkeys("┌┐└┘├┤┬┴┼╔╗╚╝╠╣╦╩╬╞╡╪", "+")}
)


def _is_box_line(content: str) -> bool:
    content = content.translate(_BOX_ASCII)
    return content[:1] in ("|", "+") and (content[:2] in ("+-", "+=", "|=", "|-") or content.count("|") >= 2)


def _box_cells(content: str) -> list[str]:
    inner = content[1:]
    if inner.endswith("|"):
        inner = inner[:-1]
    return [cell.strip() for cell in inner.split("|")]


def _scan_box(lines: Sequence[str], i: int, out: _Builder) -> tuple[int, bool]:
    """A run of box-drawn lines from line ``i``; returns the next line and whether it was amd-smi's default view."""
    recognised = False
    pending: tuple[int, str | None, str] | None = None  # (line, bdf, name) of a GPU entry's first line
    mode: str | None = None  # "gpus" or "processes"
    process_columns: list[str] = []
    while i < len(lines):
        content = lines[i].strip().translate(_BOX_ASCII)
        if not content or not _is_box_line(content):
            break
        number = i + 1
        i += 1
        if _BOX_BORDER.match(content):
            continue
        cells = _box_cells(content)
        first = cells[0]
        if len(cells) == 1 and _BOX_HEADER.match(first):
            recognised = True
            continue
        if len(cells) == 1 and first.rstrip(":").lower() == "processes":
            recognised, mode = True, "processes"
            continue
        if "BDF" in first.split() and "GPU-Name" in first:
            recognised, mode = True, "gpus"
            continue
        if first.split()[:1] == ["GPU"] and ("HIP-ID" in first or "PID" in first.split()):
            recognised = True
            if "PID" in first.split():
                mode = "processes"
                process_columns = _process_columns(first)
            continue
        if mode == "gpus" and len(cells) >= 2:
            tokens = first.split()
            if tokens and normalize_bdf(tokens[0]) is not None:
                if pending is not None:
                    out.warn(f"line {pending[0]}: GPU entry without its second line")
                pending = (number, normalize_bdf(tokens[0]), " ".join(tokens[1:]))
                continue
            index = _gpu_index(tokens[0]) if tokens else None
            if index is not None and pending is not None:
                _box_gpu(out, index, pending, cells[-1], number)
                pending = None
                continue
        if mode == "processes" and len(cells) == 1:
            if first.lower().startswith("no running processes"):
                continue
            if process_columns and _box_process(out, process_columns, first, number):
                continue
        out.warn(f"line {number}: cannot place: {content}")
    if pending is not None:
        out.warn(f"line {pending[0]}: GPU entry without its second line")
    return i, recognised


def _process_columns(header: str) -> list[str]:
    """``GPU PID Process Name GTT_MEM VRAM_MEM MEM_USAGE CU %`` -> GPU, PID, NAME, GTT_MEM, ..., CU%."""
    text = re.sub(r"\bProcess Name\b", "NAME", header)
    text = re.sub(r"\s+%", "%", text)
    return text.split()


def _box_gpu(out: _Builder, index: int, pending: tuple[int, str | None, str], right: str, line: int) -> None:
    first_line, bdf, name = pending
    out.gpu(index)
    out.set_gpu(index, "pci_bus", bdf)
    if re.fullmatch(r"0[xX][0-9a-fA-F]{1,8}", name):
        out.set_gpu(index, "device_id", name.lower())  # no market name known: amd-smi shows the device ID
    elif name and not is_missing(name):
        if name.startswith("..."):
            out.warn(f"line {first_line}: GPU {index} name cut by amd-smi: {name}")
        out.set_gpu(index, "model", name)
    m = _BOX_USAGE.search(right)
    if m is None:
        out.warn(f"line {line}: GPU {index}: no used/total memory in {right!r}")
        return
    where = f"line {line} GPU {index} Mem-Usage"
    unit = m["unit"]
    if not is_missing(m["used"]):
        out.set_gpu(index, "vram_used_bytes", _size_bytes(f"{m['used']} {unit}", "MB", out.warn, where))
    if not is_missing(m["total"]):
        out.set_gpu(index, "vram_total_bytes", _size_bytes(f"{m['total']} {unit}", "MB", out.warn, where))


def _box_process(out: _Builder, columns: Sequence[str], row: str, line: int) -> bool:
    """One ``Processes:`` row; False when it is not one (the caller warns)."""
    cells = _cells(row)
    if "NAME" not in columns or columns[:2] != ["GPU", "PID"] or len(cells) < len(columns):
        return False
    after = len(columns) - columns.index("NAME") - 1
    head, tail = cells[:2], cells[len(cells) - after :] if after else []
    name = " ".join(cells[2 : len(cells) - after])
    index = _gpu_index(head[0])
    if index is None or not head[1].isdigit() or len(head[1]) > 10:
        return False
    pid = int(head[1])
    row_cells = dict(zip(columns[columns.index("NAME") + 1 :], tail, strict=True))
    where = f"line {line} GPU {index} pid {pid}"

    def size(column: str) -> int | None:
        return _size_bytes(row_cells[column], "B", out.warn, f"{where} {column}") if column in row_cells else None

    out.gpu(index)
    out.processes.append(
        SmiProcess(
            pid=pid,
            name=_text(name) or None,
            gpu=index,
            vram_used_bytes=size("VRAM_MEM"),
            gtt_used_bytes=size("GTT_MEM"),
            cpu_used_bytes=size("CPU_MEM"),
        )
    )
    return True


# --------------------------------------------------------------------------- entry points


def parse_amd_smi(text: str) -> SmiReport:
    """Parse any captured ``amd-smi`` output (JSON or text, one output or several in a row).

    Returns one :class:`SmiReport` (``tool="amd-smi"``); ``format`` is that of the first data found.
    Tool messages (``WARNING: ...``) and every line that cannot be placed are in ``warnings``.
    Raises :class:`ParseError` when the input holds no amd-smi data at all (empty, random text, rocm-smi).
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    raw_lines = text.splitlines(keepends=True)
    starts: list[int] = []
    offset = 0
    for raw in raw_lines:
        starts.append(offset)
        offset += len(raw)
    lines = [raw.rstrip("\r\n") for raw in raw_lines]

    warnings: list[str] = []
    parts: list[tuple[SmiReport, bool]] = []  # (partial report, indices are only column positions)
    first_format: SmiFormat | None = None
    no_gpu_format: SmiFormat | None = None  # amd-smi output seen that names no GPU (other devices, empty box)
    other_devices: list[str] = []
    decoder = json.JSONDecoder()
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        content = line.strip()
        if not content:
            i += 1
            continue
        if _is_box_line(content):
            builder = _Builder("text", warnings)
            i, recognised = _scan_box(lines, i, builder)
            if builder.gpus:
                parts.append((builder.report(), False))
                first_format = first_format or "text"
            elif recognised:
                no_gpu_format = no_gpu_format or "text"
            continue
        if content[0] in "[{":
            before = len(parts)
            seen_others = len(other_devices)
            i = _scan_json(text, lines, starts, i, decoder, warnings, parts, other_devices)
            if len(parts) > before and first_format is None:
                first_format = "json"
            elif len(other_devices) > seen_others:
                no_gpu_format = no_gpu_format or "json"
            continue
        if _GPU_HEADER.match(line):
            end = _block_end(lines, i)
            builder = _Builder("text", warnings)
            m = _GPU_HEADER.match(line)
            assert m is not None
            index = int(m["index"])
            if index > _MAX_INDEX:
                warnings.append(f"line {i + 1}: impossible GPU index {index}")
            else:
                body = _parse_block([(k + 1, lines[k]) for k in range(i + 1, end)], builder)
                _interpret_gpu(body, index, builder)
                parts.append((builder.report(), False))
                first_format = first_format or "text"
            i = end
            continue
        if _OTHER_HEADER.match(line):
            end = _block_end(lines, i)  # CPU/core/AI_NIC blocks: amd-smi data, not GPU data
            if any(_BLOCK_KEY.match(lines[k]) for k in range(i + 1, end)):
                other_devices.append(line.split(":", 1)[0].strip())
                no_gpu_format = no_gpu_format or "text"
            else:
                warnings.append(f"line {i + 1}: cannot place: {content}")
                end = i + 1
            i = end
            continue
        if _TABLE_TITLE.match(line):
            i, tables = _scan_tables(lines, i, warnings)
            builder = _Builder("text", warnings)
            if _interpret_tables(tables, builder):
                parts.append((builder.report(), True))
                first_format = first_format or "text"
            continue
        if _MONITOR_HEADER.match(line) or (
            content == "PROCESS INFO:" and i + 1 < n and _MONITOR_HEADER.match(lines[i + 1])
        ):
            title = None
            if content == "PROCESS INFO:":
                title = "PROCESS INFO"
                i += 1
            builder = _Builder("text", warnings)
            i = _scan_monitor(lines, i, builder, title)
            if builder.gpus:
                parts.append((builder.report(), False))
                first_format = first_format or "text"
            continue
        if content == "Legend:":
            i += 1
            while i < n and lines[i][:1] in (" ", "\t") and lines[i].strip():
                i += 1
            continue
        warnings.append(content if _is_tool_message(content) else f"line {i + 1}: cannot place: {content}")
        i += 1

    if (not parts or first_format is None) and no_gpu_format is not None:
        kinds = ", ".join(sorted(set(other_devices)))
        what = f"only other devices ({kinds})" if kinds else "no GPU entry"
        warnings.append(f"amd-smi output with no GPU: {what}")
        return SmiReport(tool="amd-smi", format=no_gpu_format, warnings=tuple(warnings))
    if not parts or first_format is None:
        detail = f" (first message: {warnings[0]})" if warnings else ""
        raise ParseError(f"no amd-smi data found{detail}", 1 if n else None)
    merged = _merge(parts)
    return replace(merged, format=first_format, warnings=tuple(warnings) + merged.warnings)


def _is_tool_message(content: str) -> bool:
    head = content.split(":", 1)[0].strip().upper()
    return head in {"WARNING", "ERROR", "CRITICAL", "INFO", "DEBUG"} or content.lower().startswith(
        ("fail to ", "failed to ", "can not find", "cannot find", "amdsmi", "'ctrl' + 'c' to stop")
    )


def _block_end(lines: Sequence[str], header: int) -> int:
    """The line after a ``GPU: N`` block: its indented (or blank) lines up to the next column-0 line."""
    end = header + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t")):
        end += 1
    return end


def _scan_tables(lines: Sequence[str], i: int, warnings: list[str]) -> tuple[int, list[_Table]]:
    """Consecutive ``<NAME> TABLE:`` sections from line ``i``; returns the next unread line and the tables."""
    tables: list[_Table] = []
    n = len(lines)
    while i < n:
        m = _TABLE_TITLE.match(lines[i])
        if m is None:
            if not lines[i].strip():
                i += 1
                continue
            break
        title_line = i + 1
        i += 1
        if i >= n or not lines[i].strip() or lines[i][:1] not in (" ", "\t"):
            warnings.append(f"line {title_line}: {m['name']} TABLE without a header row")
            continue
        header = lines[i].split()
        i += 1
        rows: list[tuple[int, str, list[str]]] = []
        while i < n and lines[i].strip() and lines[i][:1] not in (" ", "\t") and not _TABLE_TITLE.match(lines[i]):
            tokens = lines[i].split()
            if normalize_bdf(tokens[0]) is None:
                break
            rows.append((i + 1, tokens[0], tokens[1:]))
            i += 1
        tables.append((title_line, m["name"], header, rows))
    return i, tables


def _starts_anew(line: str) -> bool:
    """A column-0 line where a new output can begin after a broken JSON document."""
    return (
        line[:1] in ("[", "{")
        or _GPU_HEADER.match(line) is not None
        or _TABLE_TITLE.match(line) is not None
        or _is_tool_message(line.strip())
    ) and line.strip() not in ("]", "}", "},", "],")


def _scan_json(
    text: str,
    lines: Sequence[str],
    starts: Sequence[int],
    i: int,
    decoder: json.JSONDecoder,
    warnings: list[str],
    parts: list[tuple[SmiReport, bool]],
    others: list[str],
) -> int:
    """Decode the JSON document(s) starting on line ``i``; returns the first line after them."""
    pos = starts[i] + (len(lines[i]) - len(lines[i].lstrip()))
    while pos < len(text) and text[pos] in "[{":
        line_no = bisect.bisect_right(starts, pos)  # 1-based line of pos
        try:
            doc, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            # Skip the rest of the broken document (a truncated capture) up to something that starts anew,
            # and say which lines were skipped rather than warn about each of them.
            resume = max(line_no, i + 1)
            while resume < len(lines) and not _starts_anew(lines[resume]):
                resume += 1
            skipped = f"; skipped lines {line_no}-{resume}" if resume > line_no else ""
            warnings.append(f"line {line_no}: invalid JSON ({message}){skipped}: {lines[line_no - 1].strip()[:80]}")
            return resume
        builder = _Builder("json", warnings)
        try:
            found = _interpret_json(doc, line_no, builder)
        except RecursionError:
            warnings.append(f"line {line_no}: JSON document nested too deeply")
            found = False
        if found:
            parts.append((builder.report(), False))
        others.extend(builder.other_devices)
        pos = end
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
    if pos >= len(text):
        return len(lines)
    last_line = bisect.bisect_right(starts, pos) - 1  # 0-based line of pos
    if text[starts[last_line] : pos].strip():  # pos is inside a line that JSON began
        rest = text[pos : starts[last_line] + len(lines[last_line])].strip()
        if rest:
            warnings.append(f"line {last_line + 1}: cannot place: {rest}")
        return max(last_line + 1, i + 1)
    return max(last_line, i + 1)


# --------------------------------------------------------------------------- merging


def merge_amd_smi_reports(reports: Sequence[SmiReport]) -> SmiReport:
    """Merge the reports of separate amd-smi runs (``list``, ``metric --mem-usage``, ``process``, ``topology``
    and ``static``) into one, keyed by GPU index and PCI address.

    - A GPU is one record: each field takes the first non-None value; a later different value is a warning.
    - When a later report names a BDF that an earlier one already gave an index, the earlier index wins and
      the later report's GPUs, processes and links are renumbered to match.
    - Processes are unique per ``(pid, gpu)``; links per pair; ``a_pci_bus``/``b_pci_bus`` are filled from the
      merged GPUs. Warnings are concatenated in order. ``format`` is the first report's (``json`` when empty).
    """
    return _merge([(report, False) for report in reports])


def _merge(items: Sequence[tuple[SmiReport, bool]]) -> SmiReport:
    warnings: list[str] = []
    by_bdf: dict[str, int] = {}
    # Real indices first: positional ones (text topology tables) are renumbered to match them.
    for report, positional in items:
        for gpu in report.gpus:
            if gpu.pci_bus is not None and gpu.pci_bus not in by_bdf and not positional:
                by_bdf[gpu.pci_bus] = gpu.index
    gpus: dict[int, dict[str, Any]] = {}
    processes: dict[tuple[int, int | None], SmiProcess] = {}
    links: dict[tuple[int, int], dict[str, Any]] = {}
    for report, _positional in items:
        warnings.extend(report.warnings)
        remap = _remap(report, by_bdf, warnings)
        for gpu in report.gpus:
            new = remap.get(gpu.index, gpu.index)
            if gpu.pci_bus is not None:
                by_bdf.setdefault(gpu.pci_bus, new)
            _merge_fields(gpus.setdefault(new, {}), replace(gpu, index=new), f"GPU {new}", warnings)
        for process in report.processes:
            gpu_index = remap.get(process.gpu, process.gpu) if process.gpu is not None else None
            process = replace(process, gpu=gpu_index)
            key = (process.pid, gpu_index)
            if key in processes:
                fields: dict[str, Any] = {}
                _merge_fields(fields, processes[key], "", [])
                _merge_fields(fields, process, f"PID {process.pid} on GPU {gpu_index}", warnings)
                processes[key] = SmiProcess(**fields)
            else:
                processes[key] = process
        for link in report.links:
            a, b = remap.get(link.a, link.a), remap.get(link.b, link.b)
            if a == b:
                continue
            if a > b:
                link = replace(link, a_pci_bus=link.b_pci_bus, b_pci_bus=link.a_pci_bus)
                a, b = b, a
            _merge_fields(links.setdefault((a, b), {}), replace(link, a=a, b=b), f"GPUs {a}-{b}", warnings)
    merged_gpus = tuple(SmiGpu(**fields) for _, fields in sorted(gpus.items()))
    bus = {g.index: g.pci_bus for g in merged_gpus}
    merged_links = []
    for (a, b), fields in sorted(links.items()):
        link = SmiLink(**fields)
        merged_links.append(
            replace(link, a_pci_bus=bus.get(a) or link.a_pci_bus, b_pci_bus=bus.get(b) or link.b_pci_bus)
        )
    ordered = sorted(processes.values(), key=lambda p: (p.gpu is None, p.gpu or 0, p.pid))
    fmt: SmiFormat = items[0][0].format if items else "json"
    return SmiReport(
        tool="amd-smi",
        format=fmt,
        gpus=merged_gpus,
        processes=tuple(ordered),
        links=tuple(merged_links),
        warnings=tuple(warnings),
    )


def _remap(report: SmiReport, by_bdf: Mapping[str, int], warnings: list[str]) -> dict[int, int]:
    remap: dict[int, int] = {}
    for gpu in report.gpus:
        target = by_bdf.get(gpu.pci_bus) if gpu.pci_bus is not None else None
        if target is not None and target != gpu.index:
            remap[gpu.index] = target
    if not remap:
        return {}
    targets = [remap.get(g.index, g.index) for g in report.gpus]
    if len(set(targets)) != len(targets):
        warnings.append("GPU indices and PCI addresses disagree between outputs; kept the indices as printed")
        return {}
    return remap


def _merge_fields(target: dict[str, Any], record: msgspec.Struct, where: str, warnings: list[str]) -> None:
    for field in msgspec.structs.fields(record):
        value = getattr(record, field.name)
        old = target.get(field.name)
        if old is None:
            target[field.name] = value
        elif value is not None and value != old and where:
            warnings.append(f"{where}: {field.name} differs between outputs ({old!r}, {value!r}); kept the first")


# --------------------------------------------------------------------------- --help


class AmdSmiHelp(msgspec.Struct, frozen=True):
    """What one ``amd-smi [command] --help`` says the installed version offers.

    ``command`` is None for the top-level help (``amd-smi --help`` or plain ``amd-smi``), else the
    subcommand (``"metric"``). ``commands`` are the subcommands the top-level help lists, aliases included
    (``"ucode"``, ``"dmon"``). ``options`` are every option spelling listed (``"-m"``, ``"--mem-usage"``).
    """

    command: str | None
    version: str | None = None
    rocm_version: str | None = None
    commands: frozenset[str] = frozenset()
    options: frozenset[str] = frozenset()

    def supports(self, *options: str) -> bool:
        """True when any of ``options`` is listed (``supports("--mem-usage", "-m")``)."""
        return any(option in self.options for option in options)


_USAGE = re.compile(r"^usage:\s*amd-smi(?:\s+(?P<command>[a-z][a-z0-9-]*))?", re.IGNORECASE)
_VERSION = re.compile(r"\bVersion:\s*(?P<version>[^\s|]+)")
_ROCM_VERSION = re.compile(r"\bROCm version:\s*(?P<version>[^\s|]+)", re.IGNORECASE)
_COMMAND_LINE = re.compile(r"^\s+(?P<name>[a-z][a-z0-9-]*)(?:\s+\((?P<alias>[a-z][a-z0-9-]*)\))?(?:\s{2,}\S.*)?$")
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)")


def parse_amd_smi_help(text: str) -> AmdSmiHelp:
    """Parse ``amd-smi --help`` (or ``amd-smi <command> --help``). Raises :class:`ParseError` without an
    ``usage: amd-smi`` line."""
    lines = text.splitlines()
    command: str | None = None
    usage_at: int | None = None
    for number, line in enumerate(lines):
        m = _USAGE.match(line.strip())
        if m:
            command = m["command"]
            usage_at = number
            break
    if usage_at is None:
        raise ParseError("not amd-smi help: no 'usage: amd-smi' line", 1 if lines else None)

    version = rocm = None
    for line in lines:
        if version is None and (m := _VERSION.search(line)) and not line.lstrip().lower().startswith("rocm"):
            version = m["version"]
        if rocm is None and (m := _ROCM_VERSION.search(line)):
            rocm = m["version"]

    options: set[str] = set()
    commands: set[str] = set()
    in_usage = True
    in_commands = False
    for line in lines[usage_at:]:
        stripped = line.strip()
        if in_usage:
            options.update(re.findall(r"\[(--?[A-Za-z0-9][\w-]*)", line))
            options.update(re.findall(r"\|\s*(--?[A-Za-z0-9][\w-]*)", line))
            if not stripped:
                in_usage = False
            continue
        if stripped.endswith("Commands:") and command is None:
            in_commands = True
            continue
        if in_commands:
            if not stripped:
                in_commands = False
                continue
            cm = _COMMAND_LINE.match(line)
            if cm and not stripped.endswith(":"):
                commands.add(cm["name"])
                if cm["alias"]:
                    commands.add(cm["alias"])
            continue
        if stripped.startswith("-"):
            spec = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
            options.update(token for token in _OPTION.findall(spec) if not token[1:].isdigit())
    return AmdSmiHelp(
        command=command,
        version=version,
        rocm_version=rocm,
        commands=frozenset(commands),
        options=frozenset(options),
    )


def amd_smi_commands(helps: Iterable[AmdSmiHelp]) -> tuple[tuple[str, ...], ...]:
    """The amd-smi argument lists to run, from the help texts probed at start.

    ``helps`` holds the top-level help and the help of ``list``, ``metric``, ``process``, ``topology`` and
    ``static`` when probed. A subcommand is used when the top-level help lists it (or, without a top-level
    help, when its own help was probed); ``--json`` when its help lists it. ``metric`` is asked only for
    memory (``--mem-usage``, or ``-m``), and ``static`` only for ``--numa``/``--bus``/``--asic`` when listed:
    without those flags both would print everything, which is slow (research section 3).
    """
    by_command: dict[str | None, AmdSmiHelp] = {}
    for help_ in helps:
        by_command.setdefault(help_.command, help_)
    top = by_command.get(None)
    result: list[tuple[str, ...]] = []
    for command in ("list", "metric", "process", "topology", "static"):
        sub = by_command.get(command)
        if top is not None and command not in top.commands:
            continue
        if top is None and sub is None:
            continue
        args: list[str] = [command]
        if command == "metric":
            if sub is None:
                continue
            flag = next((f for f in ("--mem-usage", "-m") if sub.supports(f)), None)
            if flag is None:
                continue
            args.append(flag)
        elif command == "static":
            if sub is None:
                continue
            flags = [
                next(f for f in pair if sub.supports(f))
                for pair in (("--numa", "-u"), ("--bus", "-b"), ("--asic", "-a"))
                if sub.supports(*pair)
            ]
            if not flags:
                continue
            args.extend(flags)
        if sub is None or sub.supports("--json"):
            args.append("--json")
        result.append(tuple(args))
    return tuple(result)
