"""Bytes of a ``gpu_metrics`` file -> ``GpuMetrics``. Pure: no I/O, and no exception but ``ParseError``.

The layout is chosen by (format_revision, content_revision), never by size: v1.3, v2.0 and v2.1 are all 120 bytes.
Size only tells apart the two layouts v1.6 has had. What cannot be decoded cleanly still gives what it can, with
one warning (never more) saying what went wrong:

- a buffer shorter than the layout: the members that fit whole, "truncated";
- a newer minor revision of a known format (v2.5, v3.1): the newest known layout of that format, whose fields a
  later revision keeps (the kernel only ever appended to a fixed layout under a new content revision);
- v1.10 and later: read as the v1.9 attribute list, which exists so that new fields need no new struct;
- a v1.9 (or later) table that is not an attribute list from its first attribute on: the newest fixed v1 layout
  (v1.8), as such a table would have been laid out before v1.9;
- an unknown format (v4.0, or garbage): the header alone.

Fewer than 4 bytes is not a capture at all: ``ParseError``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from exporter.model import ParseError
from exporter.model.gpu_metrics import FieldValue, GpuMetrics
from exporter.parsers.gpu_metrics.attributes import ATTRIBUTES_OFFSET, decode_attributes
from exporter.parsers.gpu_metrics.layouts import HEADER_FIELDS, LAYOUTS, NOT_AVAILABLE, Layout, Member, StructType
from exporter.parsers.gpu_metrics.throttle import throttle_reasons

_HEADER = struct.Struct("<HBB")
Fields = dict[str, FieldValue]
ATTRIBUTE_REVISION = (1, 9)  # the first self-describing revision: every later v1.x is read the same way
_NEWEST_FIXED_V1 = (1, 8)


def _newest(format_revision: int) -> tuple[int, int] | None:
    known = [rev for rev in (*LAYOUTS, ATTRIBUTE_REVISION) if rev[0] == format_revision]
    return max(known) if known else None


def _take(member: Member, values: Iterator[int]) -> FieldValue:
    """Rebuild one member's value from the flat tuple ``struct`` returned, all-ones -> None."""
    ctype = member.ctype
    if isinstance(ctype, StructType):
        return [_take_struct(ctype, values) for _ in range(member.count or 1)]
    missing = NOT_AVAILABLE[ctype]
    if member.count is None:
        v = next(values)
        return None if v == missing else v
    items: list[FieldValue] = []
    for _ in range(member.count):
        v = next(values)
        items.append(None if v == missing else v)
    return items


def _take_struct(ctype: StructType, values: Iterator[int]) -> FieldValue:
    element: dict[str, FieldValue] = {}
    for m in ctype.members:
        if not m.padding:
            element[m.name] = _take(m, values)
    return element


# (id of a layout, which are module constants) -> its compiled format and the members it yields values for
_WHOLE: dict[int, tuple[struct.Struct, tuple[Member, ...]]] = {}


def _plan(layout: Layout, length: int) -> tuple[struct.Struct, tuple[Member, ...]]:
    """How to unpack the members of ``layout`` that fit in ``length`` bytes; made once per layout for a whole
    table (a GPU's table is decoded at every walk), each time for a truncated one."""
    whole = length >= layout.size
    plan = _WHOLE.get(id(layout)) if whole else None
    if plan is None:
        fmt, slots = layout.prefix(length)
        plan = (struct.Struct(fmt), tuple(s.member for s in slots if not s.member.padding))
        if whole:
            _WHOLE[id(layout)] = plan
    return plan


def _decode_fixed(layout: Layout, data: bytes) -> Fields:
    compiled, members = _plan(layout, len(data))
    values = iter(compiled.unpack_from(data))
    fields: dict[str, FieldValue] = {}
    for m in members:
        value = _take(m, values)
        if m.name not in HEADER_FIELDS:
            fields[m.name] = value
    return fields


def _choose(layouts: tuple[Layout, ...], structure_size: int) -> Layout:
    """The layout whose size the header states; the current one when none matches."""
    return next((layout for layout in layouts if layout.size == structure_size), layouts[0])


def _truncation(layout: Layout, length: int) -> list[str]:
    if length < layout.size:
        return [f"truncated: {length} of the {layout.size} bytes of {layout.name}; later fields are missing"]
    return []


def _fixed_table(layout: Layout, data: bytes, structure_size: int, future: bool) -> tuple[Fields, list[str]]:
    fields = _decode_fixed(layout, data)
    problems = _truncation(layout, len(data))
    # A newer revision is longer and states its own size: only truncation is a problem then.
    if not problems and not future:
        if structure_size != layout.size:
            problems.append(f"header structure_size {structure_size} is not the {layout.size} bytes of {layout.name}")
        if len(data) > max(structure_size, layout.size):
            problems.append(f"{len(data) - max(structure_size, layout.size)} bytes after the table ignored")
    return fields, problems


def _attribute_table(data: bytes, structure_size: int) -> tuple[str, Fields, dict[str, str], list[str]]:
    end = min(len(data), structure_size) if structure_size >= ATTRIBUTES_OFFSET else len(data)
    fields, units, problem = decode_attributes(data, end)
    if problem and not fields:
        # Not an attribute list from its first bytes: read it as v1.x tables were laid out before v1.9, in the
        # newest fixed layout, whose fields a fixed successor would have kept.
        layout = LAYOUTS[_NEWEST_FIXED_V1][0]
        fallback = f"not a v1.9 attribute list ({problem}): decoded as {layout.name}"
        return layout.name, _decode_fixed(layout, data), {}, [fallback, *_truncation(layout, len(data))]
    if problem:
        return "gpu_metrics_v1_9", fields, units, [problem]
    if len(data) < structure_size:
        return "gpu_metrics_v1_9", fields, units, [f"truncated: {len(data)} of the {structure_size} bytes stated"]
    return "gpu_metrics_v1_9", fields, units, []


def _header_only(structure_size: int, frev: int, crev: int, what: str) -> GpuMetrics:
    warning = f"unknown {what} revision {frev}.{crev}: only the header decoded"
    return GpuMetrics(structure_size, frev, crev, layout=None, fields={}, warnings=(warning,))


def parse_gpu_metrics(data: bytes) -> GpuMetrics:
    """Decode the binary content of ``/sys/class/drm/cardN/device/gpu_metrics``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ParseError("not a capture: gpu_metrics is binary; expected bytes")
    data = bytes(data)
    if len(data) < _HEADER.size:
        what = "empty input" if not data else f"{len(data)} bytes"
        raise ParseError(f"not a capture: {what}; a gpu_metrics table starts with a {_HEADER.size}-byte header")
    structure_size, frev, crev = _HEADER.unpack_from(data)
    newest = _newest(frev)
    if newest is None:
        return _header_only(structure_size, frev, crev, "format")
    future = (frev, crev) > newest
    used = newest if future else (frev, crev)
    units: dict[str, str] = {}
    if frev == ATTRIBUTE_REVISION[0] and used >= ATTRIBUTE_REVISION:
        layout_name, fields, units, problems = _attribute_table(data, structure_size)
    elif used in LAYOUTS:
        layout = _choose(LAYOUTS[used], structure_size)
        layout_name = layout.name
        fields, problems = _fixed_table(layout, data, structure_size, future)
    else:  # a content revision below the newest that the kernel never defined (none today)
        return _header_only(structure_size, frev, crev, "content")
    if future:
        problems.insert(
            0,
            f"gpu_metrics v{frev}.{crev} is newer than v{newest[0]}.{newest[1]}, the newest known: "
            f"decoded as v{newest[0]}.{newest[1]}, fields it added are not shown",
        )
    indep = fields.get("indep_throttle_status")
    return GpuMetrics(
        structure_size,
        frev,
        crev,
        layout=layout_name,
        fields=fields,
        throttle_reasons=throttle_reasons(indep if isinstance(indep, int) else None),
        warnings=("; ".join(problems),) if problems else (),  # one warning per table, whatever went wrong
        units=units,
    )
