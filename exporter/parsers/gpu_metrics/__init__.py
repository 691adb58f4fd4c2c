"""amdgpu's binary ``gpu_metrics`` sysfs file: every struct revision the kernel has defined (v1.0-v1.9, v2.0-v2.4,
v3.0), decoded by kernel field name, plus helpers that put the values in SI units.

``layouts`` holds the fixed structs, ``attributes`` the self-describing v1.9 table, ``throttle`` the
``indep_throttle_status`` bit names, ``decode`` the entry point and ``normalize`` the unit helpers.
"""

from __future__ import annotations

from exporter.parsers.gpu_metrics.capture import parse_gpu_metrics_capture
from exporter.parsers.gpu_metrics.decode import parse_gpu_metrics
from exporter.parsers.gpu_metrics.normalize import (
    ENERGY_UNIT_JOULES,
    MI100_ENERGY_UNIT_JOULES,
    ROCM_SMI_ENERGY_UNIT_JOULES,
    XGMI_KILOBYTE,
    average_clocks_hz,
    current_clocks_hz,
    energy_joules,
    pcie,
    socket_power_watts,
    temperatures_celsius,
    xcp_stats,
    xgmi,
)

__all__ = [
    "ENERGY_UNIT_JOULES",
    "MI100_ENERGY_UNIT_JOULES",
    "ROCM_SMI_ENERGY_UNIT_JOULES",
    "XGMI_KILOBYTE",
    "average_clocks_hz",
    "current_clocks_hz",
    "energy_joules",
    "parse_gpu_metrics",
    "parse_gpu_metrics_capture",
    "pcie",
    "socket_power_watts",
    "temperatures_celsius",
    "xcp_stats",
    "xgmi",
]
