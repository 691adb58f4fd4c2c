"""Pure parsers for the host files read besides sysfs: a process's cgroup, etc/group, etc/passwd."""

from __future__ import annotations

import re

# Container runtimes name the cgroup after the 64-hex container id: docker-<id>.scope, /docker/<id>,
# cri-containerd-<id>.scope, crio-<id>.scope, libpod-<id>.scope, /kubepods/.../<id>.
_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:/|$)")
# kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice (systemd driver)
# or /kubepods/burstable/pod<uid>/<container> (cgroupfs driver).
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def parse_cgroup(text: str) -> tuple[str | None, str | None]:
    """``/proc/<pid>/cgroup`` -> (container id, Kubernetes pod UID), each None when absent."""
    container: str | None = None
    pod: str | None = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if container is None:
            m = _CONTAINER_ID.search(path)
            if m:
                container = m.group(1)
        if pod is None:
            m = _POD_UID.search(path)
            if m:
                pod = m.group(1).replace("_", "-")
    return container, pod


def parse_group_file(text: str) -> tuple[dict[str, int], dict[int, str], list[str]]:
    """``etc/group`` -> (gid by name, first name by gid, warnings). A bad line is a warning, not an error."""
    by_name: dict[str, int] = {}
    by_gid: dict[int, str] = {}
    warnings: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line[0] in "+-":  # NIS compat entries carry no gid of their own
            continue
        fields = line.split(":")
        if len(fields) < 3 or not fields[0] or not fields[2].isdigit():
            warnings.append(f"group line {lineno}: not name:x:gid:members")
            continue
        gid = int(fields[2])
        by_name.setdefault(fields[0], gid)
        by_gid.setdefault(gid, fields[0])
    return by_name, by_gid, warnings


def parse_passwd_file(text: str) -> tuple[dict[int, str], list[str]]:
    """``etc/passwd`` -> (first user name by uid, warnings)."""
    by_uid: dict[int, str] = {}
    warnings: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line[0] in "+-":
            continue
        fields = line.split(":")
        if len(fields) < 4 or not fields[0] or not fields[2].isdigit():
            warnings.append(f"passwd line {lineno}: not name:x:uid:gid:...")
            continue
        by_uid.setdefault(int(fields[2]), fields[0])
    return by_uid, warnings


def parse_stat_start_ticks(text: str) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (starttime: clock ticks after boot); None when it is not a stat line. The
    command name (field 2) may hold spaces and parentheses: the fields are counted after its last ``)``."""
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20:
        return None
    value = fields[19]  # fields 3.. follow the name: starttime is the 20th of them
    return int(value) if value.isdigit() else None


def parse_boot_time(text: str) -> int | None:
    """``btime`` of ``/proc/stat``: the Unix time the host booted."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "btime" and value.strip().isdigit():
            return int(value.strip())
    return None
