"""Kernel-log classification: every example line of the taxonomy, traps, attribution, multi-line events, rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from msgspec.structs import replace

from exporter.model.kernel import KERNEL_CLASSES, KernelRecord
from exporter.parsers.kernel_log import parse_kernel_log_records
from exporter.watchdog.kernel_classify import KernelClassifier, kernel_log_report, match_message
from exporter.watchdog.kernel_rules import (
    KernelRulesError,
    compile_rules,
    default_rules,
    load_rules,
    required_literal,
)

RULES = default_rules()

# The "real example" column of research/kernel-log-taxonomy.md section 2, verbatim (timestamps stripped where
# the taxonomy quotes one), and the class each must get; None = must not count.
REAL_EXAMPLES = [
    ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3", "ring_timeout"),
    ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, but soft recovered", "ring_timeout_soft"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", "gpu_reset_begin"),
    ("amdgpu 0000:05:00.0: amdgpu: MODE2 reset", "gpu_reset_method"),
    ("amdgpu 0000:05:00.0: amdgpu: GPU reset succeeded, trying to resume", "gpu_reset_asic_done"),
    ("[drm] VRAM is lost due to GPU reset!", "vram_lost"),
    (
        "amdgpu 0000:03:00.0: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:8 pasid:32779, for process python3 "
        "pid 11287 thread python3 pid 11287)",
        "vm_fault",
    ),
    ("amdgpu 0000:83:00.0: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", "ras_fatal"),
    ("vfio-pci 0000:0c:00.0: SMU error 0xfd", None),
    ("amdgpu: qcm fence wait loop timeout expired", "kfd_preempt_fail"),
    ("ring mes_kiq_3.1.0 test failed (-110)", "ring_test_fail"),
    ("[drm ERROR :psp_hw_init] PSP firmware loading failed", "psp_error"),
    ("[drm ERROR :amdgpu_device_ip_init] sw_init of IP block <psp> failed -2", "ip_block_fail"),
    ("amdgpu 0000:01:00.0: Fatal error during GPU init", "init_fatal"),
    ("amdgpu 0000:01:00.0: probe with driver amdgpu failed with error -12", "probe_fail"),
    ("[drm] Fence fallback timer expired on ring sdma0", "fence_fallback"),
    ("amdgpu 0000:06:00.0: amdgpu: Timeout waiting for VM flush ACK!", "vm_flush_timeout"),
    ("amdgpu 0000:33:00.0: [drm] *ERROR* [CRTC:72:crtc-0] flip_done timed out", "display_timeout"),
    ("pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0", "pcie_aer"),
    ("{359}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 512", None),
]

# Classes whose taxonomy example is "held-out only" or "none found": lines built from the kernel format strings
# of the same table, in the prefix variants the format-change timeline lists.
FORMAT_STRING_EXAMPLES: list[tuple[str, str | None]] = [
    ("amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=10, emitted seq=12", "ring_timeout"),
    ("amdgpu 0000:03:00.0: ring gfx_0.0.0 timeout, signaled seq=10, emitted seq=12", "ring_timeout"),
    ("amdgpu 0000:03:00.0: amdgpu: Starting gfx_0.0.0 ring reset", "ring_reset_start"),
    ("amdgpu 0000:03:00.0: amdgpu: Ring gfx_0.0.0 reset failure", "ring_reset_failed"),
    ("amdgpu 0000:03:00.0: Ring sdma0 reset failed", "ring_reset_failed"),
    ("amdgpu 0000:03:00.0: GPU reset begin!", "gpu_reset_begin"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU reset begin!. Source:  3", "gpu_reset_begin"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU jobs stop begin!", "gpu_reset_begin"),
    ("amdgpu 0000:03:00.0: amdgpu: BACO reset", "gpu_reset_method"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU mode1 reset", "gpu_reset_method"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU pci config reset", "gpu_reset_method"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU reset(3) succeeded!", "gpu_reset_succeeded"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU reset(3) failed", "gpu_reset_failed"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU mode1 reset failed", "gpu_reset_failed"),
    ("amdgpu 0000:03:00.0: VRAM is lost due to GPU reset!", "vram_lost"),
    ("amdgpu 0000:03:00.0: amdgpu: [mmhub0] page fault (src_id:0 ring:0 vmid:3 pasid:32771)", "vm_fault"),
    ("amdgpu 0000:03:00.0: [mmhub] VMC page fault (src_id:0 ring:153 vm_id:0 pas_id:0)", "vm_fault"),
    ("amdgpu 0000:03:00.0: GPU fault detected: 146 0x0c4c4804", "vm_fault"),
    ("gmc_v11_0_process_interrupt: 19 callbacks suppressed", "vm_fault_suppressed"),
    ("amdgpu 0000:03:00.0: amdgpu: {12}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", "ras_fatal"),
    ("amdgpu 0000:03:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block", "ras_uncorrectable"),
    (
        "amdgpu 0000:03:00.0: amdgpu: {3}socket: 0, die: 1, 2 new uncorrectable hardware errors detected in umc block",
        "ras_uncorrectable",
    ),
    (
        "amdgpu 0000:03:00.0: amdgpu: socket: 0, die: 0 4 correctable hardware errors detected in gfx block",
        "ras_correctable",
    ),
    ("amdgpu 0000:03:00.0: amdgpu: 1 deferred hardware errors detected in umc block", "ras_deferred"),
    ("amdgpu 0000:03:00.0: amdgpu: 3 new deferred hardware errors detected", "ras_deferred"),
    ("amdgpu 0000:03:00.0: amdgpu: GPU reset for umc RAS poison consumption is issued!", "ras_poison"),
    ("amdgpu 0000:03:00.0: amdgpu: Poison detected in VCN0, sub_block1", "ras_poison"),
    ("amdgpu 0000:03:00.0: amdgpu: [Hardware Error]: Accelerator Check Architecture events logged", "ras_aca_record"),
    (
        "amdgpu 0000:03:00.0: amdgpu: SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x0000000E "
        "SMN_C2PMSG_82:0x00000000",
        "smu_error",
    ),
    ("amdgpu 0000:03:00.0: amdgpu: SMU is in hanged state, failed to send smu message!", "smu_error"),
    ("amdgpu: [powerplay] Failed to send message 0x26, response 0x0", "smu_error"),
    (
        "amdgpu 0000:03:00.0: amdgpu: message: GetMetricsTable (42) \tparam: 0x00000003 is timeout (no response)",
        "smu_error",
    ),
    ("amdgpu 0000:03:00.0: amdgpu: Msg issuing pre-check failed and SMU may be not in the right state!", "smu_error"),
    ("amdgpu 0000:03:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE", "mes_error"),
    ("amdgpu 0000:03:00.0: amdgpu: MES might be in unrecoverable state, issue a GPU reset", "mes_error"),
    ("[drm:mes_v11_0_submit_pkt_and_poll_completion [amdgpu]] *ERROR* MES failed to response msg=14", "mes_error"),
    ("amdgpu 0000:03:00.0: amdgpu: MES(1) failed to respond to msg=REMOVE_QUEUE", "mes_error"),
    ("[drm ERROR :mes_v11_0_submit_pkt_and_poll_completion] MES failed to response msg=3", "mes_error"),
    ("drmn0: GPU reset begin!", "gpu_reset_begin"),
    ("kfd: qcm fence wait loop timeout expired ", "kfd_preempt_fail"),
    ("amdgpu 0000:03:00.0: amdgpu_init failed", "init_fatal"),
    ("pcieport 0000:00:03.1: AER: Multiple Corrected error received: id=0300", "pcie_aer"),
    ("amdgpu: Failed to evict process queues", "kfd_evict_fail"),
    ("amdgpu: Failed to quiesce KFD", "kfd_quiesce_fail"),
    ("amdgpu: Failed to suspend process pid 4242", "kfd_suspend_fail"),
    ("amdgpu: Freeing queue vital buffer 0x7f0000000000, queue evicted", "kfd_queue_evicted"),
    ("amdgpu 0000:03:00.0: amdgpu: IB test failed on gfx_0.0.0 (-110).", "ring_test_fail"),
    ("[drm:amdgpu_device_init [amdgpu]] *ERROR* amdgpu_device_ip_init failed", "init_fatal"),
    ("amdgpu: probe of 0000:03:00.0 failed with error -22", "probe_fail"),
    ("amdgpu 0000:03:00.0: Direct firmware load for amdgpu/gc_11_0_0_mes.bin failed with error -2", "fw_load_fail"),
    ("amdgpu 0000:03:00.0: Fence fallback timer expired on ring gfx_0.0.0", "fence_fallback"),
    (
        "[drm:amdgpu_atom_execute_table_locked [amdgpu]] *ERROR* atombios stuck in loop for more than 20secs aborting",
        "atombios_stuck",
    ),
    ("[drm:gfx_v11_0_bad_op_irq [amdgpu]] *ERROR* Illegal opcode in command stream", "illegal_opcode"),
    ("pcieport 0000:00:01.1: AER: Uncorrected (Non-Fatal) error received: 0000:03:00.0", "pcie_aer"),
    ("pcieport 0000:00:01.1: AER: Multiple Corrected error received: 0000:03:00.0", "pcie_aer"),
]

TRAPS = [
    "amdgpu 0000:03:00.0: amdgpu: RAS: optional ras ta ucode is not available",
    "amdgpu 0000:03:00.0: amdgpu: MEM ECC is active.",
    "amdgpu 0000:03:00.0: amdgpu: SRAM ECC is active.",
    "amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 uses VM inv eng 0 on hub 0",
    "amdgpu 0000:03:00.0: amdgpu: Watermarks table not configured properly by SMU",
    "amdgpu 0000:03:00.0: amdgpu: SMU driver if version not matched",
    "[drm:amdgpu_job_run [amdgpu]] *ERROR* Skip scheduling IBs!",
    "amdgpu 0000:03:00.0: amdgpu: Dumping IP State",
    "amdgpu 0000:03:00.0: amdgpu: recover vram bo from shadow start",
    "amdgpu 0000:03:00.0: amdgpu: recover vram bo from shadow done",
    "amdgpu 0000:03:00.0: amdgpu: UVD VCPU state may lost due to RAS ERREVENT_ATHUB_INTERRUPT",
]

DETAILS = [
    ("amdgpu 0000:03:00.0: amdgpu:   in page starting at address 0x0000000000001000 from client 27", "vm_fault"),
    ("amdgpu 0000:03:00.0: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00800932", "vm_fault"),
    ("amdgpu 0000:03:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00000000", "vm_fault"),
    ("amdgpu 0000:03:00.0: amdgpu: \t MORE_FAULTS: 0x1", "vm_fault"),
    (
        "amdgpu 0000:03:00.0: VM fault (0x04, vmid 3, pasid 32768) at page 4096, read from 'TC4' (0x54433400) (72)",
        "vm_fault",
    ),
    ("amdgpu 0000:03:00.0:   VM_CONTEXT1_PROTECTION_FAULT_ADDR   0x0013FC00", "vm_fault"),
    ("amdgpu 0000:03:00.0: amdgpu: [Hardware Error]: ACA[01/04].STATUS=0xbaa0000000040135", "ras_aca_record"),
    ("amdgpu 0000:03:00.0: amdgpu: {1}[Hardware Error]: aca entry[00].STATUS=0xbaa0000000040135", "ras_aca_record"),
    (
        "amdgpu 0000:03:00.0: amdgpu: 10 uncorrectable hardware errors detected in total in umc block",
        "ras_uncorrectable",
    ),
]


@pytest.mark.parametrize(("line", "expected"), REAL_EXAMPLES + FORMAT_STRING_EXAMPLES)
def test_example_lines_classify_as_documented(line: str, expected: str | None) -> None:
    match = match_message(RULES, line)
    if expected is None:
        assert match.kind in ("none", "trap"), (line, match.rule)
    else:
        assert match.kind in ("anchor", "followup"), line
        assert match.rule is not None
        assert match.rule.event_class == expected
        assert match.rule.severity == KERNEL_CLASSES[expected]
        if match.kind == "followup":  # a restating line still counts when it is the only one
            counts = kernel_log_report(f"[  1.000000] {line}\n")["counts"]
            assert counts == {"0000:01:00.0" if "01:00.0" in line else "0000:03:00.0": {expected: 1}}


@pytest.mark.parametrize("line", TRAPS)
def test_traps_never_count(line: str) -> None:
    assert match_message(RULES, line).kind == "trap"
    report = kernel_log_report(f"[  1.000000] {line}\n")
    assert report["events"] == [] and report["counts"] == {}


@pytest.mark.parametrize(("line", "cls"), DETAILS)
def test_detail_lines_are_not_anchors(line: str, cls: str) -> None:
    match = match_message(RULES, line)
    assert match.kind == "detail" and cls in match.detail_classes


def test_shipped_rules_cover_every_contract_class() -> None:
    assert set(RULES.classes) == set(KERNEL_CLASSES)
    for rule in RULES.rules:
        assert rule.severity == KERNEL_CLASSES[rule.event_class]


def test_every_format_gives_the_expected_counts_with_forged_lines_ignored() -> None:
    data = Path(__file__).parent / "data" / "kernel-log"
    expected = json.loads((data / "expected-counts.json").read_text())
    files = sorted(p for p in data.iterdir() if p.suffix in (".txt", ".json") and p.name != "expected-counts.json")
    assert len(files) == 13
    formats = set()
    for path in files:
        report = kernel_log_report(path.read_text())
        assert report["counts"] == expected, path.name
        formats.add(report["format"])
        shows_facility = path.name not in ("dmesg.txt", "dmesg-T.txt", "dmesg-caller.txt")
        forged = [w for w in report["warnings"] if "not from the kernel" in str(w)]  # type: ignore[attr-defined]
        assert len(forged) == (1 if shows_facility else 0), path.name
    assert formats == {"kmsg", "dmesg", "dmesg-json", "journal-short", "journal-rfc3339", "journal-json"}


def test_report_events_shape() -> None:
    text = (Path(__file__).parent / "data" / "kernel-log" / "dmesg.txt").read_text()
    report = kernel_log_report(text)
    events = report["events"]
    assert isinstance(events, list)
    first = events[0]
    # the old-format ring timeout on line 3 takes the device of the reset on line 4 (within 1 s)
    assert first == {
        "line": 3,
        "class": "ring_timeout",
        "pci_bus": "0000:43:00.0",
        "severity": "critical",
        "monotonic_seconds": 1000.0,
        "message": "ring gfx timeout, signaled seq=1, emitted seq=3",
        "count": 1,
    }
    assert json.loads(json.dumps(report)) == report


def _rec(line: int, text: str, mono: float | None = None, device: str | None = None) -> KernelRecord:
    return KernelRecord(line=line, text=text, facility=0, monotonic_seconds=mono, device=device)


def test_attribution_order_dictionary_then_text_then_single_gpu_else_unknown() -> None:
    c = KernelClassifier(RULES, known_gpus=["0000:03:00.0", "0000:43:00.0"])
    # dictionary wins over the text
    [e] = c.feed(_rec(1, "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", 1.0, device="0000:43:00.0"))
    assert e.pci_bus == "0000:43:00.0"
    [e] = c.feed(_rec(2, "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", 2.0))
    assert e.pci_bus == "0000:03:00.0"
    [e] = c.feed(_rec(3, "[drm] VRAM is lost due to GPU reset!", 3.0))
    assert e.pci_bus == "unknown"
    single = KernelClassifier(RULES, known_gpus=["0000:03:00.0"])
    [e] = single.feed(_rec(1, "[drm] VRAM is lost due to GPU reset!", 3.0))
    assert e.pci_bus == "0000:03:00.0"


def test_old_ring_timeout_lookahead_window() -> None:
    c = KernelClassifier(RULES, known_gpus=["0000:03:00.0", "0000:43:00.0"])
    assert (
        c.feed(
            _rec(1, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3", 10.0)
        )
        == []
    )
    # a reset 1.5 s later is too late: the timeout goes to unknown, then the reset counts on its own
    events = c.feed(_rec(2, "amdgpu 0000:43:00.0: amdgpu: GPU reset begin!", 11.5))
    assert [(e.event_class, e.pci_bus) for e in events] == [
        ("ring_timeout", "unknown"),
        ("gpu_reset_begin", "0000:43:00.0"),
    ]
    # within the window it takes the device
    c.feed(
        _rec(3, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, signaled seq=5, emitted seq=6", 20.0)
    )
    events = c.feed(_rec(4, "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", 20.4))
    assert [(e.event_class, e.pci_bus, e.line) for e in events] == [
        ("ring_timeout", "0000:03:00.0", 3),
        ("gpu_reset_begin", "0000:03:00.0", 4),
    ]
    # live: expire() gives up on a lookahead whose window has passed on the kernel clock
    c.feed(_rec(5, "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=7, emitted seq=9", 30.0))
    assert c.expire(now_monotonic=30.5) == []
    [e] = c.expire(now_monotonic=31.2)
    assert (e.event_class, e.pci_bus) == ("ring_timeout", "unknown")


def test_followups_restate_the_failure_once() -> None:
    text = (
        "[  10.000000] amdgpu 0000:03:00.0: amdgpu: GPU reset(2) failed\n"
        "[  10.000100] amdgpu 0000:03:00.0: amdgpu: GPU reset end with ret = -110\n"
        "[  10.000200] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* GPU Recovery Failed: -110\n"
        "[  50.000000] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* GPU Recovery Failed: -22\n"
        "[  60.000000] amdgpu 0000:03:00.0: amdgpu: GPU reset end with ret = 0\n"
    )
    report = kernel_log_report(text)
    assert report["counts"] == {"0000:03:00.0": {"gpu_reset_failed": 2}}


def test_vm_fault_suppressed_counts_n() -> None:
    text = "[ 1.0] amdgpu 0000:03:00.0: amdgpu: x\n[ 2.0] gmc_v11_0_process_interrupt: 19 callbacks suppressed\n"
    text += "[ 3.0] gmc_v9_0_process_interrupt: 4 callbacks suppressed\n[ 4.0] net_ratelimit: 7 callbacks suppressed\n"
    report = kernel_log_report(text)
    assert report["counts"] == {"0000:03:00.0": {"vm_fault_suppressed": 23}}


def test_interleaved_multi_gpu_fault_details_count_once_per_gpu() -> None:
    a, b = "amdgpu 0000:03:00.0: amdgpu: ", "amdgpu 0000:43:00.0: amdgpu: "
    lines = [
        a + "[gfxhub0] retry page fault (src_id:0 ring:0 vmid:8 pasid:32779)",
        b + "[gfxhub0] retry page fault (src_id:0 ring:0 vmid:9 pasid:32780)",
        b + "  in page starting at address 0x0000000000002000 from IH client 0x1b (UTCL2)",
        a + "  in page starting at address 0x0000000000001000 from IH client 0x1b (UTCL2)",
        "fbcon: Taking over console",
        a + "VM_L2_PROTECTION_FAULT_STATUS:0x00800932",
        b + "VM_L2_PROTECTION_FAULT_STATUS:0x00800933",
        a + "\t Faulty UTCL2 client ID: CB/DB (0x0)",
        b + "\t MORE_FAULTS: 0x1",
    ]
    c = KernelClassifier(RULES)
    events = [e for i, line in enumerate(lines, 1) for e in c.feed(_rec(i, line, 5.0 + i / 1000))]
    assert sorted((e.pci_bus, e.event_class) for e in events) == [
        ("0000:03:00.0", "vm_fault"),
        ("0000:43:00.0", "vm_fault"),
    ]
    assert c.orphan_details == 0


def test_orphan_details_are_dropped_and_a_full_event_counts_once() -> None:
    # The window begins inside a fault: its details alone never count (documented choice) ...
    orphan = (
        "[ 5.000001] amdgpu 0000:03:00.0: amdgpu:   in page starting at address 0x1000 from IH client 0x1b (UTCL2)\n"
        "[ 5.000002] amdgpu 0000:03:00.0: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00800932\n"
    )
    report = kernel_log_report(orphan)
    assert report["counts"] == {}
    assert any("2 detail lines" in str(w) for w in report["warnings"])  # type: ignore[attr-defined]
    # ... and the same details after their header make one event.
    header = "[ 5.000000] amdgpu 0000:03:00.0: amdgpu: [gfxhub0] page fault (src_id:0 ring:24 vmid:3 pasid:32769)\n"
    report = kernel_log_report(header + orphan)
    assert report["counts"] == {"0000:03:00.0": {"vm_fault": 1}}
    assert report["warnings"] == []


def test_aca_block_counts_once() -> None:
    p = "amdgpu 0000:03:00.0: amdgpu: [Hardware Error]: "
    text = "".join(
        f"[ 7.{i:06d}] {p}{m}\n"
        for i, m in enumerate(
            [
                "Accelerator Check Architecture events logged",
                "ACA[01/02].CONTROL=0x000000000000000f",
                "ACA[01/02].STATUS=0xbaa0000000040135",
                "ACA[02/02].STATUS=0xbaa0000000040136",
            ]
        )
    )
    assert kernel_log_report(text)["counts"] == {"0000:03:00.0": {"ras_aca_record": 1}}


def test_pcie_aer_counts_only_for_gpus_and_their_ports() -> None:
    c = KernelClassifier(RULES, known_gpus=["0000:03:00.0"], aer_ports={"0000:02:00.0": "0000:03:00.0"})
    lines = [
        "pcieport 0000:00:01.1: AER: Corrected error message received from 0000:03:00.0",
        "pcieport 0000:00:01.1: AER: Uncorrectable (Fatal) error message received from 0000:02:00.0",
        "pcieport 0000:00:08.1: AER: Corrected error message received from 0000:0a:00.0",
        "pcieport 0000:00:01.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "snd_hda_intel 0000:03:00.1: AER: Corrected error message received from 0000:03:00.0",
    ]
    events = [e for i, line in enumerate(lines, 1) for e in c.feed(_rec(i, line, float(i)))]
    assert [(e.line, e.pci_bus, e.event_class) for e in events] == [
        (1, "0000:03:00.0", "pcie_aer"),
        (2, "0000:03:00.0", "pcie_aer"),
    ]
    assert c.aer_not_gpu == 1


def test_other_drivers_do_not_count_as_amdgpu() -> None:
    assert match_message(RULES, "snd_hda_intel 0000:03:00.1: GPU reset begin!").kind == "none"
    assert match_message(RULES, "i915 0000:00:02.0: [drm] *ERROR* ring rcs0 test failed (-110)").kind == "none"


def test_invalid_rules_give_one_error_naming_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "rules.yml"
    bad.write_text(
        "version: 1\n"
        "bogus: 1\n"
        "traps: ['(unclosed']\n"
        "rules:\n"
        "  - class: ring_timeout\n    severity: warning\n    anchors: ['ok']\n"
        "  - class: Bad-Name\n    severity: loud\n    anchors: ['[z-a]']\n"
        "  - class: vm_fault_suppressed\n    severity: warning\n    anchors: ['no group']\n    count_group: n\n"
        "  - class: mine\n    severity: info\n    anchors: ['x']\n    lookahead: {class: nowhere}\n    colour: red\n"
        "  - class: mine\n    severity: info\n"
    )
    with pytest.raises(KernelRulesError) as err:
        load_rules(bad)
    message = str(err.value)
    assert str(bad) in message
    for needle in (
        "unknown top-level key 'bogus'",
        "traps[0]: invalid regex",
        "contract class ring_timeout has severity critical, not warning",
        "'class' must be a lower_snake_case name, got 'Bad-Name'",
        "'severity' must be one of",
        "anchors[0]: invalid regex '[z-a]'",
        "has no group (?P<n>...)",
        "unknown key 'colour'",
        "lookahead class nowhere has no rule",
        "class mine defined twice",
        "'anchors' is required",
    ):
        assert needle in message, needle
    with pytest.raises(KernelRulesError, match="not YAML"):
        bad.write_text("rules: [unclosed\n")
        load_rules(bad)
    with pytest.raises(KernelRulesError, match="cannot read"):
        load_rules(tmp_path / "missing.yml")


def test_override_rules_file_is_used(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(
        "version: 1\nrules:\n  - class: my_gpu_hang\n    severity: critical\n    anchors: ['hung forever']\n"
    )
    rules = load_rules(path)
    assert rules.classes == ("my_gpu_hang",)
    report = kernel_log_report("[ 1.0] amdgpu 0000:03:00.0: amdgpu: hung forever\n", rules)
    assert report["counts"] == {"0000:03:00.0": {"my_gpu_hang": 1}}
    with pytest.raises(KernelRulesError):
        compile_rules([], "inline")


def test_prefilter_changes_no_result() -> None:
    assert RULES.prefilter is not None
    unfiltered = replace(RULES, prefilter=None)
    data = Path(__file__).parent / "data" / "kernel-log"
    lines = [line for line, _ in REAL_EXAMPLES + FORMAT_STRING_EXAMPLES] + TRAPS + [line for line, _ in DETAILS]
    lines += [r.text for r in parse_kernel_log_records((data / "kmsg.txt").read_text()).records]
    for line in lines:
        assert match_message(RULES, line) == match_message(unfiltered, line), line


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"\bring \S+ timeout, signaled seq=\d+", " timeout, signaled seq="),
        (r"GPU reset\(\d+\) failed", "GPU reset("),
        (r"^(?:MEM|SRAM) ECC is active", "M ECC is active"),  # common to both alternatives
        (r"abcd?e", "abc"),
        (r"x+yzw", "yzw"),
        (r"foo|barbaz", None),
        (r"(?i)reset", None),
        (r"\d+\s+\w", None),
        (r"[a-z]+ [abc]{2}", None),
    ],
)
def test_required_literal(pattern: str, literal: str | None) -> None:
    assert required_literal(pattern) == literal
    if literal is not None:
        for m in ("xx ring gfx timeout, signaled seq=1", "GPU reset(2) failed", "SRAM ECC is active", "abce", "xxyzw"):
            if re.search(pattern, m):
                assert literal in m


# Synthetic pastes (tests/data/kernel-log/pastes, PROVENANCE.md there names the public threads that showed each
# feature): format, counts, every event's line and device, and every warning.
PASTES = {
    "notime-markdown.txt": (
        "plain",
        {
            "0000:0a:00.0": {
                "gpu_reset_asic_done": 1,
                "gpu_reset_begin": 1,
                "gpu_reset_method": 1,  # "MODE1 reset" then "GPU mode1 reset" and "GPU smu mode1 reset": one reset
                "ring_timeout": 1,
                "vram_lost": 1,
            }
        },
        [
            (6, "ring_timeout"),
            (8, "gpu_reset_begin"),
            (9, "gpu_reset_method"),
            (12, "gpu_reset_asic_done"),
            (13, "vram_lost"),
        ],
        [1, 2, 3, 5, 17, 18, 19],
    ),
    "journal-quoted-indented.txt": (
        "journal-short",
        {"0000:0d:00.0": {"mes_error": 1, "vm_fault": 1}},
        [(1, "vm_fault"), (7, "mes_error")],
        [],
    ),
    "grep-syslog.txt": (
        "journal-short",
        {
            "0000:0b:00.0": {"init_fatal": 1, "probe_fail": 1},  # the optional _ta.bin firmware is no fault
            "0000:0c:00.0": {"init_fatal": 1, "vm_fault": 1},  # a gmc_v8 fault is four lines, one event
            "unknown": {"ip_block_fail": 1},  # DRM_ERROR names no device and the log names two GPUs
        },
        [(4, "ip_block_fail"), (5, "init_fatal"), (7, "probe_fail"), (8, "vm_fault"), (12, "init_fatal")],
        [1],
    ),
    "freebsd-notime.txt": (
        "dmesg",
        {"unknown": {"gpu_reset_begin": 1, "gpu_reset_method": 1, "mes_error": 1, "ring_timeout": 1}},
        [(2, "ring_timeout"), (4, "gpu_reset_begin"), (5, "mes_error"), (7, "gpu_reset_method")],
        [8],
    ),
}


@pytest.mark.parametrize("name", sorted(PASTES))
def test_pasted_logs(name: str) -> None:
    fmt, counts, events, warning_lines = PASTES[name]
    text = (Path(__file__).parent / "data" / "kernel-log" / "pastes" / name).read_bytes().decode("utf-8")
    report = kernel_log_report(text)
    assert report["format"] == fmt
    assert report["counts"] == counts
    got = [(e["line"], e["class"]) for e in report["events"]]  # type: ignore[attr-defined]
    assert got == events
    warnings = [str(w) for w in report["warnings"]]  # type: ignore[attr-defined]
    assert [int(w.split(":")[0].split()[1]) for w in warnings if w.startswith("line ")] == warning_lines


def test_crlf_quoted_indented_journal_keeps_every_record() -> None:
    text = (Path(__file__).parent / "data" / "kernel-log" / "pastes" / "journal-quoted-indented.txt").read_bytes()
    assert b"\r\n" in text
    parsed = parse_kernel_log_records(text.decode("utf-8"))
    assert len(parsed.records) == 8 and parsed.warnings == ()
    assert [r.is_kernel for r in parsed.records].count(False) == 1  # the sudo line
    assert all(not r.text.endswith("\r") and r.text.startswith(("amdgpu ", "[drm:", "pam_")) for r in parsed.records)


def test_init_failure_lines_count_once_and_alone_still_count() -> None:
    pair = "[  5.000000] amdgpu 0000:03:00.0: amdgpu_device_ip_init failed\n"
    pair += "[  5.000001] amdgpu 0000:03:00.0: Fatal error during GPU init\n"
    assert kernel_log_report(pair)["counts"] == {"0000:03:00.0": {"init_fatal": 1}}
    alone = "[  5.000001] amdgpu 0000:03:00.0: Fatal error during GPU init\n"
    assert kernel_log_report(alone)["counts"] == {"0000:03:00.0": {"init_fatal": 1}}
    later = pair + "[ 99.000000] amdgpu 0000:03:00.0: Fatal error during GPU init\n"  # a second attempt, minutes on
    assert kernel_log_report(later)["counts"] == {"0000:03:00.0": {"init_fatal": 2}}


def test_probe_of_names_the_device_among_several() -> None:
    log = (
        "[  1.0] amdgpu 0000:03:00.0: amdgpu: SE 4, SH per SE 2\n"
        "[  1.1] amdgpu 0000:43:00.0: amdgpu: SE 4, SH per SE 2\n"
        "[  2.0] amdgpu: probe of 0000:43:00.0 failed with error -22\n"
    )
    assert kernel_log_report(log)["counts"] == {"0000:43:00.0": {"probe_fail": 1}}


def test_aer_requester_id_of_older_kernels() -> None:
    # id=0300: bus 03, device 00, function 0, in the reporting port's domain
    line = "pcieport 0001:00:03.1: AER: Multiple Corrected error received: id=0300"
    gpu = KernelClassifier(known_gpus=["0001:03:00.0"])
    [event] = gpu.feed(KernelRecord(line=1, text=line))
    assert (event.event_class, event.pci_bus) == ("pcie_aer", "0001:03:00.0")
    other = KernelClassifier(known_gpus=["0000:03:00.0"])  # same bus in another domain: not the GPU
    assert other.feed(KernelRecord(line=1, text=line)) == [] and other.aer_not_gpu == 1


def test_optional_ta_firmware_is_a_trap_but_other_firmware_counts() -> None:
    ta = "amdgpu 0000:03:00.0: Direct firmware load for amdgpu/vega20_ta.bin failed with error -2"
    assert match_message(RULES, ta).kind == "trap"
    sos = "amdgpu 0000:03:00.0: Direct firmware load for amdgpu/vega20_sos.bin failed with error -2"
    match = match_message(RULES, sos)
    assert match.kind == "anchor" and match.rule is not None and match.rule.event_class == "fw_load_fail"


def test_padded_lines_and_journal_continuations() -> None:
    # Pastes padded with blanks to a fixed width; journalctl's indented continuation of a multi-line message
    log = (
        "[  3.000000] amdgpu 0000:03:00.0: amdgpu: MODE1 reset          \n"
        "[  3.000001] gmc_v11_0_process_interrupt: 7 callbacks suppressed     \n"
        "Jan 05 10:00:00 box kernel: amdgpu: [powerplay] \n"
        "                             failed to send message 5a ret is 0 \n"
        "Jan 05 10:00:01 box kernel: amdgpu: [powerplay] \n"
        "                             last message was failed ret is 0\n"
    )
    report = kernel_log_report(log)
    assert report["counts"] == {"0000:03:00.0": {"gpu_reset_method": 1, "smu_error": 1, "vm_fault_suppressed": 7}}
    assert [(e["line"], e["class"]) for e in report["events"]] == [  # type: ignore[attr-defined]
        (1, "gpu_reset_method"),
        (2, "vm_fault_suppressed"),
        (4, "smu_error"),
    ]


def test_one_mes_failure_and_one_kfd_eviction_count_once() -> None:
    log = (
        "[ 50.000000] amdgpu 0000:07:00.0: amdgpu: MES failed to respond to msg=SUSPEND\n"
        "[ 50.000001] amdgpu 0000:07:00.0: amdgpu: failed to remove hardware queue from MES, doorbell=0x1000\n"
        "[ 50.000002] amdgpu 0000:07:00.0: amdgpu: MES might be in unrecoverable state, issue a GPU reset\n"
        "[ 50.000003] amdgpu 0000:07:00.0: amdgpu: Failed to evict queue 2\n"
        "[ 50.000004] amdgpu 0000:07:00.0: amdgpu: Failed to evict process queues\n"
        "[ 53.000000] amdgpu 0000:07:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE\n"
    )
    assert kernel_log_report(log)["counts"] == {"0000:07:00.0": {"kfd_evict_fail": 1, "mes_error": 2}}


def test_dmesg_human_and_colour_output() -> None:
    # dmesg -H: a minute stamp, then deltas; --color escapes copied from a terminal; a <pre><code> opening tag
    log = (
        "<pre><code>[Feb11 09:15] amdgpu 0000:07:00.0: amdgpu: GPU reset begin!\n"
        "[  +0.000010] amdgpu 0000:07:00.0: amdgpu: MODE2 reset\n"
        "\x1b[32m[  +0,250000]\x1b[0m \x1b[33mamdgpu 0000:07:00.0\x1b[0m: amdgpu: GPU reset succeeded, "
        "trying to resume\n"
        "[ +12.500000] [drm] VRAM is lost due to GPU reset!\n"
        "</code></pre>\n"
    )
    parsed = parse_kernel_log_records(log)
    assert parsed.format == "dmesg"
    assert [r.monotonic_seconds for r in parsed.records] == [None] * 4
    report = kernel_log_report(log)
    assert report["counts"] == {
        "0000:07:00.0": {"gpu_reset_asic_done": 1, "gpu_reset_begin": 1, "gpu_reset_method": 1, "vram_lost": 1}
    }
    assert report["warnings"] == ["line 5: not a kernel-log line: '</code></pre>'"]
