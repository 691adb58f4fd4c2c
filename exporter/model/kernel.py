"""Kernel-log records, classified events and the kernel-log source's cumulative state (issue 4).

A ``KernelRecord`` is one record of the kernel log as some format showed it (``/dev/kmsg``, dmesg, journald);
the classifier turns records into ``KernelEvent``s; the source folds events into a ``KernelLogState``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

import msgspec

Severity = Literal["critical", "warning", "info"]

# Contract section 3: every class and its severity. Rule files may add classes; they may not change these.
KERNEL_CLASSES: Mapping[str, Severity] = MappingProxyType(
    {
        **dict.fromkeys(
            (
                "ring_timeout",
                "ring_reset_failed",
                "gpu_reset_begin",
                "gpu_reset_failed",
                "vram_lost",
                "ras_fatal",
                "ras_uncorrectable",
                "ras_poison",
                "ras_aca_record",
                "mes_error",
                "kfd_preempt_fail",
                "ring_test_fail",
                "psp_error",
                "ip_block_fail",
                "init_fatal",
                "probe_fail",
                "atombios_stuck",
                "vm_flush_timeout",
            ),
            "critical",
        ),
        **dict.fromkeys(
            (
                "ring_timeout_soft",
                "vm_fault",
                "vm_fault_suppressed",
                "ras_correctable",
                "ras_deferred",
                "smu_error",
                "kfd_evict_fail",
                "kfd_quiesce_fail",
                "kfd_suspend_fail",
                "fw_load_fail",
                "fence_fallback",
                "illegal_opcode",
                "display_timeout",
                "pcie_aer",
            ),
            "warning",
        ),
        **dict.fromkeys(
            (
                "ring_reset_start",
                "gpu_reset_method",
                "gpu_reset_asic_done",
                "gpu_reset_succeeded",
                "kfd_queue_evicted",
            ),
            "info",
        ),
    }
)

UNKNOWN_DEVICE = "unknown"
# The classes whose counters start at 0 for every known GPU and for "unknown": those a shipped alert reads with
# increase() or rate() and needs to see from the first event (a counter that appears at 1 has no increase).
# Every other class appears at its first event (CONTRACT section 4); the boot-time classes' alerts
# (RocmGpuInitFailed, RocmFirmwareLoadFailed) also fire on the last event's timestamp, so theirs need no zero.
# alerts/generate.py fails when its rules read another class this way.
ZERO_INITIALISED_CLASSES = frozenset(
    {
        "ring_timeout",
        "ring_reset_failed",
        "gpu_reset_begin",
        "gpu_reset_failed",
        "vram_lost",
        "ras_fatal",
        "ras_uncorrectable",
        "ras_poison",
        "ras_aca_record",
        "mes_error",
        "kfd_preempt_fail",
        "vm_flush_timeout",
        "ring_timeout_soft",
        "vm_fault",
        "vm_fault_suppressed",
        "ras_correctable",
        "ras_deferred",
        "smu_error",
        "kfd_evict_fail",
        "kfd_quiesce_fail",
        "kfd_suspend_fail",
        "fence_fallback",
        "illegal_opcode",
        "display_timeout",
    }
)
# rocm_kernel_pcie_aer_errors_total{aer_severity}: corrected errors are a ticket, uncorrected ones a page
AER_SEVERITIES = ("corrected", "uncorrected_nonfatal", "uncorrected_fatal")
KERNEL_FACILITY = 0  # LOG_KERN; user space cannot log with it (kernel/printk devkmsg_write)


class KernelRecord(msgspec.Struct, frozen=True, gc=False):
    """One kernel-log record. Fields a format does not show are None.

    One is made per log line: a msgspec struct is made in less time than a tuple (positional arguments, fields
    in this order), and with ``gc=False`` the garbage collector never tracks it (it holds no container that could
    form a cycle), where it walked every NamedTuple record of a backlog several times over.
    """

    line: int  # 1-based line of the record's first line in the input (kmsg device: the record's ordinal)
    text: str  # the message, timestamp/syslog header stripped, device prefix kept
    facility: int | None = None  # 0 = kernel; None when the format does not show it
    level: int | None = None  # 0 (emerg) .. 7 (debug)
    seq: int | None = None  # kmsg sequence number (per boot)
    monotonic_seconds: float | None = None  # kernel timestamp, seconds since boot
    wall_time: float | None = None  # Unix time when the format gives an unambiguous one (journald, RFC 3339)
    device: str | None = None  # lower-case BDF from the structured metadata (kmsg DEVICE=+pci:..., _KERNEL_DEVICE)
    dictionary: tuple[tuple[str, str], ...] = ()  # kmsg dictionary / journald trusted kernel fields
    identifier: str | None = None  # syslog identifier in journal text formats ("kernel" for kernel records)
    boot_id: str | None = None  # journald _BOOT_ID

    @property
    def is_kernel(self) -> bool:
        """True unless the format shows the record did not come from the kernel itself."""
        if self.facility is not None:
            return self.facility == KERNEL_FACILITY
        return self.identifier is None or self.identifier == "kernel"


class KernelEvent(msgspec.Struct, frozen=True, gc=False):
    """One counted event: an anchor line of a class, attributed to a device (BDF or ``unknown``). A msgspec
    struct without garbage collection for the reason KernelRecord is one."""

    line: int
    event_class: str
    pci_bus: str
    severity: str
    message: str
    monotonic_seconds: float | None = None
    count: int = 1  # N for vm_fault_suppressed ("N callbacks suppressed"), else 1
    seq: int | None = None
    wall_time: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "line": self.line,
            "class": self.event_class,
            "pci_bus": self.pci_bus,
            "severity": self.severity,
            "monotonic_seconds": self.monotonic_seconds,
            "message": self.message,
            "count": self.count,
        }


def _frozen_counts() -> Mapping[tuple[str, str], int]:
    return MappingProxyType({})


def _frozen_times() -> Mapping[tuple[str, str], float]:
    return MappingProxyType({})


class KernelLogState(msgspec.Struct, frozen=True):
    """What the kernel-log source has counted so far (cumulative, persisted across restarts and reboots)."""

    counts: Mapping[tuple[str, str], int] = msgspec.field(default_factory=_frozen_counts)  # (pci_bus, class) -> n
    last_event_seconds: Mapping[tuple[str, str], float] = msgspec.field(default_factory=_frozen_times)  # Unix time
    aer_counts: Mapping[tuple[str, str], int] = msgspec.field(default_factory=_frozen_counts)  # (pci_bus, severity)
    records_lost: int = 0  # kmsg records overwritten before they were read (EPIPE, sequence gaps)
    records_read: int = 0  # records read by this process since it started
    records_ignored: int = 0  # records not from the kernel (user space writing to /dev/kmsg): never counted
    lines_unparsed: int = 0  # text lines no known format could read (warnings)
    boot_id: str | None = None
    last_seq: int | None = None
    source_kind: str = ""  # "kmsg", "fifo" or "file"
    cursor_corrupt: bool = False  # the persisted cursor could not be read and was moved aside
    cursor_unsaved: bool = False  # the last cursor write failed: counting goes on, exactly-once across a restart not
    warnings: tuple[str, ...] = ()  # the most recent problems (bounded)
