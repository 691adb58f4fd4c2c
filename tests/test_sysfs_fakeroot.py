"""The fake-root builder lays the tree out the way the kernel and udev do (sysfs-devfs.md section 1).

These checks look at the tree with plain os calls, not through the code under test, so a builder bug
cannot hide behind a reader bug.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from fakeroot import KFD_CAPTURES, FakeGpu, FakeOther, build_root, capture_gpus, location_id


def _gpu_pair() -> list[FakeGpu]:
    return [
        FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1, connectors=("DP-1",), unique_id=0xA),
        FakeGpu("0000:83:00.0", card=2, render=129, kfd_node=2, unique_id=0xB),
    ]


def _rdev(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode), f"{path} is not a character device"
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def test_sysfs_links_are_relative_and_resolve_like_the_kernel_s(tmp_path: Path) -> None:
    root = build_root(tmp_path, _gpu_pair(), others=[FakeOther.bmc("0000:63:00.0", card=0)])
    drm = root.sys / "class" / "drm"
    assert sorted(os.listdir(drm)) == [
        "card0",
        "card0-VGA-1",
        "card1",
        "card1-DP-1",
        "card2",
        "renderD128",
        "renderD129",
        "version",
    ]
    assert os.readlink(drm / "card0") == "../../devices/pci0000:60/0000:60:01.1/0000:63:00.0/drm/card0"
    assert os.readlink(drm / "renderD128") == "../../devices/pci0000:00/0000:00:01.1/0000:03:00.0/drm/renderD128"
    assert os.readlink(drm / "card1-DP-1") == "../../devices/pci0000:00/0000:00:01.1/0000:03:00.0/drm/card1/card1-DP-1"
    minor_dir = root.sys / "devices/pci0000:00/0000:00:01.1/0000:03:00.0/drm/renderD128"
    assert os.readlink(minor_dir / "device") == "../../../0000:03:00.0"
    assert (
        Path(os.path.realpath(drm / "renderD128" / "device"))
        == root.sys / "devices/pci0000:00/0000:00:01.1/0000:03:00.0"
    )
    assert (minor_dir / "dev").read_text() == "226:128\n"
    assert (minor_dir / "uevent").read_text() == "MAJOR=226\nMINOR=128\nDEVNAME=dri/renderD128\nDEVTYPE=drm_minor\n"
    drv = root.sys / "bus" / "pci" / "drivers" / "amdgpu"
    assert os.readlink(drv / "0000:83:00.0") == "../../../../devices/pci0000:80/0000:80:01.1/0000:83:00.0"
    assert {"bind", "unbind", "new_id", "module"} <= set(os.listdir(drv))
    assert os.path.realpath(root.sys / "module" / "amdgpu" / "drivers" / "pci:amdgpu") == str(drv)
    pci = root.pci_dir("0000:03:00.0")
    assert os.readlink(pci / "driver") == "../../../../bus/pci/drivers/amdgpu"
    assert (pci / "unique_id").read_text() == "000000000000000a\n"
    assert "PCI_SLOT_NAME=0000:03:00.0" in (pci / "uevent").read_text().splitlines()
    assert os.readlink(root.sys / "dev" / "char" / "226:129").endswith("/0000:83:00.0/drm/renderD129")
    hwmon = os.listdir(pci / "hwmon")
    assert hwmon == ["hwmon0"]
    assert os.path.realpath(root.sys / "class" / "hwmon" / "hwmon0") == str(pci / "hwmon" / "hwmon0")
    # BMC: its own driver, no render node
    bmc = root.sys / "devices/pci0000:60/0000:60:01.1/0000:63:00.0"
    assert os.readlink(bmc / "driver") == "../../../../bus/pci/drivers/ast"
    assert not (bmc / "drm" / "renderD128").exists()


def test_kfd_class_link_dev_and_topology(tmp_path: Path) -> None:
    gpus = [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=2, gpu_id=24248)]
    root = build_root(tmp_path, gpus, kfd_major=243, cpu_nodes=2)
    kfd = root.sys / "class" / "kfd" / "kfd"
    assert os.readlink(kfd) == "../../devices/virtual/kfd/kfd"
    assert (kfd / "dev").read_text() == "243:0\n"
    nodes = kfd / "topology" / "nodes"
    assert sorted(os.listdir(nodes), key=int) == ["0", "1", "2"]
    assert (nodes / "0" / "gpu_id").read_text() == "0\n"
    assert "simd_count 0\n" in (nodes / "1" / "properties").read_text()
    assert (nodes / "2" / "gpu_id").read_text() == "24248\n"
    # a GPU on a CPU node's number is a spec error, not a silently odd tree
    with pytest.raises(ValueError, match="CPU node"):
        build_root(tmp_path, _gpu_pair(), cpu_nodes=2, name="other")


def test_kfd_properties_generated_in_kernel_key_order(tmp_path: Path) -> None:
    root = build_root(tmp_path, _gpu_pair())
    text = (root.sys / "class/kfd/kfd/topology/nodes/2/properties").read_text()
    lines = dict(line.split() for line in text.splitlines())
    assert (lines["location_id"], lines["domain"], lines["drm_render_minor"], lines["unique_id"]) == (
        str(0x8300),
        "0",
        "129",
        "11",
    )
    assert text.splitlines()[0] == "cpu_cores_count 0" and text.splitlines()[-1].startswith("max_engine_clk_ccompute")


def test_capture_properties_are_copied_verbatim(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi308x-cpx-2socket"), cpu_nodes=2)
    nodes = root.sys / "class/kfd/kfd/topology/nodes"
    for n in (2, 5, 18, 33):
        assert (nodes / str(n) / "properties").read_text() == (
            KFD_CAPTURES / "mi308x-cpx-2socket" / "nodes" / str(n) / "properties"
        ).read_text()
        assert (nodes / str(n) / "gpu_id").read_text().strip() == (
            KFD_CAPTURES / "mi308x-cpx-2socket" / "nodes" / str(n) / "gpu_id"
        ).read_text().strip()
    assert (nodes / "2" / "name").read_text() == "ip discovery\n"


def test_partitions_on_platform_devices(tmp_path: Path) -> None:
    root = build_root(tmp_path, capture_gpus("mi300x-cpx-8gpu"), others=[FakeOther.bmc()], cpu_nodes=2)
    plat = root.sys / "devices" / "platform"
    assert len([d for d in os.listdir(plat) if d.startswith("amdgpu_xcp.")]) == 56
    assert (
        os.readlink(root.sys / "class" / "drm" / "renderD129") == "../../devices/platform/amdgpu_xcp.0/drm/renderD129"
    )
    assert os.readlink(plat / "amdgpu_xcp.0" / "drm" / "renderD129" / "device") == "../../../amdgpu_xcp.0"
    # the 56th partition device exists but its minors did not register (card64 is past the primaries)
    assert (plat / "amdgpu_xcp.55").is_dir() and not (plat / "amdgpu_xcp.55" / "drm").exists()
    assert not (root.dev / "dri" / "card64").exists()
    assert _rdev(root.dev / "dri" / "renderD190") == (226, 190)
    assert os.readlink(root.dev / "dri" / "by-path" / "platform-amdgpu_xcp.0-render") == "../renderD129"
    assert (root.pci_dir("0000:05:00.0") / "current_compute_partition").read_text() == "CPX\n"


def test_dev_nodes_are_character_devices_with_udev_permissions(tmp_path: Path) -> None:
    root = build_root(tmp_path, _gpu_pair(), others=[FakeOther.bmc("0000:63:00.0", card=0)], kfd_major=510)
    dri = root.dev / "dri"
    assert _rdev(root.dev / "kfd") == (510, 0)
    assert _rdev(dri / "card0") == (226, 0)
    assert _rdev(dri / "renderD129") == (226, 129)
    kfd, card, render = (os.lstat(p) for p in (root.dev / "kfd", dri / "card1", dri / "renderD128"))
    assert (stat.S_IMODE(kfd.st_mode), kfd.st_uid, kfd.st_gid) == (0o660, 0, 109)
    assert (stat.S_IMODE(card.st_mode), card.st_gid) == (0o660, 44)
    assert (stat.S_IMODE(render.st_mode), render.st_gid) == (0o660, 109)
    assert stat.S_IMODE(os.stat(dri).st_mode) == 0o755
    by_path = dri / "by-path"
    assert sorted(os.listdir(by_path)) == [
        "pci-0000:03:00.0-card",
        "pci-0000:03:00.0-render",
        "pci-0000:63:00.0-card",
        "pci-0000:83:00.0-card",
        "pci-0000:83:00.0-render",
    ]
    assert os.readlink(by_path / "pci-0000:83:00.0-render") == "../renderD129"
    assert "render:x:109:" in (root.etc / "group").read_text().splitlines()
    assert root.boot_id_path.read_text() == "8f2d4c1e-6b3a-4f59-9d0e-2a7c5b1e3f40\n"


def test_systemd_default_modes_and_numeric_groups(tmp_path: Path) -> None:
    root = build_root(
        tmp_path,
        _gpu_pair(),
        modes={"render": 0o666, "kfd": 0o666},
        groups={"kfd": 28},  # a gid with no name in etc/group
        gids={"video": 39, "render": 993},  # Fedora-style
    )
    kfd, render, card = (os.lstat(root.dev / p) for p in ("kfd", "dri/renderD128", "dri/card1"))
    assert (stat.S_IMODE(kfd.st_mode), kfd.st_gid) == (0o666, 28)
    assert (stat.S_IMODE(render.st_mode), render.st_gid) == (0o666, 993)
    assert (stat.S_IMODE(card.st_mode), card.st_gid) == (0o660, 39)


def test_mutators_simulate_reboots_and_drift(tmp_path: Path) -> None:
    root = build_root(tmp_path, _gpu_pair())
    (root.state_dir / "baseline.json").write_text("{}")
    root.chmod("kfd", 0o600)
    root.chgrp("dri/renderD128", "video")
    root.renumber("0000:03:00.0", card=3, render=130)
    new_boot = root.reboot()
    # the state dir and the overrides survive the rebuild
    assert (root.state_dir / "baseline.json").read_text() == "{}"
    assert root.boot_id_path.read_text() == new_boot + "\n"
    assert stat.S_IMODE(os.lstat(root.dev / "kfd").st_mode) == 0o600
    assert not (root.dev / "dri" / "renderD128").exists()
    assert _rdev(root.dev / "dri" / "renderD130") == (226, 130)
    assert os.readlink(root.dev / "dri" / "by-path" / "pci-0000:03:00.0-render") == "../renderD130"
    assert "renderD128" not in os.listdir(root.sys / "class" / "drm")
    props = (root.sys / "class/kfd/kfd/topology/nodes/1/properties").read_text()
    assert "drm_render_minor 130\n" in props

    root.renumber("0000:03:00.0", render=128)  # the chgrp was on the path: it applies again
    assert os.lstat(root.dev / "dri" / "renderD128").st_gid == 44
    root.renumber("0000:03:00.0", render=130)

    root.set_gid("render", 110)
    assert "render:x:110:" in (root.etc / "group").read_text().splitlines()
    assert os.lstat(root.dev / "dri" / "renderD129").st_gid == 110

    root.set_kfd_major(238)
    assert _rdev(root.dev / "kfd") == (238, 0)
    assert (root.sys / "class" / "kfd" / "kfd" / "dev").read_text() == "238:0\n"

    removed = root.remove_gpu("0000:83:00.0")
    assert removed.bdf == "0000:83:00.0"
    assert not (root.sys / "bus" / "pci" / "drivers" / "amdgpu" / "0000:83:00.0").exists()
    assert not (root.dev / "dri" / "renderD129").exists()

    root.mknod("dri/renderD130", 226, 131)  # a stale static /dev entry
    assert _rdev(root.dev / "dri" / "renderD130") == (226, 131)
    root.set_boot_id("b")
    assert root.boot_id_path.read_text() == "b\n"


def test_duplicate_pci_addresses_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="share a PCI address"):
        build_root(tmp_path, _gpu_pair(), others=[FakeOther.bmc("0000:03:00.0")])


def test_location_id_matches_the_captures_encoding() -> None:
    assert location_id("0000:63:00.0") == 25344  # MI210 node 2
    assert location_id("0000:05:00.7") == 1287  # MI300X partition


def test_config_points_into_the_root(tmp_path: Path) -> None:
    root = build_root(tmp_path, [])
    cfg = root.config(top_processes=5)
    assert (cfg.sysfs, cfg.devfs, cfg.procfs, cfg.rootfs, cfg.state_dir) == (
        root.sys,
        root.dev,
        root.proc,
        root.root,
        root.state_dir,
    )
    assert cfg.top_processes == 5


def test_root_bus_functions_sit_directly_under_the_host_bridge(tmp_path: Path) -> None:
    """An iGPU on bus 0 is ``pci0000:00/0000:00:02.0`` (level-zero#69, ghw#408), not behind a root port;
    a function on any other bus is behind one; ``pci_path`` places it exactly."""
    others = [FakeOther.igpu("0000:00:02.0", card=0, render=128)]
    gpus = [
        FakeGpu("0000:01:00.0", card=1, render=129, pci_path="pci0000:00/0000:00:01.0"),
        FakeGpu("0000:43:00.0", card=2, render=130),
    ]
    root = build_root(tmp_path, gpus, others=others)
    drm = root.sys / "class" / "drm"
    assert os.readlink(drm / "card0") == "../../devices/pci0000:00/0000:00:02.0/drm/card0"
    assert os.readlink(drm / "card0-eDP-1") == "../../devices/pci0000:00/0000:00:02.0/drm/card0/card0-eDP-1"
    assert os.readlink(drm / "renderD129") == "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/drm/renderD129"
    assert os.readlink(drm / "card2") == "../../devices/pci0000:40/0000:40:01.1/0000:43:00.0/drm/card2"
    igpu = root.pci_dir("0000:00:02.0")
    assert os.readlink(igpu / "driver") == "../../../bus/pci/drivers/i915"
    assert os.readlink(root.pci_dir("0000:01:00.0") / "driver") == "../../../../bus/pci/drivers/amdgpu"


def test_pci_uevent_class_and_ids_as_the_pci_core_writes_them(tmp_path: Path) -> None:
    gpu = FakeGpu("0000:0b:00.0", card=0, render=128, device_id=0x73BF, pci_class=0x030000, subsystem=(0x1DA2, 0xE438))
    other = FakeOther(driver="ast", card=1, bdf="0000:c2:00.0", pci_id=(0x1A03, 0x2000))
    root = build_root(tmp_path, [gpu], others=[other])
    pci = root.pci_dir("0000:0b:00.0")
    assert (pci / "uevent").read_text().splitlines() == [
        "DRIVER=amdgpu",
        "PCI_CLASS=30000",  # %X of the class: no 0x, no leading zero
        "PCI_ID=1002:73BF",
        "PCI_SUBSYS_ID=1DA2:E438",
        "PCI_SLOT_NAME=0000:0b:00.0",
        "MODALIAS=pci:v00001002d000073BFsv00001DA2sd0000E438bc03sc00i00",
    ]
    assert [(pci / f).read_text() for f in ("class", "vendor", "device", "subsystem_vendor", "subsystem_device")] == [
        "0x030000\n",
        "0x1002\n",
        "0x73bf\n",
        "0x1da2\n",
        "0xe438\n",
    ]
    assert (root.pci_dir("0000:c2:00.0") / "uevent").read_text().splitlines()[:3] == [
        "DRIVER=ast",
        "PCI_CLASS=30000",
        "PCI_ID=1A03:2000",
    ]


def test_on_card_switch_ports_and_root_port_files(tmp_path: Path) -> None:
    gpu = FakeGpu("0000:03:00.0", card=1, render=128, link_speed="32.0 GT/s PCIe", card_switch=("8.0 GT/s PCIe", 4))
    root = build_root(tmp_path, [gpu])
    pci = root.pci_dir("0000:03:00.0")
    assert pci == root.sys / "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0"
    down, up, port = pci.parent, pci.parent.parent, pci.parent.parent.parent
    assert [(d / "vendor").read_text() for d in (down, up, port)] == ["0x1002\n", "0x1002\n", "0x1022\n"]
    assert {(d / "class").read_text() for d in (down, up, port)} == {"0x060400\n"}
    assert ((up / "current_link_speed").read_text(), (up / "current_link_width").read_text()) == (
        "8.0 GT/s PCIe\n",
        "4\n",
    )
    assert (pci / "current_link_speed").read_text() == "32.0 GT/s PCIe\n"
    assert not (down / "current_link_speed").exists()
    with pytest.raises(ValueError, match="two bus numbers"):
        build_root(tmp_path, [FakeGpu("0000:01:00.0", card_switch=("8.0 GT/s PCIe", 4))], name="nobus")


def test_legacy_drm_entries(tmp_path: Path) -> None:
    """Older kernels: class/drm/ttm (a virtual device, radeon-profile#46) and controlD<64+N> -> card<N>
    inside the card's drm/ directory (lxd#4591)."""
    root = build_root(tmp_path, _gpu_pair(), others=[FakeOther.bmc("0000:63:00.0", card=0)], legacy_drm="ttm")
    drm = root.sys / "class" / "drm"
    assert os.readlink(drm / "ttm") == "../../devices/virtual/drm/ttm"
    assert os.readlink(root.pci_dir("0000:03:00.0") / "drm" / "controlD65") == "card1"
    assert os.readlink(root.pci_dir("0000:63:00.0") / "drm" / "controlD64") == "card0"
    assert not any(n.startswith("controlD") for n in os.listdir(drm))
