"""Every metric name, HELP string and label tuple, in one place (contract section 4).

Values served from a snapshot that a scheduled source refreshed say "cached" in HELP: a scrape never
runs a tool, it reads the last good snapshot.

Every family belongs to one metric group (``Spec.group``), the unit ``--metrics.disable`` and
``--metrics.enable-only`` switch (``exporter.metrics.groups`` describes each group). A family declared without
``group=`` takes the group of the first rule of ``GROUP_RULES`` its name matches; tests/test_metric_groups.py
fails for a family no rule places.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

# Name -> group, first match wins (re.match: from the start of the name). "core" is never switched off: the
# exporter's health, each GPU's sysfs-read health, and the device-watchdog conditions and baseline the alerts read.
GROUP_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), group)
    for pattern, group in (
        (r"rocm_watchdog_|rocm_device_condition|rocm_baseline_|rocm_gpu_sysfs_", "core"),
        (r"rocm_gpus$|rocm_gpu_(info|numa_node|partition_mode_info)$", "gpu.identity"),
        (r"rocm_gpu_(ras_|vram_bad_pages)", "gpu.ras"),
        (r"rocm_gpu_(vram|gtt|visible_vram)_", "gpu.memory"),
        (r"rocm_gpu_(power|energy)", "gpu.power"),
        (r"rocm_gpu_clock", "gpu.clocks"),
        (r"rocm_gpu_(temperature|fan)", "gpu.thermal"),
        (r"rocm_gpu_voltage", "gpu.voltage"),
        (r"rocm_gpu_pcie_", "gpu.pcie"),
        (r"rocm_gpu_xgmi_", "gpu.xgmi"),
        (r"rocm_gpu_\w*(throttl|violation|residency)", "gpu.throttle"),
        (r"rocm_gpu_\w*(busy|activity)", "gpu.activity"),
        (r"rocm_gpu_link_(info|weight|hops)$", "gpu.topology.pairs"),
        (r"rocm_gpu_link_|rocm_gpu_xgmi_hive_", "gpu.topology"),
        (r"rocm_gpu_pod_info$|rocm_process_(slurm|pod)_", "attribution"),
        (r"rocm_process_gpu_", "processes.gpu"),
        (r"rocm_processes$|rocm_process_", "processes"),
        (r"rocm_device_node_|rocm_render_node_|rocm_card_|rocm_gpu_missing$|rocm_group_gid_drift$", "devices"),
        (r"rocm_kernel_", "kernel"),
    )
)


def group_of(name: str) -> str:
    """The group of the first rule of ``GROUP_RULES`` ``name`` matches; "" when none does."""
    return next((group for pattern, group in GROUP_RULES if pattern.match(name)), "")


class Spec(msgspec.Struct, frozen=True):
    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: Literal["gauge", "counter", "summary"] = "gauge"
    group: str = ""  # the metric group (--metrics.disable); "" takes it from the name (GROUP_RULES)

    def __post_init__(self) -> None:
        if not self.group:  # a frozen Struct is set once here, before anything can see it
            msgspec.structs.force_setattr(self, "group", group_of(self.name))


CACHED = " (cached: read from the last successful run of its source)"

# GPU state -------------------------------------------------------------------------------------------
GPU_INFO = Spec(
    "rocm_gpu_info",
    "GPU identity, 1 per GPU present" + CACHED,
    ("pci_bus", "card", "render_node", "kfd_node", "gpu_id", "unique_id", "model", "device_id", "vbios", "driver"),
)
GPU_VRAM_TOTAL = Spec("rocm_gpu_vram_total_bytes", "VRAM size in bytes" + CACHED, ("pci_bus",))
GPU_VRAM_USED = Spec("rocm_gpu_vram_used_bytes", "VRAM in use in bytes" + CACHED, ("pci_bus",))
GPU_BUSY = Spec(
    "rocm_gpu_busy_ratio",
    "GPU busy ratio 0..1 (gpu_busy_percent; without it, gpu_metrics: a partition's or GPU's mean XCC gfx_busy_inst, "
    "else average_gfx_activity)" + CACHED,
    ("pci_bus",),
)
GPU_NUMA = Spec("rocm_gpu_numa_node", "NUMA node of the GPU, -1 when none" + CACHED, ("pci_bus",))
GPU_TEMPERATURE = Spec(
    "rocm_gpu_temperature_celsius",
    "GPU temperature per hwmon sensor (edge, junction, mem); sensors hwmon lacks from gpu_metrics (junction is its "
    "temperature_hotspot; vrgfx, vrsoc, vrmem, hbm0..3; an APU's soc, skin)" + CACHED,
    ("pci_bus", "sensor"),
)
GPU_POWER = Spec(
    "rocm_gpu_power_watts",
    "GPU power draw in watts (hwmon power1_average or power1_input, else gpu_metrics socket power)" + CACHED,
    ("pci_bus",),
)
GPU_PCIE_SPEED = Spec(
    "rocm_gpu_pcie_link_speed_gigatransfers_per_second",
    "Current PCIe link speed (current_link_speed, else gpu_metrics pcie_link_speed)" + CACHED,
    ("pci_bus",),
)
GPU_PCIE_WIDTH = Spec(
    "rocm_gpu_pcie_link_width_lanes",
    "Current PCIe link width (current_link_width, else gpu_metrics pcie_link_width)" + CACHED,
    ("pci_bus",),
)
GPU_RAS_CORRECTABLE = Spec(
    "rocm_gpu_ras_correctable_errors_total",
    "RAS correctable errors since driver load, per block" + CACHED,
    ("pci_bus", "block"),
    "counter",
)
GPU_RAS_UNCORRECTABLE = Spec(
    "rocm_gpu_ras_uncorrectable_errors_total",
    "RAS uncorrectable errors since driver load, per block" + CACHED,
    ("pci_bus", "block"),
    "counter",
)
GPU_RAS_DEFERRED = Spec(
    "rocm_gpu_ras_deferred_errors_total",
    "RAS deferred errors since driver load, per block" + CACHED,
    ("pci_bus", "block"),
    "counter",
)
# sysfs telemetry of the PCI function (issue 10): a series only where the driver provides the file
GPU_CLOCK = Spec(
    "rocm_gpu_clock_hertz",
    "Current clock per domain (sclk, mclk, fclk, socclk, dcefclk, vclk, dclk, vclk1, dclk1): hwmon freqN_input, "
    "else the level pp_dpm_<domain> marks current, else gpu_metrics current_<clk> (its first instance)" + CACHED,
    ("pci_bus", "domain"),
)
GPU_POWER_CAP = Spec("rocm_gpu_power_cap_watts", "Power cap in watts (hwmon power1_cap)" + CACHED, ("pci_bus",))
GPU_POWER_CAP_MAX = Spec(
    "rocm_gpu_power_cap_max_watts", "Highest power cap that can be set (hwmon power1_cap_max)" + CACHED, ("pci_bus",)
)
GPU_POWER_CAP_MIN = Spec(
    "rocm_gpu_power_cap_min_watts", "Lowest power cap that can be set (hwmon power1_cap_min)" + CACHED, ("pci_bus",)
)
GPU_FAN_SPEED = Spec(
    "rocm_gpu_fan_speed_rpm", "Fan speed in revolutions per minute (hwmon fan1_input)" + CACHED, ("pci_bus",)
)
GPU_FAN_PWM = Spec("rocm_gpu_fan_pwm_ratio", "Fan PWM duty cycle 0..1 (hwmon pwm1 / 255)" + CACHED, ("pci_bus",))
GPU_MEMORY_BUSY = Spec(
    "rocm_gpu_memory_busy_ratio",
    "Memory controller busy ratio 0..1 (mem_busy_percent, else gpu_metrics average_umc_activity)" + CACHED,
    ("pci_bus",),
)
GPU_GTT_TOTAL = Spec(
    "rocm_gpu_gtt_total_bytes", "GTT (system memory mapped for the GPU) size in bytes" + CACHED, ("pci_bus",)
)
GPU_GTT_USED = Spec("rocm_gpu_gtt_used_bytes", "GTT in use in bytes" + CACHED, ("pci_bus",))
GPU_VISIBLE_VRAM_TOTAL = Spec(
    "rocm_gpu_visible_vram_total_bytes",
    "CPU-visible VRAM (the part the PCI BAR maps) size in bytes (mem_info_vis_vram_total)" + CACHED,
    ("pci_bus",),
)
GPU_VISIBLE_VRAM_USED = Spec(
    "rocm_gpu_visible_vram_used_bytes",
    "CPU-visible VRAM in use in bytes (mem_info_vis_vram_used)" + CACHED,
    ("pci_bus",),
)
GPU_PCIE_REPLAYS = Spec(
    "rocm_gpu_pcie_replays_total",
    "PCIe replays (retransmissions after a NAK or timeout) the GPU counted (pcie_replay_count, else gpu_metrics "
    "pcie_replay_count_acc)" + CACHED,
    ("pci_bus",),
    "counter",
)
GPU_VOLTAGE = Spec(
    "rocm_gpu_voltage_volts",
    "Voltage per hwmon rail, sensor from in*_label (vddgfx, vddnb, vddboard)" + CACHED,
    ("pci_bus", "sensor"),
)
GPU_VRAM_BAD_PAGES = Spec(
    "rocm_gpu_vram_bad_pages",
    "VRAM pages in the driver's bad-page list by status: retired (reserved, never used again), pending (reserved "
    "at the next chance), failed (could not be reserved) (ras/gpu_vram_bad_pages)" + CACHED,
    ("pci_bus", "status"),
)
GPU_PARTITION_MODE = Spec(
    "rocm_gpu_partition_mode_info",
    "Current compute (SPX..CPX) and memory (NPS1..NPS8) partition mode of a partitionable GPU, 1; on its PCI "
    "function only, not on each partition (current_compute_partition, current_memory_partition)" + CACHED,
    ("pci_bus", "compute_partition", "memory_partition"),
)
# The binary gpu_metrics table of the PCI function (issue 10): a series only for what the table's revision has
# and does not mark "not available"; readings sysfs also gives fill the families above only where sysfs has none.
GM = " (gpu_metrics"
GPU_THROTTLED = Spec(
    "rocm_gpu_throttled",
    "1 when the SMU reports any throttler active, 0 when none" + GM + " indep_throttle_status, else throttle_status); "
    "absent when the table has no throttle status (MI300 v1.6+: see rocm_gpu_throttle_residency_ticks_total)" + CACHED,
    ("pci_bus",),
)
GPU_THROTTLE_ACTIVE = Spec(
    "rocm_gpu_throttle_active",
    "1 per active throttler, reason the kernel's SMU_THROTTLER_<reason>_BIT name (PPT0..3, SPL, FPPT, SPPT, TDC_GFX, "
    "TDC_SOC, TDC_MEM, EDC_GFX, TEMP_EDGE, TEMP_HOTSPOT, TEMP_MEM, VRHOT0, PROCHOT_GFX, PPM, FIT...)"
    + GM
    + " indep_throttle_status: v1.3, APU v2.2+); inactive reasons have no series"
    + CACHED,
    ("pci_bus", "reason"),
)
GPU_ACCUMULATION_TICKS = Spec(
    "rocm_gpu_accumulation_ticks_total",
    "Ticks of the SMU's accumulation counter" + GM + " accumulation_counter, v1.6+), the time base of the residency "
    "and violation tick counters; the table gives no tick period" + CACHED,
    ("pci_bus",),
    "counter",
    group="gpu.throttle",
)
GPU_THROTTLE_RESIDENCY = Spec(
    "rocm_gpu_throttle_residency_ticks_total",
    "Accumulation ticks during which the throttler was active" + GM + " <reason>_residency_acc, v1.6+: prochot, ppt, "
    "socket_thm, vr_thm, hbm_thm; APU v3.0 throttle_residency_<reason>: prochot, spl, fppt, sppt, thm_core, thm_gfx, "
    "thm_soc); the fraction of time throttled is its increase over that of rocm_gpu_accumulation_ticks_total" + CACHED,
    ("pci_bus", "reason"),
    "counter",
)
GPU_ENGINE_ACTIVITY = Spec(
    "rocm_gpu_engine_activity_ratio",
    "Busy ratio 0..1 of a media engine of the GPU or partition: mm (the multimedia block, average_mm_activity), vcn "
    "(video codec) and jpeg, each the mean over the instances the table reports" + GM + " vcn_activity, "
    "jpeg_activity; a partition's from its XCP's vcn_busy, jpeg_busy)" + CACHED,
    ("pci_bus", "engine"),
)
GPU_XCC_BUSY = Spec(
    "rocm_gpu_xcc_busy_ratio",
    "Busy ratio 0..1 of each compute die (XCC) of the GPU or partition, xcc its index within the partition"
    + GM
    + " xcp_stats gfx_busy_inst, v1.6+)"
    + CACHED,
    ("pci_bus", "xcc"),
)
GPU_XCC_VIOLATION = Spec(
    "rocm_gpu_xcc_violation_ticks_total",
    "Accumulation ticks the XCCs of the GPU spent in the condition, summed over its XCCs, those of all its "
    "partitions included (the power and thermal limits are the socket's)"
    + GM
    + " xcp_stats <counter>_acc: gfx_below_host_limit (v1.7), gfx_below_host_limit_ppt, gfx_below_host_limit_thm, "
    "gfx_below_host_limit_total, gfx_low_utilization (v1.8)); the fraction of time is its increase over that of "
    "rocm_gpu_accumulation_ticks_total times the GPU's XCC count" + CACHED,
    ("pci_bus", "counter"),
    "counter",
)
GPU_XGMI_WIDTH = Spec(
    "rocm_gpu_xgmi_link_width_lanes", "XGMI link width" + GM + " xgmi_link_width)" + CACHED, ("pci_bus",)
)
GPU_XGMI_SPEED = Spec(
    "rocm_gpu_xgmi_link_speed_bytes_per_second",
    "XGMI link speed in bytes per second" + GM + " xgmi_link_speed, Gbps / 8)" + CACHED,
    ("pci_bus",),
)
GPU_XGMI_ACTIVE = Spec(
    "rocm_gpu_xgmi_links_active",
    "XGMI links of the GPU that are active" + GM + " xgmi_link_status, v1.7+; links the table marks not available "
    "are not counted)" + CACHED,
    ("pci_bus",),
)
GPU_XGMI_INACTIVE = Spec(
    "rocm_gpu_xgmi_link_inactive",
    "1 per XGMI link the table reports inactive, absent while it is active" + GM + " xgmi_link_status, v1.7+)" + CACHED,
    ("pci_bus", "link"),
)
GPU_XGMI_READ = Spec(
    "rocm_gpu_xgmi_read_bytes_total",
    "Bytes read over the XGMI link since the SMU's counter started" + GM + " xgmi_read_data_acc, KB taken as 1024 "
    "bytes)" + CACHED,
    ("pci_bus", "link"),
    "counter",
)
GPU_XGMI_WRITE = Spec(
    "rocm_gpu_xgmi_write_bytes_total",
    "Bytes written over the XGMI link since the SMU's counter started" + GM + " xgmi_write_data_acc, KB taken as "
    "1024 bytes)" + CACHED,
    ("pci_bus", "link"),
    "counter",
)
GPU_PCIE_BANDWIDTH = Spec(
    "rocm_gpu_pcie_bandwidth_bytes_per_second",
    "PCIe bandwidth the SMU measured last, bytes per second" + GM + " pcie_bandwidth_inst, GB/s)" + CACHED,
    ("pci_bus",),
)
GPU_PCIE_REPLAY_ROLLOVERS = Spec(
    "rocm_gpu_pcie_replay_rollovers_total",
    "PCIe replay number rollovers" + GM + " pcie_replay_rover_count_acc, v1.4+)" + CACHED,
    ("pci_bus",),
    "counter",
)
GPU_PCIE_RECOVERIES = Spec(
    "rocm_gpu_pcie_recoveries_total",
    "PCIe link transitions from L0 to recovery (link retraining)" + GM + " pcie_l0_to_recov_count_acc, v1.4+)" + CACHED,
    ("pci_bus",),
    "counter",
)
GPU_PCIE_NAKS_SENT = Spec(
    "rocm_gpu_pcie_naks_sent_total",
    "PCIe NAKs the GPU sent" + GM + " pcie_nak_sent_count_acc, v1.5+)" + CACHED,
    ("pci_bus",),
    "counter",
)
GPU_PCIE_NAKS_RECEIVED = Spec(
    "rocm_gpu_pcie_naks_received_total",
    "PCIe NAKs the GPU received" + GM + " pcie_nak_rcvd_count_acc, v1.5+)" + CACHED,
    ("pci_bus",),
    "counter",
)
GPU_PCIE_OTHER_END_RECOVERIES = Spec(
    "rocm_gpu_pcie_other_end_recoveries_total",
    "PCIe link recoveries the link partner started" + GM + " pcie_lc_perf_other_end_recovery, v1.6+)" + CACHED,
    ("pci_bus",),
    "counter",
)
GPU_ENERGY = Spec(
    "rocm_gpu_energy_joules_total",
    "Energy the GPU used since its SMU's counter started" + GM + " energy_accumulator times the chip's unit: 1 J "
    "on Arcturus/MI100, 2^-16 J on every other chip; docs/gpu-metrics.md); restarts with the firmware" + CACHED,
    ("pci_bus",),
    "counter",
)
# A sick GPU's sysfs files (issue 11): its reads run under a deadline, and a failed read is counted, not silent.
GPU_SYSFS_READABLE = Spec(
    "rocm_gpu_sysfs_readable",
    "1 when the GPU's sysfs files were read in the last run of the sysfs source (reason empty); 0 with reason "
    "timeout (not read within the deadline, or an earlier read is still blocked, e.g. by a hung GPU: the GPU's "
    "state series are then absent) or error (every file read failed)" + CACHED,
    ("pci_bus", "reason"),
)
GPU_SYSFS_READ_ERRORS = Spec(
    "rocm_gpu_sysfs_read_errors_total",
    "Failed reads of a sysfs file of the GPU since the exporter started; file relative to the GPU's PCI device "
    "directory; error: the errno name (EIO, EACCES, EISDIR, ENOENT for a dangling link...), not_regular_file, "
    "too_large, unparsable, out_of_range (a reading outside the physical range of its quantity, rejected), or "
    "partial (a gpu_metrics table decoded in part: truncated, of a newer or inconsistent revision)" + CACHED,
    ("pci_bus", "file", "error"),
    "counter",
)
GPU_LINK_PEERS = Spec(
    "rocm_gpu_link_peers",
    "GPUs this GPU is linked to by the link type, from the tools' topology (XGMI: its hive's other GPUs)" + CACHED,
    ("pci_bus", "link_type"),
)
GPU_XGMI_HIVE = Spec(
    "rocm_gpu_xgmi_hive_info",
    "1 per GPU in an XGMI hive: hive is the lowest PCI address of the GPUs the tools' topology links to it by XGMI, "
    "itself included (count by (hive) gives the hive sizes)" + CACHED,
    ("pci_bus", "hive"),
)
GPU_LINK_INFO = Spec(
    "rocm_gpu_link_info",
    "1 per linked GPU pair, both directions (--metrics.enable=gpu.topology.pairs)" + CACHED,
    ("pci_bus", "peer_pci_bus", "link_type"),
)
GPU_LINK_WEIGHT = Spec("rocm_gpu_link_weight", "Topology link weight" + CACHED, ("pci_bus", "peer_pci_bus"))
GPU_LINK_HOPS = Spec("rocm_gpu_link_hops", "Topology hops between GPUs" + CACHED, ("pci_bus", "peer_pci_bus"))
PROCESSES = Spec("rocm_processes", "KFD processes on the node" + CACHED)
PROCESS_VRAM = Spec(
    "rocm_process_vram_used_bytes",
    "VRAM used by a KFD process, the N largest" + CACHED,
    ("pid", "process_name"),
)
PROCESS_INFO = Spec(
    "rocm_process_info",
    "Who runs a KFD process of rocm_process_vram_used_bytes (join on pid): owner, container, pod; 1" + CACHED,
    ("pid", "process_name", "user", "container_id", "pod_uid"),
)
# Per-GPU process VRAM and workload attribution (issue 10): for the processes of rocm_process_vram_used_bytes
# only (the --processes.top-n bound), each family only when it has series.
PROCESS_GPU_VRAM = Spec(
    "rocm_process_gpu_vram_used_bytes",
    "VRAM a KFD process of rocm_process_vram_used_bytes holds on one GPU (KFD vram_<gpu_id>, else amd-smi); "
    "GPUs it holds none on have no series" + CACHED,
    ("pid", "pci_bus"),
)
PROCESS_SLURM_JOB = Spec(
    "rocm_process_slurm_job_info",
    "The Slurm job and step (0, batch, extern...) a KFD process of rocm_process_vram_used_bytes runs in, from "
    "its cgroup (join on pid); 1" + CACHED,
    ("pid", "job_id", "step"),
)
PROCESS_POD = Spec(
    "rocm_process_pod_info",
    "The Kubernetes pod and container of a KFD process of rocm_process_vram_used_bytes: the one container the "
    "kubelet allocated the process's GPUs to (--collector.kubernetes; join on pid); 1" + CACHED,
    ("pid", "namespace", "pod", "container"),
)
GPU_POD = Spec(
    "rocm_gpu_pod_info",
    "A Kubernetes container the kubelet allocated the GPU or partition to (pod-resources API, "
    "--collector.kubernetes; join on pci_bus); 1" + CACHED,
    ("pci_bus", "namespace", "pod", "container"),
)
GPUS = Spec("rocm_gpus", "GPUs present now" + CACHED)

# Device identity and drift ---------------------------------------------------------------------------
DEVICE_NODE_INFO = Spec(
    "rocm_device_node_info",
    "1 per GPU device node, with its mode, owner and numbers; pci_bus: the GPU it belongs to" + CACHED,
    ("path", "mode", "owner", "group", "uid", "gid", "major", "minor", "pci_bus"),
)
DEVICE_NODE_PRESENT = Spec(
    "rocm_device_node_present",
    "1 when the node exists; for nodes present or in the baseline" + CACHED,
    ("path", "pci_bus"),
)
DEVICE_NODE_ACCESSIBLE = Spec(
    "rocm_device_node_accessible",
    "1 when this process can open the node read-write" + CACHED,
    ("path", "pci_bus"),
)
DEVICE_NODE_OPEN_OK = Spec(
    "rocm_device_node_open_ok",
    "1 when this process opened the node read-write (the kernel's answer: device cgroup, nodev, security modules "
    "and driver included); error: the errno name when it did not, or timeout. Only with --devices.probe, for "
    "/dev/kfd and the render nodes KFD lists" + CACHED,
    ("path", "error", "pci_bus"),
)
DEVICE_NODE_DRIFT = Spec(
    "rocm_device_node_drift",
    "1 when the attribute differs from the baseline" + CACHED,
    ("path", "attribute", "pci_bus"),
)
DEVICE_NODE_POLICY = Spec(
    "rocm_device_node_policy_violation",
    "1 when the node breaks the named rule" + CACHED,
    ("path", "rule", "pci_bus"),
)
RENDER_NODE_MINOR = Spec("rocm_render_node_minor", "Render node number of the GPU now" + CACHED, ("pci_bus",))
CARD_MINOR = Spec("rocm_card_minor", "Card node number of the GPU now" + CACHED, ("pci_bus",))
RENDER_NODE_RENUMBERED = Spec(
    "rocm_render_node_renumbered", "1 when the render node differs from the baseline" + CACHED, ("pci_bus",)
)
GPU_MISSING = Spec("rocm_gpu_missing", "1 when a GPU of the baseline is gone" + CACHED, ("pci_bus",))
BASELINE_GPUS = Spec("rocm_baseline_gpus", "GPUs in the baseline")
GROUP_GID_DRIFT = Spec(
    "rocm_group_gid_drift", "1 when the host's gid for the group changed since the baseline" + CACHED, ("group",)
)

# Health verdict (issue 22: exporter/watchdog/health.py, its reasons in exporter/watchdog/health_reasons.py) ----
GPU_HEALTH = Spec(
    "rocm_gpu_health",
    "1 per GPU and partition: its health verdict now (state: healthy, unhealthy, unknown; unknown never counts as "
    "unhealthy); from the devices conditions, the kernel log's critical events within --health.event-window and "
    "the sources' freshness" + CACHED,
    ("pci_bus", "state"),
    group="core",
)
GPU_HEALTH_REASON = Spec(
    "rocm_gpu_health_reason",
    "1 per reason while the GPU is unhealthy, or unknown through a kernel event that named no GPU "
    "(reason node_kernel_event)" + CACHED,
    ("pci_bus", "reason"),
    group="core",
)
NODE_GPUS_UNHEALTHY = Spec(
    "rocm_node_gpus_unhealthy",
    "GPUs and partitions whose rocm_gpu_health state is unhealthy" + CACHED,
    group="core",
)

# Kernel log ------------------------------------------------------------------------------------------
KERNEL_EVENTS = Spec(
    "rocm_kernel_events_total", "amdgpu/amdkfd kernel-log events per GPU and class", ("pci_bus", "class"), "counter"
)
KERNEL_EVENT_LAST = Spec(
    "rocm_kernel_event_last_timestamp_seconds",
    "Wall-clock time of the last kernel-log event per GPU and class",
    ("pci_bus", "class"),
)
KERNEL_PCIE_AER = Spec(
    "rocm_kernel_pcie_aer_errors_total",
    "PCIe AER errors the kernel log reports for the GPU or a port directly above it, by AER severity "
    "(corrected, uncorrected_nonfatal, uncorrected_fatal); the pcie_aer events of rocm_kernel_events_total split",
    ("pci_bus", "aer_severity"),
    "counter",
)
KERNEL_RECORDS_LOST = Spec(
    "rocm_kernel_log_records_lost_total", "kmsg records overwritten before they were read", (), "counter"
)

# The exporter itself ---------------------------------------------------------------------------------
SOURCE_UP = Spec("rocm_watchdog_source_up", "1 when the last run of the source succeeded", ("source",))
SOURCE_DURATION = Spec("rocm_watchdog_source_duration_seconds", "Duration of the last run of the source", ("source",))
SOURCE_LAST_SUCCESS = Spec(
    "rocm_watchdog_source_last_success_timestamp_seconds",
    "Unix time of the last successful run of the source",
    ("source",),
)
SOURCE_FAILURES = Spec("rocm_watchdog_source_failures_total", "Failed runs of the source", ("source",), "counter")
SOURCE_ABSENT = Spec(
    "rocm_watchdog_source_absent",
    "1 while nothing the source reads is installed (smi: --smi.backend=auto with neither amd-smi nor rocm-smi; "
    "GPUs are read from sysfs only): a state, not a failure, so the tools have no up series",
    ("source",),
)
SOURCE_STALE = Spec(
    "rocm_watchdog_source_stale",
    "1 when the source's last success is too old and its values are no longer exported",
    ("source",),
)
SOURCE_PENDING = Spec(
    "rocm_watchdog_source_pending",
    "1 while the source's first run has not finished (its up is 0 meanwhile, not a failure; /readyz answers 503)",
    ("source",),
)
BUILD_INFO = Spec(
    "rocm_watchdog_build_info",
    "Build information, 1: version, git revision and branch of the build (unknown when not built from git), Python "
    "version",
    ("version", "revision", "branch", "pythonversion"),
)
# serve's own cost (on by default, off with --web.disable-exporter-metrics, like node_exporter's promhttp_* and
# process_* series; the process_* and python_* families come from prometheus_client's collectors)
SCRAPE_DURATION = Spec(
    "rocm_watchdog_scrape_duration_seconds",
    "Time taken to answer the scrapes of the telemetry path before this one (building the body from the cache)",
    (),
    "summary",
)
# The HTTP server's own view of its clients (issue 11): always exported by serve, from zero, built per scrape.
HTTP_CONNECTIONS = Spec(
    "rocm_watchdog_http_connections",
    "Connections open to the HTTP server (TLS handshake, request head, keep-alive idle or being answered); it holds "
    "at most 512, half of them per client address",
)
HTTP_CONNECTIONS_DROPPED = Spec(
    "rocm_watchdog_http_connections_dropped_total",
    "Connections the HTTP server closed or refused before the client was done, by reason: header_timeout (TLS "
    "handshake and request head not in within 10 s), tls_handshake_failed, bad_request, idle_timeout (keep-alive), "
    "write_timeout, connection_reset (by the client, mid-request), evicted_idle, evicted_head, evicted_write "
    "(displaced for a newcomer when full), refused_address_share, refused_full",
    ("reason",),
    "counter",
)
HTTP_REQUESTS = Spec(
    "rocm_watchdog_http_requests_total",
    "Requests the HTTP server answered, by status code, its own refusals included (401, 429, 503)",
    ("code",),
    "counter",
)
HTTP_AUTH_FAILURES = Spec(
    "rocm_watchdog_http_auth_failures_total",
    "Requests refused by basic auth (401): no, malformed or wrong credentials; an address past its failure limit "
    "is answered 429 without a check, counted in rocm_watchdog_http_requests_total",
    (),
    "counter",
)
HTTP_AUTH_BCRYPT_CHECKS = Spec(
    "rocm_watchdog_http_auth_bcrypt_checks_total",
    "Basic-auth credentials checked with bcrypt (a user's hash, or a dummy of at most cost 12 for an unknown user): "
    "a pair verified before is answered from memory without one, an address past its failure limit gets 429 "
    "without one",
    (),
    "counter",
)
HOST_INFO = Spec(
    "rocm_watchdog_host_info",
    "The host this exporter watches ($NODE_NAME or the hostname, --host.name), 1: join on instance to name the host",
    ("nodename",),
)
# Direct push to Alertmanager (--alertmanager.url; only when it is set). alertmanager: scheme://host:port of the URL.
ALERTMANAGER_PUSHES = Spec(
    "rocm_watchdog_alertmanager_pushes_total",
    "POSTs of alerts to the Alertmanager (--alertmanager.url), by result (success, failure); retries count too",
    ("alertmanager", "result"),
    "counter",
)
ALERTMANAGER_LAST_SUCCESS = Spec(
    "rocm_watchdog_alertmanager_last_success_timestamp_seconds",
    "Unix time of the last successful POST to the Alertmanager (only moves while there are alerts to send)",
    ("alertmanager",),
)
ALERTMANAGER_FIRING = Spec(
    "rocm_watchdog_alertmanager_alerts_firing",
    "Alerts the exporter keeps firing in Alertmanager: active root device-watchdog conditions that alert",
)
STATE_FILE_UNSAVED = Spec(
    "rocm_watchdog_state_file_unsaved",
    "1 when the last write of a state file failed: its state lives in memory only until a write succeeds",
    ("file",),
)
STATE_FILE_CORRUPT = Spec(
    "rocm_watchdog_state_file_corrupt",
    "1 when a state file was read but is not valid: it was moved aside to <file>.corrupt-<time> (left in place "
    "when the state dir refuses the move) and its state started over; for baseline.json it stays 1 until "
    "`rocm-watchdog baseline accept`, for other files until the exporter restarts",
    ("file",),
)
STATE_FILE_UNREADABLE = Spec(
    "rocm_watchdog_state_file_unreadable",
    "1 while a state file exists but cannot be read (permission denied, I/O error, a directory in its place): "
    "nothing was moved or replaced; read again every collection",
    ("file",),
)
DRIFT_EVALUATED = Spec(
    "rocm_watchdog_drift_evaluated",
    "1 when the last devices collection compared the node with a baseline; 0 when it had none it could use (not "
    "written yet, unreadable or corrupt: see rocm_watchdog_state_file_*), so drift was not evaluated, only the "
    "rules that need no baseline" + CACHED,
)

# Device watchdog conditions (issue 3 part B: exporter/watchdog/drift.py) ---------------------------------
# Every drift scenario is one condition kind (drift.KINDS); the contract's drift metrics above cover the
# node and GPU ones, this gauge covers all of them with one series per ACTIVE condition (a series vanishes
# when its condition clears, so `rocm_device_condition == 1` alerts resolve by themselves).
DEVICE_CONDITION = Spec(
    "rocm_device_condition",
    "1 per active device-watchdog condition (drift since the baseline or a broken rule); cause: the kind of the "
    "root cause for a consequence (a GPU renumbered because another is missing), empty for a root cause" + CACHED,
    ("condition", "subject", "severity", "pci_bus", "cause"),
)
DEVICE_CONDITION_SINCE = Spec(
    "rocm_device_condition_since_timestamp_seconds",
    "Unix time the active device-watchdog condition started" + CACHED,
    ("condition", "subject", "pci_bus", "cause"),
)
BASELINE_TIMESTAMP = Spec("rocm_baseline_timestamp_seconds", "Unix time the baseline was accepted")
