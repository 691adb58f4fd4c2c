"""What every amd-smi output format shares: value normalisation, units, the record builder, and the lines
that start an output.

- Values: numbers are plain or ``{"value": N, "unit": "..."}`` (JSON, ``research/smi-formats.md`` 2.1).
  Redacted values (``<redacted>``, as in amd-smi's own documented outputs) are None, like N/A.
- Units: the ``mem_usage`` "MB" of amd-smi are MiB (``bytes // 2**20``, section 2.2), so MB values are multiplied
  by 1048576 (the default view's ``Mem-Usage`` ``285/196288 MB`` too); human-readable text sizes (``10.1 GB``,
  ``0.0 B``) use a 1024 base and are approximate (one decimal, section 2.3). "N/A" is None, never 0.
- :class:`_Builder` collects what one output says about GPUs, processes and links and freezes it into a
  :class:`~exporter.model.smi.SmiReport`; the format modules fill it, ``merge`` joins the reports.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from exporter.model.smi import SmiFormat, SmiGpu, SmiLink, SmiProcess, SmiReport
from exporter.parsers.common import is_missing

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


def _link_type(raw: object) -> str | None:
    text = _text(raw)
    return text.upper() if text is not None else None


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


# Cells of amd-smi's right-aligned tables (``monitor``, the default view's ``Processes:`` box) hold a value and
# its unit (``305 W``, ``97 %``, ``3.0/191.7 GB``, ``2.9/ 15.9 GB``, ``0 ns``): they are read as value+unit tokens.
# Rates too (``PCIE_BW`` ``N/A Mb/s``): a unit after N/A stays in its cell.
_UNITS = (
    r"(?:W|mW|kW|°C|C|°F|MHz|GHz|%|B|KB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB|ns|us|ms|s|mV|V|GT/s|RPM"
    r"|b/s|Kb/s|Mb/s|Gb/s|Tb/s|B/s|KB/s|MB/s|GB/s|TB/s|bps|Kbps|Mbps|Gbps)"
)
_CELL = re.compile(
    r"(?P<usage>\d+(?:\.\d+)?/\s*\d+(?:\.\d+)?(?:\s+" + _UNITS + r")?(?!\S))"
    r"|(?P<plain>\S+(?:\s+" + _UNITS + r"(?!\S))?)"
)


def _cells(line: str) -> list[str]:
    return [m.group(0) for m in _CELL.finditer(line.expandtabs(8))]


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


# Lines where an output begins besides JSON and boxes (a text ``GPU: N`` block, a topology ``<NAME> TABLE:``) and
# the tool's own messages before or between outputs: the entry point dispatches on them, and the JSON reader
# resumes at them after a broken document.
_GPU_HEADER = re.compile(r"^GPU:\s*(?P<index>[0-9]{1,9})\s*$")
_TABLE_TITLE = re.compile(r"^(?P<name>[A-Z][A-Z0-9 /_-]*?)\s+TABLE:\s*$")


def _is_tool_message(content: str) -> bool:
    head = content.split(":", 1)[0].strip().upper()
    return head in {"WARNING", "ERROR", "CRITICAL", "INFO", "DEBUG"} or content.lower().startswith(
        ("fail to ", "failed to ", "can not find", "cannot find", "amdsmi", "'ctrl' + 'c' to stop")
    )
