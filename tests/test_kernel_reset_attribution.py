"""An unprefixed "VRAM is lost due to GPU reset!" goes to the GPU whose reset sequence is the only one open
(contract section 2, docs/gpu-health.md), in the pure classifier and through the kernel-log source across a
restart between the reset line and the VRAM line (exactly once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_kernel_log_source import A, B, Fifo, Host, kmsg

from exporter.model.kernel import KernelRecord
from exporter.watchdog.kernel_classify import RESET_OPEN_MAX_SECONDS, KernelClassifier, kernel_log_report

VRAM = "[drm] VRAM is lost due to GPU reset!"


def _begin(bdf: str) -> str:
    return f"amdgpu {bdf}: amdgpu: GPU reset begin!"


def _ok(bdf: str) -> str:
    return f"amdgpu {bdf}: amdgpu: GPU reset(2) succeeded!"


def _dmesg(*lines: tuple[float, str]) -> str:
    # both GPUs named once, so the log names several GPUs and the single-GPU rule never applies
    named = [(1.0, f"amdgpu {A}: amdgpu: SMU is initialized successfully!")]
    named.append((1.1, f"amdgpu {B}: amdgpu: SMU is initialized successfully!"))
    return "".join(f"[{t:12.6f}] {text}\n" for t, text in (*named, *lines))


def _vram_counts(log: str) -> dict[str, int]:
    counts = kernel_log_report(log)["counts"]
    assert isinstance(counts, dict)
    return {bus: c["vram_lost"] for bus, c in counts.items() if "vram_lost" in c}


def test_vram_lost_inside_one_gpus_reset_counts_for_that_gpu() -> None:
    log = _dmesg((10.0, _begin(B)), (10.5, f"amdgpu {B}: amdgpu: MODE1 reset"), (12.0, VRAM), (12.5, _ok(B)))
    assert _vram_counts(log) == {B: 1}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # two resets overlap (a hive reset): it cannot be told
        (((10.0, _begin(A)), (10.1, _begin(B)), (12.0, VRAM)), {"unknown": 1}),
        # none open: the reset succeeded before the line
        (((10.0, _begin(B)), (11.0, _ok(B)), (12.0, VRAM)), {"unknown": 1}),
        # a failed reset ends the sequence too
        (((10.0, _begin(B)), (11.0, f"amdgpu {B}: amdgpu: GPU reset(3) failed"), (12.0, VRAM)), {"unknown": 1}),
        # A's reset ended, B's is open: B
        (((10.0, _begin(A)), (10.1, _begin(B)), (11.0, _ok(A)), (12.0, VRAM)), {B: 1}),
        # a reset whose end never came is closed after RESET_OPEN_MAX_SECONDS of kernel time
        (((10.0, _begin(B)), (10.0 + RESET_OPEN_MAX_SECONDS + 1, VRAM)), {"unknown": 1}),
        # no reset at all
        (((12.0, VRAM),), {"unknown": 1}),
    ],
)
def test_overlapping_or_no_open_reset_stays_unknown(
    lines: tuple[tuple[float, str], ...], expected: dict[str, int]
) -> None:
    assert _vram_counts(_dmesg(*lines)) == expected


def test_a_log_naming_one_gpu_keeps_the_single_gpu_rule() -> None:
    log = f"[   10.000000] {_begin(A)}\n[   11.000000] {_ok(A)}\n[   12.000000] {VRAM}\n"
    assert _vram_counts(log) == {A: 1}


def test_record_by_record_feed_attributes_like_the_batch_loop() -> None:
    """``feed`` (records with a structured device, or while a lookahead waits) and ``feed_many`` agree."""
    c = KernelClassifier(known_gpus=[A, B])
    rec = [
        KernelRecord(1, _begin(B), facility=0, monotonic_seconds=10.0, device=B),
        KernelRecord(2, VRAM, facility=0, monotonic_seconds=11.0),
    ]
    events = [e for r in rec for e in c.feed(r)]
    assert [(e.event_class, e.pci_bus) for e in events] == [("gpu_reset_begin", B), ("vram_lost", B)]
    assert c.open_resets() == ((B, 10.0),)
    restored = KernelClassifier(known_gpus=[A, B])
    restored.restore_open_resets(c.open_resets())
    [e] = restored.feed(KernelRecord(3, VRAM, facility=0, monotonic_seconds=12.0))
    assert e.pci_bus == B


def test_restart_between_the_reset_line_and_the_vram_line_kmsg(tmp_path: Path) -> None:
    host = Host(tmp_path)
    fifo = Fifo(host.log)
    try:
        src = host.source()
        src.collect()
        fifo.write(kmsg(0, _begin(B), 6, mono=10.0, device=B))
        state = src.collect()
        assert state.counts == {(B, "gpu_reset_begin"): 1}
        src.close()
        fifo.close()
        assert json.loads(host.cursor.read_text())["resets"] == [[B, 10.0]]
        # the exporter restarts; the VRAM line arrives with no device
        src = host.source()
        src.collect()
        fifo.write(kmsg(0, _begin(B), 6, mono=10.0, device=B), kmsg(1, VRAM, 6, mono=12.0))
        state = src.collect()
        assert dict(state.counts) == {(B, "gpu_reset_begin"): 1, (B, "vram_lost"): 1}
        fifo.write(kmsg(2, _ok(B), 6, mono=13.0, device=B))
        src.collect()
        src.close()
        assert json.loads(host.cursor.read_text())["resets"] == []
    finally:
        fifo.close()


def test_restart_between_the_reset_line_and_the_vram_line_followed_file(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.log = tmp_path / "kern.log"
    host.log.write_text(f"[   10.000000] {_begin(B)}\n")
    src = host.source()
    assert dict(src.collect().counts) == {(B, "gpu_reset_begin"): 1}
    src.close()
    with host.log.open("a") as f:
        f.write(f"[   12.000000] {VRAM}\n")
    for _ in range(2):  # counted once, and a second restart counts nothing again
        src = host.source()
        assert dict(src.collect().counts) == {(B, "gpu_reset_begin"): 1, (B, "vram_lost"): 1}
        src.close()


def test_a_reset_open_in_an_older_boot_is_not_restored(tmp_path: Path) -> None:
    host = Host(tmp_path)
    fifo = Fifo(host.log)
    try:
        src = host.source()
        src.collect()
        fifo.write(kmsg(0, _begin(B), 6, mono=10.0, device=B))
        src.collect()
        src.close()
        fifo.close()
        host.boot("99999999-8888-7777-6666-555555555555")
        src = host.source()
        src.collect()
        fifo.write(kmsg(0, VRAM, 6, mono=5.0))
        state = src.collect()
        assert state.counts[("unknown", "vram_lost")] == 1
        src.close()
    finally:
        fifo.close()
