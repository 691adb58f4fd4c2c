"""Every metric name, HELP string and label tuple, in one place (contract section 4).

Values served from a snapshot that a scheduled source refreshed say "cached" in HELP: a scrape never
runs a tool, it reads the last good snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: Literal["gauge", "counter", "summary"] = "gauge"


CACHED = " (cached: read from the last successful run of its source)"

# GPU state -------------------------------------------------------------------------------------------
GPU_INFO = Spec(
    "rocm_gpu_info",
    "GPU identity, 1 per GPU present" + CACHED,
    ("pci_bus", "card", "render_node", "kfd_node", "gpu_id", "unique_id", "model", "device_id", "vbios", "driver"),
)
GPU_VRAM_TOTAL = Spec("rocm_gpu_vram_total_bytes", "VRAM size in bytes" + CACHED, ("pci_bus",))
GPU_VRAM_USED = Spec("rocm_gpu_vram_used_bytes", "VRAM in use in bytes" + CACHED, ("pci_bus",))
GPU_BUSY = Spec("rocm_gpu_busy_ratio", "GPU busy ratio 0..1" + CACHED, ("pci_bus",))
GPU_NUMA = Spec("rocm_gpu_numa_node", "NUMA node of the GPU, -1 when none" + CACHED, ("pci_bus",))
GPU_TEMPERATURE = Spec(
    "rocm_gpu_temperature_celsius", "GPU temperature per hwmon sensor" + CACHED, ("pci_bus", "sensor")
)
GPU_POWER = Spec("rocm_gpu_power_watts", "GPU power draw in watts" + CACHED, ("pci_bus",))
GPU_PCIE_SPEED = Spec(
    "rocm_gpu_pcie_link_speed_gigatransfers_per_second", "Current PCIe link speed" + CACHED, ("pci_bus",)
)
GPU_PCIE_WIDTH = Spec("rocm_gpu_pcie_link_width_lanes", "Current PCIe link width" + CACHED, ("pci_bus",))
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
    "else the level pp_dpm_<domain> marks current" + CACHED,
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
    "rocm_gpu_memory_busy_ratio", "Memory controller busy ratio 0..1 (mem_busy_percent)" + CACHED, ("pci_bus",)
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
    "PCIe replays (retransmissions after a NAK or timeout) the GPU counted (pcie_replay_count)" + CACHED,
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
    "too_large, unparsable, or out_of_range (a reading outside the physical range of its quantity, rejected)" + CACHED,
    ("pci_bus", "file", "error"),
    "counter",
)
GPU_LINK_INFO = Spec(
    "rocm_gpu_link_info", "1 per linked GPU pair, both directions" + CACHED, ("pci_bus", "peer_pci_bus", "link_type")
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
SOURCE_STALE = Spec(
    "rocm_watchdog_source_stale",
    "1 when the source's last success is too old and its values are no longer exported",
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
