"""Records decoded from amdgpu's binary ``gpu_metrics`` sysfs file (``parse gpu-metrics``).

``GpuMetrics.fields`` keeps every kernel field under its kernel name, with the value as the kernel stores it:
integers, lists for arrays, a list of dicts for ``xcp_stats``, and ``None`` for the all-ones "not available"
marker. Units differ between revisions (see docs/gpu-metrics.md); the helpers in
``exporter.parsers.gpu_metrics.normalize`` turn them into SI units and return the small records below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import msgspec

# An integer, None for "not available", a list for a C array, a dict for one element of a struct array.
FieldValue: TypeAlias = "int | list[FieldValue] | dict[str, FieldValue] | None"


def _plain(value: FieldValue) -> FieldValue:
    """A deep copy made of plain lists and dicts, so the JSON of a record cannot alias its fields."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class GpuMetrics(msgspec.Struct, frozen=True):
    """One decoded ``gpu_metrics`` table.

    ``layout`` names the kernel struct the bytes were decoded with (``gpu_metrics_v1_3``), or is None when the
    format revision is unknown and only the header could be read. ``units`` is filled for the self-describing
    v1.9 table only (attribute name -> unit the table declares). ``warnings`` says what was truncated, unknown
    or inconsistent; it is empty for a clean capture.
    """

    structure_size: int
    format_revision: int
    content_revision: int
    layout: str | None
    fields: Mapping[str, FieldValue]
    throttle_reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    units: Mapping[str, str] = msgspec.field(default_factory=dict)

    @property
    def revision(self) -> tuple[int, int]:
        return (self.format_revision, self.content_revision)

    def to_json(self) -> dict[str, Any]:
        """The ``parse gpu-metrics`` JSON object."""
        return {
            "structure_size": self.structure_size,
            "format_revision": self.format_revision,
            "content_revision": self.content_revision,
            "layout": self.layout,
            "fields": {name: _plain(value) for name, value in self.fields.items()},
            "throttle_reasons": list(self.throttle_reasons),
            "warnings": list(self.warnings),
            "units": dict(self.units),
        }


class Sample(msgspec.Struct, frozen=True):
    """One normalised value: the kernel field it came from, the array index (None for a scalar), the value."""

    field: str
    index: int | None
    value: float


class SocketPower(msgspec.Struct, frozen=True):
    """Socket power in watts; a revision that has only one of the two leaves the other None."""

    average_watts: float | None = None
    current_watts: float | None = None


class PcieStatus(msgspec.Struct, frozen=True):
    """The PCIe link as the SMU sees it, and its counters (v1.4+ on Instinct parts)."""

    link_width_lanes: int | None = None
    link_speed_gts: float | None = None  # GT/s per lane (the table stores 0.1 GT/s)
    bandwidth_inst_bytes_per_second: float | None = None
    bandwidth_acc: int | None = None  # the firmware's running sum of bandwidth samples, unit as the header says
    l0_to_recovery_count: int | None = None
    replay_count: int | None = None
    replay_rollover_count: int | None = None
    nak_sent_count: int | None = None
    nak_received_count: int | None = None
    other_end_recovery_count: int | None = None


class XgmiStatus(msgspec.Struct, frozen=True):
    """XGMI links (Instinct): width, bit rate and per-link accumulated traffic (link index = list index)."""

    link_width: int | None = None
    link_speed_gbps: float | None = None
    read_bytes: tuple[int | None, ...] = ()
    write_bytes: tuple[int | None, ...] = ()
    link_status: tuple[int | None, ...] = ()  # v1.7+: 0 inactive, 1 active, 2 not available


class XcpStats(msgspec.Struct, frozen=True):
    """Per-partition (XCP) activity from ``xcp_stats`` (v1.6+); arrays are per XCC / JPEG / VCN instance."""

    index: int
    gfx_busy_inst: tuple[int | None, ...] = ()  # %
    jpeg_busy: tuple[int | None, ...] = ()  # %
    vcn_busy: tuple[int | None, ...] = ()  # %
    gfx_busy_acc: tuple[int | None, ...] = ()  # accumulated %
    gfx_below_host_limit_acc: tuple[int | None, ...] | None = None  # v1.7
    gfx_below_host_limit_ppt_acc: tuple[int | None, ...] | None = None  # v1.8
    gfx_below_host_limit_thm_acc: tuple[int | None, ...] | None = None  # v1.8
    gfx_low_utilization_acc: tuple[int | None, ...] | None = None  # v1.8
    gfx_below_host_limit_total_acc: tuple[int | None, ...] | None = None  # v1.8
