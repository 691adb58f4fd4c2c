"""The default view of plain ``amd-smi`` (amd-smi >= 26, ROCm 7): box-drawn tables, a two-line entry per GPU
(BDF and name; index and ``used/total MB``) and a ``Processes:`` box; borders never reach a value. Documented by
the captures in ``tests/data/amd-smi/default_text_box_*`` (``PROVENANCE.md`` there); ``research/smi-formats.md``
does not describe it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.model.smi import SmiProcess
from exporter.parsers.amd_smi.common import _Builder, _cells, _gpu_index, _size_bytes, _text
from exporter.parsers.common import is_missing, normalize_bdf

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
