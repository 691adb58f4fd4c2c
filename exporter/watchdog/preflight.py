"""``check``'s problem model and the table of the causes it finds itself (beside the drift engine's conditions,
whose kinds are in ``exporter.watchdog.conditions``).

A **problem** is one cause: a kind, a subject, a message, the fixes (one per audience when the fix differs for a
container and a host: ``--group-add 109`` and ``usermod -aG render USER``), and the consequences folded under it
(the nodes a device cgroup refuses, the rules a ``chgrp`` of one node breaks). ``check`` prints one line per
problem, its fixes under it, then its consequences (listed when few, counted when many; ``--verbose`` lists all).

Every kind ``check`` reports comes from a table: the drift engine's from ``conditions.KINDS``, the preflight's own
from ``PREFLIGHT_KINDS`` below (severity and fix templates, formatted with the problem's details). A module that
adds a preflight check adds its kinds here (or a table of its own merged into ``PREFLIGHT_KINDS``) and returns
``Problem`` records built with ``problem()``; ``check`` sorts, prints and exports them without knowing the kind.
``probe`` marks the kinds that come from the kernel's answer to an open (``exporter.watchdog.probe_verdict``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import msgspec

from exporter.model.devices import Condition, Severity
from exporter.watchdog.conditions import KINDS as CONDITION_KINDS
from exporter.watchdog.conditions import fix_text


class PreflightKind(msgspec.Struct, frozen=True):
    severity: Severity
    fixes: tuple[str, ...]  # templates, formatted with the problem's details and {subject}
    probe: bool = False  # a verdict of the kernel's answer to an open (the probe)
    what: str = ""  # for the docs: what it means


_DMESG = "`dmesg | grep -iE 'amdgpu|kfd'`"
_UDEV_RULE = (
    'the host\'s udev rule (e.g. /etc/udev/rules.d/70-amdgpu.rules: KERNEL=="kfd", GROUP="render", MODE="0660" and '
    'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"), then `udevadm trigger`'
)

PREFLIGHT_KINDS: MappingProxyType[str, PreflightKind] = MappingProxyType(
    {
        # the host's driver and the nodes this process was given
        "no_gpu": PreflightKind("critical", (), what="no amdgpu GPU in sysfs"),
        "kfd_not_registered": PreflightKind(
            "critical",
            (f"check dmesg for amdgpu/kfd errors ({_DMESG}); a kernel without CONFIG_HSA_AMD has no KFD at all",),
            what="no /dev/kfd and no KFD in sysfs: no device flag can help",
        ),
        "kfd_lists_no_gpu": PreflightKind(
            "critical",
            (
                f"check dmesg for amdgpu/kfd errors ({_DMESG}), or the GPU is in a partition mode with no KFD node "
                "(current_compute_partition); the render nodes are there, so no device flag can help",
            ),
            what="KFD registered, but lists no GPU",
        ),
        # (the messages of these kinds carry their advice, as check printed it before the table)
        "kfd_absent": PreflightKind("critical", (), what="/dev/kfd is absent (though the host has a KFD)"),
        "kfd_not_char": PreflightKind("critical", (), what="/dev/kfd is not a character device"),
        "render_nodes_absent": PreflightKind(
            "critical", (), what="none of the render nodes KFD lists is under /dev/dri"
        ),
        "kfd_drm_disagree": PreflightKind("critical", (), what="KFD lists render nodes DRM lacks"),
        # what the modes, groups and ACLs allow this process
        "not_in_gpu_group": PreflightKind(
            "critical",
            (
                "in a container: docker run {docker}, Kubernetes: securityContext.supplementalGroups: [{gid_list}]",
                "a host user: usermod -aG {names} USER (then log in again)",
            ),
            what="the process is in none of the groups the nodes are in",
        ),
        "no_group_grants": PreflightKind(
            "critical",
            ("run as root, or fix " + _UDEV_RULE,),
            what="no group could open the node (e.g. crw------- root root)",
        ),
        "cannot_open": PreflightKind(
            "critical",
            (),
            what="(a consequence only) this process cannot open the node because of the cause it is folded under "
            "(a wrong group is fixed by the udev rule, not by joining that group)",
        ),
        # the kernel's answer (the probe), where the modes and groups allow
        "device_cgroup": PreflightKind(
            "critical",
            (
                "Kubernetes: request the GPUs from the AMD GPU device plugin (`resources.limits: amd.com/gpu: N`) "
                "instead of hostPath volumes of /dev/kfd and /dev/dri",
                "Docker: `--device /dev/kfd --device /dev/dri` (or --device per render node), not "
                "`-v /dev/kfd:/dev/kfd`",
            ),
            probe=True,
            what="EPERM: the device cgroup does not allow the node (the runtime was not given it as a device)",
        ),
        "nodev_mount": PreflightKind(
            "critical",
            (
                "mount {mount} without nodev (`mount -o remount,dev {mount}`), or give the container the nodes with "
                "`--device` instead of a /dev of its own",
            ),
            probe=True,
            what="EACCES: the node is on a mount with nodev",
        ),
        "security_module": PreflightKind(
            "critical",
            (
                "find the denial in the kernel log (`dmesg | grep -iE 'apparmor=.DENIED|avc: +denied'`) and allow "
                "read-write on /dev/kfd and /dev/dri/renderD* in that profile or policy (Docker: "
                "`--security-opt apparmor=...`; SELinux: the container_use_devices boolean or a device label)",
            ),
            probe=True,
            what="EACCES on a mount without nodev: a security module (AppArmor, SELinux) refused",
        ),
        "no_driver": PreflightKind(
            "critical",
            (
                "a host problem, not the container's: load the driver (`modprobe amdgpu`), check "
                f"{_DMESG}, that the GPU is bound (`lspci -k -s <bdf>`) and that /proc/devices lists major "
                "{majors}",
            ),
            probe=True,
            what="ENXIO/ENODEV: no driver behind the node's major:minor (amdgpu or KFD not loaded, GPU unbound)",
        ),
        "open_failed": PreflightKind(
            "critical",
            (f"see the kernel log ({_DMESG}) for why the driver refused the open",),
            probe=True,
            what="another error from open()",
        ),
        "open_timeout": PreflightKind(
            "critical",
            (
                f"the driver holds open() (a GPU reset, a hung GPU): check {_DMESG}; a GPU that never answers needs a "
                "reset or a reboot",
            ),
            probe=True,
            what="open() did not return within the per-read deadline",
        ),
        "kernel_allows": PreflightKind(
            "info",
            (),
            probe=True,
            what="the kernel opened a node the modes and groups say this process cannot (a capability such as "
            "CAP_DAC_OVERRIDE, or an ACL that could not be read)",
        ),
        # the baseline and the GPU selection
        "baseline_unreadable": PreflightKind("critical", (), what="baseline.json exists but cannot be read"),
        "baseline_corrupt": PreflightKind("critical", (), what="baseline.json is not a valid baseline"),
        "visible_devices_invalid": PreflightKind("critical", (), what="a *_VISIBLE_DEVICES entry selects nothing"),
        "visible_index_moved": PreflightKind("critical", (), what="a pinned index selects another GPU than then"),
        "visible_count_changed": PreflightKind("critical", (), what="the environment selects another GPU count"),
    }
)


class Consequence(msgspec.Struct, frozen=True):
    kind: str
    subject: str
    severity: Severity
    message: str
    pci_bus: str | None = None
    details: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "condition": self.kind,
            "subject": self.subject,
            "severity": self.severity,
            "pci_bus": self.pci_bus,
            "message": self.message,
            "details": dict(self.details),
        }


class Problem(msgspec.Struct, frozen=True):
    """One cause ``check`` reports, with its fixes and what it caused."""

    kind: str  # a PREFLIGHT_KINDS or conditions.KINDS key
    subject: str
    severity: Severity
    message: str
    fixes: tuple[str, ...] = ()
    consequences: tuple[Consequence, ...] = ()
    details: tuple[tuple[str, str], ...] = ()
    pci_bus: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The shape of ``check --json``'s ``causes[]``: ``fix`` the fixes joined, ``fixes`` each."""
        return {
            "condition": self.kind,
            "subject": self.subject,
            "severity": self.severity,
            "pci_bus": self.pci_bus,
            "message": self.message,
            "details": dict(self.details),
            "fix": "; ".join(self.fixes),
            "fixes": list(self.fixes),
            "consequences": [c.to_json() for c in self.consequences],
        }

    def with_consequences(self, more: Sequence[Consequence]) -> Problem:
        return msgspec.structs.replace(self, consequences=(*self.consequences, *more))


def _format(template: str, subject: str, details: Mapping[str, str]) -> str:
    try:
        return template.format(subject=subject, **details)
    except (KeyError, IndexError, ValueError):
        return template


def problem(
    kind: str,
    subject: str,
    message: str,
    consequences: Sequence[Consequence] = (),
    pci_bus: str | None = None,
    **details: object,
) -> Problem:
    """A problem of a ``PREFLIGHT_KINDS`` kind: severity and fixes from the table."""
    spec = PREFLIGHT_KINDS[kind]
    text = {k: "" if v is None else str(v) for k, v in details.items()}
    fixes = tuple(_format(f, subject, text) for f in spec.fixes)
    return Problem(kind, subject, spec.severity, message, fixes, tuple(consequences), tuple(text.items()), pci_bus)


def consequence_of(c: Condition) -> Consequence:
    return Consequence(c.kind, c.subject, c.severity, c.message, c.pci_bus, c.details)


def from_conditions(active: Sequence[Condition]) -> list[Problem]:
    """One problem per root condition, its consequences folded under it (the drift engine ties them)."""
    keys = {c.key for c in active}
    roots = [c for c in active if c.cause is None or c.cause not in keys]
    out = []
    for root in roots:
        fix = fix_text(root.kind, root.subject, dict(root.details))
        follow = [consequence_of(c) for c in sorted(active, key=lambda c: (c.kind, c.subject)) if c.cause == root.key]
        out.append(
            Problem(
                root.kind,
                root.subject,
                root.severity,
                root.message,
                (fix,) if fix else (),
                tuple(follow),
                root.details,
                root.pci_bus,
            )
        )
    return out


_ORDER = {"critical": 0, "warning": 1, "info": 2}


def sort_problems(problems: Sequence[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (_ORDER[p.severity], p.kind, p.subject))


def known_kind(kind: str) -> bool:
    return kind in PREFLIGHT_KINDS or kind in CONDITION_KINDS
