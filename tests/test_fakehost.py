"""The fake host builder's parts the demo needs (issue 24): the MI300X node built from the shipped
``mi300x-cpx-8gpu`` capture, a host without device nodes (a user's), changes made in place or swapped in whole
while the tree is read, and two GPUs that probe in each other's place."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from fakeroot import FakeRoot, mi300x_node

from exporter.fakehost import builder
from exporter.sources.devices import read_devices
from exporter.sources.sysfs import read_sysfs

SHIPPED = Path(builder.__file__).parent / "data" / "kfd-topology" / "mi300x-cpx-8gpu"
A, B = "0000:05:00.0", "0000:27:00.0"


def demo_host(tmp_path: Path, **kw: object) -> FakeRoot:
    return mi300x_node(tmp_path, kfd_capture="mi300x-cpx-8gpu", name="root", **kw)  # type: ignore[arg-type]


def test_the_capture_node_is_the_capture_with_the_mi300x_files(tmp_path: Path) -> None:
    root = demo_host(tmp_path)
    assert builder.capture_dir("mi300x-cpx-8gpu") == SHIPPED  # the package's copy, found first
    assert [g.bdf for g in root.gpus] == [
        f"0000:{bus:02x}:00.0" for bus in (5, 0x27, 0x47, 0x65, 0x85, 0xA7, 0xC7, 0xE5)
    ]
    nodes = root.sys / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for n in sorted(int(x) for x in os.listdir(SHIPPED / "nodes")):
        if n >= 2:  # the GPU nodes verbatim (the two CPU nodes are generated)
            assert (nodes / str(n) / "properties").read_text() == (
                SHIPPED / "nodes" / str(n) / "properties"
            ).read_text()
    sysfs = read_sysfs(root.sys, with_state=False)
    assert len(sysfs.gpus) == 63  # 8 x 8 partitions, the last one past the 64 card minors (as captured)
    pci = root.pci_dir(A)
    assert (pci / "product_name").read_text() == "AMD Instinct MI300X\n"
    assert (pci / "current_compute_partition").read_text() == "CPX\n"
    assert (pci / "gpu_metrics").stat().st_size > 0
    assert os.readlink(root.sys / "class" / "drm" / "card0").endswith("/0000:c2:00.0/drm/card0")  # the BMC


def test_a_host_without_device_nodes_is_read_like_a_container_given_none(tmp_path: Path) -> None:
    root = demo_host(tmp_path, device_nodes=False)
    assert (root.dev / "dri").is_dir() and not os.listdir(root.dev / "dri")
    assert not (root.dev / "kfd").exists()
    devices = read_devices(root.config(), read_sysfs(root.sys, with_state=False))
    assert devices.nodes and not any(n.exists for n in devices.nodes)  # sysfs names them, dev has none
    root.swap_probe_order(A, B)  # a rebuild makes none either
    assert not os.listdir(root.dev / "dri")


def test_relabel_changes_the_nodes_in_place(tmp_path: Path) -> None:
    root = demo_host(tmp_path)
    render = root.dev / "dri" / "renderD128"
    before = render.stat()
    root.set_gid("render", 992, relabel=False)
    assert render.stat().st_gid == 109
    root.relabel()
    after = render.stat()
    assert (after.st_ino, after.st_gid, after.st_mode) == (before.st_ino, 992, before.st_mode)
    assert (root.dev / "kfd").stat().st_gid == 992 and (root.dev / "dri" / "card1").stat().st_gid == 44
    assert "render:x:992:" in (root.etc / "group").read_text().splitlines()


def test_swap_probe_order_trades_every_number_of_the_two_gpus(tmp_path: Path) -> None:
    root = demo_host(tmp_path)
    before = {g.bdf: (g.card, g.render, g.kfd_node, [(p.xcp, p.render) for p in g.partitions]) for g in root.gpus}
    old_boot = root.boot_id_path.read_text()
    root.swap_probe_order(A, B)
    after = {g.bdf: (g.card, g.render, g.kfd_node, [(p.xcp, p.render) for p in g.partitions]) for g in root.gpus}
    assert after[A] == before[B] and after[B] == before[A]
    assert {k: v for k, v in after.items() if k not in (A, B)} == {k: v for k, v in before.items() if k not in (A, B)}
    assert root.boot_id_path.read_text() != old_boot
    device = os.path.realpath(root.sys / "class" / "drm" / "renderD128" / "device")
    assert device.endswith(f"/{B}")
    with pytest.raises(ValueError, match="partitions"):
        root.gpu(A).partitions = root.gpu(A).partitions[:3]
        root.swap_probe_order(A, B)


def test_a_staged_rebuild_swaps_in_whole_while_the_tree_is_read(tmp_path: Path) -> None:
    root = demo_host(tmp_path)
    root.swap_probe_order(A, B, rebuild=False)
    swap_in = root.staged_rebuild()
    # built aside: the tree being read is untouched until the swap
    assert os.path.realpath(root.sys / "class" / "drm" / "renderD128" / "device").endswith(f"/{A}")
    seen: set[str] = set()
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        for _ in range(100_000):  # bounded; ends when the swap is done
            if stop.is_set():
                return
            try:
                # one lookup each (a path resolved link by link may straddle the swap: the demo swaps between reads)
                seen.add(os.readlink(root.sys / "class" / "drm" / "renderD128").split("/")[-3])
                if not (root.dev / "dri" / "renderD128").exists():
                    problems.append("renderD128 missing")
            except OSError as exc:
                problems.append(repr(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    swap_in()
    stop.set()
    thread.join(timeout=60)
    assert not problems
    assert seen <= {A, B}  # the old tree or the new one, nothing in between
    assert os.path.realpath(root.sys / "class" / "drm" / "renderD128" / "device").endswith(f"/{B}")
    assert not (root.root / ".staged").exists()
    # the same tree a plain rebuild makes
    plain = demo_host(tmp_path / "plain")
    plain.swap_probe_order(A, B)
    assert read_sysfs(root.sys, with_state=False).gpus == read_sysfs(plain.sys, with_state=False).gpus
