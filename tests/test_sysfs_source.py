"""read_sysfs / SysfsSource on fake roots built with real symlinks and files (tests/fakeroot.py).

Expected mappings are written out by hand from the KFD captures in shared/fixtures/sysfs/kfd-topology
(location_id -> BDF, drm_render_minor -> renderD, node directory -> KFD node, unique_id decimal -> hex).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakeroot import FakeGpu, FakeOther, FakeRoot, FakeXcp, build_root, capture_gpus
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import FIXTURES

from exporter.model.gpu import GpuIdentity, RasCount, SysfsSnapshot
from exporter.sources import SourceError
from exporter.sources.sysfs import SysfsSource, other_kind, read_sysfs

PROCFS_SYS = FIXTURES / "sysfs" / "procfs-drm-amdgpu" / "sys"


def _by_bdf(snap: SysfsSnapshot) -> dict[str, GpuIdentity]:
    return {g.pci_bus: g for g in snap.gpus}


def _row(g: GpuIdentity) -> tuple[str | None, str | None, int | None]:
    return (g.card.name if g.card else None, g.render.name if g.render else None, g.kfd_node)


# ---- real 8-GPU layouts -------------------------------------------------------------------------------

# MI210 x8 XGMI capture with a BMC on card0: (card, render, KFD node, hip index, unique_id).
MI210 = {
    "0000:63:00.0": ("card1", "renderD128", 2, 0, "0x1901ead3a2ecd4a6"),
    "0000:43:00.0": ("card2", "renderD129", 3, 1, "0x51276ac12ce05db3"),
    "0000:03:00.0": ("card3", "renderD130", 4, 2, "0x93bb3629c01aea1c"),
    "0000:26:00.0": ("card4", "renderD131", 5, 3, "0x4344e78b718814cd"),
    "0000:e3:00.0": ("card5", "renderD132", 6, 4, "0xaea834aa2723eb57"),
    "0000:c3:00.0": ("card6", "renderD133", 7, 5, "0xa3781b5a10fcf54a"),
    "0000:83:00.0": ("card7", "renderD134", 8, 6, "0xf83f06efb714e6cf"),
    "0000:a3:00.0": ("card8", "renderD135", 9, 7, "0xc34ec50444dd0a6d"),
}


def test_mi210_xgmi_maps_every_gpu_to_its_card_render_and_kfd_node(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc()], cpu_nodes=2)
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    got = {g.pci_bus: (*_row(g), g.hip_index, g.unique_id) for g in snap.gpus}
    assert got == MI210
    # keyed by BDF, listed in BDF order, not in render order
    assert [g.pci_bus for g in snap.gpus] == sorted(MI210)
    gpus = _by_bdf(snap)
    # rocm-smi counts the amdgpu cards in card order: the BMC's card0 is not one of them
    assert gpus["0000:63:00.0"].rocm_smi_index == 0
    assert gpus["0000:a3:00.0"].rocm_smi_index == 7
    assert all(g.device_id == "0x740f" and g.driver == "amdgpu" for g in snap.gpus)
    assert all(g.partition_index is None and g.parent_pci_bus is None for g in snap.gpus)
    assert [o.kind for o in snap.other_drm] == ["bmc"]
    assert snap.kfd_dev == (510, 0)
    assert [n.node for n in snap.kfd_nodes] == [2, 3, 4, 5, 6, 7, 8, 9]


def test_mi300x_cpx_partitions_have_their_own_bdf_and_join_their_parent(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi300x-cpx-8gpu"), others=[FakeOther.bmc()], cpu_nodes=2)
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    gpus = _by_bdf(snap)
    assert len(snap.gpus) == 63  # the capture has 63 of 64 partitions
    first = gpus["0000:05:00.0"]
    assert (_row(first), first.partition_index, first.parent_pci_bus, first.partition_device) == (
        ("card1", "renderD128", 2),
        0,
        "0000:05:00.0",
        None,
    )
    p7 = gpus["0000:05:00.7"]
    assert (_row(p7), p7.partition_index, p7.parent_pci_bus, p7.partition_device) == (
        ("card8", "renderD135", 9),
        7,
        "0000:05:00.0",
        "amdgpu_xcp.6",
    )
    assert _row(gpus["0000:27:00.0"]) == ("card9", "renderD136", 10)
    assert _row(gpus["0000:27:00.1"]) == ("card10", "renderD137", 11)
    assert _row(gpus["0000:a7:00.3"]) == ("card44", "renderD171", 45)
    last = gpus["0000:e5:00.6"]
    assert (_row(last), last.partition_device) == (("card63", "renderD190", 64), "amdgpu_xcp.54")
    assert "0000:e5:00.7" not in gpus
    # every partition of a GPU carries the GPU's unique_id (KFD shares it) and its compute partition mode
    for index in range(8):
        part = gpus[f"0000:05:00.{index}"]
        assert part.unique_id == "0xe3aa140f9a5f9e31"
        assert part.compute_partition == "CPX"
        assert part.device_id == "0x74a1"
    assert {g.unique_id for g in snap.gpus if g.parent_pci_bus == "0000:e5:00.0"} == {"0xdd197ad1b50577f6"}
    assert sum(1 for g in snap.gpus if g.parent_pci_bus == "0000:e5:00.0") == 7
    # state belongs to the PCI function: partitions other than 0 do not repeat it
    assert first.vram_total_bytes == 68_702_699_520
    assert p7.vram_total_bytes is None and p7.temperatures_celsius == ()
    # HIP counts KFD GPU nodes in node order, rocm-smi counts cards
    assert (p7.hip_index, p7.rocm_smi_index) == (7, 7)
    assert (last.hip_index, last.rocm_smi_index) == (62, 62)


def test_mi308x_two_sockets_render_gaps_and_idle_partitions(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi308x-cpx-2socket", first_card=0), cpu_nodes=2, kfd_major=234)
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    gpus = _by_bdf(snap)
    assert len(snap.gpus) == 32
    assert (_row(gpus["0000:0a:00.0"]), gpus["0000:0a:00.0"].gpu_id) == (("card0", "renderD128", 2), 24248)
    assert (_row(gpus["0000:0a:00.3"]), gpus["0000:0a:00.3"].gpu_id) == (("card3", "renderD131", 5), 2236)
    # the next GPU starts 8 minors later: 132..135 belong to partitions KFD does not list
    assert _row(gpus["0000:80:00.0"]) == ("card8", "renderD136", 6)
    # second socket: PCI domain 1, same bus numbers as socket 0 would use
    second = gpus["0001:0b:00.0"]
    assert (_row(second), second.unique_id, second.hip_index) == (
        ("card32", "renderD160", 18),
        "0xf263c618bb387ecb",
        16,
    )
    assert _row(gpus["0001:c9:00.3"]) == ("card59", "renderD187", 33)
    assert gpus["0000:0a:00.2"].unique_id == "0x84cafeae17e7696"
    renders = sorted(g.render.minor for g in snap.gpus if g.render)
    assert renders[:8] == [128, 129, 130, 131, 136, 137, 138, 139]
    # the spare render nodes are listed apart: not GPUs, not foreign devices
    assert len(snap.idle_partitions) == 32
    assert snap.other_drm == ()
    idle = {m.name for o in snap.idle_partitions for m in o.minors}
    assert {"renderD132", "renderD133", "renderD134", "renderD135", "renderD188", "renderD191"} <= idle
    assert all(o.kind == "amdgpu" for o in snap.idle_partitions)
    assert snap.kfd_dev == (234, 0)


def test_partitions_without_kfd_are_idle_not_gpus(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi300x-cpx-8gpu"), others=[FakeOther.bmc()], kfd_major=None)
    snap = read_sysfs(root.sys)
    assert len(snap.gpus) == 8  # the 8 PCI functions
    assert all(g.kfd_node is None and g.partition_index is None for g in snap.gpus)
    assert len(snap.idle_partitions) == 55  # 56 platform devices, one without minors (card64 overflow)
    assert snap.kfd_dev is None and snap.kfd_nodes == ()


def test_platform_device_named_with_an_underscore(tmp_path: Path) -> None:
    gpu = FakeGpu(
        "0000:05:00.0",
        card=1,
        render=128,
        kfd_node=1,
        compute_partition="DPX",
        partitions=(FakeXcp(xcp=0, index=1, card=2, render=129, kfd_node=2, separator="_"),),
    )
    snap = read_sysfs(build_root(tmp_path, [gpu]).sys)
    part = _by_bdf(snap)["0000:05:00.1"]
    assert (part.partition_device, part.parent_pci_bus, part.compute_partition) == (
        "amdgpu_xcp_0",
        "0000:05:00.0",
        "DPX",
    )


# ---- foreign DRM devices, connectors, numbering ----------------------------------------------------------


def test_bmc_igpu_simpledrm_and_virtio_are_not_gpus(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=4, render=130, kfd_node=1, connectors=("DP-1", "HDMI-A-1")),
        FakeGpu("0000:83:00.0", card=5, render=131, kfd_node=2, unique_id=0x1234),
    ]
    others = [
        FakeOther.bmc("0000:c2:00.0", card=1),
        FakeOther.igpu("0000:00:02.0", card=2, render=128),
        FakeOther.simpledrm(card=0),
        FakeOther.virtio(card=3, render=129),
    ]
    snap = read_sysfs(build_root(tmp_path, gpus, others=others).sys)
    assert snap.warnings == ()
    assert [(g.pci_bus, *_row(g)) for g in snap.gpus] == [
        ("0000:03:00.0", "card4", "renderD130", 1),
        ("0000:83:00.0", "card5", "renderD131", 2),
    ]
    assert [(o.name, o.driver, o.parent, o.kind) for o in snap.other_drm] == [
        ("card0", "simple-framebuffer", "simple-framebuffer.0", "firmware"),
        ("card1", "ast", "0000:c2:00.0", "bmc"),
        ("card2", "i915", "0000:00:02.0", "igpu"),
        ("card3", "virtio_gpu", "virtio0", "virtual"),
    ]
    igpu = snap.other_drm[2]
    assert [(m.name, m.dev) for m in igpu.minors] == [("card2", (226, 2)), ("renderD128", (226, 128))]
    # connectors are neither GPUs nor minors
    names = {m.name for g in snap.gpus for m in (g.card, g.render) if m} | {
        m.name for o in snap.other_drm for m in o.minors
    }
    assert not any("-" in n for n in names)
    assert (root_links := sorted(os.listdir(tmp_path / "root" / "sys" / "class" / "drm")))
    assert "card4-DP-1" in root_links  # the builder did lay them out
    gpu = _by_bdf(snap)["0000:03:00.0"]
    assert (gpu.rocm_smi_index, _by_bdf(snap)["0000:83:00.0"].rocm_smi_index) == (0, 1)


def test_no_amdgpu_is_an_empty_snapshot(tmp_path: Path) -> None:
    snap = read_sysfs(build_root(tmp_path, [], others=[FakeOther.bmc(card=0)], kfd_major=None).sys)
    assert snap.gpus == () and snap.kfd_nodes == () and snap.warnings == ()
    assert [o.kind for o in snap.other_drm] == ["bmc"]


def test_card10_and_extended_minors(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=10, render=138, kfd_node=1, unique_id=1),
        FakeGpu("0000:23:00.0", card=11, render=139, kfd_node=2, unique_id=2),
        # past 64 primaries, newer kernels hand out minors from 192 in one shared space
        FakeGpu("0000:43:00.0", card=192, render=193, kfd_node=3, unique_id=3),
    ]
    snap = read_sysfs(build_root(tmp_path, gpus).sys)
    assert snap.warnings == ()
    assert [(g.pci_bus, *_row(g), g.rocm_smi_index) for g in snap.gpus] == [
        ("0000:03:00.0", "card10", "renderD138", 1, 0),
        ("0000:23:00.0", "card11", "renderD139", 2, 1),
        ("0000:43:00.0", "card192", "renderD193", 3, 2),
    ]
    assert snap.gpus[2].render is not None and snap.gpus[2].render.dev == (226, 193)


def test_card_order_and_kfd_order_give_different_indices(tmp_path: Path) -> None:
    # rocm-smi follows cards, HIP follows KFD nodes: they disagree when probe orders differ
    gpus = [
        FakeGpu("0000:03:00.0", card=2, render=128, kfd_node=1, unique_id=1),
        FakeGpu("0000:83:00.0", card=1, render=129, kfd_node=2, unique_id=2),
    ]
    gpus_by = _by_bdf(read_sysfs(build_root(tmp_path, gpus).sys))
    assert (gpus_by["0000:03:00.0"].rocm_smi_index, gpus_by["0000:03:00.0"].hip_index) == (1, 0)
    assert (gpus_by["0000:83:00.0"].rocm_smi_index, gpus_by["0000:83:00.0"].hip_index) == (0, 1)


def test_hip_index_follows_kfd_node_order_not_render_order(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=2, unique_id=1),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=1, unique_id=2),
    ]
    gpus_by = _by_bdf(read_sysfs(build_root(tmp_path, gpus).sys))
    assert (gpus_by["0000:03:00.0"].kfd_node, gpus_by["0000:03:00.0"].hip_index) == (2, 1)
    assert (gpus_by["0000:83:00.0"].kfd_node, gpus_by["0000:83:00.0"].hip_index) == (1, 0)


def test_renumbered_after_reboot_keeps_the_key(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc()], cpu_nodes=2)
    root.remove_other(root.others[0])  # BMC disabled in the BIOS: every card moves down by one
    for gpu in root.gpus:
        assert gpu.card is not None
        gpu.card -= 1
    root.reboot()
    gpus = _by_bdf(read_sysfs(root.sys))
    assert _row(gpus["0000:63:00.0"]) == ("card0", "renderD128", 2)
    assert _row(gpus["0000:a3:00.0"]) == ("card7", "renderD135", 9)


# ---- the KFD join is checked ----------------------------------------------------------------------------


def test_kfd_location_disagreeing_with_sysfs_is_a_warning(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, kfd_location="0000:04:00.0"),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, unique_id=7),
    ]
    snap = read_sysfs(build_root(tmp_path, gpus).sys)
    # the DRM device link is authoritative for the node; the disagreement is reported
    assert _row(_by_bdf(snap)["0000:03:00.0"]) == ("card1", "renderD128", 1)
    assert snap.warnings == ("KFD node 1: location_id/domain say 0000:04:00.0 but renderD128 belongs to 0000:03:00.0",)


def test_kfd_unique_id_disagreeing_is_a_warning(tmp_path: Path) -> None:
    swapped = "unique_id 99\n"
    gpu = FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, unique_id=0x10)
    root = build_root(tmp_path, [gpu])
    props = root.sys / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1" / "properties"
    props.write_text(props.read_text().replace("unique_id 16\n", swapped))
    snap = read_sysfs(root.sys)
    assert snap.warnings == ("KFD node 1: unique_id 0x63 differs from 0000:03:00.0's 0x10",)
    assert snap.gpus[0].unique_id == "0x10"


def test_kfd_node_without_a_render_node_and_render_without_kfd(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=None, kfd_node=1, unique_id=1),  # render node not registered
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=None, unique_id=2),  # not KFD-initialised
    ]
    root = build_root(tmp_path, gpus)
    props = root.sys / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1" / "properties"
    props.write_text(props.read_text().replace("drm_render_minor 0\n", "drm_render_minor 128\n"))
    snap = read_sysfs(root.sys)
    assert snap.warnings == ("KFD node 1: render minor 128 has no DRM render node in class/drm",)
    gpus_by = _by_bdf(snap)
    assert _row(gpus_by["0000:03:00.0"]) == ("card1", None, None)
    assert _row(gpus_by["0000:83:00.0"]) == ("card2", "renderD129", None)
    assert gpus_by["0000:83:00.0"].hip_index is None


def test_gpu_bound_to_amdgpu_without_drm_minors_is_still_a_gpu(tmp_path: Path) -> None:
    snap = read_sysfs(build_root(tmp_path, [FakeGpu("0000:03:00.0")]).sys)
    assert [(g.pci_bus, g.card, g.render, g.rocm_smi_index) for g in snap.gpus] == [("0000:03:00.0", None, None, None)]


# ---- state, and files that are missing or unreadable ----------------------------------------------------


def test_state_values(tmp_path: Path) -> None:
    gpu = FakeGpu(
        "0000:03:00.0",
        card=1,
        render=128,
        kfd_node=1,
        numa_node=1,
        vram_total=68_702_699_520,
        vram_used=1_490_378_752,
        busy_percent=37,
        temps_millidegrees=(("edge", 41000), ("junction", 52500), ("mem", 47000)),
        power_microwatts=91_000_000,
        power_file="power1_input",
        link_speed="32.0 GT/s PCIe",
        link_width=16,
        ras=(("umc", "ue: 1\nce: 12\nde: 3\n"), ("gfx", "ue: 0\nce: 4\n"), ("xgmi_wafl", "ue: 0\nce: 0\n")),
        compute_partition="SPX",
        memory_partition="NPS1",
        product_name="AMD Instinct MI300X",
        device_id=0x74A1,
    )
    g = read_sysfs(build_root(tmp_path, [gpu]).sys).gpus[0]
    assert (g.vram_total_bytes, g.vram_used_bytes, g.busy_ratio) == (68_702_699_520, 1_490_378_752, 0.37)
    assert g.temperatures_celsius == (("edge", 41.0), ("junction", 52.5), ("mem", 47.0))
    assert g.power_watts == 91.0
    assert (g.pcie_link_speed_gts, g.pcie_link_width) == (32.0, 16)
    assert g.ras == (
        RasCount("gfx", correctable=4, uncorrectable=0),
        RasCount("umc", correctable=12, uncorrectable=1, deferred=3),
        RasCount("xgmi_wafl", correctable=0, uncorrectable=0),
    )
    assert (g.compute_partition, g.memory_partition, g.numa_node) == ("SPX", "NPS1", 1)
    assert (g.model, g.vbios, g.vendor_id, g.device_id) == ("AMD Instinct MI300X", "113-D67301-063", "0x1002", "0x74a1")
    assert g.unique_id == "0x5a4ad1c2a8ba3e1f"


def test_without_state_only_identity_is_read(tmp_path: Path) -> None:
    g = read_sysfs(build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128)]).sys, with_state=False).gpus[0]
    assert (g.vram_total_bytes, g.busy_ratio, g.power_watts, g.pcie_link_speed_gts) == (None, None, None, None)
    assert (g.temperatures_celsius, g.ras) == ((), ())
    assert (g.unique_id, g.device_id, _row(g)) == ("0x5a4ad1c2a8ba3e1f", "0x740f", ("card1", "renderD128", None))


def test_missing_files_give_none_and_no_warning(tmp_path: Path) -> None:
    omit = frozenset(
        {
            "mem_info_vram_total",
            "gpu_busy_percent",
            "unique_id",
            "current_link_speed",
            "numa_node",
            "temp2_input",
            "umc_err_count",
        }
    )
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, omit=omit, power_microwatts=None),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, unique_id=0x77),
    ]
    snap = read_sysfs(build_root(tmp_path, gpus).sys)
    assert snap.warnings == ()
    bare, full = snap.gpus
    assert (bare.vram_total_bytes, bare.busy_ratio, bare.unique_id, bare.pcie_link_speed_gts) == (None,) * 4
    assert (bare.numa_node, bare.power_watts) == (None, None)
    assert bare.vram_used_bytes == 10_485_760  # the files that are there still count
    assert bare.temperatures_celsius == (("edge", 35.0), ("mem", 33.0))
    assert [r.block for r in bare.ras] == ["gfx"]
    assert _row(bare) == ("card1", "renderD128", 1)
    assert (full.busy_ratio, full.unique_id, full.power_watts) == (0.0, "0x77", 42.0)


def test_unreadable_and_garbage_files_are_none_with_a_warning(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, unreadable=frozenset({"gpu_busy_percent"})),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, unique_id=5),
    ]
    root = build_root(tmp_path, gpus)
    root.write_attr("0000:83:00.0", "mem_info_vram_used", "lots\n")
    root.write_attr("0000:83:00.0", "ras/umc_err_count", "ue: ?\n")
    snap = read_sysfs(root.sys)
    first, second = snap.gpus
    assert first.busy_ratio is None and first.vram_total_bytes == 68_702_699_520
    assert second.vram_used_bytes is None and second.busy_ratio == 0.0
    assert [r.block for r in second.ras] == ["gfx"]
    assert len(snap.warnings) == 3
    busy, vram, ras = snap.warnings
    assert busy.endswith("0000:03:00.0/gpu_busy_percent: unreadable (EISDIR: Is a directory)")
    assert vram.endswith("0000:83:00.0/mem_info_vram_used: line 1: value: not an integer: 'lots'")
    assert "0000:83:00.0/ras/umc_err_count: line 1: ras umc" in ras


def test_procfs_fixture_plain_dirs_parse_to_the_documented_values() -> None:
    snap = read_sysfs(PROCFS_SYS)
    assert snap.warnings == ()
    (gpu,) = snap.gpus
    assert gpu.pci_bus == "0000:09:00.0"
    assert (gpu.vram_total_bytes, gpu.vram_used_bytes, gpu.busy_ratio) == (8573157376, 1490378752, 0.04)
    assert gpu.unique_id == "0x123456789abcdef"  # the file holds 0123456789abcdef
    assert gpu.card is not None and gpu.card.name == "card0" and gpu.render is None
    assert (gpu.device_id, gpu.vbios, gpu.numa_node, gpu.pcie_link_speed_gts, gpu.pcie_link_width) == (
        "0x687f",
        "115-D050PIL-100",
        -1,
        8.0,
        16,
    )
    (i915,) = snap.other_drm
    assert (i915.name, i915.driver, i915.parent, i915.kind) == ("card1", "i915", "0000:00:02.0", "igpu")


# ---- the Source -----------------------------------------------------------------------------------------


def test_source_collects_from_config(tmp_path: Path) -> None:
    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    source = SysfsSource(root.config())
    assert source.name == "sysfs"
    snap = source.collect()
    assert [g.pci_bus for g in snap.gpus] == ["0000:03:00.0"]
    source.close()


def test_source_reads_fixed_files_once_per_directory_and_again_when_it_is_recreated(tmp_path: Path) -> None:
    """The telemetry source keeps what identity files said while the GPU's drm directory (and a KFD node's
    directory) exists; values that change are read every walk; a re-created directory is read afresh; a walk
    without memory (the devices source, check) reads every file."""
    bdf = "0000:03:00.0"
    root = build_root(tmp_path, [FakeGpu(bdf, card=1, render=128, kfd_node=1, busy_percent=10)])
    source = SysfsSource(root.config())
    first = source.collect().gpus[0]
    assert (first.model, first.vbios, first.busy_ratio, first.kfd_node) == (
        "AMD Instinct MI210",
        "113-D67301-063",
        0.1,
        1,
    )
    root.write_attr(bdf, "product_name", "Edited In Place\n")
    root.write_attr(bdf, "gpu_busy_percent", "55\n")
    root.set_partition(bdf, "CPX")
    kept = source.collect().gpus[0]
    assert (kept.model, kept.busy_ratio, kept.compute_partition) == ("AMD Instinct MI210", 0.55, "CPX")
    assert read_sysfs(root.sys).gpus[0].model == "Edited In Place"  # no memory: every file read
    root.gpu(bdf).product_name = "AMD Instinct MI210 (rebound)"
    root.gpu(bdf).vbios = "113-D67301-100"
    root.rebuild()  # the directories are created again, as when the driver binds the GPU again
    fresh = source.collect().gpus[0]
    assert (fresh.model, fresh.vbios) == ("AMD Instinct MI210 (rebound)", "113-D67301-100")
    source.close()


def test_source_reads_a_fixed_file_again_until_it_could_be_read(tmp_path: Path) -> None:
    bdf = "0000:03:00.0"
    root = build_root(tmp_path, [FakeGpu(bdf, card=1, render=128, kfd_node=1, unreadable=frozenset({"vbios_version"}))])
    source = SysfsSource(root.config())
    snap = source.collect()
    assert snap.gpus[0].vbios is None
    assert [e.file for e in snap.read_errors] == ["vbios_version"]
    vbios = root.pci_dir(bdf) / "vbios_version"
    vbios.rmdir()  # unreadable: a directory in the file's place
    vbios.write_text("113-D67301-063\n")
    assert source.collect().gpus[0].vbios == "113-D67301-063"
    source.close()


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_source_error_only_when_the_root_is_unusable(tmp_path: Path, kind: str) -> None:
    sysfs = tmp_path / "sys"
    if kind == "file":
        sysfs.write_text("")
    source = SysfsSource(build_root(tmp_path, []).config(sysfs=sysfs))
    with pytest.raises(SourceError, match="sysfs root"):
        source.collect()


def test_empty_sysfs_root_is_an_empty_snapshot(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    assert read_sysfs(tmp_path / "sys") == SysfsSnapshot()


# ---- garbage never crashes the walk and never costs the GPU -----------------------------------------------

_FUZZED = (
    "gpu_busy_percent",
    "mem_info_vram_total",
    "unique_id",
    "current_link_speed",
    "current_link_width",
    "numa_node",
    "device",
    "uevent",
    "ras/umc_err_count",
    "hwmon/hwmon0/temp1_input",
    "hwmon/hwmon0/power1_average",
)


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory: pytest.TempPathFactory) -> FakeRoot:
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, hwmon=0),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, unique_id=9),
    ]
    return build_root(tmp_path_factory.mktemp("fuzz"), gpus)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(_FUZZED), data=st.binary(max_size=300))
def test_garbage_in_any_attribute_keeps_both_gpus(fuzz_root: FakeRoot, name: str, data: bytes) -> None:
    target = fuzz_root.pci_dir("0000:03:00.0") / name
    original = target.read_bytes()
    try:
        target.write_bytes(data)
        snap = read_sysfs(fuzz_root.sys)
    finally:
        target.write_bytes(original)
    assert [_row(g) for g in snap.gpus] == [("card1", "renderD128", 1), ("card2", "renderD129", 2)]
    assert snap.gpus[1].busy_ratio == 0.0 and snap.gpus[1].unique_id == "0x9"


def test_sysfs_inconsistencies_are_warnings(tmp_path: Path) -> None:
    gpus = [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, unique_id=1),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, unique_id=2),
    ]
    root = build_root(tmp_path, gpus)
    # a dev attribute that disagrees with the minor's name
    (root.pci_dir("0000:83:00.0") / "drm" / "renderD129" / "dev").write_text("226:130\n")
    # a driver link to a function that is gone
    os.symlink(
        "../../../../devices/pci0000:40/0000:40:01.1/0000:43:00.0", root.sys / "bus/pci/drivers/amdgpu/0000:43:00.0"
    )
    # a class/drm entry whose device cannot be resolved
    os.symlink("../../devices/virtual/nowhere/card7", root.sys / "class" / "drm" / "card7")
    snap = read_sysfs(root.sys)
    assert snap.warnings == (
        "bus/pci/drivers/amdgpu/0000:43:00.0: dangling link",
        "class/drm/card7: no device link, skipped",
        "class/drm/renderD129: dev 226:130 does not match the name",
    )
    assert [_row(g) for g in snap.gpus] == [("card1", "renderD128", 1), ("card2", "renderD129", 2)]
    render = snap.gpus[1].render
    assert render is not None and (render.minor, render.dev) == (129, (226, 130))


def test_capture_with_two_nodes_at_one_address_is_refused() -> None:
    with pytest.raises(ValueError, match="share location_id 6400"):
        capture_gpus("mi25-1gpu-plus-copy")


# ---- layouts rebuilt by hand from real public pastes ------------------------------------------------------
# Each test builds the layout a public thread showed (device addresses, numbering, foreign devices, /dev
# modes) with the builder and asserts the mapping the paste shows. The thread is named by address; none of
# its text is copied here.


def test_paste_igpu_on_the_root_bus_and_amdgpu_behind_a_root_port(tmp_path: Path) -> None:
    """oneapi-src/level-zero#69 (`ls -l /sys/dev/char`, device uevents) and jaypipes/ghw#408 (`ll
    /sys/class/drm`): i915 on the root bus at 00:02.0 with card0/renderD128 and connectors, the amdgpu
    behind root port 00:01.0 with card1/renderD129, a VGA-class (0x030000) part."""
    others = [
        FakeOther(
            driver="i915",
            card=0,
            render=128,
            bdf="0000:00:02.0",
            connectors=("DP-1", "HDMI-A-1", "HDMI-A-2"),
            pci_class=0x038000,
            pci_id=(0x8086, 0x3E92),
        )
    ]
    gpu = FakeGpu(
        "0000:01:00.0",
        card=1,
        render=129,
        kfd_node=1,
        device_id=0x73EF,
        pci_class=0x030000,
        subsystem=(0x1DA2, 0xE445),
        pci_path="pci0000:00/0000:00:01.0",
        connectors=("DP-2", "DP-3", "HDMI-A-3"),
    )
    root = build_root(tmp_path, [gpu], others=others)
    char = root.sys / "dev" / "char"
    assert os.readlink(char / "226:0") == "../../devices/pci0000:00/0000:00:02.0/drm/card0"
    assert os.readlink(char / "226:129") == "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/renderD129"
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    assert [(g.pci_bus, *_row(g), g.device_id, g.rocm_smi_index, g.hip_index) for g in snap.gpus] == [
        ("0000:01:00.0", "card1", "renderD129", 1, "0x73ef", 0, 0)
    ]
    assert [(o.name, o.driver, o.parent, o.kind, [m.name for m in o.minors]) for o in snap.other_drm] == [
        ("card0", "i915", "0000:00:02.0", "igpu", ["card0", "renderD128"])
    ]


# gst-wayland-display#22 (`ls -alh /dev/dri/by-path`): a BMC at 63:00.0 with card0 and no render node, and
# eight GPUs numbered in probe order, not address order. The excerpt is cut after a1:00.0; c1:00.0 and
# e1:00.0 fill the two numbers it does not show.
BY_PATH_HOST = {
    "0000:61:00.0": (1, 128),
    "0000:41:00.0": (2, 129),
    "0000:23:00.0": (3, 130),
    "0000:01:00.0": (4, 131),
    "0000:c1:00.0": (5, 132),
    "0000:e1:00.0": (6, 133),
    "0000:a1:00.0": (7, 134),
    "0000:81:00.0": (8, 135),
}


def test_paste_eight_gpus_in_probe_order_and_a_bmc_with_only_a_card(tmp_path: Path) -> None:
    gpus = [
        FakeGpu(bdf, card=card, render=render, kfd_node=card, unique_id=0x100 + card)
        for bdf, (card, render) in BY_PATH_HOST.items()
    ]
    root = build_root(tmp_path, gpus, others=[FakeOther.bmc("0000:63:00.0", card=0)])
    by_path = root.dev / "dri" / "by-path"
    assert sorted(n for n in os.listdir(by_path) if n.startswith("pci-0000:63:00.0")) == ["pci-0000:63:00.0-card"]
    assert os.readlink(by_path / "pci-0000:01:00.0-render") == "../renderD131"
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    got = {g.pci_bus: (g.card.minor if g.card else None, g.render.minor if g.render else None) for g in snap.gpus}
    assert got == BY_PATH_HOST
    # rocm-smi follows the cards, HIP the KFD nodes (here in probe order too); neither follows the address
    assert [g.pci_bus for g in sorted(snap.gpus, key=lambda g: g.rocm_smi_index or 0)] == list(BY_PATH_HOST)
    assert [g.pci_bus for g in sorted(snap.gpus, key=lambda g: g.hip_index or 0)] == list(BY_PATH_HOST)
    assert [(o.name, o.kind, [m.name for m in o.minors]) for o in snap.other_drm] == [("card0", "bmc", ["card0"])]


def test_paste_apu_with_card1_and_no_card0(tmp_path: Path) -> None:
    """hyprwm/aquamarine#81 (eza `ls /dev/dri`): an APU (PCI class 0x038000, "Display controller") with
    card1 and renderD128 only, card0 having gone with simpledrm; Arch's render mode 0666."""
    gpu = FakeGpu("0000:c4:00.0", card=1, render=128, kfd_node=1, device_id=0x150E, pci_class=0x038000)
    root = build_root(tmp_path, [gpu], modes={"render": 0o666})
    assert sorted(os.listdir(root.dev / "dri")) == ["by-path", "card1", "renderD128"]
    snap = read_sysfs(root.sys)
    assert snap.warnings == () and snap.other_drm == ()
    assert [(g.pci_bus, *_row(g), g.rocm_smi_index, g.device_id) for g in snap.gpus] == [
        ("0000:c4:00.0", "card1", "renderD128", 1, 0, "0x150e")
    ]


MI300_HOST = ["0000:05:00.0", "0000:15:00.0", "0000:65:00.0", "0000:75:00.0"]
MI300_HOST += ["0000:85:00.0", "0000:95:00.0", "0000:e5:00.0", "0000:f5:00.0"]


def _mi300_spx_host() -> list[FakeGpu]:
    """Eight MI300-class GPUs in SPX mode behind a BMC on card0: each takes card 1+8g / renderD 128+8g and
    seven spare amdgpu_xcp devices (numbered across the host) take the next seven of each. The 65th primary
    (BMC + 64) does not fit in 0..63: a kernel with extended minors hands it card192."""
    gpus = []
    for g, bdf in enumerate(MI300_HOST):
        parts = []
        for i in range(7):
            card = 2 + 8 * g + i
            parts.append(FakeXcp(xcp=7 * g + i, index=i + 1, card=card if card <= 63 else 192, render=129 + 8 * g + i))
        gpus.append(
            FakeGpu(
                bdf,
                card=1 + 8 * g,
                render=128 + 8 * g,
                kfd_node=1 + g,
                unique_id=0xA000 + g,
                device_id=0x74A1,
                compute_partition="SPX",
                memory_partition="NPS1",
                partitions=tuple(parts),
            )
        )
    return gpus


def test_paste_mi300_spx_host_cards_one_nine_seventeen(tmp_path: Path) -> None:
    """nicolargo/glances#3578 (8 GPUs at card1, card9, ..., card57), ROCm/legacy-rocm-build#4411 (rocm-smi
    finds amdgpu at card1/9/17 and not at card10..16) and ROCm/k8s-device-plugin#157 (`find
    /sys/devices/platform`: amdgpu_xcp.6 holds card8, amdgpu_xcp.29/.36/.38 renderD162/170/172, and the
    last one, amdgpu_xcp.55, card192 with renderD191)."""
    root = build_root(tmp_path, _mi300_spx_host(), others=[FakeOther.bmc("0000:02:00.0", card=0)])
    assert os.path.realpath(root.sys / "class" / "drm" / "renderD162" / "device") == str(
        root.sys / "devices" / "platform" / "amdgpu_xcp.29"
    )
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    assert [(g.pci_bus, g.card.minor if g.card else None, g.rocm_smi_index, g.hip_index) for g in snap.gpus] == [
        (bdf, 1 + 8 * i, i, i) for i, bdf in enumerate(MI300_HOST)
    ]
    assert all(g.partition_index is None and g.compute_partition == "SPX" for g in snap.gpus)
    assert {f"card{n}" for n in range(10, 17)} <= {m.name for o in snap.idle_partitions for m in o.minors}
    idle = {o.parent: o for o in snap.idle_partitions}
    assert len(idle) == 56 and {o.kind for o in idle.values()} == {"amdgpu"}
    assert [m.name for m in idle["amdgpu_xcp.6"].minors] == ["card8", "renderD135"]
    for xcp, render in ((29, 162), (36, 170), (38, 172)):
        assert idle[f"amdgpu_xcp.{xcp}"].minors[1].dev == (226, render)
    assert [(m.name, m.dev) for m in idle["amdgpu_xcp.55"].minors] == [
        ("card192", (226, 192)),
        ("renderD191", (226, 191)),
    ]
    assert snap.other_drm[0].kind == "bmc"


@pytest.mark.parametrize(
    ("major", "mode", "group", "gid"),
    [
        (509, 0o660, "render", 109),  # ROCm/ROCm-docker#93: root render 0660, Debian's render gid
        (234, 0o600, 0, 0),  # ROCm/ROCT-Thunk-Interface#36: no udev rule, crw------- root root
        (238, 0o660, "render", 109),  # ROCm/legacy-rocm-build#1211
    ],
)
def test_paste_kfd_dynamic_major_and_modes(tmp_path: Path, major: int, mode: int, group: str | int, gid: int) -> None:
    gpus = [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1), FakeGpu("0000:83:00.0", card=2, render=129)]
    root = build_root(
        tmp_path, gpus, others=[FakeOther.bmc("0000:63:00.0", card=0)], kfd_major=major, modes={"kfd": mode}
    )
    root.chgrp("kfd", group)
    st = os.lstat(root.dev / "kfd")
    assert (os.major(st.st_rdev), os.minor(st.st_rdev), st.st_mode & 0o7777, st.st_gid) == (major, 0, mode, gid)
    snap = read_sysfs(root.sys)
    assert snap.kfd_dev == (major, 0) and snap.warnings == ()
    assert [(g.pci_bus, g.kfd_node) for g in snap.gpus] == [("0000:03:00.0", 1), ("0000:83:00.0", None)]


def test_paste_sriov_virtual_functions_with_gaps_are_foreign(tmp_path: Path) -> None:
    """saihgupr/frigate-oci-script#15: an iGPU with SR-IOV VFs, card0 and card2..7 with renderD128 and
    renderD130..135 (card1/renderD129 missing), Proxmox modes 0666. No amdgpu at all: no GPU, no warning."""
    others = [FakeOther(driver="i915", card=0, render=128, bdf="0000:00:02.0")]
    others += [FakeOther(driver="i915", card=1 + vf, render=129 + vf, bdf=f"0000:00:02.{vf}") for vf in range(1, 7)]
    root = build_root(tmp_path, [], others=others, kfd_major=None, modes={"card": 0o666, "render": 0o666})
    snap = read_sysfs(root.sys)
    assert snap.gpus == () and snap.warnings == ()
    assert [(o.name, o.kind, [m.minor for m in o.minors]) for o in snap.other_drm] == [
        ("card0", "igpu", [0, 128]),
        *((f"card{1 + vf}", "igpu", [1 + vf, 129 + vf]) for vf in range(1, 7)),
    ]


def test_paste_old_kernel_ttm_entry_and_control_links(tmp_path: Path) -> None:
    """marazmista/radeon-profile#46 and #226 (class/drm holds ttm/amdttm and version beside the cards) and
    canonical/lxd#4591 (a card's drm/ directory holds controlD64 -> card0): neither is a minor."""
    gpus = [FakeGpu("0000:0d:00.0", card=0, render=128, kfd_node=1, connectors=("DP-1", "DVI-D-1", "HDMI-A-1"))]
    plain = read_sysfs(build_root(tmp_path, gpus, name="plain").sys)
    root = build_root(tmp_path, gpus, legacy_drm="ttm", name="legacy")
    assert os.readlink(root.pci_dir("0000:0d:00.0") / "drm" / "controlD64") == "card0"
    assert "ttm" in os.listdir(root.sys / "class" / "drm")
    snap = read_sysfs(root.sys)
    assert snap == plain
    assert [(g.pci_bus, *_row(g)) for g in snap.gpus] == [("0000:0d:00.0", "card0", "renderD128", 1)]


def test_paste_kfd_topology_with_only_the_cpu_node(tmp_path: Path) -> None:
    """RadeonOpenCompute/ROCm_Documentation#111 (`ls -lR topology`: node 0 only, a CPU): amdgpu is bound but
    KFD lists no GPU; the GPU keeps its DRM identity and has no KFD node or HIP index."""
    snap = read_sysfs(build_root(tmp_path, [FakeGpu("0000:03:00.0", card=0, render=128)], cpu_nodes=1).sys)
    assert snap.kfd_nodes == () and snap.kfd_dev == (510, 0) and snap.warnings == ()
    assert [(g.pci_bus, *_row(g), g.hip_index) for g in snap.gpus] == [
        ("0000:03:00.0", "card0", "renderD128", None, None)
    ]


def test_paste_kfd_order_reversed_from_the_addresses(tmp_path: Path) -> None:
    """tmac1973/llama-toolchest#121: four GPUs at 03/43/83/c7 whose KFD (HIP) order is c7, 83, 43, 03, with
    a BMC on card0. HIP indices follow the KFD nodes, whatever the addresses."""
    order = ["0000:c7:00.0", "0000:83:00.0", "0000:43:00.0", "0000:03:00.0"]
    gpus = [FakeGpu(b, card=1 + i, render=128 + i, kfd_node=1 + i, unique_id=1 + i) for i, b in enumerate(order)]
    snap = read_sysfs(build_root(tmp_path, gpus, others=[FakeOther.bmc("0000:c2:00.0", card=0)]).sys)
    assert [(g.pci_bus, g.hip_index) for g in snap.gpus] == [
        ("0000:03:00.0", 3),
        ("0000:43:00.0", 2),
        ("0000:83:00.0", 1),
        ("0000:c7:00.0", 0),
    ]


def test_on_card_switch_slot_link_is_read_from_its_upstream_port(tmp_path: Path) -> None:
    """nokyan/resources#512 and ilya-zlobintsev/amdgpu-sysfs-rs#6: a Navi board's own PCIe switch
    (root port -> 01:00.0 upstream -> 02:00.0 downstream -> 03:00.0 GPU); the GPU function reports the
    switch-internal 32 GT/s x16, the upstream port what the slot negotiated."""
    gpus = [
        FakeGpu(
            "0000:03:00.0",
            card=1,
            render=128,
            kfd_node=1,
            link_speed="32.0 GT/s PCIe",
            link_width=16,
            card_switch=("16.0 GT/s PCIe", 8),
        ),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, link_speed="8.0 GT/s PCIe", link_width=16),
    ]
    root = build_root(tmp_path, gpus)
    assert os.readlink(root.sys / "class" / "drm" / "card1").startswith(
        "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0/drm/"
    )
    gpus_by = _by_bdf(read_sysfs(root.sys))
    assert (gpus_by["0000:03:00.0"].pcie_link_speed_gts, gpus_by["0000:03:00.0"].pcie_link_width) == (16.0, 8)
    # behind the CPU's root port only (vendor 0x1022): the GPU's own link
    assert (gpus_by["0000:83:00.0"].pcie_link_speed_gts, gpus_by["0000:83:00.0"].pcie_link_width) == (8.0, 16)


def test_paste_twelve_gpu_rig_behind_riser_switches(tmp_path: Path) -> None:
    """ethereum-mining/ethminer#2077 (`ls -l /sys/class/drm`, a 12-GPU rig whose sensors stopped at 7):
    cards 0..11 behind two levels of riser switches (root ports 00:15.0/00:15.1), card10 and card11 beside
    connectors numbered across the host (card10-HDMI-A-11), and the DKMS module's amdttm entry. `ls` sorts
    card10 before card2; the rocm-smi rank must follow the card number."""
    gpus = []
    for n in range(12):
        port, bus = ("0000:00:15.0", 0x02) if n < 6 else ("0000:00:15.1", 0x0B)
        slot = n % 6 + 1
        bdf = f"0000:{bus + 2 + slot:02x}:00.0"
        path = f"pci0000:00/{port}/0000:{bus:02x}:00.0/0000:{bus + 1:02x}:{slot:02x}.0"
        gpus.append(
            FakeGpu(
                bdf,
                card=n,
                render=128 + n,
                kfd_node=1 + n,
                unique_id=None,
                device_id=0x67DF,
                pci_class=0x030000,
                pci_path=path,
                connectors=(f"HDMI-A-{n + 1}",),
            )
        )
    root = build_root(tmp_path, gpus, legacy_drm="amdttm")
    drm = root.sys / "class" / "drm"
    assert os.readlink(drm / "card10") == (
        "../../devices/pci0000:00/0000:00:15.1/0000:0b:00.0/0000:0c:05.0/0000:12:00.0/drm/card10"
    )
    assert "card10-HDMI-A-11" in os.listdir(drm) and "amdttm" in os.listdir(drm)
    snap = read_sysfs(root.sys)
    assert snap.warnings == () and snap.other_drm == ()
    assert len(snap.gpus) == 12
    ranks = sorted((g.rocm_smi_index, g.card.name if g.card else None, g.hip_index) for g in snap.gpus)
    assert ranks == [(n, f"card{n}", n) for n in range(12)]


@pytest.mark.parametrize(
    ("driver", "parent", "kind"),
    [
        ("ast", "0000:63:00.0", "bmc"),
        ("mgag200", "0000:03:00.0", "bmc"),
        ("hibmc-drm", "0000:05:00.0", "bmc"),
        ("i915", "0000:00:02.0", "igpu"),
        ("xe", "0000:00:02.0", "igpu"),
        ("simple-framebuffer", "simple-framebuffer.0", "firmware"),
        ("efidrm", "efi-framebuffer.0", "firmware"),
        (None, "vesa-framebuffer.0", "firmware"),  # driver link unreadable: the sysfb device name decides
        ("virtio_gpu", "virtio0", "virtual"),
        ("hyperv_drm", "5620e0c7-8062-4dce-aeb7-520c7ef76171", "virtual"),
        ("nouveau", "0000:01:00.0", "other"),
        (None, None, "other"),
    ],
)
def test_other_kind(driver: str | None, parent: str | None, kind: str) -> None:
    assert other_kind(driver, parent) == kind


def test_paste_simpledrm_kept_beside_an_apu_and_another_vendor_dgpu(tmp_path: Path) -> None:
    """pop-os/cosmic-epoch#535 (`ls -l /dev/dri` and drm-info): simpledrm still holds card0 next to two real
    GPUs at card1/card2 with renderD128/129 (addresses here are illustrative). Only the amdgpu one is a GPU;
    rocm-smi would count it first even though it is card1 or card2."""
    others = [
        FakeOther.simpledrm(card=0),
        FakeOther(driver="nvidia", card=1, render=128, bdf="0000:01:00.0", connectors=("HDMI-A-1",)),
    ]
    gpu = FakeGpu("0000:05:00.0", card=2, render=129, kfd_node=1, device_id=0x1681, pci_class=0x030000)
    snap = read_sysfs(build_root(tmp_path, [gpu], others=others, modes={"card": 0o660, "render": 0o660}).sys)
    assert snap.warnings == ()
    assert [(g.pci_bus, *_row(g), g.rocm_smi_index, g.hip_index) for g in snap.gpus] == [
        ("0000:05:00.0", "card2", "renderD129", 1, 0, 0)
    ]
    assert [(o.name, o.kind, [m.name for m in o.minors]) for o in snap.other_drm] == [
        ("card0", "firmware", ["card0"]),
        ("card1", "other", ["card1", "renderD128"]),
    ]


def test_driver_version_of_a_dkms_build(tmp_path: Path) -> None:
    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    assert read_sysfs(root.sys).driver_version is None  # the in-kernel driver has no module version
    (root.sys / "module" / "amdgpu").mkdir(parents=True, exist_ok=True)
    (root.sys / "module" / "amdgpu" / "version").write_text("6.10.5\n")
    assert read_sysfs(root.sys).driver_version == "6.10.5"
