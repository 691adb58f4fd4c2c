"""Device nodes: host group names, ACLs, the permission decision (checked against the kernel), by-path links.

The devices source opens nothing here (``--devices.probe`` is off by default; tests/test_devices_probe.py turns
it on)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from fakeroot import two_gpu_root

from exporter.model.devices import ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER, ACL_USER_OBJ, AclEntry
from exporter.model.devices import ProcessCreds as Creds
from exporter.parsers.host import parse_group_file, parse_passwd_file
from exporter.sources.devices import (
    can_open_rw,
    grant_gids,
    parse_acl_xattr,
    read_devices,
)
from exporter.sources.sysfs import read_sysfs

A, B = "0000:03:00.0", "0000:83:00.0"
NOBODY = 65534


def acl_bytes(*entries: tuple[int, int, int | None]) -> bytes:
    out = struct.pack("<I", 2)
    for tag, perm, ident in entries:
        out += struct.pack("<HHI", tag, perm, 0xFFFFFFFF if ident is None else ident)
    return out


def run_forked(uid: int, gid: int, groups: list[int], fn: Callable[[], object]) -> object:
    """Run ``fn`` in a forked child that dropped to uid/gid/groups; return what it returned (as JSON).

    A fork, not a new interpreter: the interpreter lives under /root (0700), which nobody cannot read.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(r)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            data = json.dumps({"ok": fn()}).encode()
            status = 0
        except BaseException as e:
            data = json.dumps({"error": repr(e)}).encode()
        with os.fdopen(w, "wb") as out:
            out.write(data)
        os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as inp:
        raw = inp.read()
    _, status = os.waitpid(pid, 0)
    result = json.loads(raw)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, result
    return result["ok"]


# pure parsers ----------------------------------------------------------------------------------------


def test_group_file_garbage_is_a_warning() -> None:
    text = "root:x:0:\nvideo:x:44:alice\n+nisgroup\nbroken line\nrender:x:109:\nrender2:x:109:\n"
    by_name, by_gid, warnings = parse_group_file(text)
    assert by_name == {"root": 0, "video": 44, "render": 109, "render2": 109}
    assert by_gid[109] == "render"  # the first name of a shared gid, as getgrgid() gives
    assert warnings == ["group line 4: not name:x:gid:members"]


def test_passwd_file() -> None:
    by_uid, warnings = parse_passwd_file("root:x:0:0:root:/root:/bin/sh\nnope\n")
    assert by_uid == {0: "root"} and len(warnings) == 1


def test_acl_xattr_round_trip_and_garbage() -> None:
    raw = acl_bytes((ACL_USER_OBJ, 6, None), (ACL_GROUP, 6, 1000), (ACL_MASK, 6, None), (ACL_OTHER, 0, None))
    assert parse_acl_xattr(raw) == (
        AclEntry(ACL_USER_OBJ, 6, None),
        AclEntry(ACL_GROUP, 6, 1000),
        AclEntry(ACL_MASK, 6, None),
        AclEntry(ACL_OTHER, 0, None),
    )
    with pytest.raises(ValueError):
        parse_acl_xattr(raw[:-3])
    with pytest.raises(ValueError):
        parse_acl_xattr(struct.pack("<I", 1))


USER = Creds(1000, 1000, (1000,))
ACL_RENDER_PLUS_1001 = (
    AclEntry(ACL_USER_OBJ, 6, None),
    AclEntry(ACL_GROUP_OBJ, 6, None),
    AclEntry(ACL_GROUP, 6, 1001),
    AclEntry(ACL_MASK, 6, None),
    AclEntry(ACL_OTHER, 0, None),
)


@pytest.mark.parametrize(
    ("mode", "uid", "gid", "acl", "creds", "ok", "gids"),
    [
        (0o660, 0, 109, (), Creds(0, 0, ()), True, ()),  # root
        (0o660, 0, 109, (), USER, False, (109,)),
        (0o660, 0, 109, (), Creds(1000, 1000, (1000, 109)), True, ()),
        (0o660, 0, 109, (), Creds(1000, 109, ()), True, ()),  # primary group counts
        (0o666, 0, 109, (), USER, True, ()),
        (0o600, 0, 0, (), USER, False, ()),  # no group can help: needs root or a udev rule
        (0o606, 0, 109, (), Creds(1000, 1000, (109,)), False, ()),  # group class matched: other bits unused
        (0o600, 1000, 109, (), USER, True, ()),  # owner
        (0o060, 1000, 109, (), Creds(1000, 109, ()), False, ()),  # owner class wins even when the group allows
        (0o660, 0, 109, ACL_RENDER_PLUS_1001, Creds(1000, 1001, ()), True, ()),  # named group in the ACL
        (0o660, 0, 109, ACL_RENDER_PLUS_1001, USER, False, (109, 1001)),
        (
            0o640,
            0,
            109,
            (*ACL_RENDER_PLUS_1001[:3], AclEntry(ACL_MASK, 4, None), ACL_RENDER_PLUS_1001[4]),
            Creds(1000, 1001, ()),
            False,
            (),
        ),  # the mask takes write away from every group entry
        ((0o660), 0, 109, (AclEntry(ACL_USER, 6, 1000), AclEntry(ACL_MASK, 6, None)), USER, True, ()),
    ],
)
def test_can_open_rw(
    mode: int, uid: int, gid: int, acl: tuple[AclEntry, ...], creds: Creds, ok: bool, gids: tuple[int, ...]
) -> None:
    assert can_open_rw(mode, uid, gid, acl, creds) is ok
    if not ok:
        assert grant_gids(mode, uid, gid, acl, creds) == gids


# read_devices on a fake root ---------------------------------------------------------------------------


def test_nodes_on_a_debian_style_root(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    sysfs = read_sysfs(root.sys, with_state=False)
    snap = read_devices(root.config(), sysfs, Creds(1000, 1000, ()))
    paths = [n.path for n in snap.nodes]
    assert paths == [
        "/dev/kfd",
        "/dev/dri/card0",
        "/dev/dri/card1",
        "/dev/dri/card2",
        "/dev/dri/renderD128",
        "/dev/dri/renderD129",
    ]
    kfd = snap.node("/dev/kfd")
    assert kfd is not None
    assert (kfd.mode, kfd.uid, kfd.gid, kfd.owner, kfd.group) == (0o660, 0, 109, "root", "render")
    assert kfd.rdev == kfd.sysfs_dev == (510, 0)
    assert kfd.is_char and kfd.accessible is False and kfd.grant_gids == (109,)
    card0 = snap.node("/dev/dri/card0")
    assert card0 is not None and card0.group == "video" and card0.rdev == (226, 0)
    assert snap.host_groups == (("render", 109), ("video", 44))
    assert snap.boot_id == "8f2d4c1e-6b3a-4f59-9d0e-2a7c5b1e3f40"
    assert snap.by_path_dir
    assert {(link.pci_bus, link.kind, link.target) for link in snap.by_path} == {
        (A, "card", "card1"),
        (A, "render", "renderD128"),
        (B, "card", "card2"),
        (B, "render", "renderD129"),
    }


def test_group_names_come_from_the_hosts_etc_group(tmp_path: Path) -> None:
    """RHEL numbering (video 39, render 993) that this process's own /etc/group does not know."""
    root = two_gpu_root(tmp_path, gids={"video": 39, "render": 993})
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(0, 0, ()))
    render = snap.node("/dev/dri/renderD128")
    assert render is not None and (render.gid, render.group) == (993, "render")
    assert snap.host_gid("video") == 39


def test_missing_expected_nodes_and_non_char(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    root.remove_node("dri/renderD129")
    (root.dev / "dri" / "renderD128").unlink()
    (root.dev / "dri" / "renderD128").write_text("a regular file left by a broken image\n")
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(0, 0, ()))
    gone = snap.node("/dev/dri/renderD129")
    assert gone is not None and not gone.exists and gone.sysfs_dev == (226, 129)
    plain = snap.node("/dev/dri/renderD128")
    assert plain is not None and plain.exists and not plain.is_char and plain.rdev is None
    assert plain.accessible is False


def test_symlinked_node_is_judged_by_its_target_and_dangling_is_absent(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    dri = root.dev / "dri"
    os.rename(dri / "renderD128", dri / "real128")
    os.symlink("real128", dri / "renderD128")
    (dri / "renderD129").unlink()
    os.symlink("nowhere", dri / "renderD129")
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(0, 0, ()))
    linked = snap.node("/dev/dri/renderD128")
    assert linked is not None and linked.is_char and linked.rdev == (226, 128)
    dangling = snap.node("/dev/dri/renderD129")
    assert dangling is not None and not dangling.exists


def test_acl_is_read(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    path = root.dev / "dri" / "renderD128"
    os.setxattr(
        path,
        "system.posix_acl_access",
        acl_bytes((ACL_USER_OBJ, 6, None), (ACL_USER, 6, 1000), (ACL_GROUP_OBJ, 6, None), (ACL_MASK, 6, None),
                  (ACL_OTHER, 0, None)),
    )  # fmt: skip
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(1000, 1000, ()))
    node = snap.node("/dev/dri/renderD128")
    assert node is not None and node.has_acl and node.accessible  # uaccess-style ACL for the seat user
    other = snap.node("/dev/dri/renderD129")
    assert other is not None and other.has_acl is False and not other.accessible


def test_by_path_dangling_and_mismatched(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    by_path = root.dev / "dri" / "by-path"
    (by_path / f"pci-{A}-render").unlink()
    os.symlink("../renderD129", by_path / f"pci-{A}-render")
    (by_path / f"pci-{B}-render").unlink()
    os.symlink("../renderD200", by_path / f"pci-{B}-render")
    (by_path / f"pci-{B}-card").unlink()
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(0, 0, ()))
    links = {(link.pci_bus, link.kind): link for link in snap.by_path}
    assert (links[(A, "render")].target, links[(A, "render")].dangling) == ("renderD129", False)
    assert (links[(B, "render")].target, links[(B, "render")].dangling) == ("renderD200", True)
    assert links[(B, "card")].target is None
    assert links[(A, "render")].link == f"/dev/dri/by-path/pci-{A}-render"


def test_no_by_path_dir_in_a_container(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path, by_path=False)
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(0, 0, ()))
    assert not snap.by_path_dir and snap.by_path == ()


def test_unreadable_group_file_is_a_warning(tmp_path: Path) -> None:
    root = two_gpu_root(tmp_path)
    (root.etc / "group").unlink()
    snap = read_devices(root.config(), read_sysfs(root.sys, with_state=False), Creds(0, 0, ()))
    assert not snap.group_file_read
    assert any("group" in w for w in snap.warnings)
    kfd = snap.node("/dev/kfd")
    assert kfd is not None and kfd.group is None and kfd.gid == 109


# the decision against the kernel's own ---------------------------------------------------------------

MATRIX = [
    ("kfd", 0o660, 0, 109),
    ("dri/renderD128", 0o666, 0, 109),
    ("dri/renderD129", 0o600, 0, 0),
    ("dri/card1", 0o660, NOBODY, 44),
    ("dri/card2", 0o606, 0, 109),
]


def test_decision_matches_the_kernel_for_an_unprivileged_process(open_tmp: Path) -> None:
    """A child dropped to nobody compares can_open_rw() with access(2) (no open, so no side effects)."""
    root = two_gpu_root(open_tmp)
    for path, mode, uid, gid in MATRIX:
        os.chown(root.dev / path, uid, gid)
        os.chmod(root.dev / path, mode)
    os.setxattr(
        root.dev / "dri" / "card0",
        "system.posix_acl_access",
        acl_bytes((ACL_USER_OBJ, 6, None), (ACL_GROUP_OBJ, 6, None), (ACL_GROUP, 6, 2000), (ACL_MASK, 6, None),
                  (ACL_OTHER, 0, None)),
    )  # fmt: skip
    cfg = root.config()

    def probe() -> dict[str, list[object]]:
        snap = read_devices(cfg, read_sysfs(cfg.sysfs, with_state=False))
        out: dict[str, list[object]] = {}
        for n in snap.nodes:
            real = cfg.devfs / n.path.removeprefix("/dev/")
            out[n.path] = [n.accessible, os.access(real, os.R_OK | os.W_OK), list(n.grant_gids)]
        return out

    for groups in ([], [109], [44], [2000], [109, 44]):
        result = run_forked(NOBODY, NOBODY, groups, probe)
        assert isinstance(result, dict)
        assert len(result) == 6
        for path, (ours, kernel, _gids) in result.items():
            assert ours == kernel, (groups, path)
        if not groups:
            assert result["/dev/kfd"] == [False, False, [109]]
            assert result["/dev/dri/renderD128"][0] is True  # 0666
            assert result["/dev/dri/renderD129"] == [False, False, []]  # 0600 root: no group helps
            assert result["/dev/dri/card0"][2] == [44, 2000]  # the owning group or the ACL's named group
