"""amd-smi's JSON output (``--json``, ``research/smi-formats.md`` section 2.1): a list of per-GPU objects
``{"gpu": N, ...}`` (pretty or one-line), or the same list under a top-level ``gpu_data`` key (amd-smi >= 26);
items keyed ``nic``/``cpu``/``core`` name other devices. Several documents may follow each other in one
capture; a broken (truncated) one is skipped up to the next line where an output can begin.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence

from exporter.model.smi import SmiReport
from exporter.parsers.amd_smi.common import _GPU_HEADER, _TABLE_TITLE, _Builder, _gpu_index, _is_tool_message
from exporter.parsers.amd_smi.gpu_object import _interpret_gpu

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
