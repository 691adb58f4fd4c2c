""":func:`parse_amd_smi`: one captured amd-smi output, or several in a row, in any of the formats of this
package. Each column-0 line decides which format's reader takes over (``default_view``, ``json_docs``,
``text_blocks``, ``topology_tables``, ``monitor_tables``, ``partition_tables``; which ROCm release prints which:
docs/amd-smi-formats.md); tool messages and lines none of them takes become warnings, and the partial reports are
merged (``merge``).

No GPU: an amd-smi output that names only other devices (``amd-smi list --nic``: ``AI_NIC: 0`` blocks with
indented keys; JSON items keyed ``nic``/``cpu``/``core``) or a default-view box with no GPU entry is still
amd-smi output: the result is an empty report with the warning ``amd-smi output with no GPU: ...`` (the source
then judges "no GPU" a failure). Input with no amd-smi data at all raises :class:`ParseError`.
Shell prompt lines in pastes (``$ amd-smi``, ``user@host:~$ ...``) are not amd-smi output: "cannot place".
"""

from __future__ import annotations

import json

from msgspec.structs import replace

from exporter.model import ParseError
from exporter.model.smi import SmiFormat, SmiReport
from exporter.parsers.amd_smi.common import _GPU_HEADER, _MAX_INDEX, _TABLE_TITLE, _Builder, _is_tool_message
from exporter.parsers.amd_smi.default_view import _is_box_line, _scan_box
from exporter.parsers.amd_smi.gpu_object import _interpret_gpu
from exporter.parsers.amd_smi.json_docs import _scan_json
from exporter.parsers.amd_smi.merge import _merge
from exporter.parsers.amd_smi.monitor_tables import _MONITOR_HEADER, _scan_monitor
from exporter.parsers.amd_smi.partition_tables import (
    is_legend_item,
    is_star_box,
    scan_partition,
    scan_star_box,
    starts_partition_table,
)
from exporter.parsers.amd_smi.text_blocks import _BLOCK_KEY, _OTHER_HEADER, _block_end, _parse_block
from exporter.parsers.amd_smi.topology_tables import _interpret_tables, _scan_tables


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
        if line[:1] not in (" ", "\t") and starts_partition_table(lines, i):
            builder = _Builder("text", warnings)
            i, positional = scan_partition(lines, i, builder)
            if builder.gpus:
                parts.append((builder.report(), positional))
                first_format = first_format or "text"
            else:
                no_gpu_format = no_gpu_format or "text"  # ACCELERATOR_PARTITION_RESOURCES alone
            continue
        if is_star_box(line):
            i = scan_star_box(lines, i, warnings)
            continue
        if content == "Legend:":
            i += 1
            while i < n and lines[i].strip() and (lines[i][:1] in (" ", "\t") or is_legend_item(lines[i])):
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
