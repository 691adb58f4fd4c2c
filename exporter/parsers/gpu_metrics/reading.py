"""A decoded ``gpu_metrics`` table -> ``GpuMetricsReading``: what the exporter keeps of one GPU's table, in base
units, with the names sysfs gives the same readings (clock domains, hwmon sensor labels). Pure.

Built on the unit helpers of ``normalize``; what they do not cover is here:

- activity (``average_*_activity``, ``vcn_activity``, ``jpeg_activity``, the ``xcp_stats`` busy arrays): percent in
  the dGPU tables (v1.x) and v3.0 ("% [0-100]" in the header), centi-percent in the APU v2.x tables (renoir_ppt.c
  copies the firmware's ``AverageGfxActivity`` into the table and divides the same value by 100 for its
  ``gpu_busy_percent`` sensor). A ratio above 1 is not a ratio and is left out.
- clocks: ``current_<clk>`` under the sysfs domain name (gfxclk -> sclk, uclk -> mclk, vclk0 -> vclk...), the first
  instance the table reports for the per-instance arrays of v1.4+ (the one pp_dpm_sclk shows). CPU core and L3
  clocks of the APU tables are the CPU's, not the GPU's, and are left out.
- temperatures: under amdgpu's hwmon labels where hwmon has the same reading (``temperature_hotspot`` is hwmon's
  ``junction``; an APU's ``temperature_gfx`` is its ``edge``, renoir_ppt.c), else the field's own name
  (``vrgfx``, ``vrsoc``, ``vrmem``, ``hbm<N>``, ``soc``, ``skin``). CPU core and L3 temperatures are left out.
- energy: the unit per chip, by PCI device id (``ENERGY_UNITS_BY_DEVICE``, docs/gpu-metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from exporter.model.gpu import GpuMetricsReading, XcpActivity
from exporter.model.gpu_metrics import GpuMetrics, XcpStats
from exporter.parsers.gpu_metrics.normalize import (
    ENERGY_UNIT_JOULES,
    MI100_ENERGY_UNIT_JOULES,
    current_clocks_hz,
    energy_joules,
    field_int,
    field_ints,
    pcie,
    socket_power_watts,
    temperatures_celsius,
    xcp_stats,
    xgmi,
)

# energy_accumulator's unit by PCI device id; every other chip: the header's 2^-16 J (ENERGY_UNIT_JOULES).
# Arcturus (MI100) counts joules: two real captures (tests/fixtures/gpu_metrics, ROCm/amdsmi issue 38) advance
# 370 counts in 10.29 s at 35-36 W. amdgpu_drv.c binds all four ids to CHIP_ARCTURUS, whose one driver
# (arcturus_ppt.c) copies the same firmware counter into the table.
ENERGY_UNITS_BY_DEVICE: dict[str, float] = {
    "0x738c": MI100_ENERGY_UNIT_JOULES,  # Instinct MI100
    "0x738e": MI100_ENERGY_UNIT_JOULES,  # Instinct MI100
    "0x7388": MI100_ENERGY_UNIT_JOULES,  # Arcturus
    "0x7390": MI100_ENERGY_UNIT_JOULES,  # Arcturus
}

# current_<clk> -> the sysfs clock domain (pp_dpm_<domain>, hwmon freqN_label) of the same clock
CLOCK_DOMAINS: dict[str, str] = {
    "current_gfxclk": "sclk",
    "current_uclk": "mclk",
    "current_fclk": "fclk",
    "current_socclk": "socclk",
    "current_vclk0": "vclk",
    "current_vclk": "vclk",
    "current_dclk0": "dclk",
    "current_dclk": "dclk",
    "current_vclk1": "vclk1",
    "current_dclk1": "dclk1",
}

# temperature field -> sensor name, per table family: dGPU (format 1) and APU (formats 2, 3)
DGPU_SENSORS: dict[str, str] = {
    "temperature_edge": "edge",
    "temperature_hotspot": "junction",
    "temperature_mem": "mem",
    "temperature_vrgfx": "vrgfx",
    "temperature_vrsoc": "vrsoc",
    "temperature_vrmem": "vrmem",
    "temperature_hbm": "hbm",  # an array: hbm0..hbm3
}
APU_SENSORS: dict[str, str] = {"temperature_gfx": "edge", "temperature_soc": "soc", "temperature_skin": "skin"}

# throttle residency counters: kernel field -> reason label
RESIDENCY_FIELDS: dict[str, str] = {
    **{f"{r}_residency_acc": r for r in ("prochot", "ppt", "socket_thm", "vr_thm", "hbm_thm")},  # v1.6+
    **{f"throttle_residency_{r}": r for r in ("prochot", "spl", "fppt", "sppt", "thm_core", "thm_gfx", "thm_soc")},
}

# the per-XCC violation accumulators of xcp_stats (v1.7, v1.8), by the XcpStats attribute
XCC_VIOLATION_FIELDS = (
    "gfx_below_host_limit_acc",
    "gfx_below_host_limit_ppt_acc",
    "gfx_below_host_limit_thm_acc",
    "gfx_below_host_limit_total_acc",
    "gfx_low_utilization_acc",
)


def energy_unit_joules(device_id: str | None) -> float:
    """The unit of ``energy_accumulator`` for a GPU of PCI device id ``device_id`` (``"0x738c"``)."""
    return ENERGY_UNITS_BY_DEVICE.get((device_id or "").lower(), ENERGY_UNIT_JOULES)


def _full_scale(m: GpuMetrics) -> int:
    """What an activity field reads at 100 %: centi-percent in the APU v2.x tables, percent elsewhere."""
    return 10_000 if m.format_revision == 2 else 100


def _ratio(value: int | None, full: int) -> float | None:
    return None if value is None or value > full else value / full


def _mean_ratio(values: Iterable[int | None], full: int) -> float | None:
    """The mean of the values the table reports (and that are ratios), as a ratio."""
    known = [v for v in values if v is not None and v <= full]
    return sum(known) / len(known) / full if known else None


def _field_ratio(m: GpuMetrics, name: str) -> float | None:
    """A scalar activity field, or the mean over the instances of an array one."""
    if name not in m.fields:
        return None
    return _mean_ratio(field_ints(m.fields[name]), _full_scale(m))


def _throttle(m: GpuMetrics) -> tuple[int | None, tuple[str, ...]]:
    indep = field_int(m, "indep_throttle_status")
    if indep is not None:
        return indep, m.throttle_reasons
    return field_int(m, "throttle_status"), ()


def _clocks(m: GpuMetrics) -> tuple[tuple[str, float], ...]:
    out: dict[str, float] = {}
    for sample in current_clocks_hz(m):  # field order, each array's instances in order
        domain = CLOCK_DOMAINS.get(sample.field)
        if domain is not None:
            out.setdefault(domain, sample.value)
    return tuple(out.items())


def _temperatures(m: GpuMetrics) -> tuple[tuple[str, float], ...]:
    sensors = DGPU_SENSORS if m.format_revision == 1 else APU_SENSORS
    out: dict[str, float] = {}
    for sample in temperatures_celsius(m):
        name = sensors.get(sample.field)
        if name is None:
            continue
        out.setdefault(name if sample.index is None else f"{name}{sample.index}", sample.value)
    return tuple(out.items())


def _xcp(stats: XcpStats, full: int) -> XcpActivity:
    busy = tuple((i, r) for i, v in enumerate(stats.gfx_busy_inst) if (r := _ratio(v, full)) is not None)
    violations: list[tuple[str, int]] = []
    for name in XCC_VIOLATION_FIELDS:
        values = getattr(stats, name)
        known = [v for v in values or () if v is not None]
        if known:
            violations.append((name.removesuffix("_acc"), sum(known)))
    return XcpActivity(
        index=stats.index,
        xcc_busy_ratios=busy,
        vcn_busy_ratio=_mean_ratio(stats.vcn_busy, full),
        jpeg_busy_ratio=_mean_ratio(stats.jpeg_busy, full),
        xcc_violation_ticks=tuple(violations),
    )


def _indexed(values: Iterable[int | None]) -> tuple[tuple[int, int], ...]:
    return tuple((i, v) for i, v in enumerate(values) if v is not None)


def gpu_metrics_reading(m: GpuMetrics, device_id: str | None = None) -> GpuMetricsReading:
    """What the exporter keeps of the table ``m`` of a GPU of PCI device id ``device_id`` (for the energy unit)."""
    status, reasons = _throttle(m)
    full = _full_scale(m)
    link = pcie(m)
    x = xgmi(m)
    power = socket_power_watts(m)
    unit = energy_unit_joules(device_id)
    energy = energy_joules(m, unit)
    speed = x.link_speed_gbps
    return GpuMetricsReading(
        format_revision=m.format_revision,
        content_revision=m.content_revision,
        throttle_status=status,
        throttle_reasons=reasons,
        accumulation_ticks=field_int(m, "accumulation_counter"),
        throttle_residency_ticks=tuple(
            (reason, v) for name, reason in RESIDENCY_FIELDS.items() if (v := field_int(m, name)) is not None
        ),
        gfx_activity_ratio=_field_ratio(m, "average_gfx_activity"),
        umc_activity_ratio=_field_ratio(m, "average_umc_activity"),
        mm_activity_ratio=_field_ratio(m, "average_mm_activity"),
        vcn_activity_ratio=_field_ratio(m, "vcn_activity")
        if "vcn_activity" in m.fields
        else _field_ratio(m, "average_vcn_activity"),
        jpeg_activity_ratio=_field_ratio(m, "jpeg_activity"),
        xcps=tuple(_xcp(s, full) for s in xcp_stats(m)),
        xgmi_link_width=x.link_width,
        xgmi_link_speed_bytes_per_second=None if speed is None else speed * 1e9 / 8,
        xgmi_read_bytes=_indexed(x.read_bytes),
        xgmi_write_bytes=_indexed(x.write_bytes),
        xgmi_link_active=tuple((i, v == 1) for i, v in enumerate(x.link_status) if v in (0, 1)),
        pcie_link_width=link.link_width_lanes,
        pcie_link_speed_gts=link.link_speed_gts,
        pcie_bandwidth_bytes_per_second=link.bandwidth_inst_bytes_per_second,
        pcie_replays=link.replay_count,
        pcie_replay_rollovers=link.replay_rollover_count,
        pcie_recoveries=link.l0_to_recovery_count,
        pcie_naks_sent=link.nak_sent_count,
        pcie_naks_received=link.nak_received_count,
        pcie_other_end_recoveries=link.other_end_recovery_count,
        energy_joules=energy,
        energy_unit_joules=unit if energy is not None else None,
        clocks_hertz=_clocks(m),
        temperatures_celsius=_temperatures(m),
        power_watts=power.current_watts if power.current_watts is not None else power.average_watts,
        warning=m.warnings[0] if m.warnings else None,
    )
