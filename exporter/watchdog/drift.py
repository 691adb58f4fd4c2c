"""The drift engine: a pure function of (sysfs identity, device nodes, baseline, previous conditions, now).

It covers the scenarios of research/sysfs-devfs.md section 8. Each check yields a condition keyed by
(kind, subject): a PCI address for GPU conditions, a host path for node conditions, a group name, or a
``driver@parent`` key for foreign DRM devices. ``since`` moves only when ``active`` flips, and each flip
yields exactly one event (``device_condition_started`` / ``device_condition_cleared``; a changed
``unique_id`` starts as ``gpu_hardware_changed``, a hardware swap rather than drift).

Conditions that compare against the baseline (``BASELINE_KINDS``) are evaluated only when there is one;
the policy rules (``POLICY_KINDS``) need none. ``baseline accept`` clears the first kind by moving the
baseline; the second kind clears only when the host is fixed.

``since`` survives a restart: the devices source persists the active conditions (``conditions_to_json``) in
``conditions.json`` and passes them back (``conditions_from_json``) as ``previous`` to its first evaluation, so a
condition still active keeps the time it began and one that ended while the exporter was down clears.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec

from exporter.model.devices import (
    Baseline,
    Condition,
    DeviceNode,
    DevicesSnapshot,
    WatchEvent,
)
from exporter.model.gpu import SysfsSnapshot
from exporter.watchdog.conditions import KINDS as CONDITION_KINDS
from exporter.watchdog.conditions import SEVERITY

EVENT_CONDITION_STARTED = "device_condition_started"
EVENT_CONDITION_CLEARED = "device_condition_cleared"
EVENT_HARDWARE_CHANGED = "gpu_hardware_changed"

# kind -> severity, from the one table (exporter.watchdog.conditions)
KINDS = SEVERITY
# rocm_device_node_drift{attribute}
NODE_DRIFT_ATTRIBUTES = {"mode_drift": "mode", "uid_drift": "uid", "gid_drift": "gid", "rdev_drift": "rdev"}
NODE_DRIFT_EXTRA = {"acl_drift": "acl"}
# rocm_device_node_policy_violation{rule}: the rules whose subject is a node path
POLICY_KINDS = (
    "not_char_device",
    "rdev_mismatch",
    "world_writable",
    "group_not_render_or_video",
    "kfd_render_group_split",
    "gid_has_no_name",
    "mode_inconsistent",
    "group_inconsistent",
    "minor_extended",
    "by_path_missing",
    "by_path_dangling",
    "by_path_mismatch",
)
DEVICE_GROUPS = frozenset({"render", "video"})
KFD_PATH = "/dev/kfd"
EXTENDED_MINOR_BASE = 192  # drm_drv.c DRM_EXTENDED_MINOR_LIMIT: beyond the 64 primaries / 64 renders


class _Found(msgspec.Struct):
    active: bool
    message: str = ""
    details: dict[str, str] = msgspec.field(default_factory=dict)
    cause: tuple[str, str] | None = None


# What every check that does not hold records: one shared record (thousands of checks per evaluation on a
# partitioned host), never changed (only active findings get a cause, details or a longer message).
_INACTIVE = _Found(False, "", {})


class _Checks:
    """Collects (kind, subject) -> what was found, in evaluation order."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str], _Found] = {}

    def add(self, kind: str, subject: str, active: bool, message: str = "", **details: object) -> None:
        assert kind in KINDS, kind
        if not active:  # most checks, every interval: keep them cheap
            self.found[(kind, subject)] = _INACTIVE
            return
        text = {k: "" if v is None else str(v) for k, v in details.items()}
        self.found[(kind, subject)] = _Found(True, message, text)

    def active(self, key: tuple[str, str]) -> bool:
        f = self.found.get(key)
        return f is not None and f.active

    def caused_by(self, key: tuple[str, str], cause: tuple[str, str]) -> bool:
        """Mark an active condition as a consequence of an active cause; True when it was marked."""
        f = self.found.get(key)
        if f is None or not f.active or not self.active(cause) or key == cause:
            return False
        if f.cause is None:
            f.cause = cause
        return True


def _render_path(minor: int) -> str:
    return f"/dev/dri/renderD{minor}"


def _mode(mode: int | None) -> str:
    return "?" if mode is None else f"{mode:04o}"


def _node_number(node: DeviceNode) -> int | None:
    if node.rdev is not None:
        return node.rdev[1]
    if node.sysfs_dev is not None:
        return node.sysfs_dev[1]
    digits = "".join(ch for ch in node.name if ch.isdigit())
    return int(digits) if digits else None


def hip_indices(sysfs: SysfsSnapshot) -> dict[str, int]:
    """pci_bus -> HIP/ROCr index: the sysfs source's when it gives one, else the rank in KFD node order."""
    given = {g.pci_bus: g.hip_index for g in sysfs.gpus if g.hip_index is not None}
    if given:
        return given
    ordered = sorted((g for g in sysfs.gpus if g.kfd_node is not None), key=lambda g: g.kfd_node or 0)
    return {g.pci_bus: i for i, g in enumerate(ordered)}


def _gpu_checks(c: _Checks, sysfs: SysfsSnapshot, baseline: Baseline) -> None:
    now_gpus = {g.pci_bus: g for g in sysfs.gpus}
    base_gpus = {g.pci_bus: g for g in baseline.gpus}
    hip = hip_indices(sysfs)
    for bdf in sorted(base_gpus.keys() | now_gpus.keys()):
        b, g = base_gpus.get(bdf), now_gpus.get(bdf)
        if b is not None:
            c.add("gpu_missing", bdf, g is None, f"GPU {bdf} of the baseline is gone", unique_id=b.unique_id)
        if g is not None:
            c.add("gpu_new", bdf, b is None, f"GPU {bdf} is not in the baseline", unique_id=g.unique_id)
        if b is None or g is None:
            continue
        render = g.render.minor if g.render else None
        if b.render is not None or render is not None:
            c.add(
                "render_renumbered",
                bdf,
                b.render != render,
                f"GPU {bdf}: render node renderD{b.render} in the baseline, now renderD{render}",
                baseline=b.render,
                now=render,
            )
        card = g.card.minor if g.card else None
        if b.card is not None or card is not None:
            c.add(
                "card_renumbered",
                bdf,
                b.card != card,
                f"GPU {bdf}: card{b.card} in the baseline, now card{card}",
                baseline=b.card,
                now=card,
            )
        hip_now = hip.get(bdf)
        if b.kfd_node is not None or g.kfd_node is not None:
            moved = b.kfd_node != g.kfd_node or (b.hip_index is not None and b.hip_index != hip_now)
            c.add(
                "kfd_node_changed",
                bdf,
                moved,
                f"GPU {bdf}: KFD node {b.kfd_node} / HIP index {b.hip_index} in the baseline, "
                f"now KFD node {g.kfd_node} / HIP index {hip_now}",
                baseline_kfd_node=b.kfd_node,
                kfd_node=g.kfd_node,
                baseline_hip_index=b.hip_index,
                hip_index=hip_now,
            )
        if b.unique_id is not None and g.unique_id is not None:
            c.add(
                "unique_id_changed",
                bdf,
                b.unique_id != g.unique_id,
                f"GPU {bdf}: unique_id {b.unique_id} in the baseline, now {g.unique_id} (board swapped?)",
                baseline=b.unique_id,
                now=g.unique_id,
            )
        changed = [
            (field, old, new)
            for field, old, new in (
                ("compute_partition", b.compute_partition, g.compute_partition),
                ("memory_partition", b.memory_partition, g.memory_partition),
            )
            if old is not None or new is not None
        ]
        if changed:
            diff = [(f, o, n) for f, o, n in changed if o != n]
            c.add(
                "partition_mode_changed",
                bdf,
                bool(diff),
                f"GPU {bdf}: partition mode " + ", ".join(f"{f} {o} -> {n}" for f, o, n in diff),
                **{f"{f}_baseline": o for f, o, _ in changed},
                **{f: n for f, _, n in changed},
            )


def _node_baseline_checks(c: _Checks, sysfs: SysfsSnapshot, devices: DevicesSnapshot, baseline: Baseline) -> None:
    for b in baseline.nodes:
        n = devices.node(b.path)
        present = n is not None and n.exists
        c.add("node_missing", b.path, not present, f"{b.path} of the baseline is gone")
        if n is None or not present:
            continue
        if b.mode is not None and n.mode is not None:
            c.add(
                "mode_drift",
                b.path,
                b.mode != n.mode,
                f"{b.path}: mode {_mode(b.mode)} in the baseline, now {_mode(n.mode)}",
                baseline=_mode(b.mode),
                now=_mode(n.mode),
            )
        if b.uid is not None and n.uid is not None:
            c.add(
                "uid_drift",
                b.path,
                b.uid != n.uid,
                f"{b.path}: owner uid {b.uid} in the baseline, now {n.uid} ({n.owner or 'no name'})",
                baseline=b.uid,
                now=n.uid,
            )
        if b.gid is not None and n.gid is not None:
            c.add(
                "gid_drift",
                b.path,
                b.gid != n.gid,
                f"{b.path}: group gid {b.gid} in the baseline, now {n.gid} ({n.group or 'no name'})",
                baseline=b.gid,
                now=n.gid,
            )
        if b.major is not None and b.minor is not None:
            was = (b.major, b.minor)
            c.add(
                "rdev_drift",
                b.path,
                n.rdev != was,
                f"{b.path}: device {b.major}:{b.minor} in the baseline, now "
                + (f"{n.rdev[0]}:{n.rdev[1]}" if n.rdev else "not a character device"),
                baseline=f"{b.major}:{b.minor}",
                now=f"{n.rdev[0]}:{n.rdev[1]}" if n.rdev else None,
            )
        if b.acl is not None and n.has_acl is not None:
            c.add(
                "acl_drift",
                b.path,
                b.acl != n.has_acl,
                f"{b.path}: POSIX ACL {'present' if b.acl else 'absent'} in the baseline, "
                f"now {'present' if n.has_acl else 'absent'}",
                baseline=b.acl,
                now=n.has_acl,
            )
    kfd = devices.node(KFD_PATH)
    major_now = sysfs.kfd_dev[0] if sysfs.kfd_dev else (kfd.rdev[0] if kfd and kfd.rdev else None)
    if baseline.kfd_major is not None and major_now is not None:
        c.add(
            "kfd_major_changed",
            KFD_PATH,
            baseline.kfd_major != major_now,
            f"/dev/kfd major {baseline.kfd_major} in the baseline, now {major_now}: containers started before "
            "keep a device-cgroup rule for the old major",
            baseline=baseline.kfd_major,
            now=major_now,
        )


def _host_checks(c: _Checks, sysfs: SysfsSnapshot, devices: DevicesSnapshot, baseline: Baseline) -> None:
    if devices.group_file_read:
        for name, gid in baseline.groups:
            now = devices.host_gid(name)
            c.add(
                "group_gid_drift",
                name,
                gid != now,
                f"host group {name}: gid {gid} in the baseline, now {now}",
                baseline=gid,
                now=now,
            )
    base = Counter(f"{d.driver}@{d.parent}" for d in baseline.other_drm)
    now_drm = Counter(f"{o.driver}@{o.parent}" for o in sysfs.other_drm)
    for key in sorted(base.keys() | now_drm.keys()):
        if key in now_drm:
            c.add(
                "drm_device_added",
                key,
                now_drm[key] > base.get(key, 0),
                f"DRM device {key} is not in the baseline: it can shift every card/render number",
            )
        if key in base:
            c.add(
                "drm_device_removed",
                key,
                base[key] > now_drm.get(key, 0),
                f"DRM device {key} of the baseline is gone: it can shift every card/render number",
            )


def _kfd_checks(c: _Checks, sysfs: SysfsSnapshot, devices: DevicesSnapshot) -> None:
    partitioned = {g.parent_pci_bus for g in sysfs.gpus if g.parent_pci_bus and g.kfd_node is not None}
    for g in sysfs.gpus:
        if g.render is None or g.partition_device is not None:
            continue  # a partition's render node without KFD is an idle partition, not a fault
        c.add(
            "render_without_kfd",
            g.pci_bus,
            g.kfd_node is None and g.pci_bus not in partitioned,
            f"GPU {g.pci_bus} has {g.render.name} but no KFD node: not usable for compute (amdkfd not initialised?)",
            render=g.render.name,
        )
    for k in sysfs.kfd_nodes:
        if k.render_minor is None:
            continue
        path = _render_path(k.render_minor)
        n = devices.node(path)
        c.add(
            "kfd_render_without_node",
            path,
            n is None or not n.exists,
            f"KFD node {k.node} uses renderD{k.render_minor} but {path} is absent",
            kfd_node=k.node,
            pci_bus=k.pci_bus,
        )


def _policy_checks(c: _Checks, devices: DevicesSnapshot) -> None:
    present = [n for n in devices.nodes if n.exists and n.mode is not None]
    for n in present:
        c.add("not_char_device", n.path, not n.is_char, f"{n.path} is not a character device")
        if n.is_char and n.sysfs_dev is not None:
            c.add(
                "rdev_mismatch",
                n.path,
                n.rdev != n.sysfs_dev,
                f"{n.path} is {n.rdev} but sysfs says {n.sysfs_dev}: a stale static or copied /dev",
                node=f"{n.rdev[0]}:{n.rdev[1]}" if n.rdev else None,
                sysfs=f"{n.sysfs_dev[0]}:{n.sysfs_dev[1]}",
            )
        mode = n.mode or 0
        c.add("world_writable", n.path, bool(mode & 0o002), f"{n.path} is writable by everyone ({_mode(mode)})")
        if devices.group_file_read and n.gid is not None:
            c.add(
                "gid_has_no_name",
                n.path,
                n.group is None,
                f"{n.path}: gid {n.gid} has no name in the host's /etc/group",
                gid=n.gid,
            )
            c.add(
                "group_not_render_or_video",
                n.path,
                n.group not in DEVICE_GROUPS,
                f"{n.path}: group {n.group or n.gid} is neither render nor video",
                group=n.group,
                gid=n.gid,
            )
        if n.kind != "kfd":
            number = _node_number(n)
            if number is not None:
                c.add(
                    "minor_extended",
                    n.path,
                    number >= EXTENDED_MINOR_BASE,
                    f"{n.path}: minor {number} is in the extended range: more than 64 DRM devices of a kind",
                    minor=number,
                )
    renders = [n for n in present if n.kind == "render" and n.gid is not None]
    kfd = next((n for n in present if n.kind == "kfd"), None)
    if kfd is not None and kfd.gid is not None and renders:
        other = sorted({n.gid for n in renders if n.gid is not None and n.gid != kfd.gid})
        counts = Counter(n.gid for n in renders)
        have = ", ".join(
            f"{n} of {len(renders)} gid {gid} ({_group_name(devices, gid)})"
            for gid, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] or 0))
        )
        c.add(
            "kfd_render_group_split",
            kfd.path,
            bool(other),
            f"/dev/kfd has gid {kfd.gid} ({_group_name(devices, kfd.gid)}) but the render nodes have: {have}: a "
            "process needs both groups",
            kfd_gid=kfd.gid,
            render_gids=",".join(map(str, other)),
        )
    for kind in ("card", "render"):
        same = [n for n in present if n.kind == kind]
        if len(same) < 2:
            continue
        for rule, attr in (("mode_inconsistent", "mode"), ("group_inconsistent", "gid")):
            values = Counter(getattr(n, attr) for n in same)
            common = sorted(values.items(), key=lambda kv: (-kv[1], kv[0] if kv[0] is not None else -1))[0][0]
            for n in same:
                value = getattr(n, attr)
                shown = _mode(value) if attr == "mode" else value
                usual = _mode(common) if attr == "mode" else common
                c.add(rule, n.path, value != common, f"{n.path}: {attr} {shown} while other {kind} nodes have {usual}")


def _group_name(devices: DevicesSnapshot, gid: int | None) -> str:
    names = dict(devices.gid_names)
    return names.get(gid, "no name") if gid is not None else "?"


def _by_path_checks(c: _Checks, devices: DevicesSnapshot) -> None:
    if not devices.by_path_dir:
        return  # a container given --device nodes has no udev links at all: nothing to compare
    for link in devices.by_path:
        path = f"/dev/dri/{link.expected}"
        c.add("by_path_missing", path, link.target is None, f"{link.link} is missing (udev did not run?)")
        if link.target is None:
            continue
        c.add("by_path_dangling", path, link.dangling, f"{link.link} points at {link.target}, which does not exist")
        c.add(
            "by_path_mismatch",
            path,
            not link.dangling and link.target != link.expected,
            f"{link.link} points at {link.target} but sysfs gives {link.pci_bus} {link.expected}",
            link_target=link.target,
            sysfs=link.expected,
        )


# What can shift every card/render/KFD number at once, in the order a renumbering is blamed on.
_ENUMERATION_CHANGES = ("partition_mode_changed", "gpu_missing", "gpu_new", "drm_device_removed", "drm_device_added")
_GROUP_CONSEQUENCES = ("gid_has_no_name", "group_not_render_or_video", "group_inconsistent")


def node_owners(sysfs: SysfsSnapshot, baseline: Baseline | None) -> tuple[dict[str, str], dict[str, str]]:
    """host path -> pci_bus of the GPU that owns the card/render node now, and in the baseline."""
    now: dict[str, str] = {}
    for g in sysfs.gpus:
        for minor in (g.card, g.render):
            if minor is not None:
                now[f"/dev/dri/{minor.name}"] = g.pci_bus
    then: dict[str, str] = {}
    for b in baseline.gpus if baseline else ():
        if b.card is not None:
            then[f"/dev/dri/card{b.card}"] = b.pci_bus
        if b.render is not None:
            then[_render_path(b.render)] = b.pci_bus
    return now, then


def _partitions(pairs: Iterable[tuple[str, str | None]]) -> dict[str, set[str]]:
    """physical GPU -> the BDFs of its other partitions."""
    out: dict[str, set[str]] = defaultdict(set)
    for bdf, parent in pairs:
        if parent is not None:
            out[parent]
            if parent != bdf:
                out[parent].add(bdf)
    return out


def _attribute_partitions(c: _Checks, sysfs: SysfsSnapshot, baseline: Baseline) -> None:
    """A partition-mode change is one condition on the physical GPU: the former partitions that vanished and the
    new ones that appeared are its consequences, not GPUs missing or new. Partitions of a GPU that is gone are
    consequences of that GPU missing."""
    now_bdfs = {g.pci_bus for g in sysfs.gpus}
    then = _partitions((b.pci_bus, b.parent_pci_bus) for b in baseline.gpus)
    now = _partitions((g.pci_bus, g.parent_pci_bus) for g in sysfs.gpus)
    for parent in sorted(then.keys() | now.keys()):
        before, after = then.get(parent, set()), now.get(parent, set())
        if parent not in now_bdfs:
            for bdf in before:
                c.caused_by(("gpu_missing", bdf), ("gpu_missing", parent))
            continue
        if before == after or baseline.gpu(parent) is None:
            continue
        key = ("partition_mode_changed", parent)
        if not c.active(key):
            c.add(
                "partition_mode_changed",
                parent,
                True,
                f"GPU {parent}: {len(before) + 1} partitions in the baseline, {len(after) + 1} now",
                partitions_baseline=len(before) + 1,
                partitions=len(after) + 1,
            )
        for bdf in before - after:
            c.caused_by(("gpu_missing", bdf), key)
        for bdf in after - before:
            c.caused_by(("gpu_new", bdf), key)


def _attribute_nodes(c: _Checks, sysfs: SysfsSnapshot, baseline: Baseline) -> None:
    """A node of the baseline that is gone because its GPU is gone is a consequence of that; one that is gone only
    because its GPU's numbers moved is not missing at all (the GPU's renumbering says it)."""
    now_owner, then_owner = node_owners(sysfs, baseline)
    now_bdfs = {g.pci_bus for g in sysfs.gpus}
    for (kind, path), f in c.found.items():
        if kind != "node_missing" or not f.active:
            continue
        owner = then_owner.get(path)
        if owner is None:
            continue
        if owner not in now_bdfs:
            c.caused_by((kind, path), ("gpu_missing", owner))
        elif now_owner.get(path) != owner:
            c.found[(kind, path)] = _INACTIVE


def _attribute_renumbering(c: _Checks) -> None:
    """Card/render/KFD numbers that moved because a device appeared or vanished before them are consequences."""
    active = sorted(key for key, f in c.found.items() if f.active and f.cause is None)  # few, sorted once
    changes = [key for kind in _ENUMERATION_CHANGES for key in active if key[0] == kind]
    if not changes:
        return
    for key in list(c.found):
        if key[0] in ("render_renumbered", "card_renumbered", "kfd_node_changed"):
            c.caused_by(key, changes[0])


def _attribute_groups(c: _Checks, devices: DevicesSnapshot, baseline: Baseline) -> None:
    """A host group's new gid is one condition on the group: the nodes relabelled to the new gid (gid drift) and
    the nodes left on the old one (no name, not render/video) are its consequences, listed in its details."""
    for (kind, group), f in list(c.found.items()):
        if kind != "group_gid_drift" or not f.active:
            continue
        old = dict(baseline.groups).get(group)
        new = devices.host_gid(group)
        gids = {g for g in (old, new) if g is not None}
        affected: set[str] = set()
        for (k, path), g in c.found.items():
            if not g.active or g.cause is not None:
                continue
            node = devices.node(path)
            bnode = baseline.node(path)
            hit = (
                (k == "gid_drift" and bnode is not None and node is not None and bnode.gid == old and node.gid == new)
                or (k in _GROUP_CONSEQUENCES and node is not None and node.gid in gids)
                or (k == "kfd_render_group_split" and node is not None and node.gid in gids)
            )
            if hit and c.caused_by((k, path), (kind, group)):
                affected.add(path)
        if affected:
            f.details["nodes"] = ",".join(sorted(affected))
            f.message += f" ({len(affected)} device nodes affected)"


def _attribute_lost_groups(c: _Checks, devices: DevicesSnapshot, baseline: Baseline) -> None:
    """A process keeps the supplementary groups it started with: after a host group's gid changed, each running KFD
    process (``devices.kfd_processes``, read only then) that lacks the new gid of a node it needs is a consequence
    of the change, named by pid, process name and pod."""
    for (kind, group), f in list(c.found.items()):
        if kind != "group_gid_drift" or not f.active:
            continue
        old = dict(baseline.groups).get(group)
        new = devices.host_gid(group)
        renders = [n for n in devices.nodes if n.kind == "render" and n.exists]
        kfd = devices.node(KFD_PATH)
        needed = [n for n in ([kfd] if kfd is not None and kfd.exists else []) + renders]
        # the nodes this group opens: their gid is the new one and "other" alone would not let the process in
        gated = [n.path for n in needed if n.gid == new and new is not None and (n.mode or 0) & 0o006 != 0o006]
        if not gated:
            continue
        lost: list[str] = []
        for p in devices.kfd_processes:
            if p.groups is None or p.uid == 0 or new in p.groups or p.gid == new:
                continue
            subject = f"pid {p.pid}"
            who = f"pid {p.pid} ({p.name or '?'}" + (f", pod {p.pod_uid}" if p.pod_uid else "") + ")"
            kept = old is not None and old in p.groups
            c.add(
                "process_lost_group",
                subject,
                True,
                f"{who} runs without the {group} group's new gid {new}"
                + (f" (it still has the old gid {old})" if kept else "")
                + f": it cannot open {', '.join(gated)} again (a new process or a re-initialised runtime fails)",
                pid=p.pid,
                name=p.name,
                pod_uid=p.pod_uid,
                container_id=p.container_id,
                group=group,
                gid=new,
                old_gid=old,
                groups=",".join(map(str, p.groups)),
            )
            if c.caused_by(("process_lost_group", subject), (kind, group)):
                lost.append(who)
        if lost:
            f.details["processes"] = ", ".join(lost)
            f.message += f"; {len(lost)} running GPU process(es) lost the group: " + ", ".join(lost)


# Node conditions that one change makes on many nodes at once (a lost udev rule): the same kind with the same
# values is one condition on the first node, the others its consequences.
_SAME_CHANGE = {
    "mode_drift": ("baseline", "now"),
    "uid_drift": ("baseline", "now"),
    "gid_drift": ("baseline", "now"),
    "acl_drift": ("baseline", "now"),
    "gid_has_no_name": ("gid",),
    "group_not_render_or_video": ("gid",),
}


def _attribute_same_change(c: _Checks) -> None:
    roots: dict[tuple[str, ...], tuple[str, str]] = {}
    # /dev/kfd first: the node every compute process needs names the change
    active = [k for k, f in c.found.items() if f.active and k[0] in _SAME_CHANGE]
    for key in sorted(active, key=lambda k: (k[1] != KFD_PATH, k)):
        fields = _SAME_CHANGE[key[0]]
        f = c.found[key]
        if f.cause is not None:
            continue
        change = (key[0], *(f.details.get(name, "") for name in fields))
        root = roots.setdefault(change, key)
        if root != key and c.caused_by(key, root):
            nodes = c.found[root].details.get("nodes", root[1]).split(",")
            c.found[root].details["nodes"] = ",".join([*nodes, key[1]])
    for root in roots.values():
        f = c.found[root]
        if "nodes" in f.details:
            f.message += f" (and the same on {f.details['nodes'].count(',')} more nodes)"


# The rules a node breaks because its group is wrong: consequences of the change (gid_drift) or of the wrong group
_NODE_GROUP_RULES = ("gid_drift", "group_not_render_or_video", "gid_has_no_name", "group_inconsistent")


def _attribute_node_groups(c: _Checks, devices: DevicesSnapshot) -> None:
    """One node's group changed (a ``chgrp``): one cause on that node, its gid drift when there is a baseline, else
    the wrong group. The other group rules it breaks, and the /dev/kfd-render split it makes, are consequences."""
    roots: dict[str, tuple[str, str]] = {}
    for kind in _NODE_GROUP_RULES:
        for (k, path), f in c.found.items():
            if k == kind and f.active and path not in roots:
                roots[path] = (k, path)
    for path, root in roots.items():
        for kind in _NODE_GROUP_RULES:
            if kind != root[0]:
                c.caused_by((kind, path), root)
    split = ("kfd_render_group_split", KFD_PATH)
    if not c.active(split):
        return
    odd = {g for g in c.found[split].details.get("render_gids", "").split(",") if g}
    for path, root in sorted(roots.items(), key=lambda kv: kv[0] != KFD_PATH):
        node = devices.node(path)
        if path == KFD_PATH or (node is not None and str(node.gid) in odd):
            c.caused_by(split, root)
            return


# Node conditions a udev rule decides: each names what the rules give the node and the file and line that set it
# (``devices.udev``, read by check, and by the devices source only while one of these holds).
UDEV_KINDS = frozenset(
    {
        "mode_drift",
        "uid_drift",
        "gid_drift",
        "world_writable",
        "group_not_render_or_video",
        "gid_has_no_name",
        "kfd_render_group_split",
        "mode_inconsistent",
        "group_inconsistent",
    }
)


def _attribute_udev(c: _Checks, devices: DevicesSnapshot) -> None:
    if not devices.udev:
        return
    for (kind, path), f in c.found.items():
        if kind not in UDEV_KINDS or not f.active:
            continue
        v = devices.udev_verdict(path)
        if v is None:
            continue
        f.details["udev_gives"] = v.gives
        f.details["udev_rule"] = v.sources or "none"
        f.details["udev_cause"] = v.cause
        f.message += f" (udev: {v.summary()})"


def _resolve(cause: tuple[str, str] | None, found: dict[tuple[str, str], _Found]) -> tuple[str, str] | None:
    """Follow a cause to its root (a partition's missing GPU -> the partition change)."""
    seen: set[tuple[str, str]] = set()
    while cause is not None and cause not in seen:
        seen.add(cause)
        up = found[cause].cause if cause in found else None
        if up is None:
            return cause
        cause = up
    return cause


_Owners = tuple[dict[str, str], dict[str, str]]


def _gpu_of(kind: str, subject: str, details: dict[str, str], owners: _Owners) -> str | None:
    scope = CONDITION_KINDS[kind].scope
    if scope == "gpu":
        return subject
    if scope == "node":
        return owners[0].get(subject) or owners[1].get(subject) or details.get("pci_bus") or None
    return None


def _transitions(
    found: dict[tuple[str, str], _Found],
    owners: _Owners,
    previous: Iterable[Condition] | None,
    now: float,
) -> tuple[tuple[Condition, ...], tuple[WatchEvent, ...]]:
    prev = {p.key: p for p in previous or ()}
    conditions: list[Condition] = []
    events: list[WatchEvent] = []
    for (kind, subject), f in found.items():
        p = prev.get((kind, subject))
        if p is not None and not f.active and not p.active:
            conditions.append(p)  # unchanged and inactive: the same record
            continue
        flipped = (p is None and f.active) or (p is not None and p.active != f.active)
        since = now if p is None or flipped else p.since
        severity = KINDS[kind]
        details = tuple(f.details.items())
        cause = _resolve(f.cause, found) if f.active else None
        gpu = _gpu_of(kind, subject, f.details, owners)
        cond = Condition(kind, subject, f.active, since, severity, f.message, details, gpu, cause)
        conditions.append(cond)
        if flipped:
            name = EVENT_CONDITION_STARTED if f.active else EVENT_CONDITION_CLEARED
            if f.active and kind == "unique_id_changed":
                name = EVENT_HARDWARE_CHANGED
            was = cause if f.active else (p.cause if p else None)
            if f.active:
                events.append(WatchEvent(name, kind, subject, now, severity, f.message, details, gpu, was))
            else:  # what it is now; the start message as ``was`` (its details are the start line's)
                msg, fields = _cleared(kind, subject, p, evaluated=True)
                events.append(WatchEvent(name, kind, subject, now, severity, msg, fields, gpu, was))
    for key, p in prev.items():
        if key in found or not p.active:
            continue
        # no longer evaluated (the GPU or node is gone, or the baseline is): it no longer holds
        conditions.append(Condition(p.kind, p.subject, False, now, p.severity, pci_bus=p.pci_bus))
        msg, fields = _cleared(p.kind, p.subject, p, evaluated=False)
        events.append(
            WatchEvent(EVENT_CONDITION_CLEARED, p.kind, p.subject, now, p.severity, msg, fields, p.pci_bus, p.cause)
        )
    return tuple(conditions), tuple(events)


def _cleared(
    kind: str, subject: str, previous: Condition | None, evaluated: bool
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The message of a ``device_condition_cleared`` event, saying what holds now, and its fields: ``was``, the
    message the condition started with."""
    if not evaluated:
        text = f"{kind} of {subject} cleared: it is not evaluated now (its GPU or device node is gone, or no baseline)"
    elif CONDITION_KINDS[kind].baseline:
        text = f"{kind} of {subject} cleared: it agrees with the baseline now"
    else:
        text = f"{kind} of {subject} cleared: the check passes now"
    was = previous.message if previous is not None else ""
    return text, (("was", was),) if was else ()


def evaluate(
    sysfs: SysfsSnapshot,
    devices: DevicesSnapshot,
    baseline: Baseline | None,
    previous: Iterable[Condition] | None,
    now: float,
) -> tuple[tuple[Condition, ...], tuple[WatchEvent, ...]]:
    """Every condition evaluated now (active or not), each consequence tied to its root cause, and the start/clear
    events since ``previous``."""
    c = _Checks()
    if baseline is not None:
        _gpu_checks(c, sysfs, baseline)
        _node_baseline_checks(c, sysfs, devices, baseline)
        _host_checks(c, sysfs, devices, baseline)
    _kfd_checks(c, sysfs, devices)
    _policy_checks(c, devices)
    _by_path_checks(c, devices)
    if baseline is not None:
        _attribute_partitions(c, sysfs, baseline)
        _attribute_nodes(c, sysfs, baseline)
        _attribute_groups(c, devices, baseline)
        _attribute_lost_groups(c, devices, baseline)
        _attribute_renumbering(c)
    _attribute_same_change(c)
    _attribute_node_groups(c, devices)
    _attribute_udev(c, devices)
    return _transitions(c.found, node_owners(sysfs, baseline), previous, now)


# Start times across restarts (conditions.json) --------------------------------------------------------------

CONDITIONS_FORMAT = 1


def conditions_to_json(conditions: Iterable[Condition]) -> dict[str, Any]:
    """The active conditions, enough to restore their start times and to clear them after a restart."""
    return {
        "format": CONDITIONS_FORMAT,
        "conditions": [
            {
                "condition": c.kind,
                "subject": c.subject,
                "since": c.since,
                "severity": c.severity,
                "pci_bus": c.pci_bus,
                "message": c.message,
            }
            for c in sorted(conditions, key=lambda c: c.key)
            if c.active
        ],
    }


def conditions_from_json(obj: object) -> tuple[Condition, ...]:
    """Validate a decoded ``conditions.json``. Raises ValueError with what is wrong. Kinds this version does not
    know are dropped (a downgrade), not an error."""
    if not isinstance(obj, dict) or obj.get("format") != CONDITIONS_FORMAT:
        raise ValueError(f"not a conditions file of format {CONDITIONS_FORMAT}")
    items = obj.get("conditions")
    if not isinstance(items, list):
        raise ValueError("conditions: expected a list")
    out: list[Condition] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"conditions[{i}]: expected an object")
        kind, subject, since = item.get("condition"), item.get("subject"), item.get("since")
        pci_bus, message = item.get("pci_bus"), item.get("message", "")
        if not isinstance(kind, str) or not isinstance(subject, str):
            raise ValueError(f"conditions[{i}]: condition and subject must be strings")
        if isinstance(since, bool) or not isinstance(since, (int, float)):
            raise ValueError(f"conditions[{i}].since: expected a number, got {since!r}")
        if (pci_bus is not None and not isinstance(pci_bus, str)) or not isinstance(message, str):
            raise ValueError(f"conditions[{i}]: pci_bus and message must be strings")
        if kind in KINDS:
            out.append(Condition(kind, subject, True, float(since), KINDS[kind], message, (), pci_bus))
    return tuple(out)
