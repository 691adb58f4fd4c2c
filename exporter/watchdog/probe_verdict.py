"""The kernel's answer beside the computed one: a verdict per probed node, one problem per cause. Pure.

What the kernel checks on ``open()`` of a character device, in this order (fs/namei.c ``may_open``): the mode
bits, ACL and capabilities (EACCES: what ``can open`` computes), then the device cgroup (EPERM), then the mount's
``nodev`` (EACCES), the security modules (EACCES, or EPERM), and last the driver (``chrdev_open``: ENXIO when no
driver has the major:minor, ENODEV when it has gone). So:

- EACCES where the computed verdict says "cannot open": the kernel confirms it; the verdict stays as it is.
- EPERM: the device cgroup (a container whose runtime was not given the node as a device).
- EACCES where the modes and groups allow: the mount when it is ``nodev``, else a security module.
- ENXIO / ENODEV: no driver behind the node, a host problem.

The kinds, their severity and fixes are in ``exporter.watchdog.preflight.PREFLIGHT_KINDS`` (``probe=True``).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

from exporter.model.devices import DeviceNode, DevicesSnapshot
from exporter.model.gpu import SysfsSnapshot
from exporter.model.probe import NodeProbe, ProbeReport
from exporter.parsers.selfproc import (
    Mount,
    allows_rw,
    devices_cgroup,
    mount_of,
    parse_cgroup_lines,
    parse_devices_list,
    parse_mountinfo,
)
from exporter.watchdog.preflight import Consequence, Problem, problem

OPENED = "opened"  # the kernel opened it, as computed
CONFIRMED = "confirmed"  # the kernel refused it, as computed
_NO_DRIVER = {errno.ENXIO, errno.ENODEV}


def compute_nodes(sysfs: SysfsSnapshot, devices: DevicesSnapshot) -> list[DeviceNode]:
    """The nodes a compute process opens and that are here as character devices: /dev/kfd and the render nodes
    KFD lists (never the card nodes, whose opener can become DRM master). What the probe opens."""
    kfd_renders = {f"/dev/dri/renderD{k.render_minor}" for k in sysfs.kfd_nodes if k.render_minor is not None}
    kfd = devices.node("/dev/kfd")
    out = [kfd] if kfd is not None and kfd.exists and kfd.is_char else []
    out += [n for n in devices.nodes if n.kind == "render" and n.exists and n.is_char and n.path in kfd_renders]
    return out


def node_verdict(node: DeviceNode, probe: NodeProbe, mounts: Sequence[Mount]) -> str:
    """``opened``, ``confirmed`` or the PREFLIGHT_KINDS kind of the disagreement."""
    if probe.status == "opened":
        return OPENED if node.accessible is not False else "kernel_allows"
    if probe.status in ("timeout", "stuck"):
        return "open_timeout"
    code = probe.errno
    if code == errno.EPERM:
        return "device_cgroup"
    if code == errno.EACCES:
        if node.accessible is False:
            return CONFIRMED
        mount = mount_of(tuple(mounts), probe.opened_path)
        return "nodev_mount" if mount is not None and "nodev" in mount.options else "security_module"
    if code in _NO_DRIVER:
        return "no_driver"
    return "open_failed"


def kernel_cell(probe: NodeProbe | None) -> str:
    """What the node table's ``kernel`` column shows."""
    if probe is None:
        return "-"
    if probe.status == "opened":
        return "opened"
    if probe.status in ("timeout", "stuck"):
        return f"no answer in {probe.seconds:.0f}s" if probe.status == "timeout" else "still opening"
    return probe.error or "refused"


def _dev(node: DeviceNode) -> str:
    return f"{node.rdev[0]}:{node.rdev[1]}" if node.rdev else "?"


def _cgroup_text(report: ProbeReport, nodes: Sequence[DeviceNode]) -> tuple[str, dict[str, str]]:
    where = devices_cgroup(parse_cgroup_lines(report.cgroup)) if report.cgroup is not None else None
    if where is None:
        return "this process's cgroup could not be read (/proc/self/cgroup)", {"cgroup": ""}
    version, path = where
    if version == 2:
        return (
            f"this process is in cgroup {path} (cgroup v2): a BPF device program attached to it decides (not decoded "
            "here)",
            {"cgroup": path, "cgroup_version": "2"},
        )
    if report.devices_list is None:
        why = report.devices_list_error or "not found"
        return (
            f"this process is in devices cgroup {path} (cgroup v1); its devices.list could not be read: {why}",
            {"cgroup": path, "cgroup_version": "1"},
        )
    rules = parse_devices_list(report.devices_list)
    allowed = ", ".join(r.text() for r in rules) or "nothing"
    refused = [f"c {_dev(n)}" for n in nodes if n.rdev and not allows_rw(rules, *n.rdev)]
    tail = f"; none grants rw on {', '.join(dict.fromkeys(refused))}" if refused else ""
    return (
        f"this process is in devices cgroup {path} (cgroup v1), whose devices.list ({report.devices_list_path}) "
        f"allows: {allowed}{tail}",
        {"cgroup": path, "cgroup_version": "1", "devices_list": report.devices_list_path or ""},
    )


def _follow(kind: str, nodes: Sequence[DeviceNode], probes: dict[str, NodeProbe]) -> list[Consequence]:
    out = []
    for n in nodes:
        p = probes[n.path]
        answer = kernel_cell(p)
        out.append(Consequence(kind, n.path, "critical", f"open(O_RDWR) as this process: {answer}"))
    return out


def judge(nodes: Sequence[DeviceNode], report: ProbeReport) -> tuple[dict[str, str], list[Problem]]:
    """``nodes``: the nodes probed (``/dev/kfd`` and the render nodes KFD lists). Returns the verdict of each (by
    path) and one problem per cause (a nodev mount is one problem per mount)."""
    mounts = parse_mountinfo(report.mountinfo) if report.mountinfo is not None else ()
    probes = {p.path: p for p in report.nodes}
    verdicts: dict[str, str] = {}
    by_kind: dict[str, list[DeviceNode]] = {}
    for n in nodes:
        p = probes.get(n.path)
        if p is None:
            continue
        verdict = node_verdict(n, p, mounts)
        verdicts[n.path] = verdict
        if verdict not in (OPENED, CONFIRMED):
            by_kind.setdefault(verdict, []).append(n)
    problems: list[Problem] = []
    for kind, group in by_kind.items():
        paths = ", ".join(n.path for n in group)
        count = f"{len(group)} node(s)" if len(group) > 1 else group[0].path
        first = group[0].path
        if kind == "device_cgroup":
            where, details = _cgroup_text(report, group)
            message = (
                f"the device cgroup refuses {count} the modes and groups allow (open: EPERM)"
                + (f": {paths}" if len(group) > 1 else "")
                + f"; {where}"
            )
            problems.append(problem(kind, first, message, _follow(kind, group, probes), **details))
        elif kind == "nodev_mount":
            by_mount: dict[str, list[DeviceNode]] = {}
            found: dict[str, Mount] = {}
            for n in group:
                m = mount_of(mounts, probes[n.path].opened_path)
                if m is not None:
                    by_mount.setdefault(m.mount_point, []).append(n)
                    found[m.mount_point] = m
            for point, on in by_mount.items():
                m = found[point]
                message = (
                    f"{point} is mounted nodev ({m.fstype} from {m.source}, options {','.join(m.options)}): the "
                    f"kernel refuses every device node on it (open: EACCES): {', '.join(n.path for n in on)}"
                )
                problems.append(problem(kind, on[0].path, message, _follow(kind, on, probes), mount=point))
        elif kind == "security_module":
            m = mount_of(mounts, probes[first].opened_path)
            label = report.security_label or "unknown (no /proc/self/attr/current)"
            where = f"{m.mount_point} is not nodev" if m is not None else "its mount is not nodev"
            message = (
                f"a security module refuses {count} the modes and groups allow (open: EACCES; {where})"
                + (f": {paths}" if len(group) > 1 else "")
                + f"; this process's security label: {label}"
            )
            problems.append(problem(kind, first, message, _follow(kind, group, probes), label=label))
        elif kind == "no_driver":
            majors = sorted({n.rdev[0] for n in group if n.rdev})
            devs = ", ".join(f"{n.path} ({_dev(n)})" for n in group)
            message = (
                f"no driver behind {devs} (open: {probes[first].error}): amdgpu or KFD is not loaded, or the GPU "
                "is unbound; a host problem"
            )
            problems.append(
                problem(kind, first, message, _follow(kind, group, probes), majors=", ".join(map(str, majors)))
            )
        elif kind == "open_timeout":
            message = (
                f"opening {paths} did not return within {report.deadline_seconds:g}s (left to finish in its "
                "thread): the driver holds it"
            )
            problems.append(problem(kind, first, message, _follow(kind, group, probes)))
        elif kind == "kernel_allows":
            message = f"the kernel opened {paths} though the modes and groups say this process cannot"
            problems.append(problem(kind, first, message))
        else:
            errors = ", ".join(f"{n.path}: {probes[n.path].error}" for n in group)
            problems.append(problem(kind, first, f"open() failed: {errors}", _follow(kind, group, probes)))
    return verdicts, problems
