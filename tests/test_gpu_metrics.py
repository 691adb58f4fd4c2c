"""The gpu_metrics parser (exporter/parsers/gpu_metrics).

- every layout against the kernel structs compiled by gcc (sizes and every member offset);
- every revision built field by field at gcc's offsets, with a recognisable value per field, decoded by name;
- the v1.9 attribute table, built in Python and by the kernel's own macro scheme compiled with gcc;
- every real capture in tests/fixtures/gpu_metrics (PROVENANCE.md), with plausible values;
- truncated, unknown, future and garbage input, and a fuzz that nothing but ParseError (< 4 bytes) escapes;
- the unit helpers, and ``rocm-watchdog parse gpu-metrics``.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_metrics_builder import build_table, member_paths, pack_table, struct_offsets
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model import ParseError
from exporter.model.gpu_metrics import FieldValue, GpuMetrics
from exporter.parsers.gpu_metrics import (
    ENERGY_UNIT_JOULES,
    MI100_ENERGY_UNIT_JOULES,
    XGMI_KILOBYTE,
    average_clocks_hz,
    current_clocks_hz,
    energy_joules,
    parse_gpu_metrics,
    pcie,
    socket_power_watts,
    temperatures_celsius,
    xcp_stats,
    xgmi,
)
from exporter.parsers.gpu_metrics.attributes import ATTRIBUTE_IDS
from exporter.parsers.gpu_metrics.layouts import (
    ALL_LAYOUTS,
    GPU_METRICS_V1_3,
    GPU_METRICS_V1_6,
    GPU_METRICS_V1_6_EARLY,
    GPU_METRICS_V2_1,
    GPU_METRICS_V2_4,
    GPU_METRICS_V3_0,
    HEADER_FIELDS,
    LAYOUTS,
    Layout,
    StructType,
)
from exporter.parsers.gpu_metrics.throttle import THROTTLER_BITS, throttle_reasons

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_metrics"
CAPTURES = sorted(FIXTURES.glob("*.bin"))
LAYOUT_BY_NAME = {layout.name: layout for layout in ALL_LAYOUTS}

# --- the kernel structs, written out from drivers/gpu/drm/amd/include/kgd_pp_interface.h --------------------------
#
# Member for member as the header declares them (the reverted first v1.6 under the name gpu_metrics_v1_6_early).
# No packing attribute, as in the header: gcc lays them out with the x86-64 ABI, as the kernel does.
C_STRUCTS = r"""
#include <stdint.h>

#define NUM_HBM_INSTANCES 4
#define NUM_XGMI_LINKS 8
#define MAX_GFX_CLKS 8
#define MAX_CLKS 4
#define NUM_VCN 4
#define NUM_JPEG_ENG 32
#define NUM_JPEG_ENG_V1 40
#define MAX_XCC 8
#define NUM_XCP 8

struct metrics_table_header {
    uint16_t structure_size;
    uint8_t format_revision;
    uint8_t content_revision;
};

struct amdgpu_xcp_metrics {
    uint32_t gfx_busy_inst[MAX_XCC];
    uint16_t jpeg_busy[NUM_JPEG_ENG];
    uint16_t vcn_busy[NUM_VCN];
    uint64_t gfx_busy_acc[MAX_XCC];
};

struct amdgpu_xcp_metrics_v1_1 {
    uint32_t gfx_busy_inst[MAX_XCC];
    uint16_t jpeg_busy[NUM_JPEG_ENG];
    uint16_t vcn_busy[NUM_VCN];
    uint64_t gfx_busy_acc[MAX_XCC];
    uint64_t gfx_below_host_limit_acc[MAX_XCC];
};

struct amdgpu_xcp_metrics_v1_2 {
    uint32_t gfx_busy_inst[MAX_XCC];
    uint16_t jpeg_busy[NUM_JPEG_ENG_V1];
    uint16_t vcn_busy[NUM_VCN];
    uint64_t gfx_busy_acc[MAX_XCC];
    uint64_t gfx_below_host_limit_ppt_acc[MAX_XCC];
    uint64_t gfx_below_host_limit_thm_acc[MAX_XCC];
    uint64_t gfx_low_utilization_acc[MAX_XCC];
    uint64_t gfx_below_host_limit_total_acc[MAX_XCC];
};

struct gpu_metrics_v1_0 {
    struct metrics_table_header common_header;
    uint64_t system_clock_counter;
    uint16_t temperature_edge;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrgfx;
    uint16_t temperature_vrsoc;
    uint16_t temperature_vrmem;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t average_mm_activity;
    uint16_t average_socket_power;
    uint32_t energy_accumulator;
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_vclk0_frequency;
    uint16_t average_dclk0_frequency;
    uint16_t average_vclk1_frequency;
    uint16_t average_dclk1_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_vclk0;
    uint16_t current_dclk0;
    uint16_t current_vclk1;
    uint16_t current_dclk1;
    uint32_t throttle_status;
    uint16_t current_fan_speed;
    uint8_t pcie_link_width;
    uint8_t pcie_link_speed;
};

struct gpu_metrics_v1_1 {
    struct metrics_table_header common_header;
    uint16_t temperature_edge;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrgfx;
    uint16_t temperature_vrsoc;
    uint16_t temperature_vrmem;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t average_mm_activity;
    uint16_t average_socket_power;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_vclk0_frequency;
    uint16_t average_dclk0_frequency;
    uint16_t average_vclk1_frequency;
    uint16_t average_dclk1_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_vclk0;
    uint16_t current_dclk0;
    uint16_t current_vclk1;
    uint16_t current_dclk1;
    uint32_t throttle_status;
    uint16_t current_fan_speed;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t padding;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint16_t temperature_hbm[NUM_HBM_INSTANCES];
};

struct gpu_metrics_v1_2 {
    struct metrics_table_header common_header;
    uint16_t temperature_edge;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrgfx;
    uint16_t temperature_vrsoc;
    uint16_t temperature_vrmem;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t average_mm_activity;
    uint16_t average_socket_power;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_vclk0_frequency;
    uint16_t average_dclk0_frequency;
    uint16_t average_vclk1_frequency;
    uint16_t average_dclk1_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_vclk0;
    uint16_t current_dclk0;
    uint16_t current_vclk1;
    uint16_t current_dclk1;
    uint32_t throttle_status;
    uint16_t current_fan_speed;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t padding;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint16_t temperature_hbm[NUM_HBM_INSTANCES];
    uint64_t firmware_timestamp;
};

struct gpu_metrics_v1_3 {
    struct metrics_table_header common_header;
    uint16_t temperature_edge;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrgfx;
    uint16_t temperature_vrsoc;
    uint16_t temperature_vrmem;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t average_mm_activity;
    uint16_t average_socket_power;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_vclk0_frequency;
    uint16_t average_dclk0_frequency;
    uint16_t average_vclk1_frequency;
    uint16_t average_dclk1_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_vclk0;
    uint16_t current_dclk0;
    uint16_t current_vclk1;
    uint16_t current_dclk1;
    uint32_t throttle_status;
    uint16_t current_fan_speed;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t padding;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint16_t temperature_hbm[NUM_HBM_INSTANCES];
    uint64_t firmware_timestamp;
    uint16_t voltage_soc;
    uint16_t voltage_gfx;
    uint16_t voltage_mem;
    uint16_t padding1;
    uint64_t indep_throttle_status;
};

struct gpu_metrics_v1_4 {
    struct metrics_table_header common_header;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrsoc;
    uint16_t curr_socket_power;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t vcn_activity[NUM_VCN];
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint32_t throttle_status;
    uint32_t gfxclk_lock_status;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint64_t xgmi_read_data_acc[NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[NUM_XGMI_LINKS];
    uint64_t firmware_timestamp;
    uint16_t current_gfxclk[MAX_GFX_CLKS];
    uint16_t current_socclk[MAX_CLKS];
    uint16_t current_vclk0[MAX_CLKS];
    uint16_t current_dclk0[MAX_CLKS];
    uint16_t current_uclk;
    uint16_t padding;
};

struct gpu_metrics_v1_5 {
    struct metrics_table_header common_header;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrsoc;
    uint16_t curr_socket_power;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t vcn_activity[NUM_VCN];
    uint16_t jpeg_activity[NUM_JPEG_ENG];
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint32_t throttle_status;
    uint32_t gfxclk_lock_status;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint32_t pcie_nak_sent_count_acc;
    uint32_t pcie_nak_rcvd_count_acc;
    uint64_t xgmi_read_data_acc[NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[NUM_XGMI_LINKS];
    uint64_t firmware_timestamp;
    uint16_t current_gfxclk[MAX_GFX_CLKS];
    uint16_t current_socclk[MAX_CLKS];
    uint16_t current_vclk0[MAX_CLKS];
    uint16_t current_dclk0[MAX_CLKS];
    uint16_t current_uclk;
    uint16_t padding;
};

/* the v1.6 of May 2024, reverted (commit "Remove gpu_metrics_v1_6 temporarily until tool support is ready") */
struct gpu_metrics_v1_6_early {
    struct metrics_table_header common_header;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrsoc;
    uint16_t curr_socket_power;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint16_t vcn_activity[NUM_VCN];
    uint16_t jpeg_activity[NUM_JPEG_ENG];
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint32_t accumulation_counter;
    uint32_t prochot_residency_acc;
    uint32_t ppt_residency_acc;
    uint32_t socket_thm_residency_acc;
    uint32_t vr_thm_residency_acc;
    uint32_t hbm_thm_residency_acc;
    uint32_t throttle_status;
    uint32_t gfxclk_lock_status;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint32_t pcie_nak_sent_count_acc;
    uint32_t pcie_nak_rcvd_count_acc;
    uint64_t xgmi_read_data_acc[NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[NUM_XGMI_LINKS];
    uint64_t firmware_timestamp;
    uint16_t current_gfxclk[MAX_GFX_CLKS];
    uint16_t current_socclk[MAX_CLKS];
    uint16_t current_vclk0[MAX_CLKS];
    uint16_t current_dclk0[MAX_CLKS];
    uint16_t current_uclk;
    uint16_t padding;
};

struct gpu_metrics_v1_6 {
    struct metrics_table_header common_header;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrsoc;
    uint16_t curr_socket_power;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint32_t accumulation_counter;
    uint32_t prochot_residency_acc;
    uint32_t ppt_residency_acc;
    uint32_t socket_thm_residency_acc;
    uint32_t vr_thm_residency_acc;
    uint32_t hbm_thm_residency_acc;
    uint32_t gfxclk_lock_status;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint32_t pcie_nak_sent_count_acc;
    uint32_t pcie_nak_rcvd_count_acc;
    uint64_t xgmi_read_data_acc[NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[NUM_XGMI_LINKS];
    uint64_t firmware_timestamp;
    uint16_t current_gfxclk[MAX_GFX_CLKS];
    uint16_t current_socclk[MAX_CLKS];
    uint16_t current_vclk0[MAX_CLKS];
    uint16_t current_dclk0[MAX_CLKS];
    uint16_t current_uclk;
    uint16_t num_partition;
    struct amdgpu_xcp_metrics xcp_stats[NUM_XCP];
    uint32_t pcie_lc_perf_other_end_recovery;
};

struct gpu_metrics_v1_7 {
    struct metrics_table_header common_header;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrsoc;
    uint16_t curr_socket_power;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint64_t mem_max_bandwidth;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint32_t accumulation_counter;
    uint32_t prochot_residency_acc;
    uint32_t ppt_residency_acc;
    uint32_t socket_thm_residency_acc;
    uint32_t vr_thm_residency_acc;
    uint32_t hbm_thm_residency_acc;
    uint32_t gfxclk_lock_status;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint32_t pcie_nak_sent_count_acc;
    uint32_t pcie_nak_rcvd_count_acc;
    uint64_t xgmi_read_data_acc[NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[NUM_XGMI_LINKS];
    uint16_t xgmi_link_status[NUM_XGMI_LINKS];
    uint16_t padding;
    uint64_t firmware_timestamp;
    uint16_t current_gfxclk[MAX_GFX_CLKS];
    uint16_t current_socclk[MAX_CLKS];
    uint16_t current_vclk0[MAX_CLKS];
    uint16_t current_dclk0[MAX_CLKS];
    uint16_t current_uclk;
    uint16_t num_partition;
    struct amdgpu_xcp_metrics_v1_1 xcp_stats[NUM_XCP];
    uint32_t pcie_lc_perf_other_end_recovery;
};

struct gpu_metrics_v1_8 {
    struct metrics_table_header common_header;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrsoc;
    uint16_t curr_socket_power;
    uint16_t average_gfx_activity;
    uint16_t average_umc_activity;
    uint64_t mem_max_bandwidth;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint32_t accumulation_counter;
    uint32_t prochot_residency_acc;
    uint32_t ppt_residency_acc;
    uint32_t socket_thm_residency_acc;
    uint32_t vr_thm_residency_acc;
    uint32_t hbm_thm_residency_acc;
    uint32_t gfxclk_lock_status;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint32_t pcie_nak_sent_count_acc;
    uint32_t pcie_nak_rcvd_count_acc;
    uint64_t xgmi_read_data_acc[NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[NUM_XGMI_LINKS];
    uint16_t xgmi_link_status[NUM_XGMI_LINKS];
    uint16_t padding;
    uint64_t firmware_timestamp;
    uint16_t current_gfxclk[MAX_GFX_CLKS];
    uint16_t current_socclk[MAX_CLKS];
    uint16_t current_vclk0[MAX_CLKS];
    uint16_t current_dclk0[MAX_CLKS];
    uint16_t current_uclk;
    uint16_t num_partition;
    struct amdgpu_xcp_metrics_v1_2 xcp_stats[NUM_XCP];
    uint32_t pcie_lc_perf_other_end_recovery;
};

struct gpu_metrics_v2_0 {
    struct metrics_table_header common_header;
    uint64_t system_clock_counter;
    uint16_t temperature_gfx;
    uint16_t temperature_soc;
    uint16_t temperature_core[8];
    uint16_t temperature_l3[2];
    uint16_t average_gfx_activity;
    uint16_t average_mm_activity;
    uint16_t average_socket_power;
    uint16_t average_cpu_power;
    uint16_t average_soc_power;
    uint16_t average_gfx_power;
    uint16_t average_core_power[8];
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_fclk_frequency;
    uint16_t average_vclk_frequency;
    uint16_t average_dclk_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_fclk;
    uint16_t current_vclk;
    uint16_t current_dclk;
    uint16_t current_coreclk[8];
    uint16_t current_l3clk[2];
    uint32_t throttle_status;
    uint16_t fan_pwm;
    uint16_t padding;
};

struct gpu_metrics_v2_1 {
    struct metrics_table_header common_header;
    uint16_t temperature_gfx;
    uint16_t temperature_soc;
    uint16_t temperature_core[8];
    uint16_t temperature_l3[2];
    uint16_t average_gfx_activity;
    uint16_t average_mm_activity;
    uint64_t system_clock_counter;
    uint16_t average_socket_power;
    uint16_t average_cpu_power;
    uint16_t average_soc_power;
    uint16_t average_gfx_power;
    uint16_t average_core_power[8];
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_fclk_frequency;
    uint16_t average_vclk_frequency;
    uint16_t average_dclk_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_fclk;
    uint16_t current_vclk;
    uint16_t current_dclk;
    uint16_t current_coreclk[8];
    uint16_t current_l3clk[2];
    uint32_t throttle_status;
    uint16_t fan_pwm;
    uint16_t padding[3];
};

struct gpu_metrics_v2_2 {
    struct metrics_table_header common_header;
    uint16_t temperature_gfx;
    uint16_t temperature_soc;
    uint16_t temperature_core[8];
    uint16_t temperature_l3[2];
    uint16_t average_gfx_activity;
    uint16_t average_mm_activity;
    uint64_t system_clock_counter;
    uint16_t average_socket_power;
    uint16_t average_cpu_power;
    uint16_t average_soc_power;
    uint16_t average_gfx_power;
    uint16_t average_core_power[8];
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_fclk_frequency;
    uint16_t average_vclk_frequency;
    uint16_t average_dclk_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_fclk;
    uint16_t current_vclk;
    uint16_t current_dclk;
    uint16_t current_coreclk[8];
    uint16_t current_l3clk[2];
    uint32_t throttle_status;
    uint16_t fan_pwm;
    uint16_t padding[3];
    uint64_t indep_throttle_status;
};

struct gpu_metrics_v2_3 {
    struct metrics_table_header common_header;
    uint16_t temperature_gfx;
    uint16_t temperature_soc;
    uint16_t temperature_core[8];
    uint16_t temperature_l3[2];
    uint16_t average_gfx_activity;
    uint16_t average_mm_activity;
    uint64_t system_clock_counter;
    uint16_t average_socket_power;
    uint16_t average_cpu_power;
    uint16_t average_soc_power;
    uint16_t average_gfx_power;
    uint16_t average_core_power[8];
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_fclk_frequency;
    uint16_t average_vclk_frequency;
    uint16_t average_dclk_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_fclk;
    uint16_t current_vclk;
    uint16_t current_dclk;
    uint16_t current_coreclk[8];
    uint16_t current_l3clk[2];
    uint32_t throttle_status;
    uint16_t fan_pwm;
    uint16_t padding[3];
    uint64_t indep_throttle_status;
    uint16_t average_temperature_gfx;
    uint16_t average_temperature_soc;
    uint16_t average_temperature_core[8];
    uint16_t average_temperature_l3[2];
};

struct gpu_metrics_v2_4 {
    struct metrics_table_header common_header;
    uint16_t temperature_gfx;
    uint16_t temperature_soc;
    uint16_t temperature_core[8];
    uint16_t temperature_l3[2];
    uint16_t average_gfx_activity;
    uint16_t average_mm_activity;
    uint64_t system_clock_counter;
    uint16_t average_socket_power;
    uint16_t average_cpu_power;
    uint16_t average_soc_power;
    uint16_t average_gfx_power;
    uint16_t average_core_power[8];
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_fclk_frequency;
    uint16_t average_vclk_frequency;
    uint16_t average_dclk_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_fclk;
    uint16_t current_vclk;
    uint16_t current_dclk;
    uint16_t current_coreclk[8];
    uint16_t current_l3clk[2];
    uint32_t throttle_status;
    uint16_t fan_pwm;
    uint16_t padding[3];
    uint64_t indep_throttle_status;
    uint16_t average_temperature_gfx;
    uint16_t average_temperature_soc;
    uint16_t average_temperature_core[8];
    uint16_t average_temperature_l3[2];
    uint16_t average_cpu_voltage;
    uint16_t average_soc_voltage;
    uint16_t average_gfx_voltage;
    uint16_t average_cpu_current;
    uint16_t average_soc_current;
    uint16_t average_gfx_current;
};

struct gpu_metrics_v3_0 {
    struct metrics_table_header common_header;
    uint16_t temperature_gfx;
    uint16_t temperature_soc;
    uint16_t temperature_core[16];
    uint16_t temperature_skin;
    uint16_t average_gfx_activity;
    uint16_t average_vcn_activity;
    uint16_t average_ipu_activity[8];
    uint16_t average_core_c0_activity[16];
    uint16_t average_dram_reads;
    uint16_t average_dram_writes;
    uint16_t average_ipu_reads;
    uint16_t average_ipu_writes;
    uint64_t system_clock_counter;
    uint32_t average_socket_power;
    uint16_t average_ipu_power;
    uint32_t average_apu_power;
    uint32_t average_gfx_power;
    uint32_t average_dgpu_power;
    uint32_t average_all_core_power;
    uint16_t average_core_power[16];
    uint16_t average_sys_power;
    uint16_t stapm_power_limit;
    uint16_t current_stapm_power_limit;
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_vpeclk_frequency;
    uint16_t average_ipuclk_frequency;
    uint16_t average_fclk_frequency;
    uint16_t average_vclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_mpipu_frequency;
    uint16_t current_coreclk[16];
    uint16_t current_core_maxfreq;
    uint16_t current_gfx_maxfreq;
    uint32_t throttle_residency_prochot;
    uint32_t throttle_residency_spl;
    uint32_t throttle_residency_fppt;
    uint32_t throttle_residency_sppt;
    uint32_t throttle_residency_thm_core;
    uint32_t throttle_residency_thm_gfx;
    uint32_t throttle_residency_thm_soc;
    uint32_t time_filter_alphavalue;
};
"""

# The packed v1.9 table as swsmu/smu_cmn.h declares it (DECLARE_SMU_METRICS_CLASS and its helpers), with the
# header's enums up to the ids used; a small field list stands in for a chip's.
C_V1_9 = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint8_t u8;
typedef int8_t s8;
typedef uint16_t u16;
typedef int16_t s16;
typedef uint32_t u32;
typedef int32_t s32;
typedef uint64_t u64;
typedef int64_t s64;

struct metrics_table_header {
    uint16_t structure_size;
    uint8_t format_revision;
    uint8_t content_revision;
};

enum amdgpu_metrics_attr_id {
    AMDGPU_METRICS_ATTR_ID_TEMPERATURE_HOTSPOT,
    AMDGPU_METRICS_ATTR_ID_TEMPERATURE_MEM,
    AMDGPU_METRICS_ATTR_ID_TEMPERATURE_VRSOC,
    AMDGPU_METRICS_ATTR_ID_CURR_SOCKET_POWER,
    AMDGPU_METRICS_ATTR_ID_AVERAGE_GFX_ACTIVITY,
    AMDGPU_METRICS_ATTR_ID_AVERAGE_UMC_ACTIVITY,
    AMDGPU_METRICS_ATTR_ID_MEM_MAX_BANDWIDTH,
    AMDGPU_METRICS_ATTR_ID_ENERGY_ACCUMULATOR,
    AMDGPU_METRICS_ATTR_ID_SYSTEM_CLOCK_COUNTER,
    AMDGPU_METRICS_ATTR_ID_ACCUMULATION_COUNTER,
    AMDGPU_METRICS_ATTR_ID_PROCHOT_RESIDENCY_ACC,
    AMDGPU_METRICS_ATTR_ID_PPT_RESIDENCY_ACC,
    AMDGPU_METRICS_ATTR_ID_SOCKET_THM_RESIDENCY_ACC,
    AMDGPU_METRICS_ATTR_ID_VR_THM_RESIDENCY_ACC,
    AMDGPU_METRICS_ATTR_ID_HBM_THM_RESIDENCY_ACC,
    AMDGPU_METRICS_ATTR_ID_GFXCLK_LOCK_STATUS,
    AMDGPU_METRICS_ATTR_ID_PCIE_LINK_WIDTH,
    AMDGPU_METRICS_ATTR_ID_PCIE_LINK_SPEED,
    AMDGPU_METRICS_ATTR_ID_XGMI_LINK_WIDTH,
    AMDGPU_METRICS_ATTR_ID_XGMI_LINK_SPEED,
    AMDGPU_METRICS_ATTR_ID_GFX_ACTIVITY_ACC,
    AMDGPU_METRICS_ATTR_ID_MEM_ACTIVITY_ACC,
    AMDGPU_METRICS_ATTR_ID_PCIE_BANDWIDTH_ACC,
    AMDGPU_METRICS_ATTR_ID_PCIE_BANDWIDTH_INST,
    AMDGPU_METRICS_ATTR_ID_PCIE_L0_TO_RECOV_COUNT_ACC,
    AMDGPU_METRICS_ATTR_ID_PCIE_REPLAY_COUNT_ACC,
    AMDGPU_METRICS_ATTR_ID_PCIE_REPLAY_ROVER_COUNT_ACC,
    AMDGPU_METRICS_ATTR_ID_PCIE_NAK_SENT_COUNT_ACC,
    AMDGPU_METRICS_ATTR_ID_PCIE_NAK_RCVD_COUNT_ACC,
    AMDGPU_METRICS_ATTR_ID_XGMI_READ_DATA_ACC,
    AMDGPU_METRICS_ATTR_ID_XGMI_WRITE_DATA_ACC,
    AMDGPU_METRICS_ATTR_ID_XGMI_LINK_STATUS,
    AMDGPU_METRICS_ATTR_ID_FIRMWARE_TIMESTAMP,
    AMDGPU_METRICS_ATTR_ID_CURRENT_GFXCLK,
    AMDGPU_METRICS_ATTR_ID_CURRENT_SOCCLK,
    AMDGPU_METRICS_ATTR_ID_CURRENT_VCLK0,
    AMDGPU_METRICS_ATTR_ID_CURRENT_DCLK0,
    AMDGPU_METRICS_ATTR_ID_CURRENT_UCLK,
    AMDGPU_METRICS_ATTR_ID_NUM_PARTITION,
    AMDGPU_METRICS_ATTR_ID_PCIE_LC_PERF_OTHER_END_RECOVERY,
    AMDGPU_METRICS_ATTR_ID_GFX_BUSY_INST,
    AMDGPU_METRICS_ATTR_ID_JPEG_BUSY,
    AMDGPU_METRICS_ATTR_ID_VCN_BUSY,
    AMDGPU_METRICS_ATTR_ID_GFX_BUSY_ACC,
    AMDGPU_METRICS_ATTR_ID_GFX_BELOW_HOST_LIMIT_PPT_ACC,
    AMDGPU_METRICS_ATTR_ID_GFX_BELOW_HOST_LIMIT_THM_ACC,
    AMDGPU_METRICS_ATTR_ID_GFX_LOW_UTILIZATION_ACC,
    AMDGPU_METRICS_ATTR_ID_GFX_BELOW_HOST_LIMIT_TOTAL_ACC,
    AMDGPU_METRICS_ATTR_ID_TEMPERATURE_HBM,
};

enum amdgpu_metrics_attr_type {
    AMDGPU_METRICS_TYPE_U8,
    AMDGPU_METRICS_TYPE_S8,
    AMDGPU_METRICS_TYPE_U16,
    AMDGPU_METRICS_TYPE_S16,
    AMDGPU_METRICS_TYPE_U32,
    AMDGPU_METRICS_TYPE_S32,
    AMDGPU_METRICS_TYPE_U64,
    AMDGPU_METRICS_TYPE_S64,
    AMDGPU_METRICS_TYPE_MAX,
};

enum amdgpu_metrics_attr_unit {
    AMDGPU_METRICS_UNIT_NONE,
    AMDGPU_METRICS_UNIT_CLOCK_1,
    AMDGPU_METRICS_UNIT_TEMP_1,
    AMDGPU_METRICS_UNIT_POWER_1,
    AMDGPU_METRICS_UNIT_TIME_1,
    AMDGPU_METRICS_UNIT_TIME_2,
    AMDGPU_METRICS_UNIT_SPEED_1,
    AMDGPU_METRICS_UNIT_SPEED_2,
    AMDGPU_METRICS_UNIT_BW_1,
    AMDGPU_METRICS_UNIT_DATA_1,
    AMDGPU_METRICS_UNIT_PERCENT,
    AMDGPU_METRICS_UNIT_MAX,
};

#define AMDGPU_METRICS_ATTR_UNIT_SHIFT 24
#define AMDGPU_METRICS_ATTR_TYPE_SHIFT 20
#define AMDGPU_METRICS_ATTR_ID_SHIFT 10
#define AMDGPU_METRICS_ENC_ATTR(unit, type, id, inst) \
    (((u64)(unit) << AMDGPU_METRICS_ATTR_UNIT_SHIFT) | \
     ((u64)(type) << AMDGPU_METRICS_ATTR_TYPE_SHIFT) | \
     ((u64)(id) << AMDGPU_METRICS_ATTR_ID_SHIFT) | (inst))

#define SMU_MATTR(X) AMDGPU_METRICS_ATTR_ID_##X
#define SMU_MTYPE(X) AMDGPU_METRICS_TYPE_##X
#define SMU_MUNIT(X) AMDGPU_METRICS_UNIT_##X
#define SMU_CTYPE(TYPEID) SMU_CTYPE_##TYPEID
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_U8 u8
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_S8 s8
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_U16 u16
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_S16 s16
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_U32 u32
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_S32 s32
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_U64 u64
#define SMU_CTYPE_AMDGPU_METRICS_TYPE_S64 s64

#define SMU_METRICS_SCALAR(ID, UNIT, TYPEID, NAME) \
    u64 NAME##_ftype; \
    SMU_CTYPE(TYPEID) NAME;
#define SMU_METRICS_ARRAY(ID, UNIT, TYPEID, NAME, SIZE) \
    u64 NAME##_ftype; \
    SMU_CTYPE(TYPEID) NAME[SIZE];
#define SMU_METRICS_INIT_SCALAR(ID, UNIT, TYPEID, NAME) \
    obj->NAME##_ftype = AMDGPU_METRICS_ENC_ATTR(UNIT, TYPEID, ID, 1); \
    obj->NAME = (SMU_CTYPE(TYPEID)) ~0; \
    count++;
#define SMU_METRICS_INIT_ARRAY(ID, UNIT, TYPEID, NAME, SIZE) \
    obj->NAME##_ftype = AMDGPU_METRICS_ENC_ATTR(UNIT, TYPEID, ID, SIZE); \
    memset(obj->NAME, 0xFF, sizeof(obj->NAME)); \
    count++;
#define DECLARE_SMU_METRICS_CLASS(CLASSNAME, SMU_METRICS_FIELD_LIST) \
    struct __attribute__((packed)) CLASSNAME { \
        struct metrics_table_header header; \
        int attr_count; \
        SMU_METRICS_FIELD_LIST(SMU_METRICS_SCALAR, SMU_METRICS_ARRAY) \
    }; \
    static inline void CLASSNAME##_init(struct CLASSNAME *obj, uint8_t frev, uint8_t crev) \
    { \
        int count = 0; \
        memset(obj, 0xFF, sizeof(*obj)); \
        obj->header.format_revision = frev; \
        obj->header.content_revision = crev; \
        obj->header.structure_size = sizeof(*obj); \
        SMU_METRICS_FIELD_LIST(SMU_METRICS_INIT_SCALAR, SMU_METRICS_INIT_ARRAY) \
        obj->attr_count = count; \
    }

/* temperature_mem as S16 only to cover a signed type */
#define TEST_METRICS_FIELDS(SMU_SCALAR, SMU_ARRAY) \
    SMU_SCALAR(SMU_MATTR(TEMPERATURE_HOTSPOT), SMU_MUNIT(TEMP_1), SMU_MTYPE(U16), temperature_hotspot) \
    SMU_SCALAR(SMU_MATTR(TEMPERATURE_MEM), SMU_MUNIT(TEMP_1), SMU_MTYPE(S16), temperature_mem) \
    SMU_SCALAR(SMU_MATTR(CURR_SOCKET_POWER), SMU_MUNIT(POWER_1), SMU_MTYPE(U16), curr_socket_power) \
    SMU_SCALAR(SMU_MATTR(ENERGY_ACCUMULATOR), SMU_MUNIT(NONE), SMU_MTYPE(U64), energy_accumulator) \
    SMU_SCALAR(SMU_MATTR(SYSTEM_CLOCK_COUNTER), SMU_MUNIT(TIME_1), SMU_MTYPE(U64), system_clock_counter) \
    SMU_SCALAR(SMU_MATTR(PCIE_LINK_SPEED), SMU_MUNIT(SPEED_2), SMU_MTYPE(U16), pcie_link_speed) \
    SMU_SCALAR(SMU_MATTR(PCIE_BANDWIDTH_INST), SMU_MUNIT(BW_1), SMU_MTYPE(U64), pcie_bandwidth_inst) \
    SMU_ARRAY(SMU_MATTR(XGMI_READ_DATA_ACC), SMU_MUNIT(DATA_1), SMU_MTYPE(U64), xgmi_read_data_acc, 8) \
    SMU_ARRAY(SMU_MATTR(CURRENT_GFXCLK), SMU_MUNIT(CLOCK_1), SMU_MTYPE(U16), current_gfxclk, 8) \
    SMU_ARRAY(SMU_MATTR(GFX_BUSY_INST), SMU_MUNIT(PERCENT), SMU_MTYPE(U32), gfx_busy_inst, 8) \
    SMU_SCALAR(SMU_MATTR(ACCUMULATION_COUNTER), SMU_MUNIT(NONE), SMU_MTYPE(U64), accumulation_counter)

DECLARE_SMU_METRICS_CLASS(test_gpu_metrics, TEST_METRICS_FIELDS)

int main(void)
{
    struct test_gpu_metrics m;
    int i;

    test_gpu_metrics_init(&m, 1, 9);
    m.temperature_hotspot = 61;
    m.temperature_mem = -5;
    m.curr_socket_power = 512;
    m.energy_accumulator = 123456789012ULL;
    m.pcie_link_speed = 320;
    m.pcie_bandwidth_inst = 12;
    m.xgmi_read_data_acc[0] = 1000;
    m.xgmi_read_data_acc[1] = 2000;
    for (i = 0; i < 4; i++)
        m.current_gfxclk[i] = 2100 + i;
    for (i = 0; i < 8; i++)
        m.gfx_busy_inst[i] = 10 * i;
    m.accumulation_counter = 77;
    fwrite(&m, sizeof(m), 1, stdout);
    return 0;
}
"""


def _compile_and_run(tmp: Path, name: str, source: str) -> bytes:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to check the layouts against the kernel's C structs")
    src = tmp / f"{name}.c"
    exe = tmp / name
    src.write_text(source)
    subprocess.run(["gcc", "-std=gnu11", "-O0", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, timeout=60).stdout


@pytest.fixture(scope="module")
def gcc_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[int, int]]:
    """(struct, member path) -> (offset, size) as gcc lays out the kernel structs; (struct, "") -> sizeof."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", C_STRUCTS]
    lines.append(
        '#define M(s, m) printf("%s %s %zu %zu\\n", #s, #m, offsetof(struct s, m), sizeof(((struct s *)0)->m));'
    )
    lines.append("int main(void) {")
    for layout in ALL_LAYOUTS:
        lines.append(f'printf("{layout.name} - 0 %zu\\n", sizeof(struct {layout.name}));')
        lines.extend(f"M({layout.name}, {path})" for path in member_paths(layout))
    lines.append("return 0; }")
    out = _compile_and_run(tmp_path_factory.mktemp("gcc"), "layout", "\n".join(lines)).decode()
    table: dict[tuple[str, str], tuple[int, int]] = {}
    for line in out.splitlines():
        struct_name, path, offset, size = line.split()
        table[(struct_name, "" if path == "-" else path)] = (int(offset), int(size))
    return table


# --- layouts against gcc ----------------------------------------------------------------------------------------


def test_every_kernel_revision_has_a_layout() -> None:
    expected = {(1, c) for c in range(9)} | {(2, c) for c in range(5)} | {(3, 0)}
    assert set(LAYOUTS) == expected
    assert [layout.name for layout in LAYOUTS[(1, 6)]] == ["gpu_metrics_v1_6", "gpu_metrics_v1_6_early"]


@pytest.mark.parametrize("layout", ALL_LAYOUTS, ids=lambda layout: layout.name)
def test_layout_is_the_kernel_struct_compiled_by_gcc(
    layout: Layout, gcc_layout: dict[tuple[str, str], tuple[int, int]]
) -> None:
    assert layout.size == gcc_layout[(layout.name, "")][1]
    assert struct.calcsize(layout.fmt) == layout.size
    assert layout.fmt.startswith("<") and "@" not in layout.fmt
    for slot in layout.slots:
        m = slot.member
        if isinstance(m.ctype, StructType):
            for k in range(m.count or 1):
                for inner in m.ctype.slots:
                    offset, size = gcc_layout[(layout.name, f"{m.name}[{k}].{inner.member.name}")]
                    assert offset == slot.offset + k * m.ctype.size + inner.offset, (m.name, k, inner.member.name)
                    assert size == inner.member.size
            continue
        path = f"common_header.{m.name}" if m.name in HEADER_FIELDS else m.name
        assert (slot.offset, m.size) == gcc_layout[(layout.name, path)], m.name


@pytest.mark.parametrize("layout", ALL_LAYOUTS, ids=lambda layout: layout.name)
def test_the_builders_offsets_are_gccs(layout: Layout, gcc_layout: dict[tuple[str, str], tuple[int, int]]) -> None:
    """tests/gpu_metrics_builder.py builds the fake roots' tables at these offsets: they must be the C struct's."""
    assert struct_offsets(layout) == {k: v for k, v in gcc_layout.items() if k[0] == layout.name}
    # and a table packed with them, from gcc's own offsets, is byte for byte the same
    values: dict[str, FieldValue] = {"pcie_link_width": 16} if layout.format_revision == 1 else {}
    assert pack_table(layout, values) == pack_table(layout, values, gcc_layout)


def test_declared_and_implicit_padding_are_explicit_pad_bytes() -> None:
    # v1.3: 'padding' after pcie_link_speed and 'padding1' after the voltages are pad bytes; so are the compiler's
    # 4 bytes between the header and system_clock_counter in v1.0, and v2.1's 'padding[3]'.
    assert GPU_METRICS_V1_3.fmt.endswith("IHHH2xII4HQHHH2xQ")
    assert LAYOUT_BY_NAME["gpu_metrics_v1_0"].fmt.startswith("<HBB4xQ")
    assert GPU_METRICS_V2_1.fmt.endswith("IH6x")
    names = [s.member.name for s in GPU_METRICS_V1_3.slots if s.member.padding]
    assert names == ["padding", "padding1"]


# --- every revision, field by field -------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ALL_LAYOUTS, ids=lambda layout: layout.name)
def test_every_field_of_every_revision_by_name(
    layout: Layout, gcc_layout: dict[tuple[str, str], tuple[int, int]]
) -> None:
    data, expected = build_table(layout, gcc_layout)
    m = parse_gpu_metrics(data)
    assert (m.structure_size, m.format_revision, m.content_revision) == (
        len(data),
        layout.format_revision,
        layout.content_revision,
    )
    assert m.layout == layout.name
    assert m.fields == expected
    assert list(m.fields) == list(expected)  # kernel order
    assert m.warnings == ()
    assert not any(name.startswith("padding") for name in m.fields)


def test_v1_3_and_v2_1_have_the_same_size_and_are_told_apart_by_revision(
    gcc_layout: dict[tuple[str, str], tuple[int, int]],
) -> None:
    v1_3, _ = build_table(GPU_METRICS_V1_3, gcc_layout)
    v2_1, _ = build_table(GPU_METRICS_V2_1, gcc_layout)
    assert len(v1_3) == len(v2_1) == 120
    assert "temperature_edge" in parse_gpu_metrics(v1_3).fields
    assert "temperature_gfx" in parse_gpu_metrics(v2_1).fields
    # the same body under the other header: decoded by the header's revision, not guessed from the bytes
    swapped = parse_gpu_metrics(v2_1[:2] + bytes([1, 3]) + v2_1[4:])
    assert swapped.layout == "gpu_metrics_v1_3" and "temperature_edge" in swapped.fields


def _flat(value: FieldValue) -> Iterator[FieldValue]:
    if isinstance(value, list):
        for v in value:
            yield from _flat(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flat(v)
    else:
        yield value


def test_all_ones_is_none_for_every_width(gcc_layout: dict[tuple[str, str], tuple[int, int]]) -> None:
    for layout in (LAYOUT_BY_NAME["gpu_metrics_v1_0"], GPU_METRICS_V1_6):
        size = layout.size
        data = struct.pack("<HBB", size, layout.format_revision, layout.content_revision) + b"\xff" * (size - 4)
        m = parse_gpu_metrics(data)
        assert m.warnings == ()
        assert all(v is None for f in m.fields.values() for v in _flat(f))
    # one below all-ones is a value
    v1_0 = LAYOUT_BY_NAME["gpu_metrics_v1_0"]
    data, _ = build_table(v1_0, gcc_layout)
    buf = bytearray(data)
    buf[gcc_layout[(v1_0.name, "pcie_link_width")][0]] = 0xFE
    struct.pack_into("<I", buf, gcc_layout[(v1_0.name, "energy_accumulator")][0], 0xFFFF_FFFE)
    fields = parse_gpu_metrics(bytes(buf)).fields
    assert (fields["pcie_link_width"], fields["energy_accumulator"]) == (0xFE, 0xFFFF_FFFE)


def test_the_two_v1_6_layouts_are_chosen_by_size(gcc_layout: dict[tuple[str, str], tuple[int, int]]) -> None:
    early, early_fields = build_table(GPU_METRICS_V1_6_EARLY, gcc_layout)
    current, current_fields = build_table(GPU_METRICS_V1_6, gcc_layout)
    assert parse_gpu_metrics(early).layout == "gpu_metrics_v1_6_early"
    assert parse_gpu_metrics(early).fields == early_fields
    assert parse_gpu_metrics(current).fields == current_fields
    # a v1.6 header with neither size: the current layout, and the mismatch said once
    odd = struct.pack("<H", 1700) + current[2:] + b"\x00" * 36
    m = parse_gpu_metrics(odd)
    assert m.layout == "gpu_metrics_v1_6" and m.fields == current_fields
    assert len(m.warnings) == 1 and "structure_size 1700" in m.warnings[0]


# --- v1.9 ---------------------------------------------------------------------------------------------------------


def _enc(unit: int, type_id: int, attr_id: int, instances: int) -> bytes:
    return struct.pack("<Q", unit << 24 | type_id << 20 | attr_id << 10 | instances)


def _v1_9(*attrs: bytes, content_revision: int = 9, size: int | None = None) -> bytes:
    body = struct.pack("<i", len(attrs)) + b"".join(attrs)
    total = 4 + len(body)
    return struct.pack("<HBB", total if size is None else size, 1, content_revision) + body


def _id(name: str) -> int:
    return ATTRIBUTE_IDS.index(name)


def test_v1_9_attribute_table() -> None:
    data = _v1_9(
        _enc(2, 2, _id("temperature_hotspot"), 1) + struct.pack("<H", 71),
        _enc(3, 2, _id("curr_socket_power"), 1) + struct.pack("<H", 0xFFFF),
        _enc(1, 2, _id("current_gfxclk"), 4) + struct.pack("<4H", 2100, 2101, 0xFFFF, 2103),
        _enc(0, 6, _id("energy_accumulator"), 1) + struct.pack("<Q", 2**40),
        _enc(9, 6, _id("xgmi_read_data_acc"), 2) + struct.pack("<2Q", 5, 2**64 - 1),
        _enc(0, 7, _id("accumulation_counter"), 1) + struct.pack("<q", -1),
        _enc(2, 3, 1000, 1) + struct.pack("<h", -12),  # an id newer than this parser
    )
    m = parse_gpu_metrics(data)
    assert (m.layout, m.warnings) == ("gpu_metrics_v1_9", ())
    assert m.fields == {
        "temperature_hotspot": 71,
        "curr_socket_power": None,
        "current_gfxclk": [2100, 2101, None, 2103],
        "energy_accumulator": 2**40,
        "xgmi_read_data_acc": [5, None],
        "accumulation_counter": None,
        "attribute_1000": -12,
    }
    assert m.units["temperature_hotspot"] == "celsius"
    assert m.units["current_gfxclk"] == "MHz"
    assert m.units["xgmi_read_data_acc"] == "KB"
    assert m.to_json()["units"]["curr_socket_power"] == "watts"


def test_v1_9_as_the_kernel_macros_build_it(tmp_path: Path) -> None:
    data = _compile_and_run(tmp_path, "v1_9", C_V1_9)
    m = parse_gpu_metrics(data)
    assert (m.structure_size, m.layout, m.warnings) == (len(data), "gpu_metrics_v1_9", ())
    assert m.fields == {
        "temperature_hotspot": 61,
        "temperature_mem": -5,
        "curr_socket_power": 512,
        "energy_accumulator": 123456789012,
        "system_clock_counter": None,
        "pcie_link_speed": 320,
        "pcie_bandwidth_inst": 12,
        "xgmi_read_data_acc": [1000, 2000, None, None, None, None, None, None],
        "current_gfxclk": [2100, 2101, 2102, 2103, None, None, None, None],
        "gfx_busy_inst": [0, 10, 20, 30, 40, 50, 60, 70],
        "accumulation_counter": 77,
    }
    assert m.units == {
        "temperature_hotspot": "celsius",
        "temperature_mem": "celsius",
        "curr_socket_power": "watts",
        "energy_accumulator": "none",
        "system_clock_counter": "ns",
        "pcie_link_speed": "0.1GT/s",
        "pcie_bandwidth_inst": "GB/s",
        "xgmi_read_data_acc": "KB",
        "current_gfxclk": "MHz",
        "gfx_busy_inst": "percent",
        "accumulation_counter": "none",
    }
    assert socket_power_watts(m).current_watts == 512.0
    assert pcie(m).link_speed_gts == 32.0 and pcie(m).bandwidth_inst_bytes_per_second == 12e9
    assert xgmi(m).read_bytes[:3] == (1000 * XGMI_KILOBYTE, 2000 * XGMI_KILOBYTE, None)
    assert [s.value for s in temperatures_celsius(m)] == [61.0, -5.0]
    assert xcp_stats(m)[0].gfx_busy_inst == (0, 10, 20, 30, 40, 50, 60, 70)
    # truncated in the middle of an attribute: what came before it, one warning
    cut = parse_gpu_metrics(data[:40])
    assert len(cut.warnings) == 1 and "truncated" in cut.warnings[0]
    assert cut.fields == {"temperature_hotspot": 61, "temperature_mem": -5, "curr_socket_power": 512}


def test_v1_9_bad_attribute_lists_give_one_warning() -> None:
    good = _enc(2, 2, 0, 1) + struct.pack("<H", 50)
    bad_type = _v1_9(good, _enc(2, 9, 1, 1) + b"\x00" * 8)
    m = parse_gpu_metrics(bad_type)
    assert (m.layout, m.fields) == ("gpu_metrics_v1_9", {"temperature_hotspot": 50})
    assert len(m.warnings) == 1 and "invalid encoding" in m.warnings[0]
    m = parse_gpu_metrics(_v1_9(good, good)[:-1])
    assert m.fields == {"temperature_hotspot": 50}
    assert len(m.warnings) == 1 and "truncated in attribute 1 of 2" in m.warnings[0]


def test_a_v1_9_header_on_a_fixed_table_is_read_as_v1_8(gcc_layout: dict[tuple[str, str], tuple[int, int]]) -> None:
    # Not an attribute list from the first bytes (attr_count would be the first two temperatures): the table is
    # read as the newest fixed v1 layout, with one warning saying so.
    v1_8, expected = build_table(LAYOUT_BY_NAME["gpu_metrics_v1_8"], gcc_layout)
    for revision in (9, 10):
        data = struct.pack("<HBB", len(v1_8) + 16, 1, revision) + v1_8[4:] + b"\x00" * 16
        m = parse_gpu_metrics(data)
        assert (m.layout, m.fields) == ("gpu_metrics_v1_8", expected)
        assert len(m.warnings) == 1 and "not a v1.9 attribute list" in m.warnings[0]
    negative = parse_gpu_metrics(struct.pack("<HBBi", 8, 1, 9, -3))
    assert negative.layout == "gpu_metrics_v1_8" and len(negative.warnings) == 1
    assert "outside 0..1024" in negative.warnings[0] and "truncated" in negative.warnings[0]


# --- real captures ------------------------------------------------------------------------------------------------

REAL = {
    "mi100_arcturus_v1_3_a.bin": {
        "layout": "gpu_metrics_v1_3",
        "temperature_edge": 45,
        "temperature_hotspot": 49,
        "average_socket_power": 36,
        "energy_accumulator": 59231,
        "average_uclk_frequency": 1200,
        "pcie_link_width": 16,
        "pcie_link_speed": 160,
        "temperature_hbm": [None, None, None, None],
    },
    "mi100_arcturus_v1_3_b.bin": {
        "layout": "gpu_metrics_v1_3",
        "temperature_vrmem": 43,
        "average_socket_power": 35,
        "energy_accumulator": 59601,
        "current_gfxclk": 300,
    },
    "apu_v2_2_netip_device.bin": {
        "layout": "gpu_metrics_v2_2",
        "temperature_gfx": 4000,
        "temperature_core": [3925, 3925, 3925, 3900, 3950, 3925, 3975, 3900],
        "average_socket_power": 7,
        "average_cpu_power": 5089,
        "average_soc_power": 693,
        "current_coreclk": [2800, 2800, 2240, 0, 0, 2240, 2240, 2240],
        "indep_throttle_status": 0,
    },
}


def test_real_captures_are_all_checked_and_described() -> None:
    provenance = (FIXTURES / "PROVENANCE.md").read_text()
    assert {p.name for p in CAPTURES} == set(REAL)
    for name in REAL:
        assert f"## {name}" in provenance or f"{name}," in provenance or f", {name}" in provenance, name
    assert "https://github.com/ROCm/amdsmi/issues/38" in provenance


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_real_capture(capture: Path) -> None:
    data = capture.read_bytes()
    m = parse_gpu_metrics(data)
    expect = dict(REAL[capture.name])
    assert m.layout == expect.pop("layout")
    assert m.structure_size == len(data)
    assert m.warnings == () and m.throttle_reasons == ()
    for name, value in expect.items():
        assert m.fields[name] == value, name
    temps = temperatures_celsius(m)
    assert temps and all(0 <= t.value <= 120 for t in temps)
    clocks = current_clocks_hz(m) + average_clocks_hz(m)
    assert clocks and all(0 <= c.value <= 4000e6 for c in clocks)
    power = socket_power_watts(m).average_watts
    assert power is not None and 1 <= power <= 1000
    json.dumps(m.to_json())


def test_real_mi100_energy_counter_counts_joules() -> None:
    a = parse_gpu_metrics((FIXTURES / "mi100_arcturus_v1_3_a.bin").read_bytes())
    b = parse_gpu_metrics((FIXTURES / "mi100_arcturus_v1_3_b.bin").read_bytes())
    ta, tb = a.fields["system_clock_counter"], b.fields["system_clock_counter"]
    assert isinstance(ta, int) and isinstance(tb, int)
    seconds = (tb - ta) / 1e9
    assert 10 < seconds < 11  # the capture slept 10 s between reads
    ea, eb = energy_joules(a, MI100_ENERGY_UNIT_JOULES), energy_joules(b, MI100_ENERGY_UNIT_JOULES)
    assert ea is not None and eb is not None
    watts = (eb - ea) / seconds
    assert 34 <= watts <= 37  # the table's own average_socket_power: 36 W, then 35 W
    # with the header's 15.259 uJ unit the same counter would say half a milliwatt
    ha, hb = energy_joules(a), energy_joules(b)
    assert ha is not None and hb is not None and (hb - ha) / seconds < 0.001


def test_real_apu_socket_power_is_in_watts_on_this_firmware() -> None:
    m = parse_gpu_metrics((FIXTURES / "apu_v2_2_netip_device.bin").read_bytes())
    assert socket_power_watts(m).average_watts == 7.0  # below the 5089 mW CPU power: watts
    temps = {(t.field, t.index): t.value for t in temperatures_celsius(m)}
    assert temps[("temperature_gfx", None)] == 40.0 and temps[("temperature_core", 6)] == 39.75


# --- truncated, unknown, future, garbage --------------------------------------------------------------------------


def test_truncated_capture_gives_the_whole_fields_that_fit_and_one_warning() -> None:
    data = (FIXTURES / "mi100_arcturus_v1_3_a.bin").read_bytes()
    m = parse_gpu_metrics(data[:40])
    assert m.layout == "gpu_metrics_v1_3"
    assert list(m.fields) == [
        "temperature_edge",
        "temperature_hotspot",
        "temperature_mem",
        "temperature_vrgfx",
        "temperature_vrsoc",
        "temperature_vrmem",
        "average_gfx_activity",
        "average_umc_activity",
        "average_mm_activity",
        "average_socket_power",
        "energy_accumulator",
        "system_clock_counter",
    ]
    assert len(m.warnings) == 1 and m.warnings[0].startswith("truncated: 40 of the 120 bytes")
    # cut inside temperature_hbm: the array is left out, not half-filled
    m = parse_gpu_metrics(data[:92])
    assert "temperature_hbm" not in m.fields and "mem_activity_acc" in m.fields
    assert len(m.warnings) == 1
    # only the header
    m = parse_gpu_metrics(data[:4])
    assert (m.fields, len(m.warnings)) == ({}, 1)


def test_header_size_disagreeing_and_trailing_bytes_are_warned() -> None:
    data = (FIXTURES / "mi100_arcturus_v1_3_a.bin").read_bytes()
    m = parse_gpu_metrics(struct.pack("<H", 124) + data[2:])
    assert m.fields == parse_gpu_metrics(data).fields
    assert len(m.warnings) == 1 and "structure_size 124" in m.warnings[0]
    m = parse_gpu_metrics(data + b"\n")
    assert len(m.warnings) == 1 and "1 bytes after the table" in m.warnings[0]


@pytest.mark.parametrize("header", [(64, 4, 0), (120, 0, 3), (8, 255, 255), (300, 9, 1)])
def test_unknown_format_revision_gives_the_header_and_one_warning(header: tuple[int, int, int]) -> None:
    m = parse_gpu_metrics(struct.pack("<HBB", *header) + b"\x01" * 60)
    assert (m.structure_size, m.format_revision, m.content_revision) == header
    assert (m.layout, m.fields, m.throttle_reasons) == (None, {}, ())
    assert len(m.warnings) == 1 and "unknown format revision" in m.warnings[0]


@pytest.mark.parametrize(("layout", "future"), [(GPU_METRICS_V2_4, 5), (GPU_METRICS_V3_0, 1)])
def test_future_minor_revision_decodes_the_newest_known_prefix(
    layout: Layout, future: int, gcc_layout: dict[tuple[str, str], tuple[int, int]]
) -> None:
    data, expected = build_table(layout, gcc_layout)
    longer = struct.pack("<HBB", len(data) + 24, layout.format_revision, future) + data[4:] + b"\x33" * 24
    m = parse_gpu_metrics(longer)
    assert m.layout == layout.name and m.fields == expected
    assert len(m.warnings) == 1
    assert f"v{layout.format_revision}.{future} is newer" in m.warnings[0]
    assert f"decoded as v{layout.format_revision}.{layout.content_revision}" in m.warnings[0]
    # future and truncated: still one warning, saying both
    m = parse_gpu_metrics(longer[:60])
    assert len(m.warnings) == 1 and "newer" in m.warnings[0] and "truncated" in m.warnings[0]


def test_future_v1_revision_is_read_as_attributes_with_one_warning() -> None:
    m = parse_gpu_metrics(_v1_9(_enc(2, 2, 0, 1) + struct.pack("<H", 55), content_revision=12))
    assert m.fields == {"temperature_hotspot": 55}
    assert len(m.warnings) == 1 and "v1.12 is newer than v1.9" in m.warnings[0]


@pytest.mark.parametrize("data", [b"", b"\x78", b"\x78\x00", b"\x78\x00\x01"])
def test_fewer_than_four_bytes_is_not_a_capture(data: bytes) -> None:
    with pytest.raises(ParseError, match="not a capture"):
        parse_gpu_metrics(data)


@pytest.mark.parametrize(
    "data",
    [b"\x00" * 4, b"\xff" * 4, b"\xff" * 4096, b"hello, this is text\n", b"\x78\x00\x01\x03" + b"\xff" * 3],
)
def test_garbage_never_raises(data: bytes) -> None:
    m = parse_gpu_metrics(data)
    json.dumps(m.to_json())
    assert len(m.warnings) <= 1


def _all_helpers(m: GpuMetrics) -> None:
    temperatures_celsius(m)
    current_clocks_hz(m)
    average_clocks_hz(m)
    socket_power_watts(m)
    energy_joules(m)
    pcie(m)
    xgmi(m)
    xcp_stats(m)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=5000))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    try:
        m = parse_gpu_metrics(data)
    except ParseError:
        assert len(data) < 4
        return
    json.dumps(m.to_json())
    _all_helpers(m)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([*LAYOUTS, (1, 9), (1, 10), (2, 7), (3, 2)]),
    st.integers(min_value=0, max_value=0xFFFF),
    st.binary(max_size=4200),
)
def test_fuzz_known_headers_with_arbitrary_bodies(revision: tuple[int, int], size: int, body: bytes) -> None:
    m = parse_gpu_metrics(struct.pack("<HBB", size, *revision) + body)
    assert m.layout is not None
    json.dumps(m.to_json())
    _all_helpers(m)


# --- throttle reasons ---------------------------------------------------------------------------------------------


def test_throttle_bit_names_are_the_kernels() -> None:
    assert THROTTLER_BITS[0] == "PPT0" and THROTTLER_BITS[7] == "SPPT_APU"
    assert THROTTLER_BITS[16] == "TDC_GFX" and THROTTLER_BITS[23] == "APCC"
    assert THROTTLER_BITS[32] == "TEMP_GPU" and THROTTLER_BITS[37] == "TEMP_SOC"
    assert THROTTLER_BITS[43] == "TEMP_LIQUID1" and THROTTLER_BITS[47] == "PROCHOT_GFX"
    assert (THROTTLER_BITS[56], THROTTLER_BITS[57]) == ("PPM", "FIT")
    assert len(THROTTLER_BITS) == 34
    assert throttle_reasons(None) == () and throttle_reasons(0) == ()
    assert throttle_reasons(1 << 60 | 1 << 36 | 1) == ("PPT0", "TEMP_HOTSPOT", "BIT60")


def test_throttle_reasons_come_from_indep_throttle_status() -> None:
    data = bytearray((FIXTURES / "mi100_arcturus_v1_3_a.bin").read_bytes())
    struct.pack_into("<Q", data, 112, 1 << 4 | 1 << 35 | 1 << 57)
    m = parse_gpu_metrics(bytes(data))
    assert m.throttle_reasons == ("SPL", "TEMP_EDGE", "FIT")
    assert m.to_json()["throttle_reasons"] == ["SPL", "TEMP_EDGE", "FIT"]
    struct.pack_into("<Q", data, 112, 2**64 - 1)  # not available, not "everything"
    assert parse_gpu_metrics(bytes(data)).throttle_reasons == ()


# --- unit helpers -------------------------------------------------------------------------------------------------


def _metrics(revision: tuple[int, int], layout: str | None = None, **fields: FieldValue) -> GpuMetrics:
    return GpuMetrics(0, revision[0], revision[1], layout or f"gpu_metrics_v{revision[0]}_{revision[1]}", fields)


def test_temperatures_are_celsius_on_dgpus_and_centi_celsius_on_apus() -> None:
    dgpu = _metrics((1, 3), temperature_edge=45, temperature_hbm=[50, None, 52, 53], voltage_gfx=800)
    assert [(t.field, t.index, t.value) for t in temperatures_celsius(dgpu)] == [
        ("temperature_edge", None, 45.0),
        ("temperature_hbm", 0, 50.0),
        ("temperature_hbm", 2, 52.0),
        ("temperature_hbm", 3, 53.0),
    ]
    apu = _metrics((2, 4), temperature_gfx=4321, average_temperature_core=[3900, None])
    assert [(t.field, t.value) for t in temperatures_celsius(apu)] == [
        ("temperature_gfx", 43.21),
        ("average_temperature_core", 39.0),
    ]
    assert temperatures_celsius(_metrics((3, 0), temperature_skin=3550))[0].value == 35.5


def test_clocks_are_hertz() -> None:
    m = _metrics(
        (1, 5), current_gfxclk=[2100, None, 1900], current_uclk=1300, average_gfx_activity=50, current_socclk=[None]
    )
    assert [(c.field, c.index, c.value) for c in current_clocks_hz(m)] == [
        ("current_gfxclk", 0, 2.1e9),
        ("current_gfxclk", 2, 1.9e9),
        ("current_uclk", None, 1.3e9),
    ]
    v1_3 = _metrics((1, 3), current_vclk0=187, current_dclk1=None, average_dclk0_frequency=600, current_fan_speed=900)
    assert [(c.field, c.value) for c in current_clocks_hz(v1_3)] == [("current_vclk0", 187e6)]
    assert [(c.field, c.value) for c in average_clocks_hz(v1_3)] == [("average_dclk0_frequency", 600e6)]
    v3 = _metrics((3, 0), current_coreclk=[4000], current_core_maxfreq=5000, average_fclk_frequency=2000)
    assert [c.field for c in current_clocks_hz(v3)] == ["current_coreclk"]
    assert average_clocks_hz(v3)[0].value == 2e9


def test_socket_power_units_per_revision() -> None:
    assert socket_power_watts(_metrics((1, 3), average_socket_power=250)).average_watts == 250.0
    assert socket_power_watts(_metrics((1, 5), curr_socket_power=550)).current_watts == 550.0
    assert socket_power_watts(_metrics((1, 5), curr_socket_power=None)).current_watts is None
    # APU v2.0-v2.3: milliwatts, unless the socket is below the CPU alone (Renoir-family firmware's watts)
    assert socket_power_watts(_metrics((2, 2), average_socket_power=15000, average_cpu_power=9000)).average_watts == 15
    assert socket_power_watts(_metrics((2, 2), average_socket_power=12, average_cpu_power=9000)).average_watts == 12
    assert socket_power_watts(_metrics((2, 1), average_socket_power=4500)).average_watts == 4.5
    assert socket_power_watts(_metrics((2, 4), average_socket_power=12, average_cpu_power=9000)).average_watts == 0.012
    assert socket_power_watts(_metrics((3, 0), average_socket_power=28000)).average_watts == 28.0
    assert socket_power_watts(_metrics((3, 0))).average_watts is None


def test_energy_is_the_counter_times_the_chips_unit() -> None:
    m = _metrics((1, 5), energy_accumulator=65536)
    assert energy_joules(m) == 1.0 == 65536 * ENERGY_UNIT_JOULES
    assert energy_joules(m, 15.3e-6) == pytest.approx(1.0027, rel=1e-4)
    assert energy_joules(m, MI100_ENERGY_UNIT_JOULES) == 65536.0
    assert energy_joules(_metrics((1, 5), energy_accumulator=None)) is None


def test_pcie_and_xgmi() -> None:
    m = _metrics(
        (1, 5),
        pcie_link_width=16,
        pcie_link_speed=320,
        pcie_bandwidth_inst=24,
        pcie_bandwidth_acc=123456,
        pcie_replay_count_acc=3,
        pcie_nak_rcvd_count_acc=None,
        xgmi_link_width=16,
        xgmi_link_speed=32,
        xgmi_read_data_acc=[1, None, 3],
        xgmi_write_data_acc=[4, 5, 6],
    )
    link = pcie(m)
    assert (link.link_width_lanes, link.link_speed_gts, link.bandwidth_inst_bytes_per_second) == (16, 32.0, 24e9)
    assert (link.bandwidth_acc, link.replay_count, link.nak_received_count) == (123456, 3, None)
    early = _metrics((1, 6), layout="gpu_metrics_v1_6_early", pcie_bandwidth_inst=8000)
    assert pcie(early).bandwidth_inst_bytes_per_second == 1e9  # 8000 Mbps
    x = xgmi(m)
    assert (x.link_width, x.link_speed_gbps) == (16, 32.0)
    assert x.read_bytes == (1024, None, 3072) and x.write_bytes == (4096, 5120, 6144)
    assert x.link_status == ()
    assert pcie(_metrics((2, 2))).link_width_lanes is None


def test_xcp_stats_per_partition(gcc_layout: dict[tuple[str, str], tuple[int, int]]) -> None:
    data, expected = build_table(LAYOUT_BY_NAME["gpu_metrics_v1_8"], gcc_layout)
    buf = bytearray(data)
    struct.pack_into("<H", buf, gcc_layout[("gpu_metrics_v1_8", "num_partition")][0], 2)
    m = parse_gpu_metrics(bytes(buf))
    stats = xcp_stats(m)
    assert [s.index for s in stats] == [0, 1]
    built = expected["xcp_stats"]
    assert isinstance(built, list) and isinstance(built[1], dict)
    busy = built[1]["gfx_busy_inst"]
    assert isinstance(busy, list)
    assert stats[1].gfx_busy_inst == tuple(busy)
    assert len(stats[0].jpeg_busy) == 40 and stats[0].gfx_below_host_limit_total_acc is not None
    assert stats[0].gfx_below_host_limit_acc is None  # v1.7's field, not in v1.8
    # num_partition not available: the partitions that carry any value
    none_elem: dict[str, FieldValue] = {
        k: [None] * 8 for k in ("gfx_busy_inst", "vcn_busy", "jpeg_busy", "gfx_busy_acc")
    }
    some_elem: dict[str, FieldValue] = {**none_elem, "gfx_busy_inst": [5, None, None, None, None, None, None, None]}
    v16 = _metrics((1, 6), num_partition=None, xcp_stats=[some_elem, none_elem, some_elem])
    assert [s.index for s in xcp_stats(v16)] == [0, 2]
    assert xcp_stats(_metrics((1, 3))) == ()


# --- the CLI ------------------------------------------------------------------------------------------------------


def _cli(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "parse", "gpu-metrics", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_cli_prints_the_json() -> None:
    proc = _cli(str(FIXTURES / "mi100_arcturus_v1_3_a.bin"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("structure_size", "format_revision", "content_revision", "fields", "throttle_reasons", "warnings"):
        assert key in out
    assert (out["format_revision"], out["content_revision"], out["layout"]) == (1, 3, "gpu_metrics_v1_3")
    assert out["fields"]["temperature_edge"] == 45 and out["fields"]["temperature_hbm"] == [None] * 4
    assert out["warnings"] == []


def test_cli_reads_bytes_from_stdin() -> None:
    data = (FIXTURES / "apu_v2_2_netip_device.bin").read_bytes()
    proc = _cli("-", stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fields"]["average_cpu_power"] == 5089


def test_cli_empty_file_is_not_a_capture(tmp_path: Path) -> None:
    empty = tmp_path / "gpu_metrics"
    empty.write_bytes(b"")
    proc = _cli(str(empty))
    assert proc.returncode == 1
    assert proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and "not a capture" in lines[0]
    assert _cli(str(tmp_path / "missing")).returncode == 2


def test_cli_refuses_what_is_not_a_table(tmp_path: Path) -> None:
    """``/bin/ls`` (header "76.70"), text with NUL bytes, a table cut short or with bytes after it: exit 1, one line."""
    table = (FIXTURES / "mi100_arcturus_v1_3_a.bin").read_bytes()
    text = tmp_path / "notes.txt"
    text.write_bytes(b"_S\x00\x00some notes\x00\x00 with NUL bytes\n")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(table[:-8])
    longer = tmp_path / "longer.bin"
    longer.write_bytes(table + b"\x00" * 8)
    future = tmp_path / "v4.bin"
    future.write_bytes(bytes([len(table) & 0xFF, len(table) >> 8, 4, 0]) + table[4:])
    for path, what in (
        (Path("/bin/ls"), "format revision 76.70 names no gpu_metrics family"),
        (text, "names no gpu_metrics family"),
        (cut, f"the header says {len(table)} bytes (format revision 1.3), the input has {len(table) - 8}"),
        (longer, f"the input has {len(table) + 8}"),
        (future, "format revision 4.0 names no gpu_metrics family"),
    ):
        proc = _cli(str(path))
        assert proc.returncode == 1, (path, proc.stdout[:200])
        assert proc.stdout == b""
        lines = proc.stderr.decode().splitlines()
        assert len(lines) == 1 and "not a capture" in lines[0] and what in lines[0], lines


def test_cli_still_decodes_a_newer_revision_of_a_known_family(tmp_path: Path) -> None:
    table = bytearray((FIXTURES / "mi100_arcturus_v1_3_a.bin").read_bytes())
    table[2], table[3] = 2, 9  # a content revision newer than any known v2: decoded as v2.4, with its warning
    path = tmp_path / "v2_9.bin"
    path.write_bytes(bytes(table))
    proc = _cli(str(path))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["format_revision"], out["content_revision"]) == (2, 9) and len(out["warnings"]) == 1
