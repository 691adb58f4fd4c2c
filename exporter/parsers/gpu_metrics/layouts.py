"""The fixed ``gpu_metrics`` layouts, written from the kernel header drivers/gpu/drm/amd/include/kgd_pp_interface.h.

Every struct there is a plain C struct (no ``packed`` attribute): members are naturally aligned and the size is
rounded up to the largest member alignment. Each layout below lists the members in header order with the kernel's
names; ``Layout.of`` computes the offsets and a little-endian ``struct`` format string in which every byte of padding,
the compiler's and the header's own ``padding`` members alike, is an explicit ``x``. tests/test_gpu_metrics.py
compiles the same structs with gcc and checks every size and offset against these.

Only the self-describing v1.9 table is ``__packed`` (it is built by the DECLARE_SMU_METRICS_CLASS macro in
swsmu/smu_cmn.h); it has no fixed layout and is decoded in ``attributes.py``.
"""

from __future__ import annotations

import struct
from typing import Literal

import msgspec

CType = Literal["u8", "u16", "u32", "u64"]

_CODE: dict[str, str] = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q"}
_SIZE: dict[str, int] = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
# The all-ones value the kernel writes (smu_cmn_init_soft_gpu_metrics memsets the table to 0xFF) for a field the
# firmware does not fill.
NOT_AVAILABLE: dict[str, int] = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF, "u64": 0xFFFF_FFFF_FFFF_FFFF}

# Array bounds, from the header.
NUM_HBM_INSTANCES = 4
NUM_XGMI_LINKS = 8
MAX_GFX_CLKS = 8
MAX_CLKS = 4
NUM_VCN = 4
NUM_JPEG_ENG = 32
NUM_JPEG_ENG_V1 = 40
MAX_XCC = 8
NUM_XCP = 8

HEADER_FIELDS = ("structure_size", "format_revision", "content_revision")


class Member(msgspec.Struct, frozen=True):
    """One struct member: a scalar (``count`` None) or an array; ``ctype`` is a base type or a nested struct."""

    name: str
    ctype: CType | StructType
    count: int | None = None
    padding: bool = False  # declared ``padding`` in the header: read as pad bytes, not reported

    @property
    def align(self) -> int:
        return self.ctype.align if isinstance(self.ctype, StructType) else _SIZE[self.ctype]

    @property
    def element_size(self) -> int:
        return self.ctype.size if isinstance(self.ctype, StructType) else _SIZE[self.ctype]

    @property
    def size(self) -> int:
        return self.element_size * (self.count or 1)

    def format(self) -> str:
        n = self.count or 1
        if self.padding:
            return f"{self.size}x"
        if isinstance(self.ctype, StructType):
            return self.ctype.fmt * n
        return f"{n}{_CODE[self.ctype]}" if n > 1 else _CODE[self.ctype]


class Slot(msgspec.Struct, frozen=True):
    """A member placed in a struct: its offset and its format piece (leading alignment padding included)."""

    member: Member
    offset: int
    fmt: str

    @property
    def end(self) -> int:
        return self.offset + self.member.size


def _place(members: tuple[Member, ...]) -> tuple[tuple[Slot, ...], int, int, str]:
    """Natural C layout: (slots, size, alignment, tail padding format)."""
    slots: list[Slot] = []
    offset = 0
    align = 1
    for m in members:
        pad = -offset % m.align
        slots.append(Slot(m, offset + pad, (f"{pad}x" if pad else "") + m.format()))
        offset += pad + m.size
        align = max(align, m.align)
    tail = -offset % align
    return tuple(slots), offset + tail, align, f"{tail}x" if tail else ""


class StructType(msgspec.Struct, frozen=True):
    """A nested struct type (``struct amdgpu_xcp_metrics``), laid out like the outer ones."""

    name: str
    members: tuple[Member, ...]
    slots: tuple[Slot, ...]
    size: int
    align: int
    fmt: str  # without byte order; used inside an outer format

    @classmethod
    def of(cls, name: str, *members: Member) -> StructType:
        """The struct of ``members`` in declaration order, laid out."""
        slots, size, align, tail = _place(members)
        return cls(name, members, slots, size, align, "".join(s.fmt for s in slots) + tail)


class Layout(msgspec.Struct, frozen=True):
    """One ``struct gpu_metrics_vX_Y``: the header's three members first, then the table."""

    name: str
    format_revision: int
    content_revision: int
    slots: tuple[Slot, ...]
    size: int
    fmt: str  # '<' + every member + every pad: struct.calcsize(fmt) == size

    @classmethod
    def of(cls, name: str, revision: tuple[int, int], *members: Member) -> Layout:
        """The table of ``struct gpu_metrics_vX_Y``: the header, then ``members`` in declaration order, laid out."""
        slots, size, _align, tail = _place((*_HEADER, *members))
        fmt = "<" + "".join(s.fmt for s in slots) + tail
        if struct.calcsize(fmt) != size:  # a mistake in this module, caught at import
            raise AssertionError(f"{name}: format {fmt!r} is not {size} bytes")
        return cls(name, revision[0], revision[1], slots, size, fmt)

    def prefix(self, available: int) -> tuple[str, tuple[Slot, ...]]:
        """The format and slots of the longest run of whole members that fits in ``available`` bytes."""
        fitting = tuple(s for s in self.slots if s.end <= available)
        return "<" + "".join(s.fmt for s in fitting), fitting

    @property
    def members(self) -> tuple[Member, ...]:
        return tuple(s.member for s in self.slots)


def u8(name: str, count: int | None = None) -> Member:
    return Member(name, "u8", count)


def u16(name: str, count: int | None = None) -> Member:
    return Member(name, "u16", count)


def u32(name: str, count: int | None = None) -> Member:
    return Member(name, "u32", count)


def u64(name: str, count: int | None = None) -> Member:
    return Member(name, "u64", count)


def pad(name: str, ctype: CType, count: int | None = None) -> Member:
    return Member(name, ctype, count, padding=True)


def nested(name: str, ctype: StructType, count: int) -> Member:
    return Member(name, ctype, count)


# struct metrics_table_header
_HEADER = (u16("structure_size"), u8("format_revision"), u8("content_revision"))

# --- dGPU (format 1) ---------------------------------------------------------------------------------------------

_V1_TEMPERATURES = (
    u16("temperature_edge"),
    u16("temperature_hotspot"),
    u16("temperature_mem"),
    u16("temperature_vrgfx"),
    u16("temperature_vrsoc"),
    u16("temperature_vrmem"),
)
_V1_ACTIVITY = (u16("average_gfx_activity"), u16("average_umc_activity"), u16("average_mm_activity"))
_V1_AVERAGE_CLOCKS = tuple(
    u16(f"average_{clk}_frequency") for clk in ("gfxclk", "socclk", "uclk", "vclk0", "dclk0", "vclk1", "dclk1")
)
_V1_CURRENT_CLOCKS = tuple(
    u16(f"current_{clk}") for clk in ("gfxclk", "socclk", "uclk", "vclk0", "dclk0", "vclk1", "dclk1")
)

GPU_METRICS_V1_0 = Layout.of(
    "gpu_metrics_v1_0",
    (1, 0),
    u64("system_clock_counter"),
    *_V1_TEMPERATURES,
    *_V1_ACTIVITY,
    u16("average_socket_power"),
    u32("energy_accumulator"),
    *_V1_AVERAGE_CLOCKS,
    *_V1_CURRENT_CLOCKS,
    u32("throttle_status"),
    u16("current_fan_speed"),
    u8("pcie_link_width"),
    u8("pcie_link_speed"),  # 0.1 GT/s
)

_V1_1_BODY = (
    *_V1_TEMPERATURES,
    *_V1_ACTIVITY,
    u16("average_socket_power"),
    u64("energy_accumulator"),
    u64("system_clock_counter"),
    *_V1_AVERAGE_CLOCKS,
    *_V1_CURRENT_CLOCKS,
    u32("throttle_status"),
    u16("current_fan_speed"),
    u16("pcie_link_width"),
    u16("pcie_link_speed"),  # 0.1 GT/s
    pad("padding", "u16"),
    u32("gfx_activity_acc"),
    u32("mem_activity_acc"),
    u16("temperature_hbm", NUM_HBM_INSTANCES),
)
GPU_METRICS_V1_1 = Layout.of("gpu_metrics_v1_1", (1, 1), *_V1_1_BODY)
GPU_METRICS_V1_2 = Layout.of("gpu_metrics_v1_2", (1, 2), *_V1_1_BODY, u64("firmware_timestamp"))
GPU_METRICS_V1_3 = Layout.of(
    "gpu_metrics_v1_3",
    (1, 3),
    *_V1_1_BODY,
    u64("firmware_timestamp"),
    u16("voltage_soc"),
    u16("voltage_gfx"),
    u16("voltage_mem"),
    pad("padding1", "u16"),
    u64("indep_throttle_status"),
)

# MI300 (SMU 13.0.6) and later: Celsius, watts, per-instance clock arrays.
_V1_4_HEAD = (
    u16("temperature_hotspot"),
    u16("temperature_mem"),
    u16("temperature_vrsoc"),
    u16("curr_socket_power"),
    u16("average_gfx_activity"),
    u16("average_umc_activity"),
)
_V1_4_LINKS = (
    u16("pcie_link_width"),
    u16("pcie_link_speed"),  # 0.1 GT/s
    u16("xgmi_link_width"),
    u16("xgmi_link_speed"),  # Gbps
    u32("gfx_activity_acc"),
    u32("mem_activity_acc"),
    u64("pcie_bandwidth_acc"),
    u64("pcie_bandwidth_inst"),
    u64("pcie_l0_to_recov_count_acc"),
    u64("pcie_replay_count_acc"),
    u64("pcie_replay_rover_count_acc"),
)
_V1_5_NAK = (u32("pcie_nak_sent_count_acc"), u32("pcie_nak_rcvd_count_acc"))
_V1_4_XGMI_DATA = (u64("xgmi_read_data_acc", NUM_XGMI_LINKS), u64("xgmi_write_data_acc", NUM_XGMI_LINKS))
_V1_4_CLOCKS = (
    u16("current_gfxclk", MAX_GFX_CLKS),
    u16("current_socclk", MAX_CLKS),
    u16("current_vclk0", MAX_CLKS),
    u16("current_dclk0", MAX_CLKS),
    u16("current_uclk"),
)
_V1_6_RESIDENCY = (
    u32("accumulation_counter"),
    u32("prochot_residency_acc"),
    u32("ppt_residency_acc"),
    u32("socket_thm_residency_acc"),
    u32("vr_thm_residency_acc"),
    u32("hbm_thm_residency_acc"),
)

GPU_METRICS_V1_4 = Layout.of(
    "gpu_metrics_v1_4",
    (1, 4),
    *_V1_4_HEAD,
    u16("vcn_activity", NUM_VCN),
    u64("energy_accumulator"),
    u64("system_clock_counter"),
    u32("throttle_status"),
    u32("gfxclk_lock_status"),
    *_V1_4_LINKS,
    *_V1_4_XGMI_DATA,
    u64("firmware_timestamp"),
    *_V1_4_CLOCKS,
    pad("padding", "u16"),
)
GPU_METRICS_V1_5 = Layout.of(
    "gpu_metrics_v1_5",
    (1, 5),
    *_V1_4_HEAD,
    u16("vcn_activity", NUM_VCN),
    u16("jpeg_activity", NUM_JPEG_ENG),
    u64("energy_accumulator"),
    u64("system_clock_counter"),
    u32("throttle_status"),
    u32("gfxclk_lock_status"),
    *_V1_4_LINKS,
    *_V1_5_NAK,
    *_V1_4_XGMI_DATA,
    u64("firmware_timestamp"),
    *_V1_4_CLOCKS,
    pad("padding", "u16"),
)
# The first v1.6, added to the header in May 2024 (commit d24c43b1e319) and reverted days later "until tool support
# is ready"; v1.6 was then redefined with per-partition stats. A kernel built in that window carries this one, so a
# v1.6 table of exactly this size is decoded with it. Its header comment gives PCIe bandwidth in Mbps.
GPU_METRICS_V1_6_EARLY = Layout.of(
    "gpu_metrics_v1_6_early",
    (1, 6),
    *_V1_4_HEAD,
    u16("vcn_activity", NUM_VCN),
    u16("jpeg_activity", NUM_JPEG_ENG),
    u64("energy_accumulator"),
    u64("system_clock_counter"),
    *_V1_6_RESIDENCY,
    u32("throttle_status"),
    u32("gfxclk_lock_status"),
    *_V1_4_LINKS,
    *_V1_5_NAK,
    *_V1_4_XGMI_DATA,
    u64("firmware_timestamp"),
    *_V1_4_CLOCKS,
    pad("padding", "u16"),
)

_XCP_HEAD = (u32("gfx_busy_inst", MAX_XCC),)
AMDGPU_XCP_METRICS = StructType.of(
    "amdgpu_xcp_metrics",
    *_XCP_HEAD,
    u16("jpeg_busy", NUM_JPEG_ENG),
    u16("vcn_busy", NUM_VCN),
    u64("gfx_busy_acc", MAX_XCC),
)
AMDGPU_XCP_METRICS_V1_1 = StructType.of(
    "amdgpu_xcp_metrics_v1_1",
    *_XCP_HEAD,
    u16("jpeg_busy", NUM_JPEG_ENG),
    u16("vcn_busy", NUM_VCN),
    u64("gfx_busy_acc", MAX_XCC),
    u64("gfx_below_host_limit_acc", MAX_XCC),
)
AMDGPU_XCP_METRICS_V1_2 = StructType.of(
    "amdgpu_xcp_metrics_v1_2",
    *_XCP_HEAD,
    u16("jpeg_busy", NUM_JPEG_ENG_V1),
    u16("vcn_busy", NUM_VCN),
    u64("gfx_busy_acc", MAX_XCC),
    u64("gfx_below_host_limit_ppt_acc", MAX_XCC),
    u64("gfx_below_host_limit_thm_acc", MAX_XCC),
    u64("gfx_low_utilization_acc", MAX_XCC),
    u64("gfx_below_host_limit_total_acc", MAX_XCC),
)


def _v1_6_on(xcp: StructType, *, v1_7: bool) -> tuple[Member, ...]:
    """The body v1.6, v1.7 and v1.8 share; v1.7 added mem_max_bandwidth and xgmi_link_status."""
    return (
        *_V1_4_HEAD,
        *((u64("mem_max_bandwidth"),) if v1_7 else ()),  # GB/s at the maximum memory clock
        u64("energy_accumulator"),
        u64("system_clock_counter"),
        *_V1_6_RESIDENCY,
        u32("gfxclk_lock_status"),
        *_V1_4_LINKS,
        *_V1_5_NAK,
        *_V1_4_XGMI_DATA,
        *((u16("xgmi_link_status", NUM_XGMI_LINKS), pad("padding", "u16")) if v1_7 else ()),
        u64("firmware_timestamp"),
        *_V1_4_CLOCKS,
        u16("num_partition"),
        nested("xcp_stats", xcp, NUM_XCP),
        u32("pcie_lc_perf_other_end_recovery"),
    )


GPU_METRICS_V1_6 = Layout.of("gpu_metrics_v1_6", (1, 6), *_v1_6_on(AMDGPU_XCP_METRICS, v1_7=False))
GPU_METRICS_V1_7 = Layout.of("gpu_metrics_v1_7", (1, 7), *_v1_6_on(AMDGPU_XCP_METRICS_V1_1, v1_7=True))
GPU_METRICS_V1_8 = Layout.of("gpu_metrics_v1_8", (1, 8), *_v1_6_on(AMDGPU_XCP_METRICS_V1_2, v1_7=True))

# --- APU (formats 2 and 3) -------------------------------------------------------------------------------------

_V2_TEMPERATURES = (
    u16("temperature_gfx"),
    u16("temperature_soc"),
    u16("temperature_core", 8),
    u16("temperature_l3", 2),
)
_V2_ACTIVITY = (u16("average_gfx_activity"), u16("average_mm_activity"))
_V2_POWER = (
    u16("average_socket_power"),
    u16("average_cpu_power"),
    u16("average_soc_power"),
    u16("average_gfx_power"),
    u16("average_core_power", 8),
)
_V2_CLOCKS = (
    *(u16(f"average_{clk}_frequency") for clk in ("gfxclk", "socclk", "uclk", "fclk", "vclk", "dclk")),
    *(u16(f"current_{clk}") for clk in ("gfxclk", "socclk", "uclk", "fclk", "vclk", "dclk")),
    u16("current_coreclk", 8),
    u16("current_l3clk", 2),
)

GPU_METRICS_V2_0 = Layout.of(
    "gpu_metrics_v2_0",
    (2, 0),
    u64("system_clock_counter"),
    *_V2_TEMPERATURES,
    *_V2_ACTIVITY,
    *_V2_POWER,
    *_V2_CLOCKS,
    u32("throttle_status"),
    u16("fan_pwm"),
    pad("padding", "u16"),
)
_V2_1_BODY = (
    *_V2_TEMPERATURES,
    *_V2_ACTIVITY,
    u64("system_clock_counter"),
    *_V2_POWER,
    *_V2_CLOCKS,
    u32("throttle_status"),
    u16("fan_pwm"),
    pad("padding", "u16", 3),
)
_V2_3_AVERAGE_TEMPERATURES = (
    u16("average_temperature_gfx"),
    u16("average_temperature_soc"),
    u16("average_temperature_core", 8),
    u16("average_temperature_l3", 2),
)
GPU_METRICS_V2_1 = Layout.of("gpu_metrics_v2_1", (2, 1), *_V2_1_BODY)
GPU_METRICS_V2_2 = Layout.of("gpu_metrics_v2_2", (2, 2), *_V2_1_BODY, u64("indep_throttle_status"))
GPU_METRICS_V2_3 = Layout.of(
    "gpu_metrics_v2_3", (2, 3), *_V2_1_BODY, u64("indep_throttle_status"), *_V2_3_AVERAGE_TEMPERATURES
)
GPU_METRICS_V2_4 = Layout.of(
    "gpu_metrics_v2_4",
    (2, 4),
    *_V2_1_BODY,
    u64("indep_throttle_status"),
    *_V2_3_AVERAGE_TEMPERATURES,
    u16("average_cpu_voltage"),
    u16("average_soc_voltage"),
    u16("average_gfx_voltage"),
    u16("average_cpu_current"),
    u16("average_soc_current"),
    u16("average_gfx_current"),
)

GPU_METRICS_V3_0 = Layout.of(
    "gpu_metrics_v3_0",
    (3, 0),
    u16("temperature_gfx"),
    u16("temperature_soc"),
    u16("temperature_core", 16),
    u16("temperature_skin"),
    u16("average_gfx_activity"),
    u16("average_vcn_activity"),
    u16("average_ipu_activity", 8),
    u16("average_core_c0_activity", 16),
    u16("average_dram_reads"),
    u16("average_dram_writes"),
    u16("average_ipu_reads"),
    u16("average_ipu_writes"),
    u64("system_clock_counter"),
    u32("average_socket_power"),
    u16("average_ipu_power"),
    u32("average_apu_power"),
    u32("average_gfx_power"),
    u32("average_dgpu_power"),
    u32("average_all_core_power"),
    u16("average_core_power", 16),
    u16("average_sys_power"),
    u16("stapm_power_limit"),
    u16("current_stapm_power_limit"),
    *(
        u16(f"average_{clk}_frequency")
        for clk in ("gfxclk", "socclk", "vpeclk", "ipuclk", "fclk", "vclk", "uclk", "mpipu")
    ),
    u16("current_coreclk", 16),
    u16("current_core_maxfreq"),
    u16("current_gfx_maxfreq"),
    *(
        u32(f"throttle_residency_{what}")
        for what in ("prochot", "spl", "fppt", "sppt", "thm_core", "thm_gfx", "thm_soc")
    ),
    u32("time_filter_alphavalue"),
)

# Every fixed layout by (format_revision, content_revision); a revision with two layouts in kernel history lists
# the current one first.
LAYOUTS: dict[tuple[int, int], tuple[Layout, ...]] = {
    (1, 0): (GPU_METRICS_V1_0,),
    (1, 1): (GPU_METRICS_V1_1,),
    (1, 2): (GPU_METRICS_V1_2,),
    (1, 3): (GPU_METRICS_V1_3,),
    (1, 4): (GPU_METRICS_V1_4,),
    (1, 5): (GPU_METRICS_V1_5,),
    (1, 6): (GPU_METRICS_V1_6, GPU_METRICS_V1_6_EARLY),
    (1, 7): (GPU_METRICS_V1_7,),
    (1, 8): (GPU_METRICS_V1_8,),
    (2, 0): (GPU_METRICS_V2_0,),
    (2, 1): (GPU_METRICS_V2_1,),
    (2, 2): (GPU_METRICS_V2_2,),
    (2, 3): (GPU_METRICS_V2_3,),
    (2, 4): (GPU_METRICS_V2_4,),
    (3, 0): (GPU_METRICS_V3_0,),
}
ALL_LAYOUTS: tuple[Layout, ...] = tuple(layout for layouts in LAYOUTS.values() for layout in layouts)
