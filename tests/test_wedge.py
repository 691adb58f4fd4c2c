"""No read can wedge a source, no signal leaves a tool behind (issue 11, items 2 and 4).

A FIFO stands in for a sysfs file: nothing writes to it, so a plain ``open()`` of it blocks for good, the way a
read of a hung GPU's ``gpu_busy_percent`` blocks inside the driver. The exporter refuses a FIFO outright
(``O_NONBLOCK`` + ``fstat``), so to exercise the deadline behind that first line (what protects against a
regular file whose ``read()`` hangs) the daemon is started with ``deadline.read_regular`` replaced by a plain
blocking read; those tests say so.

Errors made for real: a directory in place of a file (EISDIR), a dangling link (ENOENT), a link to
``/proc/self/mem`` (EIO: reading offset 0 of one's own memory), a FIFO, and a 000 file read as nobody (EACCES;
the tests run as root, which ignores permission bits). The daemons are real ``serve`` processes sent real
signals; the hung tool is a stub rocm-smi that sleeps, found again afterwards by its path in /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from fakeroot import FakeGpu, FakeRoot, build_root
from paths import FIXTURES, PROJECT
from prometheus_client import generate_latest
from structlog.testing import capture_logs
from stubs import Stub, rocm_smi_stub
from test_devices import NOBODY, run_forked

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.model.gpu import SysfsSnapshot
from exporter.scheduler import Scheduled, Scheduler
from exporter.sources import deadline, runner
from exporter.sources.deadline import DeadlineRunner
from exporter.sources.processes import ProcessesSource
from exporter.sources.sysfs import SysfsSource, read_sysfs
from exporter.store import SnapshotStore

A, B = "0000:1e:00.0", "0000:22:00.0"
MI100 = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"
SIGTERM_LIMIT_SECONDS = 5.0


def two_gpus(tmp_path: Path, **a: object) -> FakeRoot:
    return build_root(
        tmp_path,
        [
            FakeGpu(A, card=1, render=128, kfd_node=1, busy_percent=37, **a),  # type: ignore[arg-type]
            FakeGpu(B, card=2, render=129, kfd_node=2, unique_id=0x1234),
        ],
    )


def fifo_in_place_of(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


def release(fifo: Path, text: str = "50\n") -> None:
    """Give a reader blocked in open() of ``fifo`` what it waits for (no-op when nobody is blocked on it)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader
        return
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def blocking_read(path: str | os.PathLike[str], limit: int) -> bytes:
    """What a read looked like before the first line of defence: a plain open, which blocks on a FIFO."""
    with open(path, "rb") as fh:
        return fh.read(limit + 1)


def within(seconds: float, fn: Callable[[], object]) -> object:
    """``fn()`` in a daemon thread; fails (instead of hanging the suite) when it does not return in time."""
    box: list[object] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"did not return within {seconds}s: the read wedged"
    return box[0]


def exposition(config: Config, snap: SysfsSnapshot) -> str:
    store = SnapshotStore()
    store.register("sysfs", 15, 45)
    store.record_success("sysfs", snap, 0.01, time.time())
    return generate_latest(make_registry(store, config)).decode()


def threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


# ---- the deadline runner ----------------------------------------------------------------------------------


def test_a_stuck_key_gets_one_thread_and_the_others_still_run() -> None:
    gate = threading.Event()
    runner: DeadlineRunner[str] = DeadlineRunner("t")

    def a() -> str:
        gate.wait(30)
        return "a"

    calls = {"a": a, "b": lambda: "b"}
    try:
        first = runner.run(calls, 0.1)
        assert (first["a"].status, first["b"].status, first["b"].value) == ("timeout", "done", "b")
        for _ in range(5):  # every later run: not started again, reported at once
            started = time.monotonic()
            again = runner.run(calls, 0.1)
            assert (again["a"].status, again["b"].value) == ("stuck", "b")
            assert time.monotonic() - started < 0.1
        assert len(threads_named("t-a")) == 1 and threads_named("t-a")[0].daemon
        assert set(runner.stuck()) == {"a"}
    finally:
        gate.set()
    threads_named("t-a")[0].join(5) if threads_named("t-a") else None
    assert runner.run(calls, 1.0)["a"].value == "a"  # returned: the key runs again
    assert runner.stuck() == {}


def test_calls_after_a_stuck_one_go_to_a_new_worker_and_none_runs_twice() -> None:
    gate = threading.Event()
    ran: list[str] = []
    runner: DeadlineRunner[str] = DeadlineRunner("u")

    def call(key: str, seconds: float = 0.0, wait: bool = False) -> Callable[[], str]:
        def fn() -> str:
            ran.append(key)
            if wait:
                gate.wait(30)
            time.sleep(seconds)
            return key

        return fn

    calls = {"a": call("a"), "b": call("b", wait=True), "c": call("c"), "d": call("d", seconds=0.05)}
    try:
        started = time.monotonic()
        out = runner.run(calls, 0.3)
        took = time.monotonic() - started
        assert {k: (o.status, o.value) for k, o in out.items()} == {
            "a": ("done", "a"), "b": ("timeout", None), "c": ("done", "c"), "d": ("done", "d"),
        }  # fmt: skip
        assert 0.3 <= took < 5 and out["b"].running_seconds >= 0.3
        assert ran == ["a", "b", "c", "d"]  # each once, in order; c and d on the new worker
        assert len(threads_named("u-b")) == 1 and len(threads_named("u-worker")) == 1
    finally:
        gate.set()
    threads_named("u-b")[0].join(5) if threads_named("u-b") else None
    assert ran == ["a", "b", "c", "d"]  # the abandoned worker took nothing after b
    assert {k: o.status for k, o in runner.run(calls, 1.0).items()} == dict.fromkeys("abcd", "done")


# ---- sysfs: the first line (no blocking open) and the errors ------------------------------------------------


def test_a_fifo_in_place_of_a_file_is_a_counted_error_not_a_wedge(tmp_path: Path) -> None:
    root = two_gpus(tmp_path)
    fifo_in_place_of(root.pci_dir(A) / "gpu_busy_percent")
    snap = within(5, lambda: read_sysfs(root.sys))
    assert isinstance(snap, SysfsSnapshot)
    a, b = snap.gpus
    assert a.busy_ratio is None and a.vram_total_bytes == 68_702_699_520 and a.sysfs_read == "ok"
    assert b.busy_ratio == 0.0
    assert [(e.pci_bus, e.file, e.error) for e in snap.read_errors] == [(A, "gpu_busy_percent", "not_regular_file")]
    assert any(w.endswith("gpu_busy_percent: unreadable (not_regular_file: not a regular file)") for w in snap.warnings)


def test_read_errors_are_counted_per_gpu_and_file_and_logged_once(tmp_path: Path) -> None:
    # temp1 ("edge") reads -99999999999999999999 millidegrees: once exported as -1e17 degrees.
    root = two_gpus(tmp_path, hwmon_files={"temp1_input": "-99999999999999999999\n"})
    d = root.pci_dir(A)
    (d / "mem_busy_percent").unlink(missing_ok=True)
    (d / "mem_busy_percent").mkdir()  # EISDIR
    (d / "mem_info_gtt_total").unlink(missing_ok=True)
    (d / "mem_info_gtt_total").symlink_to("../gone/mem_info_gtt_total")  # ENOENT: a dangling link
    (d / "pcie_replay_count").unlink(missing_ok=True)
    (d / "pcie_replay_count").symlink_to("/proc/self/mem")  # EIO: offset 0 of one's own memory is unmapped
    fifo_in_place_of(d / "gpu_busy_percent")
    config = root.config()
    source = SysfsSource(config)
    with capture_logs() as logs:
        within(10, source.collect)
        snap = within(10, source.collect)
    assert isinstance(snap, SysfsSnapshot)
    counts = {(e.pci_bus, e.file, e.error): e.count for e in snap.read_errors}
    assert counts == {
        (A, "mem_busy_percent", "EISDIR"): 2,
        (A, "mem_info_gtt_total", "ENOENT"): 2,
        (A, "pcie_replay_count", "EIO"): 2,
        (A, "gpu_busy_percent", "not_regular_file"): 2,
        (A, f"hwmon/{os.listdir(d / 'hwmon')[0]}/temp1_input", "out_of_range"): 2,
    }
    a = snap.gpus[0]
    assert "edge" not in dict(a.temperatures_celsius) and dict(a.temperatures_celsius)["junction"] == 38.0
    assert a.telemetry.memory_busy_ratio is None and a.telemetry.pcie_replays is None
    assert a.sysfs_read == "ok"  # most files read fine: the GPU answers
    # Logged once per (GPU, file, error) over two runs, the out-of-range value as a warning of its own.
    events = [(e["event"], e.get("file"), e.get("error")) for e in logs if e["log_level"] == "warning"]
    assert sorted(events) == sorted(
        [("sysfs_read_error", f, err) for (_, f, err) in counts if err != "out_of_range"]
        + [("sysfs_value_out_of_range", f, err) for (_, f, err) in counts if err == "out_of_range"]
    )
    out_of_range = next(e for e in logs if e["event"] == "sysfs_value_out_of_range")
    assert "-99999999999999999999" in out_of_range["detail"]
    text = exposition(config, snap)
    assert f'rocm_gpu_sysfs_read_errors_total{{error="EIO",file="pcie_replay_count",pci_bus="{A}"}} 2.0' in text
    assert f'{{pci_bus="{A}",sensor="edge"}}' not in text and "e+17" not in text
    assert f'rocm_gpu_sysfs_readable{{pci_bus="{A}",reason=""}} 1.0' in text


def test_a_file_nobody_may_read_is_an_eacces_error(open_tmp: Path) -> None:
    root = two_gpus(open_tmp)
    (root.pci_dir(A) / "gpu_busy_percent").chmod(0)

    def read() -> list[list[str]]:
        return [[e.pci_bus, e.file, e.error] for e in read_sysfs(root.sys).read_errors]

    assert run_forked(NOBODY, NOBODY, [], read) == [[A, "gpu_busy_percent", "EACCES"]]


# ---- sysfs: the deadline ------------------------------------------------------------------------------------


def test_a_gpu_whose_read_blocks_is_unreadable_and_the_others_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = two_gpus(tmp_path)
    config = root.config()
    source = SysfsSource(config, deadline_seconds=0.5)
    first = source.collect()
    assert [g.sysfs_read for g in first.gpus] == ["ok", "ok"] and first.gpus[0].busy_ratio == 0.37
    monkeypatch.setattr(deadline, "read_regular", blocking_read)  # a regular file whose read hangs, as a FIFO
    fifo = fifo_in_place_of(root.pci_dir(A) / "gpu_busy_percent")
    try:
        with capture_logs() as logs:
            started = time.monotonic()
            stuck = source.collect()
            assert time.monotonic() - started < 0.5 + 1.0
            started = time.monotonic()
            still = source.collect()  # the stuck read is not started again, nor waited for
            assert time.monotonic() - started < 0.4
            assert len(threads_named(f"sysfs-gpu-{A}")) == 1
        for snap in (stuck, still):
            a, b = snap.gpus
            assert a.sysfs_read == "timeout"
            assert (a.busy_ratio, a.vram_total_bytes, a.temperatures_celsius) == (None, None, ())
            # the identity is the last one read, so rocm_gpu_info keeps its labels
            assert (a.unique_id, a.model, a.card) == (first.gpus[0].unique_id, first.gpus[0].model, a.card)
            assert (b.sysfs_read, b.busy_ratio, b.vram_total_bytes) == ("ok", 0.0, 68_702_699_520)
        unreadable = [e for e in logs if e["event"] == "gpu_sysfs_unreadable"]
        assert [(e["pci_bus"], e["reason"], e["log_level"]) for e in unreadable] == [(A, "timeout", "warning")]
        assert unreadable[0]["blocked_on"] == "gpu_busy_percent"
        text = exposition(config, still)
        assert f'rocm_gpu_sysfs_readable{{pci_bus="{A}",reason="timeout"}} 0.0' in text
        assert f'rocm_gpu_sysfs_readable{{pci_bus="{B}",reason=""}} 1.0' in text
        assert f'rocm_gpu_busy_ratio{{pci_bus="{B}"}} 0.0' in text and f'busy_ratio{{pci_bus="{A}"}}' not in text
        assert 'rocm_gpu_info{card="card1",device_id="0x740f",driver="amdgpu",gpu_id="",kfd_node="1"' in text
    finally:
        release(fifo)
    for thread in threads_named(f"sysfs-gpu-{A}"):
        thread.join(5)
    fifo.unlink()
    fifo.write_text("50\n")
    with capture_logs() as logs:
        back = source.collect()
    assert (back.gpus[0].sysfs_read, back.gpus[0].busy_ratio) == ("ok", 0.5)
    assert [e["pci_bus"] for e in logs if e["event"] == "gpu_sysfs_readable"] == [A]


# ---- procfs --------------------------------------------------------------------------------------------------


def test_a_fifo_in_procfs_or_kfd_does_not_wedge_the_processes_source(tmp_path: Path) -> None:
    sysfs, procfs = tmp_path / "sys", tmp_path / "proc"
    kfd = sysfs / "class" / "kfd" / "kfd" / "proc" / "4242"
    kfd.mkdir(parents=True)
    (kfd / "vram_11111").write_text("1048576\n")
    os.mkfifo(kfd / "vram_22222")
    (procfs / "4242").mkdir(parents=True)
    os.mkfifo(procfs / "4242" / "comm")
    (procfs / "4242" / "cgroup").write_text("0::/system.slice/x.scope\n")
    source = ProcessesSource(Config(sysfs=sysfs, procfs=procfs, rootfs=tmp_path), list)
    snap = within(5, source.collect)
    (process,) = snap.processes  # type: ignore[attr-defined]
    assert (process.pid, process.name, process.vram_used_bytes, process.cgroup_known) == (4242, None, 1048576, True)


# ---- the scheduler -------------------------------------------------------------------------------------------


@dataclass
class Hung:
    """A source whose collect blocks until released (a read stuck in the kernel)."""

    name: str = "hung"
    gate: threading.Event = field(default_factory=threading.Event)
    runs: int = 0

    def collect(self) -> object:
        self.runs += 1
        self.gate.wait(30)
        return self.runs

    def close(self) -> None:
        pass


def test_a_stuck_run_is_a_failure_at_its_deadline_and_is_not_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("exporter.scheduler.IN_PROCESS_DEADLINE_SECONDS", 0.3, raising=False)
    store = SnapshotStore()
    hung = Hung()
    scheduler = Scheduler(store, [Scheduled(hung, 0.05)])
    with capture_logs() as logs:
        scheduler.start()
        try:
            limit = time.monotonic() + 5
            while store.view(time.time()).entries["hung"].health.up is None and time.monotonic() < limit:
                time.sleep(0.02)
            time.sleep(0.3)
            health = store.view(time.time()).entries["hung"].health
            assert health.up is False and health.failures_total >= 2
            assert health.last_error == "a run did not return within 0.3s; no new run starts until it does"
            assert hung.runs == 1
        finally:
            scheduler.shutdown()
    # skipped ticks are structured events (info once, then debug), never a plain-text warning
    assert [e["log_level"] for e in logs if e["event"] == "source_skipped"][:2] == ["info", "debug"]
    assert next(e for e in logs if e["event"] == "source_failed")["log_level"] == "warning"
    # what is left after shutdown: the stuck collect, a daemon thread; the timer thread has ended
    assert not [t for t in threading.enumerate() if t.name == "scheduler"]
    stuck = threads_named("collect-hung")
    assert len(stuck) == 1 and stuck[0].daemon
    limit = time.monotonic() + 5
    others = ["?"]
    while others and time.monotonic() < limit:
        others = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
        time.sleep(0.05)
    assert others == []
    hung.gate.set()
    stuck[0].join(5)


def test_once_does_not_wait_for_a_stuck_source_past_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("exporter.scheduler.IN_PROCESS_DEADLINE_SECONDS", 0.3, raising=False)
    store = SnapshotStore()
    hung = Hung()
    scheduler = Scheduler(store, [Scheduled(hung, 15)])
    started = time.monotonic()
    try:
        scheduler.run_all_once()
        assert time.monotonic() - started < 2
        assert store.view(time.time()).entries["hung"].health.up is False
    finally:
        hung.gate.set()
        scheduler.shutdown()


# ---- serve, signals, the hung tool ----------------------------------------------------------------------------

# The daemon with the first line of defence off: a FIFO then blocks in open() like a hung GPU's file in read().
BLOCKING_READS = """
import sys
from exporter.sources import deadline
def blocking(path, limit):
    with open(path, "rb") as fh:
        return fh.read(limit + 1)
deadline.read_regular = blocking
from exporter.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int = 0

    def events(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

    def lines(self) -> list[str]:
        return self.log_path.read_text().splitlines()

    def scrape(self) -> str:
        response = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)
        response.raise_for_status()
        return response.text

    def wait_for(self, needle: str, limit_seconds: float = 20) -> str:
        limit = time.monotonic() + limit_seconds
        text = ""
        while time.monotonic() < limit:
            assert self.proc.poll() is None, f"the daemon exited ({self.proc.returncode}): {self.lines()[-5:]}"
            text = self.scrape()
            if needle in text:
                return text
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} never appeared; last scrape:\n{text}")

    def stop(self, signum: int) -> float:
        """Send ``signum``; the seconds until the process was gone (fails past the limit)."""
        started = time.monotonic()
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=SIGTERM_LIMIT_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{signal.Signals(signum).name}: still running after 5 s") from None
        return time.monotonic() - started


def start(root: FakeRoot, tmp_path: Path, stub: Stub, *, blocking_reads: bool) -> Daemon:
    prefix = ["-c", BLOCKING_READS] if blocking_reads else ["-m", "exporter"]
    argv = [
        sys.executable, *prefix, "serve",
        "--web.listen-address", "127.0.0.1:0",
        "--path.rootfs", str(root.root),
        "--state.dir", str(root.state_dir),
        "--kernel-log.path", str(root.root / "kern.log"),
        "--rocm-smi.path", str(stub.path),
        "--amd-smi.path", str(tmp_path / "no-amd-smi"),
        "--smi.backend", "rocm-smi",
        "--smi.timeout", "120s",
        "--collector.sysfs.interval", "1s",
        "--collector.rocm-smi.interval", "1s",
        "--log.format", "json",
    ]  # fmt: skip
    (root.root / "kern.log").write_text("")
    log_path = tmp_path / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    with open(log_path, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    daemon = Daemon(proc, log_path)
    limit = time.monotonic() + 30
    while time.monotonic() < limit and proc.poll() is None:
        serving = [e for e in daemon.events() if e.get("event") == "serving"] if log_path.stat().st_size else []
        if serving:
            daemon.port = int(serving[0]["port"])  # type: ignore[call-overload]
            return daemon
        time.sleep(0.05)
    raise AssertionError(f"the daemon did not start (exit {proc.poll()}): {daemon.lines()[-5:]}")


def tool_processes(stub: Stub) -> list[int]:
    """Live (not zombie) processes running the stub."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(stub.path).encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


def wait_until_gone(pids: list[int], stub: Stub, limit_seconds: float = 2.0) -> list[int]:
    """The stub processes among ``pids`` still alive after a short grace (SIGKILL takes effect within ms)."""
    limit = time.monotonic() + limit_seconds
    left = [p for p in pids if p in tool_processes(stub)]
    while left and time.monotonic() < limit:
        time.sleep(0.05)
        left = [p for p in pids if p in tool_processes(stub)]
    return left


def gone(pid: int) -> bool:
    """Dead, or a zombie (SIGKILL has done its work; only the reaping is left)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_stop_all_kills_a_tool_that_is_still_being_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal that lands while a tool is being started: the daemon may exit right after stop_all, before the
    starting thread ever sees the pid, so stop_all itself must end that tool."""
    monkeypatch.setattr(runner, "_stopping", threading.Event())  # stop_all is for the rest of a process
    spawned: list[subprocess.Popen[bytes]] = []
    forked = threading.Event()

    class SlowStart(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            spawned.append(self)
            forked.set()
            time.sleep(0.5)  # the child runs; the runner does not know its pid yet

    monkeypatch.setattr(subprocess, "Popen", SlowStart)
    thread = threading.Thread(target=runner.run, args=([sys.executable, "-c", "import time; time.sleep(60)"], 60))
    thread.start()
    assert forked.wait(10)
    runner.stop_all()
    limit = time.monotonic() + 0.2  # well before the starting thread would see the pid
    while not gone(spawned[0].pid) and time.monotonic() < limit:
        time.sleep(0.01)
    try:
        assert gone(spawned[0].pid), "stop_all returned and the tool being started is still running"
    finally:
        thread.join(10)
        spawned[0].kill()
        spawned[0].wait()


@pytest.fixture
def hung_tool(tmp_path: Path) -> Iterator[Stub]:
    stub = rocm_smi_stub(tmp_path / "bin", MI100)
    stub.set("--showmeminfo", sleep=300)  # the query hangs; its timeout is 120 s
    yield stub
    for pid in tool_processes(stub):  # what a failing test left behind
        os.kill(pid, signal.SIGKILL)


def wait_for_tool(daemon: Daemon, stub: Stub) -> list[int]:
    limit = time.monotonic() + 30
    while not tool_processes(stub) and time.monotonic() < limit:
        assert daemon.proc.poll() is None
        time.sleep(0.05)
    pids = tool_processes(stub)
    assert pids, "the hung query never started"
    return pids


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stuck_read_and_a_hung_tool_stop_within_5s_and_leave_no_tool(
    tmp_path: Path, hung_tool: Stub, signum: int
) -> None:
    root = two_gpus(tmp_path)
    fifo_in_place_of(root.pci_dir(A) / "gpu_busy_percent")
    daemon = start(root, tmp_path, hung_tool, blocking_reads=True)
    try:
        pids = wait_for_tool(daemon, hung_tool)
        # The read of GPU A is stuck past its deadline: A is unreadable, B still read, the source itself up.
        text = daemon.wait_for(f'rocm_gpu_sysfs_readable{{pci_bus="{A}",reason="timeout"}} 0.0')
        assert f'rocm_gpu_sysfs_readable{{pci_bus="{B}",reason=""}} 1.0' in text
        assert f'rocm_gpu_busy_ratio{{pci_bus="{B}"}} 0.0' in text
        assert 'rocm_watchdog_source_up{source="sysfs"} 1.0' in text
        time.sleep(1.5)  # a few more sysfs intervals with the read stuck
        seconds = daemon.stop(signum)
        assert daemon.proc.returncode == 0
        print(f"{signal.Signals(signum).name} with a stuck read and a hung tool: exited in {seconds:.2f} s")
        assert wait_until_gone(pids, hung_tool) == []
        # one structured line per event; no plain-text line
        lines = daemon.lines()
        assert all(line.startswith("{") for line in lines), [line for line in lines if not line.startswith("{")]
        events = [e["event"] for e in daemon.events()]
        assert events.count("gpu_sysfs_unreadable") == 1 and "shutdown_deadline_exceeded" not in events
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


def test_a_fifo_is_reported_and_serve_keeps_reading(tmp_path: Path, hung_tool: Stub) -> None:
    root = two_gpus(tmp_path)
    fifo_in_place_of(root.pci_dir(A) / "gpu_busy_percent")
    daemon = start(root, tmp_path, hung_tool, blocking_reads=False)
    try:
        text = daemon.wait_for("rocm_gpu_sysfs_read_errors_total{")
        assert f'error="not_regular_file",file="gpu_busy_percent",pci_bus="{A}"' in text
        assert f'rocm_gpu_sysfs_readable{{pci_bus="{A}",reason=""}} 1.0' in text
        assert f'rocm_gpu_vram_total_bytes{{pci_bus="{A}"}}' in text
        pids = wait_for_tool(daemon, hung_tool)
        assert daemon.stop(signal.SIGTERM) < SIGTERM_LIMIT_SECONDS
        assert wait_until_gone(pids, hung_tool) == []
        errors = [e for e in daemon.events() if e["event"] == "sysfs_read_error"]
        assert len(errors) == 1 and errors[0]["file"] == "gpu_busy_percent"  # logged once, not every second
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


def test_sighup_is_logged_and_neither_stops_serve_nor_orphans_a_hung_tool(tmp_path: Path, hung_tool: Stub) -> None:
    root = two_gpus(tmp_path)
    daemon = start(root, tmp_path, hung_tool, blocking_reads=False)
    try:
        pids = wait_for_tool(daemon, hung_tool)
        daemon.proc.send_signal(signal.SIGHUP)
        limit = time.monotonic() + 5
        while "reload_requested" not in [e["event"] for e in daemon.events()] and time.monotonic() < limit:
            assert daemon.proc.poll() is None, "SIGHUP ended the daemon"
            time.sleep(0.05)
        assert "reload_requested" in [e["event"] for e in daemon.events()]
        time.sleep(0.5)
        assert daemon.proc.poll() is None, "SIGHUP ended the daemon"
        assert "rocm_watchdog_source_up" in daemon.scrape()
        assert tool_processes(hung_tool), "the hung query should still be running (its timeout is 120 s)"
        assert daemon.stop(signal.SIGTERM) < SIGTERM_LIMIT_SECONDS
        assert wait_until_gone(pids, hung_tool) == []
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
