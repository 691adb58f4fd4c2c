"""``amd-smi monitor`` (with ``--watch`` too) and ``amd-smi monitor --process`` as text
(``research/smi-formats.md`` sections 2.2 and 2.3): right-aligned tables with one row per GPU (or process).
The VRAM columns and the process rows are read; ``--watch`` repeats rows and the last sample wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from exporter.model.smi import SmiProcess
from exporter.parsers.amd_smi.common import _Builder, _cells, _gpu_index, _integer, _size_bytes, _text
from exporter.parsers.common import is_missing

# ``amd-smi monitor`` (``GPU  [XCP]  POWER ... VRAM_USAGE``, ``TIMESTAMP`` first under ``--watch``) and the
# ``PROCESS INFO:`` table of ``monitor --process``: right-aligned columns whose cells hold a value and its unit
# (``305 W``, ``97 %``, ``3.0/191.7 GB``, ``2.9/ 15.9 GB``, ``0 ns``). Cells are read as value+unit tokens.
_MONITOR_HEADER = re.compile(r"^\s*(?:TIMESTAMP\s+)?GPU(?:\s+[A-Z][A-Z0-9_]*%?){2,}\s*$")
_USED_TOTAL = re.compile(r"^(?P<used>\d+(?:\.\d+)?)/\s*(?P<total>\d+(?:\.\d+)?)(?:\s+(?P<unit>\S+))?$")


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
