"""SI units from a decoded ``gpu_metrics`` table. Pure functions of ``GpuMetrics``; "not available" stays out.

Units, as the kernel stores them (checked against the header comments and the SMU drivers that fill the tables):

- temperatures: v1.x and v1.9 whole degrees Celsius (the dGPU drivers copy the firmware's Celsius values, e.g.
  navi10 ``TemperatureEdge``, which the same driver's hwmon path multiplies by 1000 for millidegrees); v2.x and
  v3.0 centi-Celsius (v2.4 says so in the header; renoir_ppt.c, which fills v2.1/v2.2, divides the same
  ``GfxTemperature`` by 100 for its hwmon sensor).
- clocks: MHz in every revision.
- socket power: v1.0-v1.3 ``average_socket_power`` and v1.4+ ``curr_socket_power`` in watts; v2.4 and v3.0 in
  milliwatts. v2.0-v2.3 ``average_socket_power`` is milliwatts on most firmware, but Renoir/Cezanne firmware from
  0x40000f (SMU 12.0.1) / 0x373200 (SMU 12.0.0) reports watts (renoir_get_smu_metrics_data branches on the
  firmware version) while the CPU and SoC powers stay in milliwatts. The table does not carry the firmware
  version, so: socket power includes the CPU's, and a socket value below ``average_cpu_power`` can only be watts.
- energy: ``energy_accumulator`` counts in a chip-dependent unit; see ``energy_joules``.
- PCIe: link speed in 0.1 GT/s; ``pcie_bandwidth_inst`` in GB/s (v1.4-v1.8, v1.9 declares GB/s), Mbps in the
  reverted early v1.6.
- XGMI: link speed in Gbps; read/write accumulators in KB (see ``XGMI_KILOBYTE``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from exporter.model.gpu_metrics import (
    FieldValue,
    GpuMetrics,
    PcieStatus,
    Sample,
    SocketPower,
    XcpStats,
    XgmiStatus,
)

# The header's unit for energy_accumulator (v1.4+ comments, and smu_v13_0_6_ppt.c: "Energy counter reported in
# 15.259uJ (2^-16) units"). MI200 and MI300 counters agree with their socket power in this unit.
ENERGY_UNIT_JOULES = 2.0**-16
# What rocm_smi_lib (kEnergyCounterResolution, "hard-coded for now since all ASICs have same resolution") and
# amd-smi multiply by: 15.3 uJ.
ROCM_SMI_ENERGY_UNIT_JOULES = 15.3e-6
# MI100 (Arcturus, v1.3): one count per joule. Two real captures 10 s apart (tests/fixtures/gpu_metrics,
# ROCm/amdsmi issue 38) advance by 370 counts at 35-36 W socket power, and the same thread measures MI100 power as
# 1e9 * d(counter) / d(ns). (A user there also reports 1e6 * d(counter) / d(ns) on an RX 6900 XT, one count per
# millijoule; no capture confirms it.)
MI100_ENERGY_UNIT_JOULES = 1.0

_CURRENT_CLOCK = re.compile(r"current_[a-z0-9]*clk[0-9]?")  # current_gfxclk, current_vclk0, current_l3clk

# The header says "KiloBytes" without saying which; AMD's tools print the raw value as KB. 1024 is assumed.
XGMI_KILOBYTE = 1024


def field_ints(value: FieldValue) -> list[int | None]:
    """A scalar or an array field as a flat list (v1.9 gives a one-instance array as a scalar)."""
    if isinstance(value, list):
        return [v if isinstance(v, int) else None for v in value]
    return [value if isinstance(value, int) else None]


def field_int(m: GpuMetrics, name: str) -> int | None:
    value = m.fields.get(name)
    return value if isinstance(value, int) else None


def _samples(m: GpuMetrics, names: Iterable[str], scale: float) -> tuple[Sample, ...]:
    out: list[Sample] = []
    for name in names:
        if name not in m.fields:
            continue
        value = m.fields[name]
        if isinstance(value, list):
            out.extend(Sample(name, i, v * scale) for i, v in enumerate(field_ints(value)) if v is not None)
        elif isinstance(value, int):
            out.append(Sample(name, None, value * scale))
    return tuple(out)


def _is_apu(m: GpuMetrics) -> bool:
    return m.format_revision in (2, 3)


def temperatures_celsius(m: GpuMetrics) -> tuple[Sample, ...]:
    """Every ``temperature_*`` and ``average_temperature_*`` field, in degrees Celsius."""
    scale = 0.01 if _is_apu(m) else 1.0
    names = [n for n in m.fields if n.startswith(("temperature_", "average_temperature_"))]
    return _samples(m, names, scale)


def current_clocks_hz(m: GpuMetrics) -> tuple[Sample, ...]:
    """``current_<clk>`` fields (scalars before v1.4, per-instance arrays after), in hertz.

    The v3.0 frequency limits ``current_core_maxfreq``/``current_gfx_maxfreq`` are limits, not clocks, and are left
    out.
    """
    names = [n for n in m.fields if _CURRENT_CLOCK.fullmatch(n)]
    return _samples(m, names, 1e6)


def average_clocks_hz(m: GpuMetrics) -> tuple[Sample, ...]:
    """``average_<clk>_frequency`` fields, in hertz."""
    names = [n for n in m.fields if n.startswith("average_") and n.endswith("_frequency")]
    return _samples(m, names, 1e6)


def socket_power_watts(m: GpuMetrics) -> SocketPower:
    """Average and current socket power in watts (see the module doc for the APU v2.0-v2.3 unit)."""
    average = field_int(m, "average_socket_power")
    current = field_int(m, "curr_socket_power")
    if m.format_revision == 1:
        return SocketPower(
            float(average) if average is not None else None, float(current) if current is not None else None
        )
    if average is None:
        return SocketPower()
    if m.format_revision == 2 and m.content_revision <= 3:
        cpu = field_int(m, "average_cpu_power")
        if cpu is not None and average < cpu:
            return SocketPower(average_watts=float(average))
    return SocketPower(average_watts=average / 1000.0)


def energy_joules(m: GpuMetrics, unit_joules: float = ENERGY_UNIT_JOULES) -> float | None:
    """``energy_accumulator`` x ``unit_joules``: the counter's energy since it started (it wraps and resets).

    The unit depends on the chip (module constants); a counter is only comparable with itself, so rates should come
    from differences of two readings of the same GPU.
    """
    counter = field_int(m, "energy_accumulator")
    return None if counter is None else counter * unit_joules


def pcie(m: GpuMetrics) -> PcieStatus:
    """Link width and speed (every revision that has them) and the v1.4+ PCIe counters."""
    speed = field_int(m, "pcie_link_speed")
    inst = field_int(m, "pcie_bandwidth_inst")
    bytes_per_unit = 125_000.0 if m.layout == "gpu_metrics_v1_6_early" else 1e9  # Mbps there, GB/s elsewhere
    return PcieStatus(
        link_width_lanes=field_int(m, "pcie_link_width"),
        link_speed_gts=None if speed is None else speed / 10.0,
        bandwidth_inst_bytes_per_second=None if inst is None else inst * bytes_per_unit,
        bandwidth_acc=field_int(m, "pcie_bandwidth_acc"),
        l0_to_recovery_count=field_int(m, "pcie_l0_to_recov_count_acc"),
        replay_count=field_int(m, "pcie_replay_count_acc"),
        replay_rollover_count=field_int(m, "pcie_replay_rover_count_acc"),
        nak_sent_count=field_int(m, "pcie_nak_sent_count_acc"),
        nak_received_count=field_int(m, "pcie_nak_rcvd_count_acc"),
        other_end_recovery_count=field_int(m, "pcie_lc_perf_other_end_recovery"),
    )


def _kilobytes(values: Sequence[int | None]) -> tuple[int | None, ...]:
    return tuple(None if v is None else v * XGMI_KILOBYTE for v in values)


def xgmi(m: GpuMetrics) -> XgmiStatus:
    """XGMI width, bit rate and per-link read/write bytes (v1.4+)."""
    speed = field_int(m, "xgmi_link_speed")
    return XgmiStatus(
        link_width=field_int(m, "xgmi_link_width"),
        link_speed_gbps=None if speed is None else float(speed),
        read_bytes=_kilobytes(field_ints(m.fields["xgmi_read_data_acc"])) if "xgmi_read_data_acc" in m.fields else (),
        write_bytes=_kilobytes(field_ints(m.fields["xgmi_write_data_acc"]))
        if "xgmi_write_data_acc" in m.fields
        else (),
        link_status=tuple(field_ints(m.fields["xgmi_link_status"])) if "xgmi_link_status" in m.fields else (),
    )


_XCP_OPTIONAL = (
    "gfx_below_host_limit_acc",
    "gfx_below_host_limit_ppt_acc",
    "gfx_below_host_limit_thm_acc",
    "gfx_low_utilization_acc",
    "gfx_below_host_limit_total_acc",
)


def _xcp(index: int, element: dict[str, FieldValue]) -> XcpStats:
    def arr(name: str) -> tuple[int | None, ...]:
        return tuple(field_ints(element[name])) if name in element else ()

    optional = {name: tuple(field_ints(element[name])) for name in _XCP_OPTIONAL if name in element}
    return XcpStats(
        index=index,
        gfx_busy_inst=arr("gfx_busy_inst"),
        jpeg_busy=arr("jpeg_busy"),
        vcn_busy=arr("vcn_busy"),
        gfx_busy_acc=arr("gfx_busy_acc"),
        **optional,
    )


def xcp_stats(m: GpuMetrics) -> tuple[XcpStats, ...]:
    """Per-partition activity: ``xcp_stats`` (v1.6-v1.8), the first ``num_partition`` entries.

    When ``num_partition`` is not available, the entries that carry any value. A v1.9 table that reports the
    per-XCC arrays at top level gives them as one entry.
    """
    stats = m.fields.get("xcp_stats")
    if isinstance(stats, list):
        elements = [e for e in stats if isinstance(e, dict)]
        count = field_int(m, "num_partition")
        if count is None:
            used = [(i, e) for i, e in enumerate(elements) if any(v is not None for k in e for v in field_ints(e[k]))]
        else:
            used = list(enumerate(elements[:count]))
        return tuple(_xcp(i, e) for i, e in used)
    top = {
        k: v
        for k, v in m.fields.items()
        if k in ("gfx_busy_inst", "jpeg_busy", "vcn_busy", "gfx_busy_acc", *_XCP_OPTIONAL)
    }
    return (_xcp(0, top),) if "gfx_busy_inst" in top else ()
