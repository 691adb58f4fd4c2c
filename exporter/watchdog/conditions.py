"""The one table of device-watchdog condition kinds: severity, the alert that pages or tickets on a root cause, and
the fix ``check`` prints.

Everything that states a severity reads it from here: the drift engine (and so ``rocm_device_condition`` and its
``severity`` label), ``check``, the alert rules (``alerts/generate.py`` renders them from this table and
tests/test_alerts.py fails when the shipped file differs) and the Alertmanager push (``--alertmanager.url``).

Severity: ``critical`` pages (GPUs cannot be used, or the wrong one is used); ``warning`` goes to a ticket queue
(drift or a broken rule that will bite); ``info`` is worth knowing, not a problem by itself (``check`` does not
fail on it, no alert fires).

A condition is either a root cause or a consequence of one (``Condition.cause``): a GPU that disappears forces the
card/render renumbering of the GPUs after it, a host group's new gid relabels every node of the group. Only root
causes alert; a consequence is shown under its cause and carries the cause's kind in the ``cause`` label.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

import msgspec

from exporter.model.devices import Severity
from exporter.watchdog.health_reasons import HEALTH_REASONS as HEALTH_REASONS  # the GPU verdict's table, beside this

Scope = Literal["gpu", "node", "group", "drm", "process"]

ALERT_GENERIC = "RocmDeviceCondition"


class ConditionKind(msgspec.Struct, frozen=True):
    severity: Severity
    scope: Scope  # what the subject is: a PCI address, a host device path, a group name, a driver@parent key
    baseline: bool  # compared against the baseline: ``baseline accept`` clears it
    fix: str  # what to do, formatted with the condition's details and ``{subject}``
    alert: str = ALERT_GENERIC  # the alert rule (and pushed alert) named for it; "" for info kinds


_ACCEPT = "if the change was intended: `rocm-watchdog baseline accept`"
_UDEV = (
    "restore the udev rule (e.g. /etc/udev/rules.d/70-amdgpu.rules: "
    'KERNEL=="kfd", GROUP="render", MODE="0660" and SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", '
    'MODE="0660"), then `udevadm trigger`; ' + _ACCEPT
)
_RESTART_PINNED = (
    "restart containers and device plugins that pinned card/render numbers (or pin /dev/dri/by-path/pci-<bdf>-render "
    "and GPU-<uuid> values); " + _ACCEPT
)

# What caches a GPU's partition layout (ROCm/gpu-operator#420: nothing said so after a profile change).
_PARTITION_RESTART = (
    "the partition layout of {subject} changed; restart what cached the old one: the AMD device plugin "
    "(`kubectl -n kube-amd-gpu rollout restart ds/<device-plugin>`, or its systemd unit) and the node labeller "
    "(`kubectl -n kube-amd-gpu rollout restart ds/<node-labeller>`), which advertise the old partition count, and "
    "the workloads on this GPU's partitions; rocm-watchdog's own attribution (processes and pods per partition) "
    "re-reads the layout on its next sysfs and processes runs, but pods keep the old amdgpu_xcp device ids until "
    "recreated; then " + _ACCEPT
)

KINDS: MappingProxyType[str, ConditionKind] = MappingProxyType(
    {
        # GPU identity against the baseline (subject: pci_bus)
        "gpu_missing": ConditionKind(
            "critical",
            "gpu",
            True,
            "check `lspci -s {subject}` and the kernel log (fell off the bus, failed init, removed); " + _ACCEPT,
            "RocmGpuMissing",
        ),
        "render_renumbered": ConditionKind("critical", "gpu", True, _RESTART_PINNED, "RocmRenderNodeRenumbered"),
        "card_renumbered": ConditionKind("warning", "gpu", True, _RESTART_PINNED),
        "kfd_node_changed": ConditionKind(
            "warning", "gpu", True, "jobs pinned by HIP/ROCR index now use another GPU: pin GPU-<uuid>; " + _ACCEPT
        ),
        "gpu_new": ConditionKind("warning", "gpu", True, _ACCEPT),
        "unique_id_changed": ConditionKind("info", "gpu", True, "a board was swapped: " + _ACCEPT, ""),
        "partition_mode_changed": ConditionKind(
            "warning",
            "gpu",
            True,
            _PARTITION_RESTART,
        ),
        # device nodes against the baseline (subject: host path)
        "node_missing": ConditionKind(
            "critical", "node", True, "check the driver and udev (`udevadm trigger`); " + _ACCEPT
        ),
        "mode_drift": ConditionKind("critical", "node", True, _UDEV, "RocmDeviceNodePermissionDrift"),
        "uid_drift": ConditionKind("critical", "node", True, _UDEV, "RocmDeviceNodePermissionDrift"),
        "gid_drift": ConditionKind("critical", "node", True, _UDEV, "RocmDeviceNodePermissionDrift"),
        "rdev_drift": ConditionKind(
            "warning", "node", True, "a stale static /dev entry: remove it and `udevadm trigger`; " + _ACCEPT
        ),
        "acl_drift": ConditionKind(
            "warning", "node", True, "check the uaccess/seat rules that set ACLs (`getfacl {subject}`); " + _ACCEPT
        ),
        "kfd_major_changed": ConditionKind(
            "critical",
            "node",
            True,
            "restart every GPU container (their device-cgroup rule names the old major); " + _ACCEPT,
        ),
        # host and foreign devices against the baseline
        "group_gid_drift": ConditionKind(
            "critical",
            "group",
            True,
            "give containers the new gid: `docker run --group-add {now}`, Kubernetes "
            "`securityContext.supplementalGroups: [{now}]`; then " + _ACCEPT,
            "RocmRenderGroupGidChanged",
        ),
        # a consequence of group_gid_drift only (subject: "pid <pid>"): it alerts through its cause
        "process_lost_group": ConditionKind(
            "critical",
            "process",
            False,
            "restart the workload (pid {pid}, {name}) with the new gid: `docker run --group-add {gid}`, Kubernetes "
            "`securityContext.supplementalGroups: [{gid}]` (a running process keeps the groups it started with)",
            "RocmRenderGroupGidChanged",
        ),
        "drm_device_added": ConditionKind("warning", "drm", True, _RESTART_PINNED),
        "drm_device_removed": ConditionKind("warning", "drm", True, _RESTART_PINNED),
        # rules on the current state, no baseline needed
        "render_without_kfd": ConditionKind(
            "critical", "gpu", False, "amdkfd did not initialise this GPU: check the kernel log, reload amdgpu"
        ),
        "kfd_render_without_node": ConditionKind(
            "info", "node", False, "a container given a subset of render nodes is fine; on a host run udev", ""
        ),
        "not_char_device": ConditionKind("critical", "node", False, "remove {subject} and `udevadm trigger`"),
        "rdev_mismatch": ConditionKind(
            "critical", "node", False, "a stale static or copied /dev: remove {subject} and `udevadm trigger`"
        ),
        "world_writable": ConditionKind("info", "node", False, "`chmod o-w {subject}` (or fix the udev rule)", ""),
        "group_not_render_or_video": ConditionKind("warning", "node", False, _UDEV),
        "kfd_render_group_split": ConditionKind(
            "warning",
            "node",
            False,
            "give /dev/kfd and the render nodes one group in udev, or add both gids to containers",
        ),
        "gid_has_no_name": ConditionKind(
            "warning", "node", False, "the group was deleted or renumbered on the host: " + _UDEV
        ),
        "mode_inconsistent": ConditionKind("warning", "node", False, _UDEV),
        "group_inconsistent": ConditionKind("warning", "node", False, _UDEV),
        "minor_extended": ConditionKind(
            "warning", "node", False, "more than 64 DRM devices of a kind: check that tools and plugins see them all"
        ),
        "by_path_missing": ConditionKind("warning", "node", False, "udev did not run: `udevadm trigger`"),
        "by_path_dangling": ConditionKind("warning", "node", False, "`udevadm trigger` to rebuild the links"),
        "by_path_mismatch": ConditionKind("warning", "node", False, "`udevadm trigger` to rebuild the links"),
    }
)

SEVERITY: MappingProxyType[str, Severity] = MappingProxyType({k: v.severity for k, v in KINDS.items()})
BASELINE_KINDS = frozenset(k for k, v in KINDS.items() if v.baseline)


def alert_name(kind: str) -> str:
    """The alert that fires for an active root condition of this kind ("" for info kinds, which never alert)."""
    spec = KINDS.get(kind)
    return spec.alert if spec is not None else ALERT_GENERIC


def node_alerts() -> frozenset[str]:
    """Alerts whose every condition kind is about a device node: they carry the subject as ``path`` too (the label
    the per-node alerts had), in the rules and in the pushed alerts alike."""
    scopes: dict[str, set[str]] = {}
    for spec in KINDS.values():
        if spec.severity != "info" and spec.alert:
            scopes.setdefault(spec.alert, set()).add(spec.scope)
    return frozenset(name for name, kinds in scopes.items() if kinds == {"node"})


def fix_text(kind: str, subject: str, details: dict[str, str]) -> str:
    spec = KINDS.get(kind)
    if spec is None:
        return ""
    try:
        return spec.fix.format(subject=subject, **details)
    except (KeyError, IndexError, ValueError):
        return spec.fix
