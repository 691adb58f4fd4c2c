"""Long reliability tests, run on demand (issue 11, items 6 and 7): what RELIABILITY.md quotes figures from.

- **kill -9 cycles**: a real ``python -m exporter serve`` on a fake root, SIGKILLed at random moments and restarted
  on the same state dir while a writer adds GPU reset records at a steady rate: through a followed file, through a
  followed file rotated (rename + create, copytruncate) while the exporter is stopped and while it runs, and
  through a FIFO of kmsg records with sequence numbers written by the kmsg-relay's own copying code. At the end
  the counter equals the number of records written: 0 lost, 0 counted twice.
- **a full state disk**: the state dir on a 64 KiB tmpfs filled to the last byte: counting goes on from memory and
  says so, a kill while full re-reads from the last saved cursor, freeing the disk recovers; exactly once through.
- **10,000 collection cycles with changing inputs**: every source and a scrape render in one process; RSS flat.
- **a 1M-line backlog** read by the followed-file source gives its memory back.
- **soak**: serve on an 8-GPU fake root with stub tools, scraped every second; fds, threads and RSS flat.

They are marked ``long``; the default ``pytest`` deselects them (``-m "not long"`` in pyproject's addopts), so they
show as deselected, never as skipped. Run them with::

    .venv/bin/pytest -m long tests/test_long.py                     # all of them at the defaults (~18 min)
    .venv/bin/pytest -m long tests/test_long.py -k kill             # one group

Knobs (environment): ROCM_WATCHDOG_KILL_CYCLES (50), ROCM_WATCHDOG_COLLECT_CYCLES (10000),
ROCM_WATCHDOG_BACKLOG_LINES (1000000), ROCM_WATCHDOG_BACKLOG_RESET_EVERY (100), ROCM_WATCHDOG_SOAK_SECONDS (300),
ROCM_WATCHDOG_SEED (11: the kill moments are drawn from it, so a failing run can be repeated). Each test prints its
figures (also without ``-s``) and appends them as one JSON line to the file named by ROCM_WATCHDOG_RELIABILITY_OUT
when it is set.

Only loopback is used. Every process a test starts is stopped by its pid before the test ends (SIGKILL at worst).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root, capture_for_host, capture_gpus
from paths import DATA, FIXTURES
from stubs import amd_smi_stub, rocm_smi_stub

import exporter.logging as exporter_logging
from exporter.metrics.collector import RocmCollector
from exporter.metrics.exposition import Exposition
from exporter.metrics.selfmetrics import ExporterMetrics
from exporter.model.kernel import KernelLogState
from exporter.scheduler import Scheduler, run_source
from exporter.sources.kernel_log import CURSOR_FILE
from exporter.sources.kmsg_relay import KmsgRelay
from exporter.sources.registry import build_jobs
from exporter.store import SnapshotStore
from exporter.watchdog.kernel_classify import MATCH_CACHE_SIZE

pytestmark = pytest.mark.long

PROJECT = Path(__file__).resolve().parents[1]
A = "0000:03:00.0"
RESET = "gpu_reset_begin"
WRITE_RATE = 40.0  # GPU reset records a second while the exporter is killed and restarted
MAX_UP_SECONDS = 2.5  # a kill lands uniformly in (0.05, this] after the start; serving takes ~0.4 s
CATCH_UP_SECONDS = 120.0  # the last start must have counted everything within this
SETTLE_SECONDS = 2.5  # past PERSIST_EVERY_SECONDS: a count that stays put this long is final
MIB = 1024 * 1024

SMI = FIXTURES / "smi"
ROCM_SMI_CAPTURE = SMI / "rocm-smi" / "telegraf-mi100_rocm571.json"
AMD_SMI_CAPTURES = {  # the captures benchmarks/suite.py serves, rewritten to the fake host's GPUs
    "list": SMI / "amd-smi" / "amdsmi-changelog-rocm630_list_text_2gpu-uuid-redacted.txt",
    "topology": SMI / "amd-smi" / "amdsmi-changelog-rocm611_topology-a-t_json_2gpu-pcie.json",
    "process": SMI / "amd-smi" / "amdsmi-changelog-rocm620_process_text_sudo.txt",
    "metric": DATA / "amd-smi" / "metric-mem-usage_json_value-unit_2gpu.json",
}
EIGHT_GPUS = "mi210-8gpu-xgmi-pcie"  # shared/fixtures/sysfs/kfd-topology: 8 MI210 behind XGMI and PCIe

NOISE = (
    "usb 1-1: new high-speed USB device number {n} using xhci_hcd",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "perf: interrupt took too long ({n} > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    f"amdgpu {A}: amdgpu: SMU is initialized successfully!",
    "nvme nvme0: I/O tag {n} (100c) opcode 0x2 (Read) QID 3 timeout, aborting",
)


# --- helpers --------------------------------------------------------------------------------------------------


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


SEED = env_int("ROCM_WATCHDOG_SEED", 11)


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Callable[[str, dict[str, object]], None]:
    """``report(test, figures)``: printed past pytest's capture, and appended to ROCM_WATCHDOG_RELIABILITY_OUT."""

    def emit(test: str, figures: dict[str, object]) -> None:
        record = {"test": test, "seed": SEED, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
        with capsys.disabled():
            print(f"\n[reliability] {test}: {json.dumps(figures)}", flush=True)
        out = os.environ.get("ROCM_WATCHDOG_RELIABILITY_OUT")
        if out:
            with open(out, "a") as f:
                f.write(json.dumps(record) + "\n")

    return emit


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """The exporter's logging at warn for code run in this process (structlog prints debug by default); put back
    afterwards."""
    saved = structlog.get_config()
    applied, pending = exporter_logging._applied, exporter_logging._pending
    exporter_logging.configure("warn", "json")
    try:
        yield
    finally:
        structlog.configure(**saved)
        exporter_logging._applied, exporter_logging._pending = applied, pending
        structlog.contextvars.unbind_contextvars("service", "version")


def status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM (KiB) and Threads of a process, from /proc/PID/status."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(rest.split()[0])
    return out


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def mib(kib: int) -> float:
    return round(kib / 1024, 2)


def reset_line(n: int, bdf: str = A) -> bytes:
    """One dmesg line: one GPU reset of ``bdf``, numbered ``n`` (so no two lines, and no two file starts, agree)."""
    return f"[{100 + n / 1000:12.6f}] amdgpu {bdf}: amdgpu: GPU reset begin! (line {n})\n".encode()


def noise_line(n: int) -> bytes:
    return f"[{100 + n / 1000:12.6f}] {NOISE[n % len(NOISE)].format(n=n)}\n".encode()


def kmsg_record(seq: int, message: str, device: str | None = None) -> bytes:
    """A /dev/kmsg record as one read() returns it (and the kmsg-relay writes it): header, text, dictionary."""
    record = f"6,{seq},{100_000_000 + seq * 1000},-;{message}\n"
    if device is not None:
        record += f" SUBSYSTEM=pci\n DEVICE=+pci:{device}\n"
    return record.encode()


_COUNTER = {
    cls: re.compile(
        rf'^rocm_kernel_events_total\{{(?=[^}}]*\bclass="{cls}")(?=[^}}]*\bpci_bus="([^"]+)")[^}}]*\}} (\S+)$', re.M
    )
    for cls in (RESET,)
}


def reset_counts(text: str) -> dict[str, float]:
    """``rocm_kernel_events_total{class="gpu_reset_begin"}`` per pci_bus in an exposition."""
    return {bus: float(value) for bus, value in _COUNTER[RESET].findall(text)}


def metric(text: str, name_and_labels: str) -> float | None:
    match = re.search(rf"^{re.escape(name_and_labels)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


# --- a serve process ------------------------------------------------------------------------------------------


def events_of(path: Path) -> list[dict[str, object]]:
    """The JSON log lines of a serve process (a line a SIGKILL cut short is skipped)."""
    out: list[dict[str, object]] = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    out.append(event)
    return out


class Exporter:
    """``python -m exporter serve`` on loopback, port 0; its JSON log in a file (a SIGKILL may cut its last line)."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": str(PROJECT)}
        with log_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
                start_new_session=True,
            )  # fmt: skip
        self.pid = self.proc.pid
        self._port: int | None = None

    def events(self) -> list[dict[str, object]]:
        return events_of(self.log_path)

    def port_now(self) -> int | None:
        if self._port is None:
            for event in self.events():
                if event.get("event") == "serving":
                    self._port = int(str(event["port"]))
        return self._port

    def port(self, limit: float = 30) -> int:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            port = self.port_now()
            if port is not None:
                return port
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"serve did not start (exit {self.proc.poll()}): {self.tail()}")

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-3000:]
        return ""

    def scrape(self, timeout: float = 10, gzip: bool = False) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", self.port(), timeout=timeout)
        try:
            headers = {"Accept-Encoding": "gzip"} if gzip else {}
            conn.request("GET", "/metrics", headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise AssertionError(f"/metrics answered {response.status}")
            if gzip:
                import gzip as gzip_module

                body = gzip_module.decompress(body)
            return body.decode()
        finally:
            conn.close()

    def wait_for(self, ok: Callable[[str], bool], what: str, limit: float = 60) -> str:
        """Scrape until ``ok(body)`` (bounded); the body."""
        deadline = time.monotonic() + limit
        text = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode} waiting for {what}: {self.tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                text = self.scrape()
                if ok(text):
                    return text
            time.sleep(0.1)
        raise AssertionError(f"{what} not seen within {limit:g} s; last counts {reset_counts(text)}: {self.tail()}")

    def wait_resets(self, expected: int, bdf: str = A, limit: float = CATCH_UP_SECONDS) -> float:
        """Seconds until the reset counter of ``bdf`` reads ``expected``; fails at once when it passes it."""
        started = time.monotonic()

        def reached(text: str) -> bool:
            value = reset_counts(text).get(bdf, 0.0)
            assert value <= expected, f"counted {value:g} of {expected} records written: counted twice"
            return value == expected

        self.wait_for(reached, f"{expected} resets of {bdf}", limit)
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, limit: float = 20) -> int | None:
        """SIGTERM; its exit status, or None when it had to be killed."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def serve_argv(root: FakeRoot, kernel_log: Path, state_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "exporter", "serve", "--web.listen-address", "127.0.0.1:0",
        "--path.rootfs", str(root.root), "--state.dir", str(state_dir), "--kernel-log.path", str(kernel_log),
        "--log.format", "json", *extra,
    ]  # fmt: skip


NO_TOOLS = ("--no-collector.rocm-smi", "--no-collector.amd-smi", "--no-collector.processes")


@contextlib.contextmanager
def running(argv: list[str], log_path: Path) -> Iterator[Exporter]:
    exporter = Exporter(argv, log_path)
    try:
        yield exporter
    finally:
        exporter.stop()


def one_gpu_root(base: Path) -> FakeRoot:
    return build_root(base, [FakeGpu(A, card=1, render=128, kfd_node=1)], others=[FakeOther.bmc("0000:63:00.0")])


# --- writers --------------------------------------------------------------------------------------------------


class Writer(threading.Thread):
    """Writes one GPU reset record every 1/rate s (and a noise record after every third), until stopped.
    ``resets`` is exact at any moment the lock is not held."""

    def __init__(self, rate: float) -> None:
        super().__init__(daemon=True, name="reliability-writer")
        self.rate = rate
        self.lock = threading.Lock()
        self.resets = 0
        self.noise = 0
        self._done = threading.Event()

    def emit(self, data: bytes) -> None:
        raise NotImplementedError

    def reset_record(self, n: int) -> bytes:
        raise NotImplementedError

    def noise_record(self, n: int) -> bytes:
        raise NotImplementedError

    def run(self) -> None:
        due = time.monotonic()
        n = 0
        while not self._done.is_set():
            with self.lock:
                self.emit(self.reset_record(n))
                self.resets += 1
                if n % 3 == 2:
                    self.emit(self.noise_record(n))
                    self.noise += 1
            n += 1
            due += 1 / self.rate
            self._done.wait(max(0.0, due - time.monotonic()))

    def finish(self) -> None:
        self._done.set()
        self.join(10)
        assert not self.is_alive()


class FileWriter(Writer):
    """Appends dmesg lines to a log file, one write() each, and rotates it as logrotate does: the numbered
    siblings shifted up first (kern.log.1 -> kern.log.2 ...), then rename + create (the writer reopens, as rsyslog
    does on its HUP) or copy + truncate. The writer is held during a rotation: no line falls between copy and
    truncate (copytruncate itself loses those, whoever reads the file)."""

    def __init__(self, path: Path, rate: float) -> None:
        super().__init__(rate)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def emit(self, data: bytes) -> None:
        assert os.write(self.fd, data) == len(data)

    def reset_record(self, n: int) -> bytes:
        return reset_line(n)

    def noise_record(self, n: int) -> bytes:
        return noise_line(n)

    def _shift(self) -> None:
        numbered = []
        for sibling in self.path.parent.iterdir():
            suffix = sibling.name[len(self.path.name) + 1 :]
            if sibling.name.startswith(self.path.name + ".") and suffix.isdigit():
                numbered.append((int(suffix), sibling))
        for k, sibling in sorted(numbered, reverse=True):
            sibling.rename(self.path.with_name(f"{self.path.name}.{k + 1}"))

    def rotate(self, kind: str) -> None:
        with self.lock:
            self._shift()
            first = self.path.with_name(self.path.name + ".1")
            if kind == "rename":
                os.rename(self.path, first)
                os.close(self.fd)
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o640)
            else:
                shutil.copyfile(self.path, first)
                os.truncate(self.path, 0)

    def finish(self) -> None:
        super().finish()
        os.close(self.fd)


class KernelRing:
    """A simulated /dev/kmsg ring buffer that keeps every record: ``read`` gives one record per call from the
    reader's position, BlockingIOError at the end; ``rewind`` is the relay's lseek to the oldest record. An eventfd
    is readable while the reader is behind, so the relay's poll() wakes as it would on the device."""

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.pos = 0
        self.lock = threading.Lock()
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def append(self, record: bytes) -> None:
        with self.lock:
            self.records.append(record)
            os.eventfd_write(self.efd, 1)

    def rewind(self) -> None:
        with self.lock:
            self.pos = 0
            os.eventfd_write(self.efd, 1)

    def read(self, _fd: int, _size: int) -> bytes:
        with self.lock:
            if self.pos >= len(self.records):
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self.efd)
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            record = self.records[self.pos]
            self.pos += 1
            return record

    def close(self) -> None:
        os.close(self.efd)


class RingRelay(KmsgRelay):
    """The kmsg-relay's own copying code (FIFO made fresh, one write per record, reader gone -> wait for the next
    and start again at the oldest record) fed from a KernelRing instead of /dev/kmsg."""

    def __init__(self, ring: KernelRing, fifo: Path) -> None:
        super().__init__(Path("/dev/kmsg"), fifo, read=ring.read, drop_privileges=False)
        self.ring = ring

    def _open_source(self) -> int:
        return os.dup(self.ring.efd)  # the relay closes what it opened; the ring keeps its own

    def _wait_for_reader(self) -> int | None:
        fd = super()._wait_for_reader()
        if fd is not None:
            self.ring.rewind()  # what the relay's lseek(SEEK_SET) does to a /dev/kmsg descriptor
        return fd


class RingWriter(Writer):
    """Kernel records with sequence numbers into a KernelRing: resets of A carrying DEVICE=, noise without."""

    def __init__(self, ring: KernelRing, rate: float) -> None:
        super().__init__(rate)
        self.ring = ring
        self.seq = 0

    def emit(self, data: bytes) -> None:
        self.ring.append(data)
        self.seq += 1

    def reset_record(self, n: int) -> bytes:
        return kmsg_record(self.seq, f"amdgpu {A}: amdgpu: GPU reset begin! (record {n})", device=A)

    def noise_record(self, n: int) -> bytes:
        return kmsg_record(self.seq, NOISE[n % len(NOISE)].format(n=n))


# --- 1. kill -9 cycles ----------------------------------------------------------------------------------------

ROTATIONS = ("rename, stopped", "copytruncate, stopped", "rename, running", "copytruncate, running")
ROTATE_EVERY = 3  # cycles


def kill_cycles(tmp_path: Path, root: FakeRoot, kernel_log: Path, writer: Writer, rotating: bool) -> dict[str, object]:
    """Start, wait a random moment, SIGKILL, restart on the same state dir: ROCM_WATCHDOG_KILL_CYCLES times while
    ``writer`` writes; then one start that is not killed must count every record exactly once. ``rotating``: every
    ROTATE_EVERY cycles the file is rotated, by each of ROTATIONS in turn (while stopped: before the start; while
    running: at a random moment before the kill)."""
    cycles = env_int("ROCM_WATCHDOG_KILL_CYCLES", 50)
    rng = random.Random(SEED)
    logs = tmp_path / "logs"
    logs.mkdir()
    argv = serve_argv(root, kernel_log, root.state_dir, *NO_TOOLS)
    rotations: dict[str, int] = dict.fromkeys(ROTATIONS, 0) if rotating else {}

    def rotate(kind: str) -> None:
        assert isinstance(writer, FileWriter)
        writer.rotate(kind.split(",")[0])
        rotations[kind] += 1

    before_serving = checked = temps_left = 0
    started = time.monotonic()
    writer.start()
    try:
        for cycle in range(cycles):
            kind = None
            if rotating and cycle % ROTATE_EVERY == ROTATE_EVERY - 1:
                kind = ROTATIONS[(cycle // ROTATE_EVERY) % len(ROTATIONS)]
            if kind is not None and kind.endswith("stopped"):
                rotate(kind)
            temps_left += len(list(root.state_dir.glob(f".{CURSOR_FILE}.*.tmp")))
            exporter = Exporter(argv, logs / f"cycle-{cycle}.log")
            try:
                start = time.monotonic()
                up = rng.uniform(0.05, MAX_UP_SECONDS)
                if kind is not None and kind.endswith("running"):
                    time.sleep(rng.uniform(0.0, up))
                    rotate(kind)
                time.sleep(max(0.0, rng.uniform(0.0, up - (time.monotonic() - start))))
                if exporter.port_now() is not None:  # a scrape now and then: never more than was written
                    with contextlib.suppress(OSError, http.client.HTTPException):
                        counted = reset_counts(exporter.scrape(timeout=2)).get(A, 0.0)
                        written = writer.resets
                        assert counted <= written, f"cycle {cycle}: counted {counted:g} of {written} written"
                        checked += 1
                time.sleep(max(0.0, up - (time.monotonic() - start)))
                if exporter.port_now() is None:
                    before_serving += 1
            finally:
                exporter.kill()
        writer.finish()
        written = writer.resets
        with running(argv, logs / "final.log") as final:
            catch_up = final.wait_resets(written)
            time.sleep(SETTLE_SECONDS)
            text = final.scrape()
            counted = reset_counts(text).get(A, 0.0)
            lost_total = metric(text, "rocm_kernel_log_records_lost_total")
            exit_code = final.stop()
    finally:
        if writer.is_alive():
            writer.finish()
    crashes = [
        e for log in sorted(logs.iterdir()) for e in events_of(log)
        if e.get("level") in ("error", "critical") or e.get("event") == "source_crashed"
    ]  # fmt: skip
    figures: dict[str, object] = {
        "cycles": cycles,
        "killed_before_serving": before_serving,
        "scrapes_checked_mid_run": checked,
        "records_written": written,
        "noise_written": writer.noise,
        "counted": counted,
        "lost": max(0, written - int(counted)),
        "double": max(0, int(counted) - written),
        "records_lost_metric": lost_total,
        "cursor_temp_files_seen_before_a_start": temps_left,
        "cursor_temp_files_after": len(list(root.state_dir.glob("*.tmp"))),
        "error_log_lines": len(crashes),
        "final_catch_up_seconds": round(catch_up, 2),
        "duration_seconds": round(time.monotonic() - started, 1),
    }
    if rotating:
        figures["rotations"] = rotations
    assert counted == written, figures
    assert exit_code == 0, figures
    assert figures["cursor_temp_files_after"] == 0, figures  # interrupted writes cleaned at start
    assert not crashes, crashes[:5]
    return figures


def test_kill9_cycles_followed_file(tmp_path: Path, report: Callable[[str, dict[str, object]], None]) -> None:
    root = one_gpu_root(tmp_path)
    kernel_log = root.root / "var" / "log" / "kern.log"
    kernel_log.parent.mkdir(parents=True)
    kernel_log.write_bytes(b"")
    figures = kill_cycles(tmp_path, root, kernel_log, FileWriter(kernel_log, WRITE_RATE), rotating=False)
    report("kill9_cycles_followed_file", figures)


def test_kill9_cycles_followed_file_with_rotation(
    tmp_path: Path, report: Callable[[str, dict[str, object]], None]
) -> None:
    root = one_gpu_root(tmp_path)
    kernel_log = root.root / "var" / "log" / "kern.log"
    kernel_log.parent.mkdir(parents=True)
    kernel_log.write_bytes(b"")
    figures = kill_cycles(tmp_path, root, kernel_log, FileWriter(kernel_log, WRITE_RATE), rotating=True)
    report("kill9_cycles_followed_file_with_rotation", figures)


def test_kill9_cycles_kmsg_fifo(
    tmp_path: Path, report: Callable[[str, dict[str, object]], None], quiet_logs: None
) -> None:
    root = one_gpu_root(tmp_path)
    fifo = root.root / "run" / "rocm-watchdog" / "kmsg.fifo"
    ring = KernelRing()
    relay = RingRelay(ring, fifo)
    thread = threading.Thread(target=relay.run, name="kmsg-relay", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not fifo.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fifo.exists(), "the relay did not make its FIFO"
        figures = kill_cycles(tmp_path, root, fifo, RingWriter(ring, WRITE_RATE), rotating=False)
        figures["relay_records_written"] = relay.records  # replays from the oldest record after each restart
        assert figures["records_lost_metric"] == 0, figures
    finally:
        relay.stop()
        thread.join(5)
        ring.close()
    report("kill9_cycles_kmsg_fifo", figures)


# --- 5. a full state disk -------------------------------------------------------------------------------------

UNSAVED = 'rocm_watchdog_state_file_unsaved{file="kernel-log-cursor.json"}'


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True, check=False
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(directory: Path) -> Path:
    """A file that takes every free byte of ``directory``'s file system (unbuffered writes until ENOSPC)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)
    return filler


def test_full_state_disk_counts_on_and_recovers(
    tmp_path: Path, tiny_tmpfs: Path, report: Callable[[str, dict[str, object]], None]
) -> None:
    root = one_gpu_root(tmp_path)
    kernel_log = root.root / "kern.log"
    kernel_log.write_bytes(b"")
    argv = serve_argv(root, kernel_log, tiny_tmpfs, *NO_TOOLS)
    logs = tmp_path / "logs"
    logs.mkdir()
    n = 0

    def append(count: int) -> None:
        nonlocal n
        with kernel_log.open("ab") as f:
            for _ in range(count):
                f.write(reset_line(n) + noise_line(n))
                n += 1

    def unsaved(value: float | None) -> Callable[[str], bool]:
        # served only while 1: None once the cursor is saved (the resets counted say the source has run)
        return lambda text: metric(text, UNSAVED) == value

    started = time.monotonic()
    with running(argv, logs / "1.log") as first:
        append(20)
        first.wait_resets(20)
        first.wait_for(unsaved(None), "the cursor saved")
        filler = fill(tiny_tmpfs)
        df = shutil.disk_usage(tiny_tmpfs)
        append(20)
        first.wait_resets(40)
        first.wait_for(unsaved(1.0), "the cursor unsaved")
        first.kill()  # killed while the disk is full: the cursor on disk is the one of 20 records
    with running(argv, logs / "2.log") as second:
        second.wait_resets(40)  # the 20 unsaved ones read again from the saved offset: counted once
        second.wait_for(unsaved(1.0), "the cursor still unsaved")
        append(10)
        second.wait_resets(50)
        filler.unlink()
        second.wait_for(unsaved(None), "the cursor saved again")
        append(10)
        second.wait_resets(60)
        time.sleep(SETTLE_SECONDS)
        second.kill()
    with running(argv, logs / "3.log") as third:
        third.wait_resets(60)
        time.sleep(SETTLE_SECONDS)
        counted = reset_counts(third.scrape()).get(A, 0.0)
        assert third.stop() == 0
    events = {name: [e for e in events_of(logs / name) if str(e.get("event", "")).startswith("state_write")]
              for name in ("1.log", "2.log", "3.log")}  # fmt: skip
    figures: dict[str, object] = {
        "tmpfs_bytes": df.total,
        "free_bytes_when_full": df.free,
        "records_written": n,
        "counted": counted,
        "lost": max(0, n - int(counted)),
        "double": max(0, int(counted) - n),
        "state_write_events": {k: [f"{e['event']}:{e.get('file')}" for e in v] for k, v in events.items()},
        "temp_files_after": len(list(tiny_tmpfs.glob("*.tmp"))),
        "duration_seconds": round(time.monotonic() - started, 1),
    }
    assert counted == n, figures
    assert figures["temp_files_after"] == 0, figures
    cursor_failures = [
        e for e in events["1.log"] if e["event"] == "state_write_failed" and e.get("file") == CURSOR_FILE
    ]
    assert len(cursor_failures) == 1, figures  # said once, not at every write
    assert any(e["event"] == "state_write_recovered" and e.get("file") == CURSOR_FILE for e in events["2.log"]), figures
    report("full_state_disk", figures)


# --- 2. 10,000 collection cycles --------------------------------------------------------------------------------


def eight_gpu_host(base: Path) -> tuple[FakeRoot, Path, Path, list[str]]:
    """8x MI210 (a real KFD topology capture) and a BMC, an empty followed kern.log, stub rocm-smi and amd-smi
    printing real captures rewritten to these GPUs. (root, kernel log, tools dir, GPU addresses)."""
    gpus = capture_gpus(EIGHT_GPUS)
    root = build_root(base, gpus, others=[FakeOther.bmc()], cpu_nodes=2)
    kernel_log = root.root / "var" / "log" / "kern.log"
    kernel_log.parent.mkdir(parents=True)
    kernel_log.write_bytes(b"")
    bdfs = [gpu.bdf for gpu in gpus]
    tools = root.root / "opt" / "rocm" / "bin"
    captures = root.root / "captures"
    rocm_smi_stub(tools, capture_for_host(ROCM_SMI_CAPTURE, bdfs, captures / ROCM_SMI_CAPTURE.name))
    outputs = {cmd: capture_for_host(path, bdfs, captures / path.name) for cmd, path in AMD_SMI_CAPTURES.items()}
    amd_smi_stub(tools, outputs).set("static", stdout="[]")
    return root, kernel_log, tools, bdfs


class Changer:
    """Changes what the host shows between two collections: per GPU busy %, memory busy %, VRAM used, three
    temperatures and power (sysfs and hwmon files rewritten), and kernel-log lines appended (resets spread over
    the GPUs, noise between them)."""

    def __init__(self, root: FakeRoot, kernel_log: Path, bdfs: list[str]) -> None:
        self.kernel_log = kernel_log
        self.bdfs = bdfs
        self.dirs: list[tuple[Path, Path, str]] = []
        for gpu in root.gpus:
            pci = root.pci_dir(gpu.bdf)
            hwmon = next((pci / "hwmon").iterdir())
            self.dirs.append((pci, hwmon, gpu.power_file))
        self.resets: dict[str, int] = dict.fromkeys(bdfs, 0)
        self.lines = 0

    def step(self, i: int, lines: int = 3) -> None:
        for g, (pci, hwmon, power_file) in enumerate(self.dirs):
            v = i * 7 + g * 13
            (pci / "gpu_busy_percent").write_text(f"{v % 101}\n")
            (pci / "mem_busy_percent").write_text(f"{(v * 3) % 101}\n")
            (pci / "mem_info_vram_used").write_text(f"{(v % 4096) * MIB + 4096}\n")
            for t in (1, 2, 3):
                (hwmon / f"temp{t}_input").write_text(f"{30000 + (v * t * 37) % 60000}\n")
            (hwmon / power_file).write_text(f"{40_000_000 + (v * 997) % 250_000_000}\n")
        with self.kernel_log.open("ab") as f:
            for k in range(lines):
                n = self.lines
                if k == 0:
                    bdf = self.bdfs[i % len(self.bdfs)]
                    f.write(reset_line(n, bdf))
                    self.resets[bdf] += 1
                else:
                    f.write(noise_line(n))
                self.lines += 1


def test_collection_cycles_keep_rss_flat(
    tmp_path: Path, report: Callable[[str, dict[str, object]], None], quiet_logs: None
) -> None:
    """ROCM_WATCHDOG_COLLECT_CYCLES (10,000) cycles in this process: inputs changed (Changer), then sysfs, devices,
    processes and the kernel-log source run (scheduler.run_source, each recording into the store, whose listener
    refreshes the exposition as serve's does), then a scrape is rendered (Exposition.get, gzip as Prometheus asks,
    plain text every 10th cycle). The smi sources (amd-smi and rocm-smi, both) run their stub tools as real
    subprocesses every 10th cycle: 1,000 runs each, the parsers on real captures each time. VmRSS of this process
    is sampled every 500 cycles.

    Every reset line written is a message not seen before, so the kernel-log classifier's match cache (at most
    MATCH_CACHE_SIZE messages, in two halves: the older is dropped when the newer is full) fills up over the first
    ~4,100 cycles, a few MiB, and is reused from then on. So: from cycle 1,000 (everything else warm) to the end
    RSS may grow by rss_bound_mib, and once the cache has filled (PLATEAU) by plateau_bound_mib: a leak of a few
    hundred bytes a cycle shows there."""
    cycles = env_int("ROCM_WATCHDOG_COLLECT_CYCLES", 10_000)
    smi_every = 10
    sample_every = min(500, max(1, cycles // 20))
    warm = min(1000, cycles // 2) // sample_every * sample_every
    plateau = -(-(warm + MATCH_CACHE_SIZE) // sample_every) * sample_every  # the first sample past a full cache
    rss_bound_mib, plateau_bound_mib = 6.0, 1.5
    root, kernel_log, tools, bdfs = eight_gpu_host(tmp_path)
    config = root.config(
        kernel_log_path=kernel_log, rocm_smi_path=str(tools / "rocm-smi"), amd_smi_path=str(tools / "amd-smi"),
        smi_backend="both", smi_timeout_seconds=10.0,
    )  # fmt: skip
    store = SnapshotStore()
    jobs = build_jobs(config, store)
    scheduler = Scheduler(store, jobs)  # registers every source in the store; never started
    smi = {"amd-smi", "rocm-smi"}
    assert {job.source.name for job in jobs} == smi | {"sysfs", "devices", "processes", "kernel-log"}
    collector = RocmCollector(store, config, exporter_metrics=ExporterMetrics())
    exposition = Exposition(collector)
    store.subscribe(exposition.refresh)
    changer = Changer(root, kernel_log, bdfs)
    samples: list[tuple[int, float]] = []
    failures: dict[str, int] = {}
    body_sizes: set[int] = set()
    started = time.monotonic()
    try:
        for i in range(1, cycles + 1):
            changer.step(i)
            for job in jobs:
                if job.source.name in smi and i % smi_every != 1:
                    continue
                if not run_source(job.source, store):
                    failures[job.source.name] = failures.get(job.source.name, 0) + 1
            exposition.get(gzip=True)
            if i % 10 == 0:
                body_sizes.add(len(exposition.get()))
            if i == 1 or i % sample_every == 0 or i == cycles:
                samples.append((i, mib(status()["VmRSS"])))
        elapsed = time.monotonic() - started
        text = exposition.get().decode()
        kernel = store.view(time.time()).entries["kernel-log"].data
    finally:
        scheduler.shutdown()
    assert isinstance(kernel, KernelLogState)
    rss = dict(samples)
    growth = round(rss[cycles] - rss[warm], 2) if warm in rss else None
    # measured only when the run goes on for a third of its length past a full cache (the default run does)
    plateau_growth = round(rss[cycles] - rss[plateau], 2) if plateau in rss and cycles - plateau >= cycles / 3 else None
    figures: dict[str, object] = {
        "cycles": cycles,
        "smi_runs_each": (cycles + smi_every - 1) // smi_every,
        "seconds": round(elapsed, 1),
        "ms_per_cycle": round(elapsed / cycles * 1000, 2),
        "rss_mib_by_cycle": samples,
        f"rss_growth_mib_{warm}_to_{cycles}": growth,
        "bound_mib": rss_bound_mib,
        f"rss_growth_mib_{plateau}_to_{cycles}": plateau_growth,
        "plateau_bound_mib": plateau_bound_mib,
        "vmhwm_mib": mib(status()["VmHWM"]),
        "gc_objects_at_end": len(gc.get_objects()),
        "body_bytes_min_max": [min(body_sizes), max(body_sizes)],
        "source_failures": failures,
        "kernel_lines_appended": changer.lines,
    }
    report("collection_cycles_rss", figures)
    assert not failures, figures
    for name in smi | {"sysfs", "devices", "processes", "kernel-log"}:
        assert f'rocm_watchdog_source_up{{source="{name}"}} 1.0' in text
    assert {bus: kernel.counts.get((bus, RESET), 0) for bus in bdfs} == changer.resets  # each line once
    assert growth is not None and growth < rss_bound_mib, figures
    assert plateau_growth is None or plateau_growth < plateau_bound_mib, figures


# --- 3. a big backlog gives its memory back ---------------------------------------------------------------------


def test_a_million_line_backlog_gives_its_memory_back(
    tmp_path: Path, report: Callable[[str, dict[str, object]], None]
) -> None:
    """Serve (sysfs, devices, kernel-log on a followed file) is started on the log as it is, left to settle and its
    RSS taken; stopped; ROCM_WATCHDOG_BACKLOG_LINES (1,000,000) lines (one GPU reset in
    ROCM_WATCHDOG_BACKLOG_RESET_EVERY, default 100, the rest noise) are appended; started again on the same state
    dir: once it has counted them all and settled, its RSS is within bound_mib of the first run's. VmHWM shows what
    reading the backlog took at its peak. (What stays depends on the mix, not the length: an amdgpu-heavy backlog,
    RESET_EVERY=1, leaves more behind; see the figures.)"""
    lines = env_int("ROCM_WATCHDOG_BACKLOG_LINES", 1_000_000)
    reset_every = env_int("ROCM_WATCHDOG_BACKLOG_RESET_EVERY", 100)
    bound_mib = 8.0  # measured: +5 MiB (100k lines or 1M alike: what stays is not proportional); 38 MiB untrimmed
    settle = 8.0
    root = one_gpu_root(tmp_path)
    kernel_log = root.root / "var" / "log" / "kern.log"
    kernel_log.parent.mkdir(parents=True)
    kernel_log.write_bytes(reset_line(0) + noise_line(1))
    argv = serve_argv(root, kernel_log, root.state_dir, *NO_TOOLS)
    logs = tmp_path / "logs"
    logs.mkdir()

    def settled_rss(exporter: Exporter) -> tuple[int, list[int]]:
        exporter.wait_for(lambda t: all(f'source_up{{source="{s}"}} 1.0' in t for s in ("sysfs", "devices")), "up")
        time.sleep(settle)
        series = []
        for _ in range(3):
            series.append(status(exporter.pid)["VmRSS"])
            exporter.scrape()
            time.sleep(1)
        return max(series), series

    with running(argv, logs / "before.log") as before:
        before.wait_resets(1)
        rss_before, series_before = settled_rss(before)
        assert before.stop() == 0
    resets = 1
    chunk: list[bytes] = []
    with kernel_log.open("ab") as f:
        for n in range(2, lines + 2):
            if n % reset_every == 0:
                chunk.append(reset_line(n))
                resets += 1
            else:
                chunk.append(noise_line(n))
            if len(chunk) >= 20_000:
                f.write(b"".join(chunk))
                chunk.clear()
        f.write(b"".join(chunk))
    size = kernel_log.stat().st_size
    with running(argv, logs / "after.log") as after:
        read_seconds = after.wait_resets(resets, limit=600)
        rss_after, series_after = settled_rss(after)
        hwm = status(after.pid)["VmHWM"]
        assert after.stop() == 0
    growth = mib(rss_after - rss_before)
    figures: dict[str, object] = {
        "lines": lines,
        "reset_every": reset_every,
        "bytes": size,
        "resets": resets,
        "seconds_to_count_all": round(read_seconds, 1),
        "rss_mib_before": [mib(x) for x in series_before],
        "rss_mib_after": [mib(x) for x in series_after],
        "vmhwm_mib_after_run": mib(hwm),
        "growth_mib": growth,
        "bound_mib": bound_mib,
    }
    report("backlog_memory", figures)
    assert growth < bound_mib, figures


# --- 4. soak --------------------------------------------------------------------------------------------------


def test_soak_fds_threads_rss_flat(tmp_path: Path, report: Callable[[str, dict[str, object]], None]) -> None:
    """Serve on the 8-GPU host with every default source (both stub tools every 5 s, sysfs, devices and processes
    every second, the kernel-log file followed), scraped every second (gzip and plain in turn, a new connection
    each) for ROCM_WATCHDOG_SOAK_SECONDS (300) while sysfs values change and kernel-log lines are appended every
    second. Open fds, threads and VmRSS sampled every 10 s; after a warm-up (a tenth of the run, at least 20 s) fds
    and threads end where they were (median of the last three samples against the first three, within fd_slack and
    thread_slack: a scrape or a tool run in flight at a sample) and RSS grows less than rss_bound_mib. Every kernel-log
    reset appended is counted exactly once, every scrape is answered, and SIGTERM ends it with 0. The creep is
    reported as the least-squares RSS slope over the last 90 minutes (all after the warm-up in a shorter run); a run
    of an hour and more (``ROCM_WATCHDOG_SOAK_SECONDS=7200``: the figure RELIABILITY.md quotes) holds it below
    1 MiB an hour."""
    seconds = env_int("ROCM_WATCHDOG_SOAK_SECONDS", 300)
    fd_slack, thread_slack, rss_bound_mib = 3, 3, 6.0
    warmup = max(20.0, seconds / 10)
    root, kernel_log, tools, bdfs = eight_gpu_host(tmp_path)
    argv = serve_argv(
        root, kernel_log, root.state_dir,
        "--rocm-smi.path", str(tools / "rocm-smi"), "--amd-smi.path", str(tools / "amd-smi"), "--smi.backend", "both",
        "--smi.timeout", "10s", "--collector.rocm-smi.interval", "5s", "--collector.amd-smi.interval", "5s",
        "--collector.sysfs.interval", "1s", "--collector.devices.interval", "1s",
        "--collector.processes.interval", "1s",
    )  # fmt: skip
    changer = Changer(root, kernel_log, bdfs)
    logs = tmp_path / "logs"
    logs.mkdir()
    samples: list[dict[str, float]] = []
    scrapes = failed = 0
    errors: list[str] = []
    with running(argv, logs / "soak.log") as exporter:
        exporter.wait_for(
            lambda t: all(f'source_up{{source="{s}"}} 1.0' in t for s in ("amd-smi", "rocm-smi", "sysfs")), "ready"
        )
        started = time.monotonic()
        next_sample = started
        i = 0
        while (now := time.monotonic()) < started + seconds:
            i += 1
            changer.step(i, lines=5)
            try:
                exporter.scrape(gzip=i % 2 == 0)
                scrapes += 1
            except (OSError, http.client.HTTPException, AssertionError) as exc:
                failed += 1
                errors.append(repr(exc))
            if now >= next_sample:
                st = status(exporter.pid)
                samples.append({"t": round(now - started), "fds": fds(exporter.pid), "threads": st["Threads"],
                                "rss_mib": mib(st["VmRSS"])})  # fmt: skip
                next_sample += 10
            time.sleep(max(0.0, started + i - time.monotonic()))
        for bdf in bdfs:
            exporter.wait_resets(changer.resets[bdf], bdf=bdf, limit=30)
        hwm = status(exporter.pid)["VmHWM"]
        code = exporter.stop()
    after = [s for s in samples if s["t"] >= warmup]
    k = min(3, max(1, len(after) // 2))
    # the creep: RSS's least-squares slope over the last SLOPE_WINDOW_SECONDS (all after the warm-up when shorter)
    window = [s for s in after if s["t"] >= seconds - SLOPE_WINDOW_SECONDS]
    slope = rss_slope_mib_per_hour(window)

    def med(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    first = {key: med([s[key] for s in after[:k]]) for key in ("fds", "threads", "rss_mib")}
    last = {key: med([s[key] for s in after[-k:]]) for key in ("fds", "threads", "rss_mib")}
    figures: dict[str, object] = {
        "seconds": seconds,
        "warmup_seconds": warmup,
        "scrapes": scrapes,
        "scrapes_failed": failed,
        "kernel_lines_appended": changer.lines,
        "resets_counted_exactly": True,
        "samples": samples,
        "after_warmup": first,
        "at_end": last,
        "rss_growth_mib": round(last["rss_mib"] - first["rss_mib"], 2),
        "rss_slope_window_seconds": round(window[-1]["t"] - window[0]["t"]) if window else 0,
        "rss_slope_mib_per_hour": None if slope is None else round(slope, 3),
        "vmhwm_mib": mib(hwm),
        "exit_code": code,
    }
    report("soak", figures)
    assert failed == 0, errors[:5]
    assert code == 0
    assert len(after) >= 2, figures
    assert abs(last["fds"] - first["fds"]) <= fd_slack, figures
    assert abs(last["threads"] - first["threads"]) <= thread_slack, figures
    assert last["rss_mib"] - first["rss_mib"] < rss_bound_mib, figures
    if seconds >= SLOPE_ASSERT_SECONDS:  # shorter runs report the slope; it means little over minutes
        assert slope is not None and slope < SLOPE_BOUND_MIB_PER_HOUR, figures


SLOPE_WINDOW_SECONDS = 5400  # the last 90 minutes of a 2-hour soak (ROCM_WATCHDOG_SOAK_SECONDS=7200)
SLOPE_ASSERT_SECONDS = 3600
SLOPE_BOUND_MIB_PER_HOUR = 1.0


def rss_slope_mib_per_hour(samples: list[dict[str, float]]) -> float | None:
    """The least-squares slope of ``rss_mib`` over ``t`` (seconds), in MiB an hour; None for fewer than 3 samples."""
    if len(samples) < 3:
        return None
    ts = [s["t"] for s in samples]
    ys = [s["rss_mib"] for s in samples]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den * 3600
