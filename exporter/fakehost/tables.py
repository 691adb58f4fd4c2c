"""Build binary ``gpu_metrics`` tables member by member at the offsets of the kernel's structs, for the parser's
tests (tests/test_gpu_metrics.py) and the fake roots (exporter/fakehost/builder.py).

Offsets come as a mapping ``(struct name, member path) -> (offset, size)`` with ``(struct name, "") -> sizeof``:
gcc's layout of the C structs (test_gpu_metrics.py's ``gcc_layout`` fixture) or ``struct_offsets(layout)``, the
same mapping read off ``exporter.parsers.gpu_metrics.layouts`` (test_gpu_metrics.py checks the two are equal for
every struct, so a table built here is the kernel's struct as gcc lays it out, not the decoder's reading of it).

- ``build_table``: every member a recognisable value of its own (the parser's field-by-field tests);
- ``pack_table``: the members given, every other byte all ones, as the kernel leaves a field the firmware does
  not fill (``smu_cmn_init_soft_gpu_metrics`` memsets the table to 0xFF).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Mapping

from exporter.model.gpu_metrics import FieldValue
from exporter.parsers.gpu_metrics.layouts import HEADER_FIELDS, NOT_AVAILABLE, Layout, Member, StructType

Offsets = Mapping[tuple[str, str], tuple[int, int]]


def member_paths(layout: Layout) -> Iterator[str]:
    """Every member of the C struct by its path (``common_header.structure_size``, ``xcp_stats[3].vcn_busy``)."""
    for slot in layout.slots:
        m = slot.member
        if m.name in HEADER_FIELDS:
            yield f"common_header.{m.name}"
        elif isinstance(m.ctype, StructType):
            for k in range(m.count or 1):
                for inner in m.ctype.members:
                    yield f"{m.name}[{k}].{inner.name}"
        else:
            yield m.name


def struct_offsets(layout: Layout) -> dict[tuple[str, str], tuple[int, int]]:
    """The ``Offsets`` of ``layout`` from the Python layout (padding members included, as in the C struct)."""
    out: dict[tuple[str, str], tuple[int, int]] = {(layout.name, ""): (0, layout.size)}
    for slot in layout.slots:
        m = slot.member
        if m.name in HEADER_FIELDS:
            out[(layout.name, f"common_header.{m.name}")] = (slot.offset, m.size)
        elif isinstance(m.ctype, StructType):
            for k in range(m.count or 1):
                for inner in m.ctype.slots:
                    path = f"{m.name}[{k}].{inner.member.name}"
                    out[(layout.name, path)] = (slot.offset + k * m.ctype.size + inner.offset, inner.member.size)
        else:
            out[(layout.name, m.name)] = (slot.offset, m.size)
    return out


def _header(buf: bytearray, layout: Layout, offsets: Offsets, size: int) -> None:
    struct.pack_into("<H", buf, offsets[(layout.name, "common_header.structure_size")][0], size)
    buf[offsets[(layout.name, "common_header.format_revision")][0]] = layout.format_revision
    buf[offsets[(layout.name, "common_header.content_revision")][0]] = layout.content_revision


def recognisable(ctype: str, n: int) -> int:
    """A value unique to its field and element, that fits the type and is not the all-ones marker."""
    return {"u8": 1 + n % 200, "u16": 0x100 + n, "u32": 0x0100_0000 + n, "u64": 0x0100_0000_0000_0000 + n}[ctype]


def put(buf: bytearray, offset: int, member: Member, counter: Iterator[int]) -> FieldValue:
    assert isinstance(member.ctype, str)
    width = member.element_size
    values: list[FieldValue] = []
    for j in range(member.count or 1):
        v = recognisable(member.ctype, next(counter))
        buf[offset + j * width : offset + (j + 1) * width] = v.to_bytes(width, "little")
        values.append(v)
    return values[0] if member.count is None else values


def build_table(layout: Layout, offsets: Offsets) -> tuple[bytes, dict[str, FieldValue]]:
    """The table filled member by member at ``offsets``; padding bytes stay 0x5a. Returns (bytes, expected)."""
    size = offsets[(layout.name, "")][1]
    buf = bytearray(b"\x5a" * size)
    _header(buf, layout, offsets, size)
    counter = itertools.count(1)
    expected: dict[str, FieldValue] = {}
    for slot in layout.slots:
        m = slot.member
        if m.name in HEADER_FIELDS or m.padding:
            continue
        if isinstance(m.ctype, StructType):
            elements: list[FieldValue] = []
            for k in range(m.count or 1):
                element: dict[str, FieldValue] = {}
                for inner in m.ctype.members:
                    offset = offsets[(layout.name, f"{m.name}[{k}].{inner.name}")][0]
                    element[inner.name] = put(buf, offset, inner, counter)
                elements.append(element)
            expected[m.name] = elements
        else:
            expected[m.name] = put(buf, offsets[(layout.name, m.name)][0], m, counter)
    return bytes(buf), expected


def _write(buf: bytearray, offset: int, member: Member, value: FieldValue) -> None:
    """``value`` (an int, None for all ones, or a list: the first elements of an array) at ``offset``."""
    assert isinstance(member.ctype, str)
    width = member.element_size
    items = value if isinstance(value, list) else [value]
    if len(items) > (member.count or 1):
        raise ValueError(f"{member.name}: {len(items)} values for {member.count or 1} elements")
    for j, v in enumerate(items):
        raw = NOT_AVAILABLE[member.ctype] if v is None else v
        if not isinstance(raw, int):
            raise TypeError(f"{member.name}[{j}]: {v!r} is not an integer")
        buf[offset + j * width : offset + (j + 1) * width] = raw.to_bytes(width, "little")


def pack_table(
    layout: Layout, values: Mapping[str, FieldValue], offsets: Offsets | None = None, size: int | None = None
) -> bytes:
    """The table with the members in ``values`` set, by kernel name, and every other byte 0xFF ("not available").

    An array takes a list of its first elements; ``xcp_stats`` a list of dicts (its first partitions), each giving
    some members of ``struct amdgpu_xcp_metrics*``. ``size`` overrides the header's ``structure_size``.
    """
    offsets = offsets if offsets is not None else struct_offsets(layout)
    length = offsets[(layout.name, "")][1]
    buf = bytearray(b"\xff" * length)
    _header(buf, layout, offsets, length if size is None else size)
    members = {s.member.name: s.member for s in layout.slots if not s.member.padding}
    for name, value in values.items():
        member = members.get(name)
        if member is None or name in HEADER_FIELDS:
            raise KeyError(f"{layout.name} has no member {name!r}")
        if isinstance(member.ctype, StructType):
            if not isinstance(value, list):
                raise TypeError(f"{name}: a list of dicts, one per element")
            inner = {m.name: m for m in member.ctype.members}
            for k, element in enumerate(value):
                if not isinstance(element, dict):
                    raise TypeError(f"{name}[{k}]: a dict of members")
                for field_name, field_value in element.items():
                    offset = offsets[(layout.name, f"{name}[{k}].{field_name}")][0]
                    _write(buf, offset, inner[field_name], field_value)
        else:
            _write(buf, offsets[(layout.name, name)][0], member, value)
    return bytes(buf)


__all__ = ["Offsets", "build_table", "member_paths", "pack_table", "put", "recognisable", "struct_offsets"]
