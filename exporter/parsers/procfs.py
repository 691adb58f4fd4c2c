"""Pure parsers for the few procfs and /etc files the process enrichment reads."""

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


def parse_id_names(text: str) -> dict[int, str]:
    """``/etc/passwd`` or ``/etc/group`` -> {numeric id: name}; the first name of an id wins."""
    names: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 3 or line.startswith("#"):
            continue
        try:
            ident = int(fields[2])
        except ValueError:
            continue
        names.setdefault(ident, fields[0])
    return names
