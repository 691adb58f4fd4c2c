"""The one table of GPU health reasons: what makes a GPU (or partition) ``unhealthy`` or ``unknown``, from which
input, and what a remediation does about it. Kept beside the conditions table (``exporter.watchdog.conditions``
re-exports it); the verdict engine (``exporter.watchdog.health``), the metrics (``rocm_gpu_health``,
``rocm_gpu_health_reason``), the verdict file node-problem-detector reads, the alerts and docs/gpu-health.md all
read it, and tests/test_gpu_health.py fails when they disagree.

Inputs:

- ``condition``: an active device-watchdog condition of the reason's kind (``KINDS``) on the GPU: ``on="gpu"`` its
  subject is the GPU; ``on="render"`` its subject is the GPU's render node or ``/dev/kfd`` (every GPU needs both);
  ``on="nodes"`` any of the GPU's device nodes (card, render) or ``/dev/kfd``. ``in_use``: only while a KFD process
  that started before the condition did holds the GPU (a renumbered render node harms the processes that opened
  the old number, not the ones started since).
- ``kernel_event``: a kernel-log event of one of ``classes`` on the GPU (or on its physical GPU, for a partition:
  the kernel names the PCI function) within ``--health.event-window`` of the event's own timestamp.
- ``node_kernel_event``: such an event the kernel log could not attribute (``pci_bus="unknown"``): no single GPU is
  to blame, so each GPU not unhealthy on its own is ``unknown`` for the window, with this reason on it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

import msgspec

HealthState = Literal["healthy", "unhealthy", "unknown"]
HEALTH_STATES: tuple[HealthState, ...] = ("healthy", "unhealthy", "unknown")
HealthInput = Literal["condition", "kernel_event", "node_kernel_event"]

# The critical kernel-log classes that make a GPU unhealthy for the window after them.
CRITICAL_EVENT_CLASSES = ("gpu_reset_failed", "vram_lost", "ras_uncorrectable", "ring_timeout")
DEFAULT_EVENT_WINDOW_SECONDS = 600.0


class HealthReason(msgspec.Struct, frozen=True):
    state: Literal["unhealthy", "unknown"]
    input: HealthInput
    meaning: str  # what it says about the GPU
    action: str  # what a remediation does (docs/gpu-health.md)
    on: Literal["gpu", "render", "nodes", ""] = ""  # condition inputs: where the condition is (see above)
    in_use: bool = False  # condition inputs: only while a KFD process older than the condition holds the GPU
    classes: tuple[str, ...] = ()  # kernel inputs: the classes


_DRAIN = "cordon the node (or taint the GPU out of the device plugin), drain its GPU pods"
_UDEV = "fix the udev rule as `rocm-watchdog check` prints, then `baseline accept` if intended; no drain needed"

HEALTH_REASONS: MappingProxyType[str, HealthReason] = MappingProxyType(
    {
        "gpu_missing": HealthReason(
            "unhealthy", "condition", "in the baseline, gone from the bus now", _DRAIN + "; reboot or reseat", "gpu"
        ),
        "render_without_kfd": HealthReason(
            "unhealthy", "condition", "a render node but no KFD node: not usable for compute", _DRAIN, "gpu"
        ),
        "node_missing": HealthReason(
            "unhealthy", "condition", "its render node (or /dev/kfd) is gone", "`udevadm trigger`; " + _DRAIN, "render"
        ),
        "not_char_device": HealthReason(
            "unhealthy", "condition", "its render node (or /dev/kfd) is not a character device", _UDEV, "render"
        ),
        "rdev_mismatch": HealthReason(
            "unhealthy", "condition", "its render node (or /dev/kfd) is another device than sysfs says", _UDEV, "render"
        ),
        "gid_drift": HealthReason("unhealthy", "condition", "a node of it changed group", _UDEV, "nodes"),
        "mode_drift": HealthReason("unhealthy", "condition", "a node of it changed mode", _UDEV, "nodes"),
        "render_renumbered": HealthReason(
            "unhealthy",
            "condition",
            "its render node number moved while a process that opened the old one still runs",
            "restart the processes (pods) started before the renumbering",
            "gpu",
            in_use=True,
        ),
        "gpu_reset_failed": HealthReason(
            "unhealthy",
            "kernel_event",
            "a reset failed",
            _DRAIN + "; reload amdgpu or reboot",
            classes=("gpu_reset_failed",),
        ),
        "vram_lost": HealthReason(
            "unhealthy",
            "kernel_event",
            "a reset lost VRAM",
            "restart every process that used it",
            classes=("vram_lost",),
        ),
        "ras_uncorrectable": HealthReason(
            "unhealthy",
            "kernel_event",
            "an uncorrectable RAS (memory) error",
            _DRAIN + "; check the bad-page count",
            classes=("ras_uncorrectable",),
        ),
        "ring_timeout": HealthReason(
            "unhealthy",
            "kernel_event",
            "a ring (job) hung",
            "let the reset finish; drain if it repeats",
            classes=("ring_timeout",),
        ),
        "node_kernel_event": HealthReason(
            "unknown",
            "node_kernel_event",
            "a critical kernel event named no GPU",
            "read the kernel log (`journalctl -k`) to find the GPU; the RocmNodeKernelEventUnattributed alert",
            classes=CRITICAL_EVENT_CLASSES,
        ),
    }
)
