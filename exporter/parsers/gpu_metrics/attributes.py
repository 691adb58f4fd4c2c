"""gpu_metrics v1.9: a self-describing list of attributes instead of a fixed struct.

The header declares ``struct gpu_metrics_v1_9 { header; int attr_count; struct gpu_metrics_attr metrics_attrs[]; }``
with ``attr_value`` as a pointer, but that struct is only a description: what the kernel copies to sysfs is the
``__packed`` struct that DECLARE_SMU_METRICS_CLASS (swsmu/smu_cmn.h) builds, in which every field is a u64
encoding followed directly by the value(s), with no alignment:

    u16 structure_size, u8 format_revision (1), u8 content_revision (9), s32 attr_count,
    then attr_count times: u64 encoding, then <instances> values of <type>

    encoding = unit << 24 | type << 20 | id << 10 | instances      (AMDGPU_METRICS_ENC_ATTR)

The id names the field (AMDGPU_METRICS_ATTR_ID_*; the kernel's field name is the id's name in lower case), so the
names below are the kernel's field names. Unset values are all ones, as in the fixed layouts.
"""

from __future__ import annotations

import struct

from exporter.model.gpu_metrics import FieldValue

# enum amdgpu_metrics_attr_id, in order (the newest header in the kernel tree; ids are positions).
ATTRIBUTE_IDS: tuple[str, ...] = (
    "temperature_hotspot",
    "temperature_mem",
    "temperature_vrsoc",
    "curr_socket_power",
    "average_gfx_activity",
    "average_umc_activity",
    "mem_max_bandwidth",
    "energy_accumulator",
    "system_clock_counter",
    "accumulation_counter",
    "prochot_residency_acc",
    "ppt_residency_acc",
    "socket_thm_residency_acc",
    "vr_thm_residency_acc",
    "hbm_thm_residency_acc",
    "gfxclk_lock_status",
    "pcie_link_width",
    "pcie_link_speed",
    "xgmi_link_width",
    "xgmi_link_speed",
    "gfx_activity_acc",
    "mem_activity_acc",
    "pcie_bandwidth_acc",
    "pcie_bandwidth_inst",
    "pcie_l0_to_recov_count_acc",
    "pcie_replay_count_acc",
    "pcie_replay_rover_count_acc",
    "pcie_nak_sent_count_acc",
    "pcie_nak_rcvd_count_acc",
    "xgmi_read_data_acc",
    "xgmi_write_data_acc",
    "xgmi_link_status",
    "firmware_timestamp",
    "current_gfxclk",
    "current_socclk",
    "current_vclk0",
    "current_dclk0",
    "current_uclk",
    "num_partition",
    "pcie_lc_perf_other_end_recovery",
    "gfx_busy_inst",
    "jpeg_busy",
    "vcn_busy",
    "gfx_busy_acc",
    "gfx_below_host_limit_ppt_acc",
    "gfx_below_host_limit_thm_acc",
    "gfx_low_utilization_acc",
    "gfx_below_host_limit_total_acc",
    "temperature_hbm",
    "temperature_mid",
    "temperature_aid",
    "temperature_xcd",
    "label_version",
    "node_id",
    "node_temp_retimer",
    "node_temp_ibc",
    "node_temp_ibc_2",
    "node_temp_vdd18_vr",
    "node_temp_04_hbm_b_vr",
    "node_temp_04_hbm_d_vr",
    "vr_temp_vddcr_socio_a",
    "vr_temp_vddcr_socio_c",
    "vr_temp_vddcr_x0",
    "vr_temp_vddcr_x1",
    "vr_temp_vddio_hbm_b",
    "vr_temp_vddio_hbm_d",
    "vr_temp_vddio_04_hbm_b",
    "vr_temp_vddio_04_hbm_d",
    "vr_temp_vddcr_hbm_b",
    "vr_temp_vddcr_hbm_d",
    "vr_temp_vddcr_075_hbm_b",
    "vr_temp_vddcr_075_hbm_d",
    "vr_temp_vddio_11_gta_a",
    "vr_temp_vddio_11_gta_c",
    "vr_temp_vddan_075_gta_a",
    "vr_temp_vddan_075_gta_c",
    "vr_temp_vddcr_075_ucie",
    "vr_temp_vddio_065_ucieaa",
    "vr_temp_vddio_065_ucieam_a",
    "vr_temp_vddio_065_ucieam_c",
    "vr_temp_vddan_075",
    "system_temp_ubb_fpga",
    "system_temp_ubb_front",
    "system_temp_ubb_back",
    "system_temp_ubb_oam7",
    "system_temp_ubb_ibc",
    "system_temp_ubb_ufpga",
    "system_temp_ubb_oam1",
    "system_temp_oam_0_1_hsc",
    "system_temp_oam_2_3_hsc",
    "system_temp_oam_4_5_hsc",
    "system_temp_oam_6_7_hsc",
    "system_temp_ubb_fpga_0v72_vr",
    "system_temp_ubb_fpga_3v3_vr",
    "system_temp_retimer_0_1_2_3_1v2_vr",
    "system_temp_retimer_4_5_6_7_1v2_vr",
    "system_temp_retimer_0_1_0v9_vr",
    "system_temp_retimer_4_5_0v9_vr",
    "system_temp_retimer_2_3_0v9_vr",
    "system_temp_retimer_6_7_0v9_vr",
    "system_temp_oam_0_1_2_3_3v3_vr",
    "system_temp_oam_4_5_6_7_3v3_vr",
    "system_temp_ibc_hsc",
    "system_temp_ibc",
)

# enum amdgpu_metrics_attr_type -> (struct code, size)
ATTRIBUTE_TYPES: tuple[tuple[str, int], ...] = (
    ("B", 1),  # U8
    ("b", 1),  # S8
    ("H", 2),  # U16
    ("h", 2),  # S16
    ("I", 4),  # U32
    ("i", 4),  # S32
    ("Q", 8),  # U64
    ("q", 8),  # S64
)

# enum amdgpu_metrics_attr_unit, named for the JSON
ATTRIBUTE_UNITS: tuple[str, ...] = (
    "none",
    "MHz",  # CLOCK_1
    "celsius",  # TEMP_1
    "watts",  # POWER_1
    "ns",  # TIME_1
    "10ns",  # TIME_2
    "GT/s",  # SPEED_1
    "0.1GT/s",  # SPEED_2
    "GB/s",  # BW_1
    "KB",  # DATA_1
    "percent",  # PERCENT
)

_ENCODING = struct.Struct("<Q")
_COUNT = struct.Struct("<i")
ATTRIBUTES_OFFSET = 8  # header (4) + attr_count (4), packed
MAX_ATTRIBUTES = 1 << 10  # the encoding's id has 10 bits: no table names more distinct fields


def _value(code: str, raw: int) -> int | None:
    """All ones is "not available": the unsigned maximum, or -1 for a signed type."""
    if code.isupper():
        return None if raw == (1 << (8 * struct.calcsize(code))) - 1 else raw
    return None if raw == -1 else raw


def decode_attributes(data: bytes, end: int) -> tuple[dict[str, FieldValue], dict[str, str], str | None]:
    """Decode the attribute list in ``data[8:end]``: (fields, units, the first problem or None).

    Stops at the first problem (truncation, an encoding that cannot be right) and returns what it decoded up to it.
    """
    fields: dict[str, FieldValue] = {}
    units: dict[str, str] = {}
    if end < ATTRIBUTES_OFFSET:
        return fields, units, f"truncated: {end} bytes, the attribute count needs {ATTRIBUTES_OFFSET}"
    (count,) = _COUNT.unpack_from(data, 4)
    if not 0 <= count <= MAX_ATTRIBUTES:
        return fields, units, f"attribute count {count} is outside 0..{MAX_ATTRIBUTES}"
    offset = ATTRIBUTES_OFFSET
    for index in range(count):
        if offset + _ENCODING.size > end:
            return fields, units, f"truncated after {index} of {count} attributes ({end} bytes)"
        (encoding,) = _ENCODING.unpack_from(data, offset)
        unit = encoding >> 24 & 0xFF
        type_id = encoding >> 20 & 0xF
        attr_id = encoding >> 10 & 0x3FF
        instances = encoding & 0x3FF
        if encoding >> 32 or type_id >= len(ATTRIBUTE_TYPES) or unit >= len(ATTRIBUTE_UNITS) or instances == 0:
            return fields, units, f"attribute {index} at byte {offset} has an invalid encoding {encoding:#x}"
        code, size = ATTRIBUTE_TYPES[type_id]
        offset += _ENCODING.size
        if offset + size * instances > end:
            return fields, units, f"truncated in attribute {index} of {count} ({end} bytes)"
        values = [_value(code, v) for v in struct.unpack_from(f"<{instances}{code}", data, offset)]
        offset += size * instances
        name = ATTRIBUTE_IDS[attr_id] if attr_id < len(ATTRIBUTE_IDS) else f"attribute_{attr_id}"
        fields[name] = values[0] if instances == 1 else list(values)
        units[name] = ATTRIBUTE_UNITS[unit]
    return fields, units, None
