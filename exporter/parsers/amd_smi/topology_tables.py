"""amd-smi ``topology`` as text (ROCm >= 6.1, ``research/smi-formats.md`` section 2.5): ``<NAME> TABLE:``
matrices (``WEIGHT``, ``HOPS``, ``LINK TYPE``, ``ACCESS``, ``NUMA BW``, and with ``-c/-n/-d/-z`` more) whose
rows and columns are BDFs, followed by a Legend.

The tables name GPUs only by BDF; their index is the column position (amd-smi prints devices in index order).
When the same capture, or a report merged with :func:`~exporter.parsers.amd_smi.merge_amd_smi_reports`, also
holds GPUs with a real index for that BDF (``list``, ``static``, JSON topology), the real index wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.parsers.amd_smi.common import _TABLE_TITLE, _Builder, _integer, _link_type
from exporter.parsers.common import normalize_bdf

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
