"""The kernel-log source: kmsg streams through real FIFOs and files, exactly once across restarts and boots,
EPIPE overruns, forged user-space records, rotation and truncation, the real /dev/kmsg, and the metrics."""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import structlog
from prometheus_client.core import Metric

from exporter.config import Config
from exporter.metrics.kernel import kernel_families
from exporter.model.kernel import KERNEL_CLASSES, ZERO_INITIALISED_CLASSES, KernelLogState
from exporter.sources import SourceError, kernel_log, logread
from exporter.sources.kernel_log import CURSOR_FILE, KernelLogSource, gpu_ports
from exporter.sources.logread import FdReader, StreamReader

A, B = "0000:03:00.0", "0000:43:00.0"
BOOT1 = "11111111-2222-3333-4444-555555555555"
BOOT2 = "99999999-8888-7777-6666-555555555555"


def kmsg(seq: int, msg: str, pri: int = 3, mono: float | None = None, device: str | None = None) -> bytes:
    usec = round((mono if mono is not None else 100.0 + seq / 1000) * 1_000_000)
    rec = f"{pri},{seq},{usec},-;{msg}\n"
    if device is not None:
        rec += f" SUBSYSTEM=pci\n DEVICE=+pci:{device}\n"
    return rec.encode()


def reset_begin(seq: int, bdf: str = A, pri: int = 6) -> bytes:
    return kmsg(seq, f"amdgpu {bdf}: amdgpu: GPU reset begin!", pri, device=bdf)


def info(seq: int) -> bytes:
    return kmsg(seq, "usb 1-1: new high-speed USB device number 2 using xhci_hcd", 6)


class Host:
    """A temporary fake host: procfs with a boot id, a state dir, a kernel-log path (FIFO or file)."""

    def __init__(self, root: Path, boot_id: str = BOOT1) -> None:
        self.root = root
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "state").mkdir()
        (root / "sys").mkdir()
        self.boot(boot_id)
        self.log = root / "kmsg"
        self.gpus: list[str] = [A, B]

    def boot(self, boot_id: str) -> None:
        (self.root / "proc/sys/kernel/random/boot_id").write_text(boot_id + "\n")

    def config(self) -> Config:
        return Config(
            kernel_log_path=self.log, state_dir=self.root / "state", procfs=self.root / "proc", sysfs=self.root / "sys"
        )

    def source(self, **kwargs: object) -> KernelLogSource:
        return KernelLogSource(self.config(), lambda: self.gpus, **kwargs)  # type: ignore[arg-type]

    @property
    def cursor(self) -> Path:
        return self.root / "state" / CURSOR_FILE


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


class Fifo:
    """The writing end of a real FIFO; opened after the source opened the reading end."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            os.mkfifo(path)
        self.path = path
        self.fd: int | None = None

    def write(self, *records: bytes) -> None:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        for record in records:
            assert os.write(self.fd, record) == len(record)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@pytest.fixture
def fifo(host: Host) -> Iterator[Fifo]:
    f = Fifo(host.log)
    yield f
    f.close()


def counts(state: KernelLogState) -> dict[tuple[str, str], int]:
    return dict(state.counts)


def test_kmsg_stream_through_a_real_fifo(host: Host, fifo: Fifo) -> None:
    src = host.source()
    state = src.collect()
    assert state.source_kind == "fifo" and counts(state) == {}
    fifo.write(info(0), reset_begin(1, A), kmsg(2, f"amdgpu {B}: amdgpu: MODE1 reset", 6, device=B))
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 1, (B, "gpu_reset_method"): 1}
    assert state.last_seq == 2 and state.records_read == 3 and state.records_lost == 0
    # nothing new: nothing changes, and the call does not block
    assert src.collect().counts == state.counts
    src.close()


def test_forged_user_space_records_never_count(host: Host, fifo: Fifo) -> None:
    src = host.source()
    src.collect()
    fifo.write(reset_begin(0, A, pri=12), reset_begin(1, A, pri=8), reset_begin(2, A, pri=6))
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 1}
    assert state.records_ignored == 2
    src.close()


def test_restart_mid_stream_counts_each_record_once(host: Host, fifo: Fifo) -> None:
    src = host.source()
    src.collect()
    fifo.write(info(0), reset_begin(1), info(2), reset_begin(3))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 2}
    src.close()
    fifo.close()
    saved = json.loads(host.cursor.read_text())
    assert (saved["boot_id"], saved["last_seq"]) == (BOOT1, 3)
    # restart in the same boot: /dev/kmsg is read again from its oldest record; 0..3 were counted already
    src = host.source()
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 2}  # counts survive the restart
    fifo.write(info(0), reset_begin(1), info(2), reset_begin(3), reset_begin(4), info(5))
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 3}
    assert state.records_read == 2 and state.records_lost == 0
    src.close()


def test_new_boot_counts_the_whole_buffer(host: Host, fifo: Fifo) -> None:
    src = host.source()
    src.collect()
    fifo.write(*(info(i) for i in range(10)), reset_begin(10))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1}
    src.close()
    fifo.close()
    host.boot(BOOT2)
    src = host.source()
    src.collect()
    # sequence numbers restarted: seq 0..2 of the new boot are new even though 0..10 were seen before
    fifo.write(reset_begin(0), info(1), reset_begin(2, B))
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 2, (B, "gpu_reset_begin"): 1}
    assert state.boot_id == BOOT2 and state.last_seq == 2
    src.close()


class EpipeOnce:
    """A real FIFO read end with /dev/kmsg read semantics: one whole record per read, and EPIPE once (on the
    given read), the way /dev/kmsg reports records overwritten before they were read."""

    def __init__(self, fd: int, fail_on_read: int) -> None:
        self.inner = FdReader(fd)
        self.reads = 0
        self.fail_on_read = fail_on_read
        self.buffer = b""

    def read(self, size: int) -> bytes:
        self.reads += 1
        if self.reads == self.fail_on_read:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        if not self.buffer:
            self.buffer = self.inner.read(size)  # BlockingIOError when the FIFO is empty
        lines = self.buffer.split(b"\n")
        n = 1
        while n < len(lines) and lines[n].startswith(b" "):
            n += 1
        record = b"\n".join(lines[:n]) + b"\n"
        self.buffer = self.buffer[len(record) :]
        return record

    def close(self) -> None:
        self.inner.close()


def test_epipe_overrun_counts_the_records_lost(host: Host) -> None:
    os.mkfifo(host.log)
    rfd = os.open(host.log, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(host.log, os.O_WRONLY | os.O_NONBLOCK)
    try:
        reader = EpipeOnce(rfd, fail_on_read=2)
        src = host.source(kmsg_stream=reader)
        # one record per write; the reader gets record 0, then EPIPE, then 5.. (1..4 were overwritten)
        os.write(wfd, reset_begin(0) + reset_begin(5) + info(6))
        state = src.collect()
        assert counts(state) == {(A, "gpu_reset_begin"): 2}
        assert state.records_lost == 4
        assert any("fell behind" in w for w in state.warnings)
        # a sequence gap without EPIPE is loss too
        os.write(wfd, info(9))
        assert src.collect().records_lost == 6
        src.close()
    finally:
        os.close(wfd)


def test_stream_reader_reports_each_epipe(tmp_path: Path) -> None:
    path = tmp_path / "f"
    os.mkfifo(path)
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        reader = StreamReader(EpipeOnce(rfd, fail_on_read=1), "kmsg")
        os.write(wfd, info(3))
        result = reader.read_available()
        assert result.overruns == 1 and [r.seq for r in result.records] == [3]
        assert reader.read_available().records == []  # EAGAIN: returns at once
        reader.close()
    finally:
        os.close(wfd)


def test_old_format_ring_timeout_waits_for_the_reset_across_collects_and_restarts(host: Host, fifo: Fifo) -> None:
    timeout = "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3"
    src = host.source(monotonic_clock=lambda: 100.0)
    src.collect()
    fifo.write(kmsg(0, timeout, mono=99.9))
    state = src.collect()
    assert counts(state) == {}  # waiting up to 1 s for "GPU reset begin!"
    src.close()
    fifo.close()
    assert json.loads(host.cursor.read_text())["pending"][0]["class"] == "ring_timeout"
    src = host.source(monotonic_clock=lambda: 100.0)
    src.collect()
    fifo.write(kmsg(1, f"amdgpu {B}: amdgpu: GPU reset begin!", 6, mono=100.0, device=B))
    state = src.collect()
    assert counts(state) == {(B, "ring_timeout"): 1, (B, "gpu_reset_begin"): 1}
    # a timeout with no reset after it goes to unknown: a FIFO has no kernel clock to compare with, so the
    # lookahead gives up after MAX_PENDING_TICKS collects (on /dev/kmsg: once CLOCK_MONOTONIC passed the window)
    fifo.write(kmsg(2, timeout, mono=200.0))
    assert ("unknown", "ring_timeout") not in src.collect().counts
    assert ("unknown", "ring_timeout") not in src.collect().counts
    assert src.collect().counts[("unknown", "ring_timeout")] == 1
    src.close()


def test_followed_file_restart_rotation_and_truncation(host: Host) -> None:
    log = host.log
    log.write_bytes(reset_begin(0) + info(1))
    src = host.source()
    state = src.collect()
    assert state.source_kind == "file" and counts(state) == {(A, "gpu_reset_begin"): 1}
    with log.open("ab") as f:
        f.write(reset_begin(2, B) + b"6,3,5,-;partial line without its newl")
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1, (B, "gpu_reset_begin"): 1}
    src.close()
    # restart: resumes at the saved offset (the partial line was not consumed)
    with log.open("ab") as f:
        f.write(b"ine\n" + reset_begin(4))
    src = host.source()
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 2, (B, "gpu_reset_begin"): 1}
    # rotation: the tail of the old file is read, then the new file from its start
    with log.open("ab") as f:
        f.write(reset_begin(5, B))
    log.rename(log.with_name("kmsg.1"))
    log.write_bytes(reset_begin(6))
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 3, (B, "gpu_reset_begin"): 2}
    # truncation in place (copytruncate), then new lines
    with log.open("r+b") as f:
        f.truncate(0)
    state = src.collect()
    with log.open("ab") as f:
        f.write(reset_begin(7, B))
    state = src.collect()
    assert counts(state) == {(A, "gpu_reset_begin"): 3, (B, "gpu_reset_begin"): 3}
    assert any("truncated" in w for w in state.warnings)
    src.close()


def test_followed_journal_json_and_text_files(host: Host) -> None:
    data = Path(__file__).parent / "data" / "kernel-log"
    expected = {
        (bus, cls): n
        for bus, per in json.loads((data / "expected-counts.json").read_text()).items()
        for cls, n in per.items()
    }
    for name in ("journal.json", "journal-short-precise.txt", "dmesg-x.txt", "kmsg.txt"):
        for p in host.root.joinpath("state").iterdir():
            p.unlink()
        host.log.unlink(missing_ok=True)
        host.log.write_text((data / name).read_text())
        src = host.source()
        state = src.collect()
        src.close()
        # the old-format ring timeout and callbacks-suppressed name no device: the log names two GPUs
        assert counts(state) == expected, name
        assert state.records_ignored == 1, name


def test_corrupt_cursor_is_moved_aside_and_reported(host: Host, fifo: Fifo) -> None:
    host.cursor.write_text('{"version": 1, "last_seq": "forty-two"')
    src = host.source()
    state = src.collect()
    assert state.cursor_corrupt
    aside = [p.name for p in (host.root / "state").iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1
    assert (host.root / "state" / aside[0]).read_text() == '{"version": 1, "last_seq": "forty-two"'
    assert any("corrupt" in w for w in state.warnings)
    fifo.write(reset_begin(0))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1}
    assert json.loads(host.cursor.read_text())["last_seq"] == 0
    src.close()


def test_cursor_write_is_atomic_and_leaves_no_temp_files(host: Host, fifo: Fifo) -> None:
    src = host.source()
    src.collect()
    fifo.write(reset_begin(0))
    src.collect()
    names = sorted(p.name for p in (host.root / "state").iterdir())
    assert names == [CURSOR_FILE]
    doc = json.loads(host.cursor.read_text())
    assert doc["counts"] == [[A, "gpu_reset_begin", 1]]
    src.close()


def test_unopenable_log_raises_source_error(host: Host) -> None:
    src = host.source()
    with pytest.raises(SourceError, match="cannot open"):
        src.collect()


def _sysfs_tree(sys_root: Path) -> None:
    """Root port 0000:00:01.1 (AMD CPU, 1022) -> card switch 01:00.0 / 02:00.0 (1002) -> GPU 03:00.0;
    root port 0000:00:08.1 -> 0a:00.0 (not a GPU)."""
    chain = ["pci0000:00", "0000:00:01.1", "0000:01:00.0", "0000:02:00.0", A]
    vendors = {"0000:00:01.1": "0x1022", "0000:01:00.0": "0x1002", "0000:02:00.0": "0x1002", A: "0x1002"}
    devices = sys_root / "devices"
    path = devices
    for name in chain:
        path = path / name
        path.mkdir(parents=True, exist_ok=True)
        if name in vendors:
            (path / "vendor").write_text(vendors[name] + "\n")
    other = devices / "pci0000:00" / "0000:00:08.1" / "0000:0a:00.0"
    other.mkdir(parents=True)
    bus = sys_root / "bus/pci/devices"
    bus.mkdir(parents=True)
    os.symlink(os.path.relpath(path, bus), bus / A)
    os.symlink(os.path.relpath(other, bus), bus / "0000:0a:00.0")


def test_gpu_ports_from_sysfs_and_aer_attribution(host: Host, fifo: Fifo) -> None:
    _sysfs_tree(host.root / "sys")
    assert gpu_ports(host.root / "sys", [A]) == {"0000:02:00.0": A, "0000:01:00.0": A, "0000:00:01.1": A}
    host.gpus = [A]
    src = host.source()
    src.collect()
    aer = "pcieport {port}: AER: Corrected error message received from {src}"
    fifo.write(
        kmsg(0, aer.format(port="0000:00:01.1", src="0000:01:00.0"), device="0000:00:01.1"),
        kmsg(1, aer.format(port="0000:00:08.1", src="0000:0a:00.0"), device="0000:00:08.1"),
        kmsg(2, aer.format(port="0000:00:01.1", src=A), device="0000:00:01.1"),
    )
    assert counts(src.collect()) == {(A, "pcie_aer"): 2}
    src.close()


def _samples(families: Sequence[Metric]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.name, tuple(s.labels.values())): s.value for f in families for s in f.samples}


def test_kernel_families_zero_initialised() -> None:
    state = KernelLogState(
        counts={(A, "vm_fault"): 3, (A, "pcie_aer"): 2},
        last_event_seconds={(A, "vm_fault"): 1_700_000_000.5},
        records_lost=7,
        aer_counts={(A, "uncorrected_fatal"): 2},
    )
    families = list(kernel_families(state, [B.upper(), A]))
    assert [f.name for f in families] == [
        "rocm_kernel_events",
        "rocm_kernel_pcie_aer_errors",
        "rocm_kernel_event_last_timestamp_seconds",
        "rocm_kernel_log_records_lost",
    ]
    samples = _samples(families)
    # "unknown" too: an event no GPU could be attributed to moves a counter that was already 0
    # the classes an alert reads with increase() from 0; the others only once counted (A's pcie_aer)
    for bus in (A, B, "unknown"):
        for cls in KERNEL_CLASSES:
            served = ("rocm_kernel_events_total", (bus, cls)) in samples
            assert served == (cls in ZERO_INITIALISED_CLASSES or (bus, cls) in state.counts), (bus, cls)
        for sev in ("corrected", "uncorrected_nonfatal", "uncorrected_fatal"):
            assert ("rocm_kernel_pcie_aer_errors_total", (bus, sev)) in samples
    assert samples[("rocm_kernel_events_total", (A, "pcie_aer"))] == 2
    assert samples[("rocm_kernel_events_total", (A, "vm_fault"))] == 3
    assert samples[("rocm_kernel_events_total", (B, "vm_fault"))] == 0
    assert samples[("rocm_kernel_events_total", ("unknown", "vram_lost"))] == 0
    assert samples[("rocm_kernel_pcie_aer_errors_total", (A, "uncorrected_fatal"))] == 2
    assert samples[("rocm_kernel_pcie_aer_errors_total", (A, "corrected"))] == 0
    assert samples[("rocm_kernel_event_last_timestamp_seconds", (A, "vm_fault"))] == 1_700_000_000.5
    assert ("rocm_kernel_event_last_timestamp_seconds", (B, "vm_fault")) not in samples  # never a fake 0
    assert samples[("rocm_kernel_log_records_lost_total", ())] == 7
    assert list(kernel_families(None, [A])) == []


def test_event_timestamps_come_from_the_kernel_clock(host: Host, fifo: Fifo) -> None:
    src = host.source(wall_clock=lambda: 1_800_000_000.0, monotonic_clock=lambda: 500.0)
    src.collect()
    fifo.write(kmsg(0, f"amdgpu {A}: amdgpu: GPU reset begin!", 6, mono=450.0, device=A))
    state = src.collect()
    # the kmsg-relay's records carry this node's kernel clock: 50 s before now
    assert state.last_event_seconds[(A, "gpu_reset_begin")] == 1_800_000_000.0 - 50.0
    # a record later than our clock is from no clock of ours: the time it was read
    fifo.write(kmsg(1, f"amdgpu {B}: amdgpu: GPU reset begin!", 6, mono=900.0, device=B))
    assert src.collect().last_event_seconds[(B, "gpu_reset_begin")] == 1_800_000_000.0
    src.close()


def test_real_dev_kmsg_read_only() -> None:
    path = Path("/dev/kmsg")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        pytest.skip(f"cannot open /dev/kmsg read-only here: {exc.strerror}")
    assert stat.S_ISCHR(os.fstat(fd).st_mode)
    reader = StreamReader(FdReader(fd), "kmsg")
    result = reader.read_available()
    reader.close()
    assert result.records, "a running kernel always has records in its ring buffer"
    assert result.lines_unparsed == 0, result.warnings
    seqs = [r.seq for r in result.records if r.seq is not None]
    assert len(seqs) == len(result.records)
    assert seqs == sorted(seqs)
    assert all(r.facility is not None and r.monotonic_seconds is not None for r in result.records)
    assert any(r.facility == 0 for r in result.records)


def test_real_dev_kmsg_source(tmp_path: Path) -> None:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        pytest.skip(f"cannot open /dev/kmsg read-only here: {exc.strerror}")
    config = Config(kernel_log_path=Path("/dev/kmsg"), state_dir=tmp_path / "state")
    src = KernelLogSource(config, lambda: [])
    first = src.collect()
    assert first.source_kind == "kmsg" and first.last_seq is not None and first.records_read > 0
    src.close()
    again = KernelLogSource(config, lambda: [])
    second = again.collect()
    again.close()
    assert second.last_seq is not None and second.last_seq >= first.last_seq
    assert second.counts == first.counts  # nothing counted twice after a restart
    assert second.records_read == second.last_seq - first.last_seq


def test_an_unwritable_state_dir_keeps_counting_and_says_so(host: Host, fifo: Fifo) -> None:
    state_dir = host.root / "state"
    state_dir.rmdir()
    state_dir.write_text("a file where the state dir should be\n")  # every write below it fails
    src = host.source()
    with structlog.testing.capture_logs() as logs:
        src.collect()
        fifo.write(reset_begin(1, A))
        first = src.collect()
        fifo.write(reset_begin(2, A))
        second = src.collect()
    assert counts(second) == {(A, "gpu_reset_begin"): 2}  # counting goes on from memory
    assert first.cursor_unsaved and second.cursor_unsaved
    assert [e["event"] for e in logs].count("state_write_failed") == 1  # said once, not every interval
    (failed,) = [e for e in logs if e["event"] == "state_write_failed"]
    assert "--state.dir" in failed["action"]  # what to do, as the other two state files say
    state_dir.unlink()
    state_dir.mkdir()
    with structlog.testing.capture_logs() as logs:
        fifo.write(reset_begin(3, A))
        third = src.collect()
    assert not third.cursor_unsaved and host.cursor.exists()
    assert [e["event"] for e in logs] == ["state_write_recovered"]
    src.close()


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe not utf-8", b'{"version": 1, "pending": [1]}', b'{"version": 1, "counts": [["a", "b", true]]}'],
    ids=["not-utf8", "pending-not-objects", "bool-count"],
)
def test_any_corrupt_cursor_is_moved_aside_not_a_crash(host: Host, fifo: Fifo, content: bytes) -> None:
    host.cursor.write_bytes(content)
    src = host.source()
    with structlog.testing.capture_logs():
        state = src.collect()
    assert state.cursor_corrupt
    assert [p.name for p in host.cursor.parent.iterdir() if ".corrupt-" in p.name]
    fifo.write(reset_begin(1, A))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1}
    src.close()


def test_records_lost_on_a_first_start_and_after_a_reboot(host: Host, fifo: Fifo) -> None:
    # First start on a host up for a while: the oldest record in the buffer has a high sequence number; the
    # records before it were never this exporter's to read.
    src = host.source()
    src.collect()
    fifo.write(info(123_456), reset_begin(123_457, A))
    state = src.collect()
    assert state.records_lost == 0 and counts(state) == {(A, "gpu_reset_begin"): 1}
    src.close()
    fifo.close()
    # A reboot the exporter was installed for: what the buffer dropped before the first record read is lost.
    host.boot(BOOT2)
    src = host.source()
    src.collect()
    fifo.write(info(500), reset_begin(501, A))
    state = src.collect()
    assert state.records_lost == 500
    assert counts(state) == {(A, "gpu_reset_begin"): 2}
    src.close()


def test_a_large_backlog_is_read_a_slice_per_collect_and_counted_once(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setattr(logread, "MAX_BYTES_PER_COLLECT", 4096)  # a small slice, so a small file is a backlog
    lines = [
        f"[{100 + i:5d}.000000] usb 1-1: new high-speed USB device number {i} using xhci_hcd\n" for i in range(300)
    ]
    lines[150] = f"[  250.000000] amdgpu {A}: amdgpu: GPU reset begin!\n"
    lines[299] = f"[  399.000000] amdgpu {B}: amdgpu: GPU reset begin!\n"
    host.log.write_text("".join(lines))
    src = host.source()
    seen = []
    for _ in range(50):  # bounded: the file is about 24 KiB, 4 KiB a collect
        seen.append(counts(src.collect()))
        if seen[-1].get((B, "gpu_reset_begin")):
            break
    assert seen[-1] == {(A, "gpu_reset_begin"): 1, (B, "gpu_reset_begin"): 1}
    assert len(seen) > 3  # it took several collects: memory per collect is bounded
    assert counts(src.collect()) == seen[-1]  # and nothing is counted again
    src.close()


def test_an_endless_line_is_dropped_not_kept(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(logread, "MAX_LINE_BYTES", 1000)
    host.log.write_bytes(b"x" * 5000)  # no newline yet: kept as a partial line, until it is too long for one
    src = host.source()
    state = src.collect()
    assert any("without a newline" in w for w in state.warnings)
    with host.log.open("ab") as f:
        f.write(b"\n" + f"[  5.000000] amdgpu {A}: amdgpu: GPU reset begin!\n".encode())
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1}
    src.close()


def test_a_recreated_fifo_is_reopened(host: Host, fifo: Fifo) -> None:
    src = host.source()
    src.collect()
    fifo.write(reset_begin(1, A))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1}
    fifo.close()
    host.log.unlink()
    src.collect()  # the path is gone: nothing to read, no error
    again = Fifo(host.log)  # the writer makes a new FIFO at the same path
    src.collect()  # the source notices and opens the new one (a writer needs a reader to open it)
    again.write(reset_begin(2, A))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 2}
    again.close()
    src.close()


def test_a_fifo_nobody_writes_to_fails_the_source_after_a_grace(host: Host, fifo: Fifo) -> None:
    """A kmsg-relay that died leaves the exporter blind: the source says so, and recovers when a writer is back."""
    clock = [1000.0]
    src = host.source(monotonic_clock=lambda: clock[0])
    src.collect()  # no writer yet: normal for a moment (the relay connects after the exporter opened the FIFO)
    clock[0] += kernel_log.FIFO_WRITER_GRACE_SECONDS - 1
    src.collect()
    clock[0] += 1
    with pytest.raises(SourceError, match="no process has had the FIFO open for writing"):
        src.collect()
    fifo.write(reset_begin(0, A))
    assert counts(src.collect()) == {(A, "gpu_reset_begin"): 1}  # a writer again: back, nothing missed
    clock[0] += 60
    src.collect()  # the writer is still there: no data is no failure
    fifo.close()
    src.collect()
    clock[0] += kernel_log.FIFO_WRITER_GRACE_SECONDS
    with pytest.raises(SourceError, match="kmsg-relay"):
        src.collect()
    src.close()


def test_a_kmsg_record_cut_by_the_read_budget_keeps_its_dictionary(
    host: Host, fifo: Fifo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a FIFO a read may end between a record and its DEVICE= line; the record waits for the next read
    instead of being counted without its device (two GPUs: without DEVICE= it would go to unknown)."""
    record = kmsg(7, "amdgpu: GPU reset begin!", 6, device=B)
    header = record.split(b"\n", 1)[0] + b"\n"
    monkeypatch.setattr(logread, "KMSG_READ_SIZE", len(header))
    monkeypatch.setattr(logread, "MAX_BYTES_PER_COLLECT", len(header))
    src = host.source()
    src.collect()
    fifo.write(record)
    assert counts(src.collect()) == {}  # the header only: held, not counted without its dictionary
    monkeypatch.setattr(logread, "KMSG_READ_SIZE", 16384)
    monkeypatch.setattr(logread, "MAX_BYTES_PER_COLLECT", 8 << 20)
    state = src.collect()
    assert counts(state) == {(B, "gpu_reset_begin"): 1} and state.last_seq == 7
    src.close()
