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
        # the host's configuration beyond the device nodes (exporter.watchdog.hostconfig; docs/check.md, "Host
        # configuration"): a fix whose template names a detail the problem does not have is left out
        "gfx_override_invalid": PreflightKind(
            "critical",
            ("unset HSA_OVERRIDE_GFX_VERSION, or give major.minor.stepping",),
            what="HSA_OVERRIDE_GFX_VERSION is not major.minor.stepping",
        ),
        "gfx_override_redundant": PreflightKind(
            "info", ("unset HSA_OVERRIDE_GFX_VERSION",), what="HSA_OVERRIDE_GFX_VERSION names the GPU's own ISA"
        ),
        "gfx_override_same_family": PreflightKind(
            "info",
            ("none needed; where the libraries ship {gfx} kernels, unset it",),
            what="HSA_OVERRIDE_GFX_VERSION names another ISA of the GPU's family: a known workaround",
        ),
        "gfx_override_mismatch": PreflightKind(
            "critical",
            (
                "unset HSA_OVERRIDE_GFX_VERSION ({gfx} needs no override when ROCm supports it); an override is a "
                "workaround only within an ISA family (e.g. 10.3.0 on gfx1031)",
                "within {gfx}'s family the override is {family_base}",
            ),
            what="HSA_OVERRIDE_GFX_VERSION names an ISA outside a visible GPU's family",
        ),
        "gfx_override_unjudged": PreflightKind(
            "info", (), what="HSA_OVERRIDE_GFX_VERSION is set and KFD gives no gfx_target_version for a GPU"
        ),
        "gpu_device_ordinal_invalid": PreflightKind(
            "critical",
            ("GPU_DEVICE_ORDINAL counts the GPUs ROCR_VISIBLE_DEVICES kept, from 0: fix or unset it",),
            what="GPU_DEVICE_ORDINAL names no GPU (OpenCL's selection)",
        ),
        "visible_devices_contradict": PreflightKind(
            "critical",
            ("set one selection (ROCR_VISIBLE_DEVICES for every runtime) and unset the others",),
            what="HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL select different GPUs",
        ),
        "sdma_disabled": PreflightKind(
            "info",
            ("keep it only as the workaround for an SDMA fault on this ROCm release; unset it after upgrading",),
            what="HSA_ENABLE_SDMA=0: copies run as blit kernels on the compute queues",
        ),
        "rocm_driver_unjudged": PreflightKind(
            "info", (), what="the in-tree amdgpu driver, or a module version the compatibility table does not know"
        ),
        "rocm_driver_mismatch": PreflightKind(
            "warning",
            (
                "use a ROCm {supported} image on this host, or install the amdgpu-dkms of a release that supports "
                "ROCm {user} (docs: user-kernel-space-compat-matrix)",
            ),
            what="the ROCm user space is outside AMD's support matrix for the amdgpu-dkms driver",
        ),
        "udev_rules_unreadable": PreflightKind(
            "info",
            ("run check with the host's root mounted read-only and --path.rootfs pointing at it",),
            what="no udev rules directory under --path.rootfs (or a container's own /): the rules are not judged",
        ),
        "udev_rules_skipped": PreflightKind(
            "info",
            ("fix the lines (`udevadm verify` on systemd >= 254), then `udevadm control --reload`",),
            what="rule lines or files that udev skips (syntax errors, unreadable files)",
        ),
        "udev_rule_undecidable": PreflightKind(
            "info",
            (
                "check the node after `udevadm trigger`; `udevadm test $(udevadm info -q path -n <node>)` shows "
                "which rules applied",
            ),
            what="a rule that would set the node depends on PROGRAM, IMPORT, ENV...: never guessed",
        ),
        "udev_no_rule_not_default": PreflightKind(
            "info",
            (
                'make it a rule: /etc/udev/rules.d/70-amdgpu.rules with KERNEL=="kfd", GROUP="render", MODE="0660" '
                'and SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"',
            ),
            what="no rule sets the node, yet it is not devtmpfs's root:root 0600: set by something else",
        ),
        "udev_no_rule": PreflightKind(
            "critical",
            (
                'add /etc/udev/rules.d/70-amdgpu.rules with KERNEL=="kfd", GROUP="render", MODE="0660" and '
                'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660", then `udevadm control '
                "--reload && udevadm trigger`",
            ),
            what="no rule sets /dev/kfd's or a render node's group or mode: devtmpfs's root:root 0600 stands",
        ),
        "udev_rule_not_applied": PreflightKind(
            "warning",
            ("`udevadm control --reload && udevadm trigger` (on the host), then check again",),
            what="the rules give the node another owner, group or mode than it has",
        ),
        "udev_rule_world_writable": PreflightKind(
            "info",
            (
                'give it a group and MODE="0660" in a rule that overrides {mode_from} (a same-named file in '
                "/etc/udev/rules.d masks one in /usr/lib/udev/rules.d)",
            ),
            what="a rule makes the node writable by everyone",
        ),
        "shm_too_small": PreflightKind(
            "warning",
            (
                "Docker: `--ipc=host` or `--shm-size=16g`; Kubernetes: an emptyDir with medium: Memory mounted at "
                "/dev/shm (sizeLimit e.g. 16Gi)",
            ),
            what="/dev/shm is under 1 GiB with two or more GPUs visible",
        ),
        "amd_smi_no_card_nodes": PreflightKind(
            "critical",
            ("pass the card nodes too (`--device /dev/dri`), or turn the source off (--no-collector.amd-smi)",),
            what="the amd-smi source is on and none of the GPUs' card nodes is under /dev/dri",
        ),
        "amd_smi_cannot_open_cards": PreflightKind(
            "critical",
            (
                "add the group: `docker run {docker}`, Kubernetes `securityContext.supplementalGroups: [{gid_list}]`",
                "or turn the source off (--no-collector.amd-smi)",
            ),
            what="the amd-smi source is on and this process cannot open the GPUs' card nodes (ROCm/amdsmi#184)",
        ),
        "amd_smi_cards_no_group": PreflightKind(
            "critical",
            (
                "no group grants them: run as root, or fix the udev rule for card nodes",
                "or turn the source off (--no-collector.amd-smi)",
            ),
            what="the amd-smi source is on and no group could open the GPUs' card nodes",
        ),
        "processes_not_checked": PreflightKind(
            "info",
            ("run check with the host's /proc as --path.procfs (hostPID, or -v /proc:/host/proc)",),
            what="a group's gid changed, but --path.procfs is not the host's /proc: processes that kept it unnamed",
        ),
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
        return _json(self)


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
            **_json(self),
            "fix": "; ".join(self.fixes),
            "fixes": list(self.fixes),
            "consequences": [c.to_json() for c in self.consequences],
        }

    def with_consequences(self, more: Sequence[Consequence]) -> Problem:
        return msgspec.structs.replace(self, consequences=(*self.consequences, *more))


def _json(c: Consequence | Problem) -> dict[str, Any]:
    """What a cause and a consequence share in ``check --json``."""
    return {
        "condition": c.kind,
        "subject": c.subject,
        "severity": c.severity,
        "pci_bus": c.pci_bus,
        "message": c.message,
        "details": dict(c.details),
    }


def _format(template: str, subject: str, details: Mapping[str, str]) -> str | None:
    """The fix, or None when it names a detail the problem does not have (a fix that applies only then)."""
    try:
        return template.format(subject=subject, **details)
    except KeyError:
        return None
    except (IndexError, ValueError):
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
    return table_problem(kind, subject, message, details, consequences, pci_bus)


def table_problem(
    kind: str,
    subject: str,
    message: str,
    details: Mapping[str, object],
    consequences: Sequence[Consequence] = (),
    pci_bus: str | None = None,
) -> Problem:
    """``problem`` with the details as a mapping. A None detail is "" in the fixes; a fix naming a detail that is
    not given at all is left out (a fix that applies only with that detail)."""
    spec = PREFLIGHT_KINDS[kind]
    text = {k: "" if v is None else str(v) for k, v in details.items()}
    fixes = tuple(fix for f in spec.fixes if (fix := _format(f, subject, text)) is not None)
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
