"""``amd-smi partition`` as text (ROCm >= 6.4): whitespace tables under a column-0 title, keyed by ``GPU_ID``.

Documented by the captures in ``tests/data/amd-smi/partition*`` (``PROVENANCE.md`` there; the layouts per release
are in ``docs/amd-smi-formats.md``):

- ``CURRENT_PARTITION:`` ``GPU_ID MEMORY ACCELERATOR_TYPE ACCELERATOR_PROFILE_INDEX PARTITION_ID``: one row per GPU
  (or partition). ``PARTITION_ID`` was a comma list (``0,1,2,3,4,5,6,7``) on the first partition of a physical GPU
  and ``N/A`` on the others up to ROCm 6.4.0; from 6.4.1 each row holds its own id. The id of a row is the first
  of the list (amd-smi's ``partition_id[0]``).
- ``MEMORY_PARTITION:`` ``GPU_ID MEMORY_PARTITION_CAPS CURRENT_MEMORY_PARTITION`` (6.4.0 printed ``GPU: N`` /
  ``MEMORY_PARTITION:`` text blocks here instead, read by ``text_blocks``).
- ``ACCELERATOR_PARTITION_PROFILES:``: one row per profile, then continuation rows for its resources whose
  ``GPU_ID`` (and ``PROFILE_INDEX``) cells are blank: they belong to the row above. ``*`` after the
  ``ACCELERATOR_TYPE`` marks the current profile. Without root every ``GPU_ID`` is ``N/A``: those rows are
  numbered by position (amd-smi prints GPUs in index order) and say nothing else.
- ``ACCELERATOR_PARTITION_RESOURCES:``: no GPU column; recognised, not read.
- A star-framed box (``****`` / ``** WARNING: ... **``) may stand between a title and its header, or between
  tables: its text is one warning. ``Legend:`` / ``* = Current mode`` ends the output.

Cells are placed by the header's column starts, so blank cells stay blank; a row whose tokens match the
columns one for one is read as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.parsers.amd_smi.common import _Builder, _gpu_index, _integer, _is_tool_message, _text
from exporter.parsers.common import is_missing

# A column-0 title of a partition table (``CURRENT_PARTITION:``, ``ACCELERATOR_PARTITION_PROFILES:``).
PARTITION_TITLE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*PARTITION[A-Z0-9_]*):\s*$")
# A header row of one: its first column is ``GPU_ID`` (or ``RESOURCE_INDEX`` for the resources table).
PARTITION_HEADER = re.compile(r"^\s*(?:GPU_ID|RESOURCE_INDEX)(?:\s+[A-Z][A-Z0-9_]*){1,}\s*$")
_STAR_LINE = re.compile(r"^\s*\*\*")
_LEGEND_ITEM = re.compile(r"^\s*\*\s*=")
_TOKEN = re.compile(r"\S+")


def is_star_box(line: str) -> bool:
    return _STAR_LINE.match(line) is not None


def scan_star_box(lines: Sequence[str], i: int, warnings: list[str]) -> int:
    """A ``****`` framed box from line ``i``: its text becomes one warning; returns the line after it."""
    words: list[str] = []
    while i < len(lines) and is_star_box(lines[i]):
        inner = lines[i].strip().strip("*").strip()
        if inner:
            words.append(inner)
        i += 1
    if words:
        warnings.append(" ".join(words))
    return i


def is_legend_item(line: str) -> bool:
    return _LEGEND_ITEM.match(line) is not None


def starts_partition_table(lines: Sequence[str], i: int) -> bool:
    """Line ``i`` is a partition table's title, or a header row pasted without one."""
    return PARTITION_TITLE.match(lines[i]) is not None or (
        PARTITION_HEADER.match(lines[i]) is not None and lines[i].split()[0] == "GPU_ID" and lines[i][:1] != " "
    )


def _columns(header: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group(0)) for m in _TOKEN.finditer(header.expandtabs(8))]


def _row_cells(line: str, columns: Sequence[tuple[int, str]]) -> dict[str, str]:
    """Cells of one row by the header's column starts; a blank cell is ``""``."""
    expanded = line.expandtabs(8)
    tokens = [(m.start(), m.group(0)) for m in _TOKEN.finditer(expanded)]
    names = [name for _, name in columns]
    if expanded[:1] not in (" ", "") and len(tokens) == len(columns):
        return dict(zip(names, (text for _, text in tokens), strict=True))
    cells = dict.fromkeys(names, "")
    starts = [start for start, _ in columns]
    for start, text in tokens:
        # the last column that starts at or before the token (a cell starts at its column; allow one off)
        k = max((j for j, s in enumerate(starts) if s <= start + 1), default=0)
        name = names[k]
        cells[name] = f"{cells[name]} {text}".strip()
    return cells


def scan_partition(lines: Sequence[str], i: int, out: _Builder) -> tuple[int, bool]:
    """One partition table from line ``i`` (its title, or a header without one). Returns the next line and
    whether its rows were GPU rows numbered by position (``GPU_ID`` N/A)."""
    n = len(lines)
    title_line = i + 1
    m = PARTITION_TITLE.match(lines[i])
    if m is not None:
        title = m["name"]
        i += 1
    else:
        title = "CURRENT_PARTITION" if "MEMORY" in lines[i].split() else "PARTITION"
    while i < n and not PARTITION_HEADER.match(lines[i]):
        content = lines[i].strip()
        if not content:
            i += 1
        elif is_star_box(lines[i]):
            i = scan_star_box(lines, i, out.warnings)
        elif _is_tool_message(content):
            out.warn(content)
            i += 1
        else:
            break
    if i >= n or not PARTITION_HEADER.match(lines[i]):
        out.warn(f"line {title_line}: {title} without a header row")
        return i, False
    columns = _columns(lines[i])
    header_line = i + 1
    i += 1
    rows: list[tuple[int, dict[str, str]]] = []
    while i < n and lines[i].strip():
        line = lines[i]
        content = line.strip()
        if line[:1] not in (" ", "\t") and (
            PARTITION_TITLE.match(line) or _is_tool_message(content) or content.startswith("GPU:")
        ):
            break
        if is_star_box(line) or content == "Legend:":
            break
        rows.append((i + 1, _row_cells(line, columns)))
        i += 1
    positional = _interpret(title, [name for _, name in columns], header_line, rows, out)
    return i, positional


def _interpret(
    title: str, names: Sequence[str], header_line: int, rows: Sequence[tuple[int, dict[str, str]]], out: _Builder
) -> bool:
    if "GPU_ID" not in names:
        return False  # ACCELERATOR_PARTITION_RESOURCES: resources of the profiles, no GPU
    current: int | None = None
    current_unnamed = False
    position = -1  # GPU rows seen (rows with a GPU_ID cell, N/A or not)
    unnamed = 0
    for number, cells in rows:
        raw = cells.get("GPU_ID", "")
        if raw:
            position += 1
            current_unnamed = is_missing(raw)
            if current_unnamed:
                current = position
                unnamed += 1
                out.gpu(current)
                continue  # without root: nothing on this row is this GPU's (PARTITION_ID reads 0 everywhere)
            current = _gpu_index(raw)
            if current is None:
                out.warn(f"line {number}: cannot place: {' '.join(v for v in cells.values() if v)}")
                continue
        elif current is None:
            if any(cells.values()):
                out.warn(f"line {number}: {title} row before any GPU row")
            continue
        elif current_unnamed:
            continue  # a continuation row of an unnamed GPU
        _row(title, current, number, cells, out)
    if unnamed:
        out.warn(
            f"line {header_line}: {title}: {unnamed} row(s) without a GPU_ID (N/A: amd-smi needs root for this "
            "table); those GPUs are numbered by position"
        )
    return unnamed > 0


def _row(title: str, index: int, number: int, cells: dict[str, str], out: _Builder) -> None:
    out.gpu(index)
    where = f"line {number} GPU {index}"
    if title == "ACCELERATOR_PARTITION_PROFILES" or "PROFILE_INDEX" in cells:
        kind = cells.get("ACCELERATOR_TYPE", "")
        if kind.endswith("*"):  # the current profile of this GPU
            out.set_gpu(index, "compute_partition", _mode(kind))
            out.set_gpu(index, "partition_id", _first_id(cells.get("PARTITION_ID", ""), out, where))
        return
    out.set_gpu(index, "memory_partition", _mode(cells.get("MEMORY", cells.get("CURRENT_MEMORY_PARTITION", ""))))
    if "ACCELERATOR_TYPE" in cells:
        out.set_gpu(index, "compute_partition", _mode(cells["ACCELERATOR_TYPE"]))
    if "PARTITION_ID" in cells:
        out.set_gpu(index, "partition_id", _first_id(cells["PARTITION_ID"], out, where))


def _mode(raw: str) -> str | None:
    text = _text(raw.rstrip("*"))
    return text.upper() if text else None


def _first_id(raw: str, out: _Builder, where: str) -> int | None:
    """``3``, or the list ``0,1,2,3,4,5,6,7`` amd-smi <= 6.4.0 printed on a physical GPU's first partition: its
    first element is this row's own id (``partition_id[0]``)."""
    first = raw.split(",", 1)[0].strip()
    return _integer(first, out.warn, f"{where} PARTITION_ID") if first else None
