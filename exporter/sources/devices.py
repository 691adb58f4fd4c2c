"""Device nodes under devfs: ``/dev/kfd``, ``/dev/dri/card*``, ``/dev/dri/renderD*`` and their by-path links.

Nothing here opens a device node unless ``--devices.probe`` asks (``exporter.sources.probe``): opening
``/dev/kfd`` creates a KFD process on the GPU for as long as it is open, and opening a node of a
runtime-suspended GPU wakes it. Whether this process could open a node read-write (``accessible``) is decided
from its mode, owner, group and POSIX ACL against the process's credentials, with or without the probe.
Owner and group names come from the HOST's ``etc/passwd`` and ``etc/group`` under
``--path.rootfs``, never from this process's NSS (inside a container the image's groups are not the host's).

``DevicesSource`` at the end is the scheduled source: sysfs identity + nodes + baseline + drift.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec.structs import replace

from exporter.clock import wall_time
from exporter.config import Config
from exporter.logging import get_logger
from exporter.model.devices import (
    ACL_GROUP,
    ACL_GROUP_OBJ,
    ACL_MASK,
    ACL_OTHER,
    ACL_USER,
    AclEntry,
    Baseline,
    ByPathLink,
    Condition,
    DeviceNode,
    DevicesSnapshot,
    DeviceWatchState,
    NodeKind,
    ProcessCreds,
    StateFileProblem,
    StateFileState,
    UdevNodeVerdict,
    WatchEvent,
)
from exporter.model.gpu import SysfsSnapshot
from exporter.parsers.host import parse_group_file, parse_passwd_file
from exporter.sources.hostconfig import with_kfd_processes, with_udev
from exporter.sources.probe import Prober
from exporter.statefile import StateFileHealth, move_aside, read_state_file, remove_stale_temps, write_atomic
from exporter.watchdog.baseline import (
    BASELINE_ACTIONS,
    EVENT_BASELINE_CREATED,
    UNHEALTHY_KINDS,
    AutoAccept,
    BaselineStore,
    build_baseline,
)
from exporter.watchdog.conditions import BASELINE_KINDS
from exporter.watchdog.drift import (
    EVENT_CONDITION_CLEARED,
    UDEV_KINDS,
    conditions_from_json,
    conditions_to_json,
    evaluate,
)
from exporter.watchdog.probe_verdict import compute_nodes

if TYPE_CHECKING:
    from exporter.sources.sysfs import FixedValues

log = get_logger(__name__)

HOST_GROUPS = ("render", "video")
_NODE_NAME = re.compile(r"^(?:card|renderD)[0-9]+$")
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_RW = 0o6


# Pure helpers ---------------------------------------------------------------------------------------


def parse_acl_xattr(data: bytes) -> tuple[AclEntry, ...]:
    """The binary ``system.posix_acl_access`` value -> entries. Raises ValueError for a malformed value."""
    if len(data) < 4 or (len(data) - 4) % 8:
        raise ValueError(f"ACL xattr of {len(data)} bytes")
    (version,) = struct.unpack_from("<I", data, 0)
    if version != _ACL_VERSION:
        raise ValueError(f"ACL xattr version {version}")
    entries = []
    for off in range(4, len(data), 8):
        tag, perm, ident = struct.unpack_from("<HHI", data, off)
        entries.append(AclEntry(tag, perm & 0o7, ident if tag in (ACL_USER, ACL_GROUP) else None))
    return tuple(entries)


def _acl_perm(acl: tuple[AclEntry, ...], tag: int) -> int | None:
    for e in acl:
        if e.tag == tag:
            return e.perm
    return None


def can_open_rw(mode: int, uid: int, gid: int, acl: tuple[AclEntry, ...] | None, creds: ProcessCreds) -> bool:
    """The kernel's permission check (POSIX.1e access ACL algorithm) for O_RDWR, without opening the node.

    Root is taken as able to open anything (CAP_DAC_OVERRIDE); a container's device cgroup is not visible here.
    """
    if creds.euid == 0:
        return True
    acl = acl or ()
    if creds.euid == uid:
        return (mode >> 6) & _RW == _RW
    mask = _acl_perm(acl, ACL_MASK)
    masked = 0o7 if mask is None else mask
    for e in acl:
        if e.tag == ACL_USER and e.id == creds.euid:
            return e.perm & masked & _RW == _RW
    groups = {creds.egid, *creds.groups}
    group_obj = _acl_perm(acl, ACL_GROUP_OBJ) if acl else None
    group_perm = ((mode >> 3) & 0o7) if group_obj is None else (group_obj & masked)
    matched = False
    if gid in groups:
        matched = True
        if group_perm & _RW == _RW:
            return True
    for e in acl:
        if e.tag == ACL_GROUP and e.id in groups:
            matched = True
            if e.perm & masked & _RW == _RW:
                return True
    if matched:
        return False
    other = _acl_perm(acl, ACL_OTHER) if acl else None
    return ((mode & 0o7) if other is None else other) & _RW == _RW


def grant_gids(mode: int, uid: int, gid: int, acl: tuple[AclEntry, ...] | None, creds: ProcessCreds) -> tuple[int, ...]:
    """The gids of which any ONE, added as a supplementary group, would let this process open the node rw."""
    candidates = [gid] + [e.id for e in acl or () if e.tag == ACL_GROUP and e.id is not None]
    out: list[int] = []
    for g in candidates:
        if g in out:
            continue
        more = ProcessCreds(creds.euid, creds.egid, (*creds.groups, g))
        if can_open_rw(mode, uid, gid, acl, more):
            out.append(g)
    return tuple(out)


def node_kind(name: str) -> NodeKind:
    return "kfd" if name == "kfd" else ("render" if name.startswith("renderD") else "card")


def sysfs_node_devs(sysfs: SysfsSnapshot) -> dict[str, tuple[int, int] | None]:
    """Every node name sysfs knows (``kfd``, ``card1``, ``renderD128``) -> its major:minor from sysfs ``dev``."""
    out: dict[str, tuple[int, int] | None] = {}
    for gpu in sysfs.gpus:
        for m in (gpu.card, gpu.render):
            if m is not None:
                out[m.name] = m.dev if m.dev is not None else ((226, m.minor) if m.minor is not None else None)
    for other in (*sysfs.other_drm, *sysfs.idle_partitions):
        for m in other.minors:
            out.setdefault(m.name, m.dev)
    if sysfs.kfd_dev is not None:
        out["kfd"] = sysfs.kfd_dev
    return out


def current_creds() -> ProcessCreds:
    return ProcessCreds(os.geteuid(), os.getegid(), tuple(sorted(set(os.getgroups()))))


# I/O ------------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_boot_id(procfs: Path) -> str | None:
    text = _read_text(procfs / "sys" / "kernel" / "random" / "boot_id")
    return text.strip() or None if text is not None else None


def _read_acl(path: Path) -> tuple[tuple[AclEntry, ...] | None, str | None]:
    try:
        data = os.getxattr(path, _ACL_XATTR)
    except OSError as e:
        if e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return (), None
        return None, f"{path.name}: reading its ACL failed: {e.strerror}"
    try:
        return parse_acl_xattr(data), None
    except ValueError as e:
        return None, f"{path.name}: unreadable ACL: {e}"


def _stat_node(
    config: Config,
    path: Path,
    name: str,
    sysfs_dev: tuple[int, int] | None,
    users: Mapping[int, str],
    groups: Mapping[int, str],
    creds: ProcessCreds,
    warnings: list[str],
) -> DeviceNode:
    host = config.host_path(path)
    kind = node_kind(name)
    try:
        st = os.stat(path)  # a symlinked node opens as its target, so judge the target
    except FileNotFoundError:
        return DeviceNode(host, name, kind, exists=False, sysfs_dev=sysfs_dev)
    except OSError as e:
        return DeviceNode(host, name, kind, exists=True, sysfs_dev=sysfs_dev, error=e.strerror)
    is_char = stat.S_ISCHR(st.st_mode)
    mode = stat.S_IMODE(st.st_mode)
    acl, problem = _read_acl(path)
    if problem:
        warnings.append(problem)
    return DeviceNode(
        path=host,
        name=name,
        kind=kind,
        exists=True,
        is_char=is_char,
        mode=mode,
        uid=st.st_uid,
        gid=st.st_gid,
        rdev=(os.major(st.st_rdev), os.minor(st.st_rdev)) if is_char else None,
        owner=users.get(st.st_uid),
        group=groups.get(st.st_gid),
        acl=acl,
        sysfs_dev=sysfs_dev,
        accessible=can_open_rw(mode, st.st_uid, st.st_gid, acl, creds) if is_char else False,
        grant_gids=grant_gids(mode, st.st_uid, st.st_gid, acl, creds) if is_char else (),
    )


def _by_path_links(config: Config, sysfs: SysfsSnapshot) -> tuple[bool, tuple[ByPathLink, ...]]:
    by_path = config.devfs / "dri" / "by-path"
    if not by_path.is_dir():
        return False, ()
    links: list[ByPathLink] = []
    for gpu in sysfs.gpus:
        if gpu.partition_device is not None:  # partitions on platform devices have no pci-<bdf> link
            continue
        for minor in (gpu.card, gpu.render):
            if minor is None:
                continue
            link = by_path / f"pci-{gpu.pci_bus}-{minor.kind}"
            target: str | None = None
            dangling = False
            try:
                target = os.path.basename(os.readlink(link))
                dangling = not link.exists()
            except FileNotFoundError:
                target = None
            except OSError as e:  # a regular file or directory where the link should be
                target = f"<{e.strerror}>"
                dangling = True
            links.append(ByPathLink(config.host_path(link), gpu.pci_bus, minor.kind, minor.name, target, dangling))
    return True, tuple(links)


def read_devices(config: Config, sysfs: SysfsSnapshot, creds: ProcessCreds | None = None) -> DevicesSnapshot:
    """Stat every GPU device node that devfs holds or sysfs expects. Never opens a node."""
    creds = creds or current_creds()
    warnings: list[str] = []
    group_text = _read_text(config.rootfs / "etc" / "group")
    passwd_text = _read_text(config.rootfs / "etc" / "passwd")
    if group_text is None:
        warnings.append(f"{config.rootfs / 'etc' / 'group'} unreadable: group names unknown")
    if passwd_text is None:
        warnings.append(f"{config.rootfs / 'etc' / 'passwd'} unreadable: owner names unknown")
    gid_by_name, name_by_gid, w = parse_group_file(group_text or "")
    warnings += w
    name_by_uid, w = parse_passwd_file(passwd_text or "")
    warnings += w

    expected = sysfs_node_devs(sysfs)
    names: set[str] = set(expected)
    dri = config.devfs / "dri"
    try:
        names.update(n for n in os.listdir(dri) if _NODE_NAME.match(n))
    except FileNotFoundError:
        pass
    except OSError as e:
        warnings.append(f"{dri}: {e.strerror}")
    if (config.devfs / "kfd").exists() or os.path.lexists(config.devfs / "kfd"):
        names.add("kfd")

    def order(name: str) -> tuple[int, int]:
        kind = node_kind(name)
        return ({"kfd": 0, "card": 1, "render": 2}[kind], int(re.sub(r"\D", "", name) or 0))

    nodes = []
    for name in sorted(names, key=order):
        path = config.devfs / name if name == "kfd" else dri / name
        nodes.append(_stat_node(config, path, name, expected.get(name), name_by_uid, name_by_gid, creds, warnings))
    by_path_dir, by_path = _by_path_links(config, sysfs)
    gids_seen = sorted({n.gid for n in nodes if n.gid is not None and n.gid in name_by_gid})
    host_groups = tuple((g, gid_by_name[g]) for g in HOST_GROUPS if g in gid_by_name)
    return DevicesSnapshot(
        nodes=tuple(nodes),
        by_path=by_path,
        by_path_dir=by_path_dir,
        host_groups=host_groups,
        gid_names=tuple((g, name_by_gid[g]) for g in gids_seen),
        creds=creds,
        boot_id=read_boot_id(config.procfs),
        group_file_read=group_text is not None,
        warnings=tuple(warnings),
    )


# The scheduled source -------------------------------------------------------------------------------

CONDITIONS_FILE = "conditions.json"
CONDITIONS_ACTIONS: dict[StateFileState, str] = {
    "unreadable": "condition start times (rocm_device_condition_since_timestamp_seconds) restart at this run "
    "until it can be read: make it readable by the exporter's user; it is not replaced meanwhile",
    "corrupt": "the start times of the conditions active before the restart are lost (they restart now); "
    "nothing else to do",
    "unsaved": "condition start times are not kept across a restart: fix the owner and mode of --state.dir or "
    "free the disk",
}
UDEV_REFRESH_SECONDS = 600.0  # how often the rules are read again while the same node conditions hold
EVENT_DRIFT_NOT_EVALUATED = "drift_not_evaluated"
EVENT_DRIFT_RESUMED = "drift_evaluation_resumed"
_NOT_EVALUATED = {
    "unreadable": ("baseline.json cannot be read", BASELINE_ACTIONS["unreadable"]),
    "corrupt": ("baseline.json is corrupt", BASELINE_ACTIONS["corrupt"]),
    "none": (
        "no baseline yet: it is written on the first collection that sees an amdgpu GPU",
        "check that the amdgpu driver is loaded and --path.sysfs is the host's",
    ),
}


def log_events(events: Iterable[WatchEvent]) -> None:
    """One line per condition start/clear. A root cause starts at warning level; a consequence of one (the GPUs
    renumbered after another went missing) at info, with ``cause`` naming its root, so a log alert fires once."""
    for e in events:
        loud = e.event != EVENT_CONDITION_CLEARED and e.severity != "info" and e.cause is None
        level = log.warning if loud else log.info
        extra: dict[str, str] = dict(e.fields)
        if e.pci_bus:
            extra["pci_bus"] = e.pci_bus
        if e.cause is not None:
            extra["cause"], extra["cause_subject"] = e.cause
        level(e.event, condition=e.kind, subject=e.subject, severity=e.severity, message=e.message, **extra)


def _backdate(
    previous: tuple[Condition, ...] | None, restored: Mapping[tuple[str, str], Condition]
) -> tuple[Condition, ...]:
    """``previous`` for the next evaluation with the start times an earlier run persisted: on the first collection
    the restored conditions themselves; later (the file was unreadable until now) only the older start times."""
    if previous is None:
        return tuple(restored.values())
    out = []
    for p in previous:
        r = restored.get(p.key)
        out.append(replace(p, since=r.since) if p.active and r is not None and r.since < p.since else p)
    return tuple(out)


class DevicesSource:
    """sysfs identity + device nodes + the baseline -> drift conditions, every interval.

    The baseline is re-read when ``baseline.json`` changes on disk, so ``rocm-watchdog baseline accept`` run
    next to a live daemon takes effect at the next collection. The first baseline is written on the first
    collection that sees at least one amdgpu GPU (a host whose driver has not loaded yet gets none), and never
    while a baseline is unreadable or a corrupt one is kept aside (see ``exporter.watchdog.baseline``). A write
    that fails is re-tried every collection; meanwhile the baseline lives in memory.

    The active conditions and their start times persist in ``conditions.json``: a restarted exporter reports
    when a condition began, not when it restarted. While drift cannot be evaluated (no usable baseline) the
    baseline conditions active before are neither reported nor cleared: they are carried, with their start
    times, until a baseline is back and says whether they still hold.
    """

    name = "devices"

    def __init__(
        self, config: Config, clock: Callable[[], float] = wall_time, creds: ProcessCreds | None = None
    ) -> None:
        self._config = config
        self._clock = clock
        self._creds = creds
        self._store = BaselineStore(config.state_dir)
        self._auto = AutoAccept(self._store, config.baseline_auto_accept_boots)
        self._previous: tuple[Condition, ...] | None = None
        self._stamp: tuple[int, int, int, int] | None = None
        self._cached: tuple[Baseline | None, StateFileProblem | None] = (None, None)
        self._unsaved: Baseline | None = None  # written to memory only: the state dir refused it
        self._baseline_health = StateFileHealth(self._store.path, BASELINE_ACTIONS)
        self._conditions_path = config.state_dir / CONDITIONS_FILE
        self._conditions_health = StateFileHealth(self._conditions_path, CONDITIONS_ACTIONS)
        self._restored: dict[tuple[str, str], Condition] | None = None  # None: not read yet, or unreadable
        self._written: frozenset[tuple[str, str, float]] | None = None  # what conditions.json holds
        self._carried: dict[tuple[str, str], Condition] = {}  # baseline conditions not evaluated now
        self._drift_reason: str | None = None  # why drift is not evaluated, as last logged
        # what the udev rules give the nodes, read while a node condition in UDEV_KINDS holds, and for which ones
        self._udev: tuple[UdevNodeVerdict, ...] = ()
        self._udev_for: frozenset[tuple[str, str]] = frozenset()
        self._udev_at = 0.0
        # what the identity files said (exporter.sources.sysfs.FixedValues), kept while their directories exist
        self._fixed: FixedValues | None = None
        # --devices.probe: open /dev/kfd and the render nodes KFD lists every collection (exporter.sources.probe)
        self._prober = Prober() if config.devices_probe and creds is None else None

    def _load(self) -> tuple[Baseline | None, StateFileProblem | None]:
        try:
            st = os.stat(self._store.path)
            stamp: tuple[int, int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        except OSError:
            stamp = None
        unreadable = self._cached[1] is not None and self._cached[1].state == "unreadable"
        if stamp is not None and stamp == self._stamp and not unreadable:  # an unreadable file: tried every time
            return self._cached
        self._stamp = stamp
        self._cached = self._store.load(move_corrupt=True)
        baseline, problem = self._cached
        health = self._baseline_health
        if problem is not None and problem.state == "unreadable":
            health.read_failed(problem.error or problem.reason)
        else:
            health.read_ok()
            if problem is not None:
                health.found_corrupt(problem.reason, problem.moved_to)
            else:
                health.corrupt_cleared()
        if baseline is not None or problem is not None:
            self._unsaved = None
        return self._cached

    def _save_baseline(self, baseline: Baseline) -> bool:
        try:
            self._store.write(baseline)
        except OSError as e:
            self._baseline_health.write_failed(e)
            return False
        self._baseline_health.write_ok()
        return True

    def _restore(self) -> dict[tuple[str, str], Condition] | None:
        """The conditions an earlier run persisted; None while the file cannot be read (tried every collection)."""
        health = self._conditions_health
        try:
            raw = read_state_file(self._conditions_path)
        except OSError as e:
            health.read_failed(e)
            return None
        health.read_ok()
        restored: tuple[Condition, ...] = ()
        if raw is not None:
            try:
                restored = conditions_from_json(json.loads(raw.decode("utf-8")))
            except ValueError as e:  # also JSONDecodeError and UnicodeDecodeError
                reason = f"not a conditions file: {e}"
                try:
                    moved: str | None = str(move_aside(self._conditions_path, self._clock()))
                except OSError as move_error:
                    moved, reason = None, f"{reason}; could not move it aside: {move_error.strerror or move_error}"
                health.found_corrupt(reason, moved)
        self._written = frozenset((c.kind, c.subject, c.since) for c in restored) if raw is not None else frozenset()
        remove_stale_temps(self._conditions_path)
        return {c.key: c for c in restored}

    def _persist(self, conditions: tuple[Condition, ...]) -> None:
        """Write the active (and carried) conditions when their set or a start time changed. Never over a file
        that could not be read: its start times may still be wanted."""
        if self._restored is None:
            return
        active = [c for c in conditions if c.active] + list(self._carried.values())
        content = frozenset((c.kind, c.subject, c.since) for c in active)
        if content == self._written:
            return
        data = (json.dumps(conditions_to_json(active), indent=1) + "\n").encode()
        try:
            write_atomic(self._conditions_path, data)
        except OSError as e:
            self._conditions_health.write_failed(e)
            return
        self._conditions_health.write_ok()
        self._written = content

    def _previous_for(self, baseline: Baseline | None) -> tuple[Condition, ...] | None:
        previous = self._previous
        if self._restored is None:
            restored = self._restore()
            if restored is not None:
                self._restored = restored
                previous = _backdate(previous, restored)
        if previous is None:
            return None
        if baseline is None:
            # Not evaluated now, so neither holding nor cleared: kept aside with their start times.
            for p in previous:
                if p.active and p.kind in BASELINE_KINDS:
                    self._carried[p.key] = p
            return tuple(p for p in previous if p.kind not in BASELINE_KINDS)
        if self._carried:
            seen = {p.key for p in previous}
            previous = previous + tuple(c for k, c in self._carried.items() if k not in seen)
            self._carried = {}
        return previous

    def _log_drift(self, baseline: Baseline | None, problem: StateFileProblem | None) -> None:
        why = None if baseline is not None else (problem.state if problem is not None else "none")
        if why == self._drift_reason:
            return
        if why is not None:
            reason, action = _NOT_EVALUATED[why]
            level = log.info if why == "none" else log.warning
            level(EVENT_DRIFT_NOT_EVALUATED, reason=reason, path=str(self._store.path), action=action)
        elif self._drift_reason is not None:
            log.info(EVENT_DRIFT_RESUMED, path=str(self._store.path))
        self._drift_reason = why

    def collect(self) -> DeviceWatchState:
        from exporter.sources.sysfs import FixedValues, read_sysfs

        if self._fixed is None:
            self._fixed = FixedValues()

        sysfs = read_sysfs(self._config.sysfs, with_state=False, fixed=self._fixed)
        devices = read_devices(self._config, sysfs, self._creds)
        probe = None
        if self._prober is not None:
            devfs = self._config.devfs
            targets = {n.path: devfs / n.path.removeprefix("/dev/") for n in compute_nodes(sysfs, devices)}
            probe = self._prober.probe(targets)
        now = self._clock()
        baseline, problem = self._load()
        created = False
        if baseline is None and problem is None:
            if self._unsaved is None and sysfs.gpus:
                self._unsaved = build_baseline(sysfs, devices, now)
            if self._unsaved is not None:
                baseline = self._unsaved
                if self._save_baseline(baseline):
                    created = True
                    self._unsaved = None
                    log.info(EVENT_BASELINE_CREATED, path=str(self._store.path), gpus=len(baseline.gpus))
                self._stamp = None
        self._log_drift(baseline, problem)
        devices = with_kfd_processes(self._config, devices, baseline)  # only while a group's gid drifted
        previous = self._previous_for(baseline)
        if self._udev:
            devices = replace(devices, udev=self._udev)
        conditions, events = evaluate(sysfs, devices, baseline, previous, now)
        wrong = frozenset(c.key for c in conditions if c.active and c.kind in UDEV_KINDS)
        if not wrong:
            self._udev, self._udev_for = (), frozenset()
        elif wrong != self._udev_for or now - self._udev_at >= UDEV_REFRESH_SECONDS:
            # a node's mode, owner or group is wrong: say which rule sets it. The rules are read only then, and
            # again when other nodes go wrong or every UDEV_REFRESH_SECONDS (a host with 0666 render nodes keeps
            # world_writable active for good: one walk of the rules per interval would be its idle cost).
            devices = with_udev(self._config, replace(devices, udev=()))
            self._udev, self._udev_for, self._udev_at = devices.udev, wrong, now
            conditions, events = evaluate(sysfs, devices, baseline, previous, now)
        if baseline is not None and not created and self._auto.boots > 0:
            accepted = self._auto_accept(sysfs, devices, conditions, now)
            if accepted is not None:
                baseline = accepted
                conditions, cleared = evaluate(sysfs, devices, accepted, conditions, now)
                events += cleared
        log_events(events)
        self._previous = conditions
        self._persist(conditions)
        files = [self._baseline_health.status(), self._conditions_health.status()]
        if self._auto.boots > 0:
            files.append(self._auto.health.status())
        return DeviceWatchState(
            sysfs=sysfs,
            devices=devices,
            baseline=baseline,
            conditions=conditions,
            collected_at=now,
            baseline_corrupt=problem if problem is not None and problem.state == "corrupt" else None,
            baseline_created=created,
            baseline_unsaved=self._unsaved is not None and baseline is self._unsaved,
            baseline_unreadable=problem if problem is not None and problem.state == "unreadable" else None,
            drift_evaluated=baseline is not None,
            state_files=tuple(files),
            probe=probe,
        )

    def _auto_accept(
        self,
        sysfs: SysfsSnapshot,
        devices: DevicesSnapshot,
        conditions: tuple[Condition, ...],
        now: float,
    ) -> Baseline | None:
        """The new baseline when this collection completed N healthy boots of the same drifted state."""
        drifted = any(c.active and c.kind in BASELINE_KINDS for c in conditions)
        healthy = not any(c.active and c.kind in UNHEALTHY_KINDS for c in conditions)
        proposed = build_baseline(sysfs, devices, now)
        try:
            accepted = self._auto.step(proposed, drifted, healthy)
        except OSError as e:
            if self._auto.health.unsaved is None:  # not the candidate file (it says so itself): the baseline
                self._baseline_health.write_failed(e)
            return None
        if not accepted:
            return None
        self._baseline_health.write_ok()
        self._stamp = None  # re-read from disk next time, like an accept from the CLI
        return proposed

    def close(self) -> None:
        pass


__all__ = ["DeviceWatchState", "DevicesSource", "read_devices"]
