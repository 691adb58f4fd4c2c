"""Kernel-log benchmarks: end-to-end throughput of a followed file, the stages of ``parse kernel-log``, and the
delay from a record appearing to its counter moving.

Run from the repository root: ``PYTHONPATH=. .venv/bin/python benchmarks/kernel_log.py [--lines N] [--runs R]``.
Figures go in BENCHMARKS.md ("Kernel log"). The machine may be shared: every figure is the median of ``--runs``
runs, with the spread, and lines/s is given both per wall-clock second and per CPU second of this process (the
second does not count time the scheduler gave to other processes).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import kernel_noise  # benchmarks/kernel_noise.py: the honest noise log

from exporter.config import Config
from exporter.parsers.kernel_log import parse_kernel_log_records
from exporter.sources.kernel_log import KernelLogSource
from exporter.watchdog.kernel_classify import KernelClassifier, kernel_log_report

GPUS = ("0000:03:00.0", "0000:43:00.0")
# amdgpu lines as a fault storm and a reset print them: the numbers change from line to line (addresses, pasids,
# sequence numbers, pids), the register dumps mostly repeat.
GPU = [
    "amdgpu {b}: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:{vmid} pasid:{pasid})",
    "amdgpu {b}: amdgpu:  in process python3 pid {pid} thread python3 pid {pid}",
    "amdgpu {b}: amdgpu:   in page starting at address 0x{addr:016x} from IH client 0x1b (UTCL2)",
    "amdgpu {b}: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x{status:08X}",
    "amdgpu {b}: amdgpu: \t Faulty UTCL2 client ID: CB/DB (0x0)",
    "amdgpu {b}: amdgpu: \t MORE_FAULTS: 0x1",
    "amdgpu {b}: amdgpu: ring gfx_0.0.0 timeout, signaled seq={seq}, emitted seq={seq2}",
    "amdgpu {b}: amdgpu: GPU reset begin!",
    "amdgpu {b}: amdgpu: MODE1 reset",
    "amdgpu {b}: amdgpu: GPU reset({n}) succeeded!",
    "[drm] VRAM is lost due to GPU reset!",
    "gmc_v9_0_process_interrupt: {n} callbacks suppressed",
    "amdgpu {b}: amdgpu: SMU driver if version not matched",
]


def amdgpu_only(lines: int, seed: int = 4) -> str:
    """A plain dmesg log of amdgpu lines only (two GPUs): a fault storm and resets, numbers changing."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        mono = 10.0 + i * 0.001
        seq = rng.randrange(1, 1 << 20)
        msg = rng.choice(GPU).format(
            b=rng.choice(GPUS),
            vmid=rng.randrange(1, 16),
            pasid=rng.randrange(32768, 32800),
            pid=rng.randrange(1000, 60000),
            addr=rng.randrange(1 << 20) << 12,
            status=rng.choice((0x00800932, 0x00840A51, 0x00000000)),
            seq=seq,
            seq2=seq + 2,
            n=rng.randrange(1, 40),
        )
        out.append(f"[{mono:12.6f}] {msg}\n")
    return "".join(out)


def noise(lines: int) -> str:
    """The honest noise log (benchmarks/kernel_noise.py): 94 % non-GPU lines, 5 % drm/amdgpu/kfd lines that match
    no rule, 1 % amdgpu rule lines, on the two GPUs."""
    return kernel_noise.generate(lines, GPUS)


def follow(data: bytes) -> tuple[float, float]:
    """Append ``data`` to a file a kernel-log source follows, collect until every line is counted: lines/s per
    wall-clock second and per CPU second."""
    lines = data.count(b"\n")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/sys/kernel/random/boot_id").write_text("11111111-2222-3333-4444-555555555555\n")
        path = root / "kern.log"
        path.write_bytes(b"")
        config = Config(kernel_log_path=path, state_dir=root / "state", procfs=root / "proc", sysfs=root / "sys")
        src = KernelLogSource(config, lambda: GPUS)
        src.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        for i in range(0, len(data), 1 << 20):
            os.write(fd, data[i : i + (1 << 20)])
        os.close(fd)
        while src.collect().records_read < lines:
            pass
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        src.close()
    return lines / wall, lines / cpu


def _median(runs: int, measure: Callable[[], tuple[float, float]]) -> str:
    results = [measure() for _ in range(runs)]
    walls, cpus = [r[0] for r in results], [r[1] for r in results]
    return (
        f"{statistics.median(walls):12,.0f} lines/s wall (runs {min(walls):,.0f}..{max(walls):,.0f}), "
        f"{statistics.median(cpus):12,.0f} per CPU second"
    )


def followed_file(lines: int, runs: int) -> None:
    for name, make in (("honest noise", lambda: noise(lines)), ("amdgpu only", lambda: amdgpu_only(lines // 5))):
        data = make().encode()
        n = data.count(b"\n")
        print(f"followed file, {name} ({n:,} lines, {len(data) / 1e6:.0f} MB): {_median(runs, partial(follow, data))}")


def stages(lines: int) -> None:
    text = noise(lines)
    t0 = time.perf_counter()
    parsed = parse_kernel_log_records(text)
    t1 = time.perf_counter()
    classifier = KernelClassifier(known_gpus=GPUS)
    events = 0
    for record in parsed.records:
        events += len(classifier.feed(record))
    events += len(classifier.flush())
    t2 = time.perf_counter()
    report = kernel_log_report(text)
    t3 = time.perf_counter()
    assert len(report["events"]) == events  # type: ignore[arg-type]
    n = len(parsed.records)
    print(f"log: {lines} lines of honest noise (kernel_noise), {len(text) / 1e6:.1f} MB, {events} events")
    print(f"parse, line by line (format, header):  {n / (t1 - t0):12,.0f} lines/s  ({t1 - t0:.2f} s)")
    print(f"classify, record by record:            {n / (t2 - t1):12,.0f} lines/s  ({t2 - t1:.2f} s)")
    print(f"parse kernel-log report, end to end:   {n / (t3 - t2):12,.0f} lines/s  ({t3 - t2:.2f} s)")


def _record(seq: int) -> bytes:
    return f"3,{seq},{seq * 1000},-;amdgpu 0000:03:00.0: amdgpu: GPU reset begin!\n".encode()


def latency(samples: int, interval: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for kind in ("fifo", "file"):
            path = root / f"kmsg-{kind}"
            state_dir = root / f"state-{kind}"
            if kind == "fifo":
                os.mkfifo(path)
            else:
                path.write_bytes(b"")
            config = Config(kernel_log_path=path, state_dir=state_dir, procfs=root)
            src = KernelLogSource(config, lambda: ["0000:03:00.0"])
            src.collect()
            wfd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | (os.O_APPEND if kind == "file" else 0))
            # 1. collect() called right after the write: the cost of one read + classify + fsync'd cursor
            direct = []
            for seq in range(samples):
                t0 = time.perf_counter()
                os.write(wfd, _record(seq))
                state = src.collect()
                direct.append(time.perf_counter() - t0)
                assert state.counts[("0000:03:00.0", "gpu_reset_begin")] == seq + 1
            # 2. the scheduler's view: collect() every `interval` seconds, the record appears at a random moment
            rng = random.Random(1)
            scheduled = []
            base = samples
            next_tick = time.perf_counter() + interval
            for i in range(max(3, samples // 20)):
                time.sleep(rng.uniform(0, interval) + max(0.0, next_tick - time.perf_counter() - interval))
                t0 = time.perf_counter()
                os.write(wfd, _record(base + i))
                while True:
                    time.sleep(max(0.0, next_tick - time.perf_counter()))
                    next_tick += interval
                    state = src.collect()
                    if state.counts[("0000:03:00.0", "gpu_reset_begin")] == base + i + 1:
                        break
                scheduled.append(time.perf_counter() - t0)
            os.close(wfd)
            src.close()
            direct.sort()
            median = statistics.median(direct) * 1e3
            print(
                f"{kind}: write -> counter moved, collect() right after: median {median:.2f} ms, "
                f"p99 {direct[int(len(direct) * 0.99) - 1] * 1e3:.2f} ms (n={len(direct)}, includes the fsync'd cursor)"
            )
            print(
                f"{kind}: with collect() every {interval:g} s: median {statistics.median(scheduled) * 1e3:.0f} ms, "
                f"max {max(scheduled) * 1e3:.0f} ms (n={len(scheduled)})"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines of the noise log (amdgpu-only: a fifth)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--only", choices=("follow", "stages", "latency"), default=None)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, {platform.release()}, "
        f"load average {load:.1f} at start"
    )
    if args.only in (None, "follow"):
        followed_file(args.lines, args.runs)
    if args.only in (None, "stages"):
        stages(args.lines)
    if args.only in (None, "latency"):
        latency(args.samples, args.interval)


if __name__ == "__main__":
    main()
