"""Asking the kernel: open the device nodes compute needs, read-write, and close them at once.

The mode bits, groups and ACL say what the filesystem allows; the kernel also asks the device cgroup (a
container's allow-list, cgroup v1 ``devices.list`` or a v2 BPF program), the mount (``nodev``), the security
modules (AppArmor, SELinux) and finally the driver (none behind the major:minor: ENXIO). Only an open answers all
of them, for the process that opens: that is why the verdict of a process judged with other credentials is never
probed.

What an open costs: opening ``/dev/kfd`` creates a KFD process for the life of the descriptor (it is closed at
once), and opening a node of a runtime-suspended GPU wakes it. So ``check`` probes by default and ``serve`` only
with ``--devices.probe``. The flags are ``O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY``: what a ROCm runtime asks
for, never waiting in ``open()``, never inherited by a child, never a controlling terminal (a node that turned
out to be a tty). Each open runs under the per-read deadline (``exporter.sources.deadline``): a driver stuck in a
GPU reset can hold ``open()`` for as long as the reset lasts.

When a node is refused, the process's own ``/proc/self/cgroup``, ``/proc/self/mountinfo``, its v1 devices
cgroup's ``devices.list`` and ``/proc/self/attr/current`` are read (always this process's, whatever
``--path.procfs`` says: the kernel answered for it) for ``exporter.watchdog.probe_verdict`` to judge.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Mapping
from pathlib import Path

from exporter.model.probe import NodeProbe, ProbeReport
from exporter.parsers.selfproc import devices_cgroup, devices_list_path, parse_cgroup_lines, parse_mountinfo
from exporter.sources.deadline import DeadlineRunner

PROBE_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
PROBE_DEADLINE_SECONDS = 2.0  # the per-read deadline of the sysfs walk (exporter.sources.sysfs)
SELF = Path("/proc/self")
_LIMIT = 1 << 20  # mountinfo of a host with thousands of mounts stays well below


def _open_close(path: str) -> float:
    start = time.monotonic()
    fd = os.open(path, PROBE_FLAGS)
    os.close(fd)
    return time.monotonic() - start


def _read(path: Path | str) -> tuple[str | None, str | None]:
    try:
        with open(path, "rb") as f:
            return f.read(_LIMIT).decode("utf-8", "replace"), None
    except OSError as e:
        return None, e.strerror or str(e)


class Prober:
    """Opens nodes under a deadline; one per command run, or kept by the devices source (an open abandoned past
    the deadline is not retried until it returned)."""

    def __init__(self, deadline_seconds: float = PROBE_DEADLINE_SECONDS, self_dir: Path = SELF) -> None:
        self.deadline_seconds = deadline_seconds
        self._self = self_dir
        self._runner: DeadlineRunner[float] = DeadlineRunner("probe")

    def probe(self, targets: Mapping[str, Path]) -> ProbeReport:
        """``targets``: host path -> the path to open (under --path.devfs)."""
        opened_paths = {host: os.path.realpath(p) for host, p in targets.items()}
        calls = {host: (lambda p=opened_paths[host]: _open_close(p)) for host in targets}
        outcomes = self._runner.run(calls, self.deadline_seconds)
        nodes = []
        for host, outcome in outcomes.items():
            real = opened_paths[host]
            if outcome.status == "done":
                nodes.append(NodeProbe(host, real, "opened", seconds=outcome.value or 0.0))
            elif outcome.status == "error":
                exc = outcome.error
                code = exc.errno if isinstance(exc, OSError) else None
                name = errno.errorcode.get(code or 0) if code else None
                nodes.append(NodeProbe(host, real, "refused", code, name or repr(exc)))
            else:
                nodes.append(NodeProbe(host, real, outcome.status, seconds=outcome.running_seconds))
        if all(n.status == "opened" for n in nodes):
            return ProbeReport(tuple(nodes), self.deadline_seconds)
        return self._explain(tuple(nodes))

    def _explain(self, nodes: tuple[NodeProbe, ...]) -> ProbeReport:
        cgroup, _ = _read(self._self / "cgroup")
        mountinfo, _ = _read(self._self / "mountinfo")
        label, _ = _read(self._self / "attr" / "current")
        list_path = list_text = list_error = None
        where = devices_cgroup(parse_cgroup_lines(cgroup)) if cgroup is not None else None
        if where is not None and where[0] == 1 and mountinfo is not None:
            list_path = devices_list_path(parse_mountinfo(mountinfo), where[1])
            if list_path is None:
                list_error = "the devices hierarchy is not mounted in this mount namespace"
            else:
                list_text, list_error = _read(list_path)
        return ProbeReport(
            nodes=nodes,
            deadline_seconds=self.deadline_seconds,
            cgroup=cgroup,
            mountinfo=mountinfo,
            devices_list_path=list_path,
            devices_list=list_text,
            devices_list_error=list_error,
            security_label=label.strip("\x00\n ") or None if label is not None else None,
        )
