"""Faults of a real host, tried on a running ``serve`` (issue 26): a wall clock that steps, a tool slow to start
(readiness), an exporter SIGKILLed while a tool hangs, and a memory limit under a kernel-log storm.

Each test starts ``python -m exporter serve`` as a real process on a fake root, on loopback, and stops it by its
pid. Waits poll the exporter's state with a time limit that only guards against a hang: what is asserted is what
the exporter says (its metrics, its answers), never how long something took.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakeroot import FakeGpu, FakeOther, FakeRoot, build_root

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")  # Debian's libfaketime 0.9.10
A, B = "0000:03:00.0", "0000:43:00.0"


def two_gpu_root(base: Path) -> FakeRoot:
    return build_root(
        base,
        [FakeGpu(A, card=1, render=128, kfd_node=1), FakeGpu(B, card=2, render=129, kfd_node=2)],
        others=[FakeOther.bmc("0000:63:00.0")],
    )


class Serve:
    """``serve`` on a fake root, its log in a file; ``port`` from its ``serving`` line."""

    def __init__(
        self,
        root: FakeRoot,
        log: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        wrapper: tuple[str, ...] = (),
    ) -> None:
        """``wrapper``: argv that execs serve's argv given after it (serve's pid stays the wrapper's)."""
        kernel_log = root.root / "var" / "log" / "kern.log"
        kernel_log.parent.mkdir(parents=True, exist_ok=True)
        kernel_log.touch()
        argv = [
            *wrapper, sys.executable, "-m", "exporter", "serve", "--web.listen-address", "127.0.0.1:0",
            "--path.rootfs", str(root.root), "--state.dir", str(root.state_dir), "--kernel-log.path",
            str(kernel_log), "--log.format", "json", *extra,
        ]  # fmt: skip
        self.log = log
        with log.open("wb") as err:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )
        self.port = 0
        deadline = time.monotonic() + 60
        while not self.port:
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("{") and json.loads(line).get("event") == "serving":
                    self.port = int(json.loads(line)["port"])
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"serve did not start (exit {self.proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> str:
        code, text = self.get("/metrics")
        assert code == 200, text
        return text

    def wait_for(self, what: str, check: Callable[[str], bool], limit: float = 60.0) -> str:
        """Scrape until ``check`` holds; the limit only guards against a hang."""
        deadline = time.monotonic() + limit
        text = ""
        while time.monotonic() < deadline:
            text = self.metrics()
            if check(text):
                return text
            time.sleep(0.1)
        pytest.fail(
            f"{what}: not within {limit:g}s; last scrape:\n{text[-4000:]}\nlog:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        return self.proc.returncode


@contextlib.contextmanager
def serving(
    root: FakeRoot, log: Path, *extra: str, env: dict[str, str] | None = None, wrapper: tuple[str, ...] = ()
) -> Iterator[Serve]:
    serve = Serve(root, log, *extra, env=env, wrapper=wrapper)
    try:
        yield serve
    finally:
        serve.stop()


def sample(text: str, name: str, **labels: str) -> float | None:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{re.escape(name)}{{{re.escape(inner)}}} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


# --- 1. a clock that steps ---------------------------------------------------------------------------------------

POLLED = ("sysfs", "devices", "processes")  # the smi tools are off: see test_polled_sources_keep_running...
FAST = (
    "--no-collector.rocm-smi", "--no-collector.amd-smi", "--collector.sysfs.interval", "1s",
    "--collector.devices.interval", "1s", "--collector.processes.interval", "1s",
    "--collector.kernel-log.interval", "1s",
)  # fmt: skip


# libfaketime 0.9.10 keeps the state a process shares with its children in /dev/shm/faketime_shm_<pid> and
# sem.faketime_sem_<pid>, created exclusively when the process starts and left behind when it does not exit
# properly (killed, os._exit): a later process given the same pid (pid_max is 32768 here, and other suites run
# faked processes too) exits at once with "libfaketime: In ft_shm_create(), shm_open failed: File exists". A
# faked process here is started in a mount namespace of its own with an empty /dev/shm, and is the only one there
# that loads the library (LD_PRELOAD is set only for the program exec'd last; the pid stays the wrapper's).
FAKED = (
    "unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
    'mount -t tmpfs -o size=1m,mode=1777 tmpfs /dev/shm && exec env "LD_PRELOAD=$0" "$@"', str(LIBFAKETIME),
)  # fmt: skip


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="needs Debian's libfaketime (scripts/test installs it)")
def test_polled_sources_keep_their_intervals_through_clock_steps(tmp_path: Path) -> None:
    """serve under libfaketime, its wall clock stepped an hour back and then two hours forward while it runs (the
    timestamp file is read at every call: FAKETIME_NO_CACHE), the monotonic clock left alone (in its default mode
    libfaketime hangs Python's threading waits). After each step every polled source goes on running (its last
    success, counted on the monotonic clock, moves on by three runs and more), none reads as stale, and the times
    the metrics carry stay those of the real clock (this test's own, which is not faked). The smi tools are off:
    under 0.9.10 ``time.sleep`` and ``Popen.wait(timeout=...)`` fail with EINVAL in Python 3.11, so the runner's
    deadlines are the monotonic ones its own tests check (tests/test_runner.py)."""
    root = two_gpu_root(tmp_path)
    stamp = tmp_path / "faketime"
    stamp.write_text("+0\n")
    env = {
        **os.environ,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_TIMESTAMP_FILE": str(stamp),
        "FAKETIME_NO_CACHE": "1",
    }
    sources = (*POLLED, "kernel-log")
    with serving(root, tmp_path / "serve.log", *FAST, env=env, wrapper=FAKED) as serve:

        def last(text: str) -> dict[str, float | None]:
            return {s: sample(text, "rocm_watchdog_source_last_success_timestamp_seconds", source=s) for s in sources}

        def runs_after(before: dict[str, float | None], runs: int) -> Callable[[str], bool]:
            seen: dict[str, set[float]] = {s: set() for s in sources}

            def check(text: str) -> bool:
                for s, value in last(text).items():
                    if value is not None and (before[s] is None or value > before[s]):  # type: ignore[operator]
                        seen[s].add(value)
                    assert sample(text, "rocm_watchdog_source_stale", source=s) in (None, 0.0), (s, text)
                    if value is not None:  # counted on from the start: the real time, not the faked one
                        assert abs(value - time.time()) < 30, (s, value, time.time())
                return all(len(v) >= runs for v in seen.values())

            return check

        text = serve.wait_for("every source ran three times", runs_after(dict.fromkeys(sources), 3))
        for step, shift in (("-1h", -3600), ("+1h", 3600)):
            stamp.write_text(step + "\n")
            # what the faked process sees now, through the same library and file
            faked = subprocess.run([*FAKED, "date", "+%s"], env=env, capture_output=True, text=True, check=True).stdout
            assert abs(float(faked) - time.time() - shift) < 30, (step, faked)
            text = serve.wait_for(f"every source ran three times after {step}", runs_after(last(text), 3))
        for s in sources:
            assert sample(text, "rocm_watchdog_source_up", source=s) == 1.0, s
        assert serve.stop() == 0
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


# --- 2. readiness ------------------------------------------------------------------------------------------------

GATED_TOOL = """#!/bin/sh
# rocm-smi that hangs at start until the test opens the gate (as amd-smi does on some hosts during DRM
# enumeration: ROCm/TheRock#4887), then says it is not installed properly
while [ ! -e {gate} ]; do sleep 0.05; done
echo "rocm-smi: no GPU found" >&2
exit 1
"""


def test_readyz_waits_for_every_first_run_and_no_alert_reads_pending_as_down(tmp_path: Path) -> None:
    """/readyz answers 503 while the rocm-smi source's first run hangs, and /healthz 200 (the process is alive);
    meanwhile the first scrape has every enabled source's health series, rocm-smi's up 0 with pending 1. Once
    the tool returns (failing), /readyz answers 200 and rocm-smi is up 0, pending 0: failed, not pending."""
    root = two_gpu_root(tmp_path)
    gate = tmp_path / "gate"
    tool = tmp_path / "bin" / "rocm-smi"
    tool.parent.mkdir()
    tool.write_text(GATED_TOOL.format(gate=gate))
    tool.chmod(0o755)
    extra = ("--no-collector.amd-smi", "--smi.backend", "rocm-smi", "--rocm-smi.path", str(tool), *FAST[2:])
    with serving(root, tmp_path / "serve.log", *extra) as serve:
        first = serve.metrics()  # at once: before any run may have finished
        for s in ("sysfs", "devices", "processes", "kernel-log", "rocm-smi"):
            assert sample(first, "rocm_watchdog_source_failures_total", source=s) == 0.0, (s, first)
            assert sample(first, "rocm_watchdog_source_up", source=s) is not None, (s, first)
        assert sample(first, "rocm_watchdog_source_up", source="amd-smi") is None  # not enabled: no series
        # the in-process sources finish; the tool still hangs
        text = serve.wait_for(
            "sysfs, devices and processes ran",
            lambda t: all(sample(t, "rocm_watchdog_source_up", source=s) == 1.0 for s in POLLED),
        )
        assert sample(text, "rocm_watchdog_source_up", source="rocm-smi") == 0.0
        assert sample(text, "rocm_watchdog_source_pending", source="rocm-smi") == 1.0
        code, body = serve.get("/readyz")
        assert (code, body) == (503, "waiting for the first run of: rocm-smi\n")
        assert serve.get("/healthz") == (200, "ok\n")
        gate.touch()
        # pending is served only while 1: the first run is over once failures count it
        text = serve.wait_for(
            "rocm-smi's first run over",
            lambda t: (sample(t, "rocm_watchdog_source_failures_total", source="rocm-smi") or 0) >= 1.0,
        )
        assert sample(text, "rocm_watchdog_source_pending", source="rocm-smi") is None
        assert sample(text, "rocm_watchdog_source_up", source="rocm-smi") == 0.0
        assert sample(text, "rocm_watchdog_source_failures_total", source="rocm-smi") >= 1.0  # type: ignore[operator]
        assert serve.get("/readyz") == (200, "ok\n")


# --- 3. no tool outlives the exporter ---------------------------------------------------------------------------

HANGING_TOOL = """#!{python}
# rocm-smi that hangs: its pid where the test finds it, then a sleep far past the test
import os, sys, time
open({pids!r} + "/hang." + str(os.getpid()), "w").close()
time.sleep(600)
"""

DAEMONIZING_TOOL = """#!{python}
# amd-smi that leaves a helper behind in a session of its own (a double fork, as daemons do), then fails
import os, sys, time
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # off the tool's pipes, as a daemon is
    open({pids!r} + "/helper." + str(os.getpid()), "w").close()
    time.sleep(600)
    os._exit(0)
sys.stderr.write("amd-smi: cannot initialise\\n")
sys.exit(1)
"""


def processes_with(marker: str, but: int = 0) -> dict[int, str]:
    """Every live (not zombie) process whose command line holds ``marker``, but pid ``but``."""
    out: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == but:
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            out[int(entry)] = cmdline
    return out


def test_sigkilled_exporter_leaves_no_tool_behind(tmp_path: Path) -> None:
    """serve runs a rocm-smi that hangs and an amd-smi that leaves a helper in a session of its own (out of the
    tool's process group) each time it runs. The exporter, a child subreaper, inherits each helper when its tool
    exits and kills it (``orphan_killed``). Then the exporter is SIGKILLed while rocm-smi hangs: the kernel kills
    rocm-smi (its parent-death signal, set by ``setpriv --pdeathsig KILL``), and no process of either tool is left."""
    root = two_gpu_root(tmp_path)
    tools, pids = tmp_path / "bin", tmp_path / "pids"
    tools.mkdir()
    pids.mkdir()
    for name, script in (("rocm-smi", HANGING_TOOL), ("amd-smi", DAEMONIZING_TOOL)):
        (tools / name).write_text(script.format(python=sys.executable, pids=str(pids)))
        (tools / name).chmod(0o755)
    extra = (
        "--smi.backend", "both", "--rocm-smi.path", str(tools / "rocm-smi"), "--amd-smi.path", str(tools / "amd-smi"),
        "--smi.timeout", "120s", "--collector.amd-smi.interval", "1s", "--no-collector.processes",
    )  # fmt: skip
    log = tmp_path / "serve.log"
    serve = Serve(root, log, *extra)
    try:

        def killed_helpers() -> set[int]:
            events = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
            return {e["pid"] for e in events if e["event"] == "orphan_killed"}

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            helpers = {int(p.name.split(".")[1]) for p in pids.glob("helper.*")}
            hanging = {int(p.name.split(".")[1]) for p in pids.glob("hang.*")}
            if hanging and helpers and helpers <= killed_helpers():
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"no hanging rocm-smi and killed helper:\n{log.read_text()[-3000:]}")
        assert not set(processes_with(str(tools), serve.pid)) & helpers  # killed and reaped by the exporter
        assert set(processes_with(str(tools / "rocm-smi"), serve.pid)) == hanging  # running: the exporter is alive
        serve.proc.kill()
        serve.proc.wait(timeout=30)
        deadline = time.monotonic() + 30  # the kernel delivers the parent-death signal at once: only a guard
        while processes_with(str(tools)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(str(tools)) == {}
    finally:
        serve.stop()
        for pid in processes_with(str(tools)):  # only on failure: what this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- 4. a GPU that falls off the bus ----------------------------------------------------------------------------


def test_a_gpu_directory_removed_mid_walk_is_gpu_missing_and_the_others_keep_their_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sysfs walk is under way on GPU B (its identity read, its state next) when B's directories go, as when a
    GPU falls off the bus: the hook is the walk's own file read (``deadline.read_regular``), which removes B's PCI
    directory, its DRM minors, its driver link and its KFD node right before B's first state file is read. The
    walk returns without a traceback or error log; A has its values in that same snapshot; the next devices run
    has B as ``gpu_missing``."""
    import shutil

    import structlog

    from exporter.sources import deadline
    from exporter.sources.devices import DevicesSource
    from exporter.sources.sysfs import SysfsSource

    root = two_gpu_root(tmp_path)
    config = root.config()
    devices = DevicesSource(config)
    assert not [c for c in devices.collect().active() if c.kind == "gpu_missing"]  # the baseline: both GPUs
    sysfs = SysfsSource(config)
    assert [(g.pci_bus, g.sysfs_read) for g in sysfs.collect().gpus] == [(A, "ok"), (B, "ok")]

    b_dir = str(root.pci_dir(B))
    trigger = f"{b_dir}/mem_info_vram_used"
    real_read = deadline.read_regular
    removed: list[str] = []

    def unplug_b() -> None:
        for path in (root.sys / "class" / "drm" / "card2", root.sys / "class" / "drm" / "renderD129",
                     root.sys / "bus" / "pci" / "drivers" / "amdgpu" / B):  # fmt: skip
            path.unlink()
        shutil.rmtree(root.sys / "class" / "kfd" / "kfd" / "topology" / "nodes" / "2")
        shutil.rmtree(b_dir)

    def read_then_maybe_unplug(path: str | os.PathLike[str], limit: int) -> bytes:
        if os.fspath(path) == trigger and not removed:
            removed.append(os.fspath(path))
            unplug_b()
        return real_read(path, limit)

    monkeypatch.setattr(deadline, "read_regular", read_then_maybe_unplug)
    with structlog.testing.capture_logs() as logs:
        during = sysfs.collect()
        after = devices.collect()
    assert removed == [trigger]  # the walk reached B's state: B's directory went mid-walk
    a = next(g for g in during.gpus if g.pci_bus == A)
    assert (a.sysfs_read, a.vram_used_bytes, a.vram_total_bytes, a.busy_ratio) == (
        "ok",
        10_485_760,
        68_702_699_520,
        0.0,
    )
    assert a.temperatures_celsius and a.power_watts == 42.0
    b = [g for g in during.gpus if g.pci_bus == B]
    assert all(g.vram_used_bytes is None and g.busy_ratio is None for g in b)  # no value read from a vanished GPU
    assert not [e for e in logs if e.get("log_level") in ("error", "critical") or "exc_info" in e], logs
    missing = [c for c in after.active() if c.kind == "gpu_missing"]
    assert [(c.subject, c.pci_bus) for c in missing] == [(B, B)], after.active()
    next_walk = sysfs.collect()
    assert [(g.pci_bus, g.sysfs_read, g.vram_used_bytes) for g in next_walk.gpus] == [(A, "ok", 10_485_760)]


# --- 5. memory under the pod's request -------------------------------------------------------------------------

MIB = 1 << 20
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")
STORM_LINES = int(os.environ.get("ROCM_WATCHDOG_STORM_LINES", "1000000"))
STORM_TEXTS = (
    "amdgpu {bdf}: amdgpu: GPU reset begin! (line {n})",
    "amdgpu {bdf}: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:{vmid} pasid:{pasid}, for process python3 pid "
    "{n} thread python3 pid {n})",
    "amdgpu {bdf}: amdgpu:   in page starting at address 0x{n:012x} from client 0x1b (UTCL2)",
    "amdgpu {bdf}: amdgpu: ring gfx_0.0.0 timeout, signaled seq={n}, emitted seq={m}",
)


def own_memory_cgroup() -> Path | None:
    """The cgroup v1 memory controller's directory this process is in (from /proc/self/cgroup), if writable."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            where = MEMORY_CGROUP / path.lstrip("/")
            return where if os.access(where, os.W_OK) else None
    return None


def memory_stat(cgroup: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in (cgroup / "memory.stat").read_text().splitlines())}


@pytest.mark.skipif(own_memory_cgroup() is None, reason="needs a writable cgroup v1 memory controller")
def test_serve_in_a_128_mib_cgroup_on_64_partitions_under_a_kernel_log_storm(tmp_path: Path) -> None:
    """The exporter container's memory request (deploy/kubernetes: 128Mi) as a hard cgroup v1 limit, made under the
    cgroup this test runs in: serve on an 8x MI300X node in CPX mode (64 partitions), every default in-process
    source, while ROCM_WATCHDOG_STORM_LINES (1,000,000) amdgpu lines (resets, page faults, ring timeouts, over the
    8 GPUs, no two alike) are appended to its followed kernel log and it is scraped. It is never OOM-killed
    (``memory.oom_control`` ``oom_kill 0``), every reset is counted, and its RSS (``memory.stat`` rss + rss_huge, not
    the page cache), sampled every 50 ms, peaks below 96 MiB."""
    from fakeroot import mi300x_node

    parent = own_memory_cgroup()
    assert parent is not None
    cgroup = parent / f"rocm-watchdog-test-{os.getpid()}"
    cgroup.mkdir()
    try:
        (cgroup / "memory.limit_in_bytes").write_text(str(128 * MIB))
        root = mi300x_node(tmp_path, modes=("CPX",) * 8)
        bdfs = sorted({g.bdf for g in root.gpus})
        assert len(bdfs) == 8
        kernel_log = root.root / "var" / "log" / "kern.log"
        kernel_log.parent.mkdir(parents=True, exist_ok=True)
        kernel_log.touch()
        log = tmp_path / "serve.log"
        enter = f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"'
        serve = Serve(root, log, "--no-collector.rocm-smi", "--no-collector.amd-smi", wrapper=("sh", "-c", enter, "sh"))
        try:
            serve.wait_for("64 partitions", lambda t: t.count("rocm_gpu_info{") == 64)
            assert int((cgroup / "cgroup.procs").read_text().split()[0]) == serve.pid
            peak = 0
            resets = 0
            rss: list[int] = []

            def sample_rss() -> None:
                nonlocal peak
                stat = memory_stat(cgroup)
                rss.append(stat["rss"] + stat.get("rss_huge", 0))
                peak = max(peak, rss[-1])

            sample_rss()
            started = time.monotonic()
            last_sample = 0.0
            with kernel_log.open("ab") as f:
                chunk: list[str] = []
                for n in range(STORM_LINES):
                    kind = n % len(STORM_TEXTS)
                    resets += kind == 0
                    message = STORM_TEXTS[kind].format(
                        bdf=bdfs[(n // len(STORM_TEXTS)) % 8], n=n, m=n + 2, vmid=n % 16, pasid=32768 + n % 4096
                    )
                    chunk.append(f"[{100 + n / 1000:12.6f}] {message}\n")
                    if len(chunk) == 10_000:
                        f.write("".join(chunk).encode())
                        f.flush()
                        chunk.clear()
                        if time.monotonic() - last_sample >= 0.05:
                            sample_rss()
                            last_sample = time.monotonic()
                f.write("".join(chunk).encode())

            def counted(t: str) -> bool:
                sample_rss()
                total = sum(
                    sample(t, "rocm_kernel_events_total", **{"class": "gpu_reset_begin", "pci_bus": b}) or 0.0
                    for b in bdfs
                )
                assert total <= resets, (total, resets)
                return total == resets

            deadline = time.monotonic() + 600
            while not counted(text := serve.metrics()):  # sampled between scrapes too: a scrape is 64 GPUs' render
                kernel = "\n".join(x for x in text.splitlines() if "gpu_reset_begin" in x or "source_" in x)
                assert time.monotonic() < deadline, f"resets not all counted:\n{kernel}\n{log.read_text()[-2000:]}"
                for _ in range(4):
                    time.sleep(0.05)
                    sample_rss()
            seconds = time.monotonic() - started
            oom = dict(line.split() for line in (cgroup / "memory.oom_control").read_text().splitlines())
            hwm = int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{serve.pid}/status").read_text()).group(1))  # type: ignore[union-attr]
            figures = {
                "lines": STORM_LINES,
                "resets": resets,
                "seconds": round(seconds, 1),
                "rss_peak_mib": round(peak / MIB, 1),
                "rss_end_mib": round(rss[-1] / MIB, 1),
                "samples": len(rss),
                "vmhwm_mib": round(hwm / 1024, 1),
                "oom_kill": int(oom.get("oom_kill", "0")),
                "under_oom": int(oom["under_oom"]),
            }
            print("storm_in_128mib_cgroup", json.dumps(figures))
            assert serve.proc.poll() is None, figures
            assert figures["oom_kill"] == 0 and figures["under_oom"] == 0, figures
            assert peak < 96 * MIB, figures
            assert serve.stop() == 0
        finally:
            serve.stop()
    finally:
        for _ in range(100):  # empty once serve has exited
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.1)
