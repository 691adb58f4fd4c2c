"""GPU identity and state read from sysfs (issue 3). Keyed by PCI address, never by card/render number.

Fields may be added; the ones here are what the device watchdog and the collector rely on.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class DrmMinor(msgspec.Struct, frozen=True):
    """One DRM minor of a device as sysfs shows it (``class/drm/<name>``)."""

    name: str  # "card1", "renderD128"
    kind: Literal["card", "render"]
    minor: int
    dev: tuple[int, int] | None = None  # major:minor from sysfs ``dev``; None when unreadable
    parent: str | None = None  # what the minor's ``device`` link resolves to: a BDF or "amdgpu_xcp.3"


class RasCount(msgspec.Struct, frozen=True):
    block: str  # "umc", "gfx", "sdma", ...
    correctable: int | None = None
    uncorrectable: int | None = None
    deferred: int | None = None


class VramBadPages(msgspec.Struct, frozen=True):
    """``ras/gpu_vram_bad_pages``: the GPU pages the driver has retired, by status (one line per page)."""

    retired: int = 0  # "R": reserved, no longer handed out
    pending: int = 0  # "P": marked bad, reserved at the next opportunity
    failed: int = 0  # "F": could not be reserved


class GpuTelemetry(msgspec.Struct, frozen=True):
    """Per-interval readings of one amdgpu PCI function from its sysfs and hwmon files (issue 10).

    Each field is None (or empty) when its file is absent, unreadable or implausible: a Radeon has fewer
    files than an MI300X, and a missing file is never a 0. Partitions (``amdgpu_xcp`` platform devices)
    have no such files of their own and keep the empty record.
    """

    clocks_hertz: tuple[tuple[str, float], ...] = ()  # (domain: sclk, mclk, fclk, ..., hertz), current clock
    power_cap_watts: float | None = None  # hwmon power1_cap
    power_cap_max_watts: float | None = None  # hwmon power1_cap_max
    power_cap_min_watts: float | None = None  # hwmon power1_cap_min
    fan_speed_rpm: int | None = None  # hwmon fan1_input
    fan_pwm_ratio: float | None = None  # hwmon pwm1, 0..255 -> 0..1
    voltages_volts: tuple[tuple[str, float], ...] = ()  # (in*_label: vddgfx, vddnb, vddboard; volts)
    memory_busy_ratio: float | None = None  # mem_busy_percent
    gtt_total_bytes: int | None = None
    gtt_used_bytes: int | None = None
    visible_vram_total_bytes: int | None = None  # mem_info_vis_vram_total: VRAM the CPU can map
    visible_vram_used_bytes: int | None = None
    pcie_replays: int | None = None  # pcie_replay_count, since driver load
    vram_bad_pages: VramBadPages | None = None


class XcpActivity(msgspec.Struct, frozen=True):
    """One partition's (XCP's) activity from its physical GPU's ``gpu_metrics`` table (``xcp_stats``, v1.6+; the
    top-level per-XCC arrays of v1.9). A partition has no telemetry files of its own: this is all it gets.

    ``index`` is the XCP index, which is the partition index (``GpuIdentity.partition_index``; 0 for an
    unpartitioned GPU). Values the table marks "not available" are left out, never 0.
    """

    index: int
    xcc_busy_ratios: tuple[tuple[int, float], ...] = ()  # (XCC index within the partition, gfx_busy_inst / 100)
    vcn_busy_ratio: float | None = None  # mean vcn_busy / 100 over the instances the table reports
    jpeg_busy_ratio: float | None = None  # mean jpeg_busy / 100 over the engines the table reports
    # (kernel field without "_acc": gfx_below_host_limit, gfx_below_host_limit_ppt, ..., gfx_low_utilization;
    # accumulation ticks summed over the partition's XCCs), v1.7+
    xcc_violation_ticks: tuple[tuple[str, int], ...] = ()

    @property
    def busy_ratio(self) -> float | None:
        """The mean gfx busy ratio of the partition's XCCs."""
        if not self.xcc_busy_ratios:
            return None
        return sum(r for _, r in self.xcc_busy_ratios) / len(self.xcc_busy_ratios)


class GpuMetricsReading(msgspec.Struct, frozen=True):
    """The normalised readings of one physical GPU's binary ``device/gpu_metrics`` table (issue 10 item 2), in
    base units. Each field is None (or empty) when the table's revision has no such field or marks it "not
    available"; see docs/gpu-metrics.md for the fields each revision has and their units.

    Readings sysfs also gives (clocks, temperatures, power, PCIe link, replays, busy) are kept here as the table
    says them; the metrics layer exports them only where sysfs/hwmon gave none.
    """

    format_revision: int
    content_revision: int
    # indep_throttle_status (v1.3, v2.2+), else throttle_status (ASIC-specific bits): None when the table has
    # neither or marks it not available; throttle_reasons names the set indep_throttle_status bits
    throttle_status: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    accumulation_ticks: int | None = None  # accumulation_counter (v1.6+): the clock the residency counters tick by
    # (kernel field stem: prochot, ppt, socket_thm, vr_thm, hbm_thm (v1.6+); v3.0: prochot, spl, fppt, sppt,
    # thm_core, thm_gfx, thm_soc; ticks)
    throttle_residency_ticks: tuple[tuple[str, int], ...] = ()
    gfx_activity_ratio: float | None = None  # average_gfx_activity
    umc_activity_ratio: float | None = None  # average_umc_activity (memory controller)
    mm_activity_ratio: float | None = None  # average_mm_activity (multimedia block)
    vcn_activity_ratio: float | None = None  # mean vcn_activity (v1.4, v1.5), average_vcn_activity (v3.0)
    jpeg_activity_ratio: float | None = None  # mean jpeg_activity (v1.5)
    xcps: tuple[XcpActivity, ...] = ()  # per partition, in XCP order
    xgmi_link_width: int | None = None
    xgmi_link_speed_bytes_per_second: float | None = None
    xgmi_read_bytes: tuple[tuple[int, int], ...] = ()  # (link index, bytes read since the counter started)
    xgmi_write_bytes: tuple[tuple[int, int], ...] = ()
    xgmi_link_active: tuple[tuple[int, bool], ...] = ()  # (link index, up) from xgmi_link_status, v1.7+
    pcie_link_width: int | None = None
    pcie_link_speed_gts: float | None = None
    pcie_bandwidth_bytes_per_second: float | None = None  # pcie_bandwidth_inst
    pcie_replays: int | None = None  # pcie_replay_count_acc
    pcie_replay_rollovers: int | None = None  # pcie_replay_rover_count_acc
    pcie_recoveries: int | None = None  # pcie_l0_to_recov_count_acc
    pcie_naks_sent: int | None = None
    pcie_naks_received: int | None = None
    pcie_other_end_recoveries: int | None = None  # pcie_lc_perf_other_end_recovery, v1.6+
    energy_joules: float | None = None  # energy_accumulator x the chip's unit
    energy_unit_joules: float | None = None  # the unit used, from the device id (see energy_unit_joules)
    clocks_hertz: tuple[tuple[str, float], ...] = ()  # (sysfs domain name: sclk, mclk, socclk...; hertz)
    temperatures_celsius: tuple[tuple[str, float], ...] = ()  # (hwmon-style sensor name: edge, junction, mem...)
    power_watts: float | None = None  # socket power: current where the table has it, else average
    warning: str | None = None  # the decoder's one warning (truncated, newer or inconsistent revision)


class KfdNode(msgspec.Struct, frozen=True):
    """One GPU node of the KFD topology (CPU nodes are not kept)."""

    node: int
    gpu_id: int | None
    render_minor: int | None
    pci_bus: str | None  # from domain + location_id (partition index in the function bits)
    unique_id: str | None  # canonical hex, see GpuIdentity.unique_id
    device_id: str | None = None
    domain: int | None = None  # PCI segment; None on old kernels without the key
    location_id: int | None = None  # (bus << 8) | (device << 3) | function; partitions use the function bits
    name: str | None = None  # the node's ``name`` file ("ip discovery"), when present
    gfx_target_version: int | None = None  # major*10000 + minor*100 + stepping: 90010 is gfx90a


class GpuIdentity(msgspec.Struct, frozen=True):
    """An amdgpu GPU or partition: its stable key and everything derived from it."""

    pci_bus: str  # lower-case dddd:bb:dd.f; a partition has its own function number
    unique_id: str | None = None  # canonical: hex(int) lower-case, e.g. "0x5a4ad1c2a8ba3e1f"
    card: DrmMinor | None = None
    render: DrmMinor | None = None
    kfd_node: int | None = None
    gpu_id: int | None = None
    # the physical GPU of a partition (its own BDF for partition 0, which is the PCI function itself);
    # None for a GPU that is not partitioned
    parent_pci_bus: str | None = None
    partition_index: int | None = None  # the BDF function bits KFD gives the partition (0..7)
    compute_partition: str | None = None  # SPX/DPX/CPX...
    memory_partition: str | None = None  # NPS1/NPS4...
    driver: str | None = None
    vendor_id: str | None = None  # "0x1002"
    device_id: str | None = None  # "0x740f"
    model: str | None = None  # product_name
    vbios: str | None = None
    numa_node: int | None = None  # -1 when none
    # derived numbers, each may change at any boot: see sysfs-devfs.md section 3
    rocm_smi_index: int | None = None  # rank among the GPUs that have a card node, in card-number order
    hip_index: int | None = None  # rank among the KFD GPU nodes, in node order (HIP/ROCR_VISIBLE_DEVICES)
    partition_device: str | None = None  # "amdgpu_xcp.3" for a partition on a platform device, else None
    # state, read every interval; None when the file is absent or unreadable
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    busy_ratio: float | None = None
    temperatures_celsius: tuple[tuple[str, float], ...] = ()  # (sensor label, value)
    power_watts: float | None = None
    pcie_link_speed_gts: float | None = None
    pcie_link_width: int | None = None
    ras: tuple[RasCount, ...] = ()
    telemetry: GpuTelemetry = GpuTelemetry()
    # the PCI function's gpu_metrics table (None: no file, unreadable, or not decodable); partitions have none
    gpu_metrics: GpuMetricsReading | None = None
    # this GPU's or partition's XCP activity from its physical GPU's gpu_metrics (partition_index, 0 when
    # unpartitioned); None when the table has no per-XCP arrays
    xcp: XcpActivity | None = None
    # how the per-interval read of the PCI function's files went: "ok"; "timeout" (not done within the deadline,
    # or an earlier read is still stuck and no new one was started: the state fields are then empty and the
    # identity is the last one read); "error" (every file read failed, or the read itself failed). None when
    # the state was not read (partitions, identity-only walks).
    sysfs_read: str | None = None


class SysfsReadErrors(msgspec.Struct, frozen=True):
    """Failed reads of one file: ``error`` is the errno name (``EIO``, ``EACCES``, ``EISDIR``, ``ENOENT`` for a
    dangling link...), ``not_regular_file`` (a FIFO or device node), ``too_large``, ``unparsable`` or
    ``out_of_range`` (a well-formed reading outside the physical range of its quantity) or ``partial``
    (a ``gpu_metrics`` table decoded only in part: truncated, of a newer or inconsistent revision)."""

    pci_bus: str  # the GPU whose files were read; "" for a file of no GPU (KFD topology, class/drm)
    file: str  # relative to the GPU's PCI function directory, else to the sysfs root
    error: str
    count: int = 1
    detail: str = ""  # the last message (strerror, the rejected value), for the log
    # what tells errors counted together apart for the log, which names each once (a gpu_metrics revision)
    variant: str = ""


class OtherDrmDevice(msgspec.Struct, frozen=True):
    """A DRM device that is not an amdgpu GPU (BMC ast/mgag200, i915 iGPU, simpledrm, virtio)."""

    name: str  # "card0"
    driver: str | None
    parent: str | None  # BDF or platform device name
    minors: tuple[DrmMinor, ...] = ()
    # "bmc" (ast, mgag200), "igpu" (i915, xe), "firmware" (simpledrm, efifb), "virtual" (virtio, vkms...),
    # "amdgpu" (an amdgpu_xcp partition device KFD does not list: present but unusable in this partition mode),
    # "other"
    kind: str = "other"


class SysfsSnapshot(msgspec.Struct, frozen=True):
    gpus: tuple[GpuIdentity, ...] = ()
    other_drm: tuple[OtherDrmDevice, ...] = ()
    kfd_nodes: tuple[KfdNode, ...] = ()
    kfd_dev: tuple[int, int] | None = None  # /sys/class/kfd/kfd/dev
    warnings: tuple[str, ...] = ()
    # amdgpu_xcp partition devices with DRM minors but no KFD node (the spare render nodes of SPX/DPX mode,
    # or every partition when KFD is not loaded): kind "amdgpu"; they are not GPUs and not foreign devices
    idle_partitions: tuple[OtherDrmDevice, ...] = ()
    # module/amdgpu/version: set by out-of-tree (DKMS, ROCm "amdgpu-dkms") builds, absent for the in-kernel driver
    driver_version: str | None = None
    # failed reads by GPU, file and kind: of this walk from ``read_sysfs``, cumulative since start from the source
    read_errors: tuple[SysfsReadErrors, ...] = ()
