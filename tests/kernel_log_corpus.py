"""The kernel-log equality corpus: every kernel-log input the project holds, plus generated logs in every
format, and what the ``parse kernel-log`` report and a followed file make of each.

``tests/golden/kernel-log-corpus.json`` holds those results as the per-line classifier (before the literal
prefilter) gave them; ``tests/test_kernel_prefilter.py`` checks the current code gives the same. Rewrite the
golden file only when a change of results is intended:

    PYTHONPATH=. .venv/bin/python tests/kernel_log_corpus.py --write
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from exporter.config import Config
from exporter.sources.kernel_log import KernelLogSource
from exporter.watchdog.kernel_classify import kernel_log_report

sys.path.insert(0, str(Path(__file__).parent))
from test_kernel_log_classify import DETAILS, FORMAT_STRING_EXAMPLES, REAL_EXAMPLES, TRAPS

DATA = Path(__file__).parent / "data" / "kernel-log"
GOLDEN = Path(__file__).parent / "golden" / "kernel-log-corpus.json"
A, B = "0000:03:00.0", "0000:43:00.0"
EXAMPLE_LINES = [line for line, _ in REAL_EXAMPLES + FORMAT_STRING_EXAMPLES] + TRAPS + [line for line, _ in DETAILS]

# Ordinary kernel lines, some of them close to a rule (a word of a literal, an amdgpu prefix, a PCI device).
NOISE = [
    "usb 1-1: new high-speed USB device number {n} using xhci_hcd",
    "usb 1-1: reset high-speed USB device number {n} using xhci_hcd",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    'audit: type=1400 audit({n}.123:77): apparmor="STATUS" operation="profile_load" name="snap"',
    "IPv6: ADDRCONF(NETDEV_CHANGE): enp5s0: link becomes ready",
    "perf: interrupt took too long ({n} > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    "systemd-journald[412]: Received client request to flush runtime journal.",
    "kfd kfd: amdgpu: added device 1002:74a1",
    f"amdgpu {A}: amdgpu: SMU is initialized successfully!",
    f"amdgpu {B}: amdgpu: SE 4, SH per SE 2, CU per SH 10, active_cu_number 80",
    "amdgpu 0000:0a:00.0: amdgpu: VRAM: 16368M 0x0000008000000000 - 0x00000083FEFFFFFF (16368M used)",
    "[drm] Initialized amdgpu 3.57.0 20150101 for 0000:03:00.0 on minor 1",
    "fbcon: Taking over console",
    "snd_hda_intel 0000:03:00.1: enabling device (0000 -> 0002)",
    "pcieport 0000:00:01.1: PME: Signaling with IRQ 26",
    "ACPI Error: AE_NOT_FOUND, While resolving a named reference package element (20230628/dspkginit-438)",
    "nvme nvme0: I/O tag 12 (100c) opcode 0x2 (Read) QID 3 timeout, aborting",
    "i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:85dffffb, in Xorg [{n}]",
    "net_ratelimit: {n} callbacks suppressed",
    "traps: python3[{n}] general protection fault ip:7f00 sp:7ffc error:0 in libc.so.6",
]
OLD_TIMEOUT = "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3"
SOFT_TIMEOUT = "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, but soft recovered"
FORMATS = (
    "dmesg",
    "dmesg-caller",
    "dmesg-r",
    "dmesg-x",
    "dmesg-T",
    "notime",
    "journal-short",
    "journal-precise",
    "journal-rfc3339",
    "kmsg",
    "journal-json",
)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def scenario(seed: int, lines: int, gpu_ratio: float) -> list[tuple[float, int, str | None, str]]:
    """(monotonic seconds, PRI, kmsg DEVICE or None, message): bursts of GPU lines among noise, old-format ring
    timeouts whose reset comes within, after or never within the look-ahead window, reboots (the clock starts
    again), user-space forgeries and continuation lines."""
    rng = random.Random(seed)
    gpu_lines = [*EXAMPLE_LINES, OLD_TIMEOUT, SOFT_TIMEOUT]
    out: list[tuple[float, int, str | None, str]] = []
    mono = 5.0
    i = 0
    bdf: str | None
    while len(out) < lines:
        i += 1
        roll = rng.random()
        mono += rng.choice((0.000001, 0.0001, 0.01, 0.3, 0.7, 1.5, 3.0))
        if roll < 0.004:
            mono = rng.uniform(0.5, 3.0)  # a reboot inside the capture
        if roll < gpu_ratio:
            pick = rng.random()
            if pick < 0.15:  # an old-format timeout, then noise, then maybe the reset that names the device
                out.append((mono, 3, None, OLD_TIMEOUT))
                for _ in range(rng.randrange(0, 30)):
                    mono += rng.choice((0.0001, 0.05, 0.4))
                    out.append((mono, 6, None, rng.choice(NOISE).format(n=i)))
                if rng.random() < 0.7:
                    bdf = rng.choice((A, B))
                    out.append((mono + 0.001, 6, bdf, f"amdgpu {bdf}: amdgpu: GPU reset begin!"))
                continue
            msg = rng.choice(gpu_lines)
            bdf = A if A in msg else B if B in msg else None
            pri = 12 if rng.random() < 0.03 else rng.choice((3, 4, 6))
            out.append((mono, pri, bdf, msg))
        else:
            msg = rng.choice(NOISE).format(n=i)
            bdf = A if msg.startswith(f"amdgpu {A}") else B if msg.startswith(f"amdgpu {B}") else None
            pri = 14 if rng.random() < 0.02 else 6
            out.append((mono, pri, bdf, msg))
    return out[:lines]


def render(events: list[tuple[float, int, str | None, str]], fmt: str, seed: int) -> str:
    """One scenario in one log format, with the extra lines each format can carry (blank lines, journal
    boot markers, dmesg continuation lines, terminal colours, unreadable lines)."""
    rng = random.Random(seed * 7 + len(fmt))
    lines: list[str] = []
    for n, (mono, pri, bdf, msg) in enumerate(events):
        user = pri >> 3 != 0
        wall = 1_788_000_000 + int(mono) + n
        month, day = MONTHS[(wall // 2_600_000) % 12], 1 + (wall // 86400) % 28
        clock = f"{(wall // 3600) % 24:02d}:{(wall // 60) % 60:02d}:{wall % 60:02d}"
        extra = rng.random()
        if fmt == "dmesg":
            if extra < 0.01:
                lines.append("")
            elif extra < 0.02:
                lines.append("    continued: the rest of a multi-line record")
            elif extra < 0.025:
                msg = msg.replace("amdgpu", "\x1b[33mamdgpu\x1b[0m", 1)
            elif extra < 0.03:
                lines.append("this line has no header at all")
            if not user:
                lines.append(f"[{mono:12.6f}] {msg}")
        elif fmt == "dmesg-caller":
            if not user:
                lines.append(f"[{mono:12.6f}] [  T{100 + n % 900}] {msg}")
        elif fmt == "dmesg-r":
            lines.append(f"<{pri}>[{mono:12.6f}] {msg}")
        elif fmt == "dmesg-x":
            fac = "user" if user else "kern"
            lvl = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")[pri & 7]
            lines.append(f"{fac:<6}:{lvl:<6}: [{mono:12.6f}] {msg}")
        elif fmt == "dmesg-T":
            if not user:
                lines.append(f"[{DAYS[wall % 7]} {month} {day:2d} {clock} 2026] {msg}")
        elif fmt == "notime":
            if not user:
                lines.append(msg)
        elif fmt in ("journal-short", "journal-precise"):
            if extra < 0.01:
                lines.append(f"-- Boot {seed:032x} --")
            ident = "gpu-forger[4242]" if user else "kernel"
            frac = f".{n % 1_000_000:06d}" if fmt == "journal-precise" else ""
            host = "" if extra > 0.98 else "gpunode1 "
            lines.append(f"{month} {day:02d} {clock}{frac} {host}{ident}: {msg}")
        elif fmt == "journal-rfc3339":
            ident = "gpu-forger[4242]" if user else "kernel"
            lines.append(f"2026-08-{day:02d}T{clock}.{n % 1_000_000:06d}+00:00 gpunode1 {ident}: [{mono:12.6f}] {msg}")
        elif fmt == "kmsg":
            lines.append(f"{pri},{100 + n},{round(mono * 1_000_000)},-;{msg}")
            if bdf is not None:
                lines += [" SUBSYSTEM=pci", f" DEVICE=+pci:{bdf}"]
        elif fmt == "journal-json":
            obj: dict[str, str] = {
                "__REALTIME_TIMESTAMP": str(wall * 1_000_000),
                "_TRANSPORT": "syslog" if user else "kernel",
                "PRIORITY": str(pri & 7),
                "SYSLOG_FACILITY": str(pri >> 3),
                "SYSLOG_IDENTIFIER": "gpu-forger" if user else "kernel",
                "_SOURCE_MONOTONIC_TIMESTAMP": str(round(mono * 1_000_000)),
                "MESSAGE": msg,
            }
            if bdf is not None:
                obj["_KERNEL_SUBSYSTEM"], obj["_KERNEL_DEVICE"] = "pci", f"+pci:{bdf}"
            lines.append(json.dumps(obj))
        else:
            raise ValueError(fmt)
    return "".join(line + "\n" for line in lines)


def corpus() -> Iterator[tuple[str, str]]:
    """(name, text) of every input: the fixtures, the pastes, the example lines, the generated logs."""
    for path in sorted(DATA.iterdir()) + sorted((DATA / "pastes").iterdir()):
        if path.suffix in (".txt", ".json") and path.name != "expected-counts.json":
            yield f"file:{path.relative_to(DATA)}", path.read_bytes().decode("utf-8")
    for i, line in enumerate(EXAMPLE_LINES):
        yield f"example:{i}", f"[  1.000000] {line}\n"
    yield "examples:dmesg", "".join(f"[{1 + i / 1000:12.6f}] {line}\n" for i, line in enumerate(EXAMPLE_LINES))
    yield "examples:notime", "".join(f"{line}\n" for line in EXAMPLE_LINES)
    for seed, lines, ratio in ((1, 1500, 0.05), (2, 1500, 0.3), (3, 800, 0.9)):
        events = scenario(seed, lines, ratio)
        for fmt in FORMATS:
            yield f"generated:{seed}:{fmt}", render(events, fmt, seed)


def report(text: str) -> dict[str, object]:
    return kernel_log_report(text)


def follow(text: str, seed: int) -> list[object]:
    """A followed file the text is appended to in pieces of random size (cut anywhere, also inside a line),
    collected after each append: every intermediate state, then the final one with its read counters."""
    data = text.encode("utf-8")
    rng = random.Random(seed)
    trace: list[object] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/sys/kernel/random/boot_id").write_text("11111111-2222-3333-4444-555555555555\n")
        log = root / "kern.log"
        log.write_bytes(b"")
        config = Config(kernel_log_path=log, state_dir=root / "state", procfs=root / "proc", sysfs=root / "sys")
        source = KernelLogSource(config, lambda: [A, B], wall_clock=lambda: 1_800_000_000.0)
        source.collect()
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        try:
            pos = 0
            while pos < len(data):
                step = rng.choice((1, 7, 100, 4096, 65536, len(data)))
                os.write(fd, data[pos : pos + step])
                pos += step
                state = source.collect()
                trace.append(sorted([*k, v] for k, v in state.counts.items()))
        finally:
            os.close(fd)
        state = source.collect()
        source.close()
    trace.append(
        {
            "counts": sorted([*k, v] for k, v in state.counts.items()),
            "aer": sorted([*k, v] for k, v in state.aer_counts.items()),
            "last": sorted([*k, v] for k, v in state.last_event_seconds.items()),
            "records_read": state.records_read,
            "records_ignored": state.records_ignored,
            "lines_unparsed": state.lines_unparsed,
            "warnings": list(state.warnings),
        }
    )
    return trace


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def results() -> dict[str, dict[str, object]]:
    """Per input: the report (whole for files and examples, else its counts and digest) and the digest of the
    followed file's trace."""
    out: dict[str, dict[str, object]] = {}
    for n, (name, text) in enumerate(corpus()):
        rep = report(text)
        entry: dict[str, object] = {"report_sha256": digest(rep), "follow_sha256": digest(follow(text, n))}
        entry["report"] = rep if not name.startswith("generated:") else {"counts": rep["counts"]}
        out[name] = entry
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    GOLDEN.write_text(json.dumps(results(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
