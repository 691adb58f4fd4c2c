"""Device nodes, the persisted baseline and the watchdog's conditions (issue 3).

Everything here is keyed by what does not move: a node by the path the host gives it (``/dev/kfd``), a GPU
by its PCI address. Numbers (card, render, KFD node, gids) are data that the drift engine compares.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from exporter.model.gpu import SysfsSnapshot
from exporter.model.probe import ProbeReport

NodeKind = Literal["kfd", "card", "render"]
Severity = Literal["info", "warning", "critical"]

# POSIX ACL tags (linux/posix_acl_xattr.h); the xattr holds (tag u16, perm u16, id u32) entries after a version.
ACL_USER_OBJ = 0x01
ACL_USER = 0x02
ACL_GROUP_OBJ = 0x04
ACL_GROUP = 0x08
ACL_MASK = 0x10
ACL_OTHER = 0x20


class AclEntry(msgspec.Struct, frozen=True):
    tag: int
    perm: int  # rwx bits, 4 2 1
    id: int | None  # uid/gid for ACL_USER/ACL_GROUP, else None


class DeviceNode(msgspec.Struct, frozen=True):
    """One node under devfs as this process sees it. ``None`` fields: the node is absent or unreadable."""

    path: str  # as the host names it: "/dev/kfd", "/dev/dri/renderD128"
    name: str  # "kfd", "card1", "renderD128"
    kind: NodeKind
    exists: bool
    is_char: bool = False
    mode: int | None = None  # permission bits only (0o660)
    uid: int | None = None
    gid: int | None = None
    rdev: tuple[int, int] | None = None  # major, minor of a character device
    owner: str | None = None  # from the host's etc/passwd; None when the uid has no name there
    group: str | None = None  # from the host's etc/group; None when the gid has no name there
    acl: tuple[AclEntry, ...] | None = None  # the access ACL; () when the node has none; None: could not read
    sysfs_dev: tuple[int, int] | None = None  # what sysfs says the node's major:minor is
    accessible: bool | None = None  # this process can open it read-write, computed from the bits (not opened)
    grant_gids: tuple[int, ...] = ()  # gids of which any one would let this process open it read-write
    error: str | None = None  # why stat failed, for a node that exists but could not be read

    @property
    def has_acl(self) -> bool | None:
        return None if self.acl is None else bool(self.acl)


class ByPathLink(msgspec.Struct, frozen=True):
    """A udev ``dri/by-path/pci-<bdf>-card|render`` link as it should be and as it is."""

    link: str  # host path of the link: "/dev/dri/by-path/pci-0000:03:00.0-render"
    pci_bus: str
    kind: Literal["card", "render"]
    expected: str  # the node sysfs says belongs to the BDF: "renderD128"
    target: str | None  # basename of what the link points at; None when the link is absent
    dangling: bool = False  # the link exists but its target does not


class ProcessCreds(msgspec.Struct, frozen=True):
    euid: int
    egid: int
    groups: tuple[int, ...]  # supplementary groups (os.getgroups())


class KfdProcess(msgspec.Struct, frozen=True):
    """A process KFD lists (``class/kfd/kfd/proc/<pid>``) with the credentials procfs gives it: what decides whether
    it can still open the nodes after a host group's gid changed (it keeps the groups it started with)."""

    pid: int
    name: str | None = None  # the kernel's comm
    uid: int | None = None  # effective uid (``Uid:`` second field)
    gid: int | None = None  # effective gid
    groups: tuple[int, ...] | None = None  # ``Groups:``; None when the status file could not be read
    pod_uid: str | None = None  # from its cgroup, when it runs in a Kubernetes pod
    container_id: str | None = None


class UdevNodeVerdict(msgspec.Struct, frozen=True):
    """What the udev rules give one node (``exporter.parsers.udev``) against what it is, and why they differ."""

    path: str
    owner: str
    group: str
    mode: int
    owner_from: str | None = None  # "file:line" of the rule that set it; None: no rule did
    group_from: str | None = None
    mode_from: str | None = None
    undecidable: tuple[str, ...] = ()  # "file:line (PROGRAM)"
    node: str = ""  # what the node is: "root:render 0660"
    applied: bool = True
    # applied | not_applied (udev has not re-run) | no_rule | world_writable (a rule makes it so) | undecidable
    cause: str = "applied"

    @property
    def gives(self) -> str:
        return f"{self.owner}:{self.group} {self.mode:04o}"

    @property
    def sources(self) -> str:
        """``group, mode from /etc/udev/rules.d/70-kfd.rules:2``; "" when no rule set anything."""
        by_src: dict[str, list[str]] = {}
        for what, src in (("owner", self.owner_from), ("group", self.group_from), ("mode", self.mode_from)):
            if src is not None:
                by_src.setdefault(src, []).append(what)
        return "; ".join(f"{', '.join(w)} from {src}" for src, w in by_src.items())

    def summary(self) -> str:
        """One clause for a condition's message."""
        if self.cause == "undecidable":
            return f"depends on rules that cannot be judged from files: {', '.join(self.undecidable)}"
        if self.cause == "no_rule":
            return "no udev rule sets its owner, group or mode: devtmpfs's root:root 0600 is the default"
        if self.cause == "not_applied":
            return f"the rules give {self.gives} ({self.sources}) but udev has not applied them: `udevadm trigger`"
        if self.cause == "world_writable":
            return f"{self.mode_from} makes it writable by everyone"
        return f"the rules give it {self.gives} ({self.sources})"


class DevicesSnapshot(msgspec.Struct, frozen=True):
    nodes: tuple[DeviceNode, ...] = ()
    by_path: tuple[ByPathLink, ...] = ()
    by_path_dir: bool = False  # dri/by-path exists (containers given --device usually have none)
    host_groups: tuple[tuple[str, int], ...] = ()  # ("render", 109), ("video", 44): None when not on the host
    gid_names: tuple[tuple[int, str], ...] = ()  # the host name of every gid seen on a node
    creds: ProcessCreds | None = None
    boot_id: str | None = None
    group_file_read: bool = True  # the host's etc/group was read: group names (and their absence) mean something
    warnings: tuple[str, ...] = ()
    # the running KFD processes and their groups; read only while a host group's gid differs from the baseline
    # (exporter.sources.hostconfig.with_kfd_processes), empty otherwise
    kfd_processes: tuple[KfdProcess, ...] = ()
    # what the udev rules under --path.rootfs give each node; read by check always, by the devices source only while
    # a node's mode, owner or group is wrong (exporter.sources.hostconfig.with_udev); empty otherwise
    udev: tuple[UdevNodeVerdict, ...] = ()

    def udev_verdict(self, path: str) -> UdevNodeVerdict | None:
        for v in self.udev:
            if v.path == path:
                return v
        return None

    def node(self, path: str) -> DeviceNode | None:
        for n in self.nodes:
            if n.path == path:
                return n
        return None

    def host_gid(self, group: str) -> int | None:
        for name, gid in self.host_groups:
            if name == group:
                return gid
        return None


# Baseline ---------------------------------------------------------------------------------------------

BASELINE_FORMAT = 1


class BaselineGpu(msgspec.Struct, frozen=True):
    pci_bus: str
    unique_id: str | None = None
    card: int | None = None  # minor of cardN
    render: int | None = None  # minor of renderDN
    kfd_node: int | None = None
    gpu_id: int | None = None
    hip_index: int | None = None  # rank among the KFD GPU nodes, what ROCR/HIP_VISIBLE_DEVICES count
    compute_partition: str | None = None
    memory_partition: str | None = None
    parent_pci_bus: str | None = None


class BaselineNode(msgspec.Struct, frozen=True):
    path: str
    mode: int | None
    uid: int | None
    gid: int | None
    major: int | None
    minor: int | None
    acl: bool | None = None  # extended ACL present


class BaselineDrm(msgspec.Struct, frozen=True):
    """A DRM device that is not an amdgpu GPU, keyed by driver and parent (its card number moves)."""

    driver: str | None
    parent: str | None
    name: str | None = None


class Baseline(msgspec.Struct, frozen=True):
    created: float  # unix time it was accepted
    boot_id: str | None
    gpus: tuple[BaselineGpu, ...] = ()
    nodes: tuple[BaselineNode, ...] = ()
    groups: tuple[tuple[str, int | None], ...] = ()  # host gids of render and video; None: no such group
    kfd_major: int | None = None
    other_drm: tuple[BaselineDrm, ...] = ()
    format: int = BASELINE_FORMAT

    def gpu(self, pci_bus: str) -> BaselineGpu | None:
        for g in self.gpus:
            if g.pci_bus == pci_bus:
                return g
        return None

    def node(self, path: str) -> BaselineNode | None:
        for n in self.nodes:
            if n.path == path:
                return n
        return None


# Watchdog conditions --------------------------------------------------------------------------------


class Condition(msgspec.Struct, frozen=True):
    """One (kind, subject) the drift engine evaluated. ``since`` changes only when ``active`` changes."""

    kind: str  # one of exporter.watchdog.conditions.KINDS
    subject: str  # a host path, a PCI address, a group name or a DRM device key
    active: bool
    since: float
    severity: Severity = "warning"
    message: str = ""
    details: tuple[tuple[str, str], ...] = ()
    pci_bus: str | None = None  # the GPU the subject belongs to (a GPU, or a card/render node of one)
    cause: tuple[str, str] | None = None  # (kind, subject) of the root cause; None: this is a root cause

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.subject)


class WatchEvent(msgspec.Struct, frozen=True):
    """A structured log event: ``event`` is a short constant, the data is in ``fields``."""

    event: str
    kind: str
    subject: str
    time: float
    severity: Severity
    message: str
    fields: tuple[tuple[str, str], ...] = ()
    pci_bus: str | None = None
    cause: tuple[str, str] | None = None


StateFileState = Literal["unreadable", "corrupt", "unsaved"]


class StateFileProblem(msgspec.Struct, frozen=True):
    """Why a state file could not be used. ``unreadable``: it exists but reading it failed (permission denied, an
    I/O error, a directory in its place); nothing was moved or replaced. ``corrupt``: it was read but is not valid;
    it was moved aside to ``moved_to`` (None: the state dir refused the move, it was left in place)."""

    file: str  # "baseline.json"
    moved_to: str | None  # where the corrupt file was kept aside, when it was moved
    reason: str
    state: Literal["unreadable", "corrupt"] = "corrupt"
    error: str = ""  # for unreadable: the error alone ("Permission denied"), without the path


class StateFileStatus(msgspec.Struct, frozen=True):
    """How one file of ``--state.dir`` fares in this process: the three ways it can fail, each None when it does
    not hold. They are independent: a corrupt baseline kept aside can also fail to be written again."""

    file: str  # "baseline.json", "conditions.json", "kernel-log-cursor.json"
    unreadable: str | None = None  # why it exists but could not be read
    corrupt: str | None = None  # why its content is not valid (it was moved aside, or left when it could not be)
    moved_to: str | None = None
    unsaved: str | None = None  # why the last write failed: its state lives in memory only


class DeviceWatchState(msgspec.Struct, frozen=True):
    """What the devices source returns every interval; the metrics and ``check`` read only this.

    Equality takes ``collected_at`` in, like every other field: what is compared for "nothing changed" (the
    exposition's section keys, ``exporter.metrics.collector``) is ``what()``, the state without its timestamp."""

    sysfs: SysfsSnapshot
    devices: DevicesSnapshot
    baseline: Baseline | None
    conditions: tuple[Condition, ...]
    collected_at: float  # when, not what: see what()
    baseline_corrupt: StateFileProblem | None = None  # no usable baseline until ``baseline accept``
    baseline_created: bool = False  # this collection wrote the first baseline
    baseline_unsaved: bool = False  # the baseline lives in memory only: the state dir refused the write
    baseline_unreadable: StateFileProblem | None = None  # baseline.json exists but cannot be read: left alone
    # drift against a baseline was evaluated; False while there is none to use (none yet, unreadable, corrupt)
    drift_evaluated: bool = True
    state_files: tuple[StateFileStatus, ...] = ()  # every state file this source keeps, for the metrics
    probe: ProbeReport | None = None  # the kernel's answers to opening the compute nodes (--devices.probe only)

    def active(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.active)

    def what(self) -> DeviceWatchState:
        """This state without when it was read: two collections that found the same state give equal ones."""
        return msgspec.structs.replace(self, collected_at=0.0)
