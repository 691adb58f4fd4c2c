"""What the kernel answered when ``check`` (or, opted in, the devices source) opened the device nodes compute
needs, and what the process read about itself to explain a refusal (issue 18)."""

from __future__ import annotations

from typing import Literal

import msgspec

# opened: open() returned a descriptor (closed at once); refused: open() failed with ``errno``; timeout: it did not
# return within the deadline (left to finish in its thread); stuck: not tried, an earlier open has not returned
ProbeStatus = Literal["opened", "refused", "timeout", "stuck"]


class NodeProbe(msgspec.Struct, frozen=True):
    path: str  # the host's name of the node: "/dev/kfd"
    opened_path: str  # what was opened, symlinks resolved: "/host/dev/kfd" (its mount decides nodev)
    status: ProbeStatus
    errno: int | None = None  # for refused
    error: str | None = None  # the errno's name ("EPERM") or the exception for refused; None otherwise
    seconds: float = 0.0  # how long the open took (timeout, stuck: how long it has been running)


class ProbeReport(msgspec.Struct, frozen=True):
    """The probe's answers and the raw self-description the verdicts are judged with (parsed in
    ``exporter.parsers.selfproc``): texts are None when they could not be read."""

    nodes: tuple[NodeProbe, ...] = ()
    deadline_seconds: float = 0.0
    cgroup: str | None = None  # /proc/self/cgroup
    mountinfo: str | None = None  # /proc/self/mountinfo
    devices_list_path: str | None = None  # the v1 devices cgroup's devices.list, where this process sees it
    devices_list: str | None = None  # its content
    devices_list_error: str | None = None  # why it could not be read
    security_label: str | None = None  # /proc/self/attr/current (AppArmor profile, SELinux context)

    def node(self, path: str) -> NodeProbe | None:
        for n in self.nodes:
            if n.path == path:
                return n
        return None
