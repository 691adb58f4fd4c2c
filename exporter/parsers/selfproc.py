"""Pure parsers for what a process reads about itself when the kernel refused it a device node:
``/proc/self/cgroup``, ``/proc/self/mountinfo`` and a cgroup v1 ``devices.list``.

No I/O here: ``exporter.sources.probe`` reads the files, ``exporter.watchdog.probe_verdict`` judges.
"""

from __future__ import annotations

import re

import msgspec


class CgroupLine(msgspec.Struct, frozen=True):
    """One line of ``/proc/<pid>/cgroup``: ``hierarchy-id:controllers:path`` (v2: ``0::path``)."""

    hierarchy: int
    controllers: tuple[str, ...]  # () for the v2 unified line
    path: str


class Mount(msgspec.Struct, frozen=True):
    """One line of ``/proc/<pid>/mountinfo`` (proc(5)): where, what, and its per-mount options."""

    mount_id: int
    root: str  # the path inside the filesystem that is mounted here ("/" for a whole tmpfs, a cgroup subdir...)
    mount_point: str
    options: tuple[str, ...]  # per-mount: rw, nodev, nosuid...
    fstype: str
    source: str
    super_options: tuple[str, ...]


class DeviceRule(msgspec.Struct, frozen=True):
    """One ``devices.list`` entry: ``c 226:* rwm``; ``None`` major/minor is ``*``."""

    type: str  # "a", "c" or "b"
    major: int | None
    minor: int | None
    access: str  # some of "rwm"

    def text(self) -> str:
        if self.type == "a":
            return f"a *:* {self.access}"
        number = f"{'*' if self.major is None else self.major}:{'*' if self.minor is None else self.minor}"
        return f"{self.type} {number} {self.access}"

    def covers(self, kind: str, major: int, minor: int) -> bool:
        if self.type != "a" and self.type != kind:
            return False
        return (self.major is None or self.major == major) and (self.minor is None or self.minor == minor)


def parse_cgroup_lines(text: str) -> tuple[CgroupLine, ...]:
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        out.append(CgroupLine(int(parts[0]), controllers, parts[2]))
    return tuple(out)


def devices_cgroup(lines: tuple[CgroupLine, ...]) -> tuple[int, str] | None:
    """(1, path) of the v1 devices controller; (2, path) of the unified hierarchy when v1 has no devices
    controller (cgroup v2 decides with a BPF program attached to the cgroup); None when neither is listed."""
    for line in lines:
        if "devices" in line.controllers:
            return 1, line.path
    for line in lines:
        if line.hierarchy == 0 and not line.controllers:
            return 2, line.path
    return None


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\040`` and the like."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """Every well-formed line; a line that is not (a truncated read) is skipped."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3 or not fields[0].isdigit():
            continue
        out.append(
            Mount(
                mount_id=int(fields[0]),
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                options=tuple(fields[5].split(",")),
                fstype=fields[sep + 1],
                source=_unescape(fields[sep + 2]),
                super_options=tuple(fields[sep + 3].split(",")) if len(fields) > sep + 3 else (),
            )
        )
    return tuple(out)


def _under(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def mount_of(mounts: tuple[Mount, ...], path: str) -> Mount | None:
    """The mount ``path`` (absolute, symlinks resolved) is on: the last-mounted of the deepest mount points
    above it (a later mount on the same point hides the earlier one)."""
    best: Mount | None = None
    for m in mounts:
        if _under(path, m.mount_point) and (best is None or len(m.mount_point) >= len(best.mount_point)):
            best = m
    return best


def devices_list_path(mounts: tuple[Mount, ...], cgroup_path: str) -> str | None:
    """Where this process sees its v1 devices cgroup's ``devices.list``: the devices hierarchy's mount point plus
    the cgroup path below the mount's root (a container sees its own cgroup mounted as the root)."""
    for m in mounts:
        if m.fstype != "cgroup" or "devices" not in m.super_options:
            continue
        if not _under(cgroup_path, m.root):
            continue
        rel = cgroup_path[len(m.root) :] if m.root != "/" else cgroup_path
        return "/".join([m.mount_point.rstrip("/"), *(p for p in rel.split("/") if p), "devices.list"])
    return None


def parse_devices_list(text: str) -> tuple[DeviceRule, ...]:
    """``devices.list`` -> rules; a line that is not one is skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[0] not in ("a", "b", "c"):
            continue
        number = parts[1].split(":")
        if len(number) != 2:
            continue
        try:
            major = None if number[0] == "*" else int(number[0])
            minor = None if number[1] == "*" else int(number[1])
        except ValueError:
            continue
        out.append(DeviceRule(parts[0], major, minor, parts[2]))
    return tuple(out)


def allows_rw(rules: tuple[DeviceRule, ...], major: int, minor: int) -> bool:
    """v1 devices.list of a cgroup lists what it allows: read-write on ``c major:minor`` needs both r and w from
    the rules that cover it."""
    access = "".join(r.access for r in rules if r.covers("c", major, minor))
    return "r" in access and "w" in access
