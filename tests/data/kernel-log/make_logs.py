"""Writes the synthetic kernel logs of this directory from one scenario (see PROVENANCE.md).

Run from the repository root: ``python tests/data/kernel-log/make_logs.py``. The outputs are committed; the
tests read the files, never this script.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

HERE = Path(__file__).parent
BOOT = "1c6a0f3e9d2b4e58a7c1d0e2f3a4b5c6"
BOOT_WALL = 1_788_000_000.0  # Unix time of the synthetic boot (2026-08-29 UTC)
HOST = "gpunode1"

# (monotonic seconds, kmsg PRI, DEVICE dictionary or None, message). PRI 3 = kern.err, 4 = kern.warn,
# 6 = kern.info, 12 = user.warn (a user-space write to /dev/kmsg: must never count).
A, B = "0000:03:00.0", "0000:43:00.0"
SCENARIO: list[tuple[float, int, str | None, str]] = [
    (5.100000, 6, A, f"amdgpu {A}: amdgpu: SMU driver if version not matched"),
    (5.200000, 6, A, f"amdgpu {A}: amdgpu: ring gfx_0.0.0 uses VM inv eng 0 on hub 0"),
    (
        1000.000000,
        3,
        None,
        "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3",
    ),
    (
        1000.000050,
        3,
        None,
        "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: process python3 pid 11 thread python3 pid 11",
    ),
    (1000.000100, 12, None, f"amdgpu {A}: amdgpu: GPU reset begin!"),
    (1000.000200, 6, B, f"amdgpu {B}: amdgpu: GPU reset begin!"),
    (1000.100000, 6, B, f"amdgpu {B}: amdgpu: MODE1 reset"),
    (1000.200000, 6, B, f"amdgpu {B}: amdgpu: GPU reset succeeded, trying to resume"),
    (1000.300000, 6, None, "[drm] VRAM is lost due to GPU reset!"),
    (1000.400000, 6, B, f"amdgpu {B}: amdgpu: GPU reset(1) succeeded!"),
    (
        1010.000000,
        3,
        A,
        f"amdgpu {A}: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:8 pasid:32779, "
        "for process python3 pid 11287 thread python3 pid 11287)",
    ),
    (1010.000001, 3, B, f"amdgpu {B}: amdgpu: [mmhub0] no-retry page fault (src_id:0 ring:0 vmid:1 pasid:32770)"),
    (
        1010.000002,
        3,
        A,
        f"amdgpu {A}: amdgpu:   in page starting at address 0x0000000000001000 from IH client 0x1b (UTCL2)",
    ),
    (1010.000003, 3, B, f"amdgpu {B}: amdgpu:  in process python3 pid 100 thread python3 pid 100"),
    (
        1010.000004,
        3,
        B,
        f"amdgpu {B}: amdgpu:   in page starting at address 0x00007f0000000000 from IH client 0x12 (VMC)",
    ),
    (1010.000005, 3, A, f"amdgpu {A}: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00800932"),
    (1010.000006, 6, None, "fbcon: Taking over console"),
    (1010.000007, 3, B, f"amdgpu {B}: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00000000"),
    (1010.000008, 3, A, f"amdgpu {A}: amdgpu: \t Faulty UTCL2 client ID: CB/DB (0x0)"),
    (1010.000009, 4, None, "gmc_v9_0_process_interrupt: 19 callbacks suppressed"),
    (1020.000000, 3, "0000:42:00.0", f"pcieport 0000:42:00.0: AER: Corrected error message received from {B}"),
    (1020.000100, 3, "0000:42:00.0", "pcieport 0000:42:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer"),
    (
        1020.000200,
        3,
        "0000:00:03.1",
        "pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0",
    ),
    (1030.000000, 0, A, f"amdgpu {A}: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!"),
    (1030.000100, 3, A, f"amdgpu {A}: amdgpu: UVD VCPU state may lost due to RAS ERREVENT_ATHUB_INTERRUPT"),
    (1040.000000, 3, A, f"amdgpu {A}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=100, emitted seq=102"),
    (1040.000100, 3, A, f"amdgpu {A}: amdgpu:  Process python3 pid 5 thread python3 pid 5"),
    (1040.000200, 6, A, f"amdgpu {A}: Starting gfx_0.0.0 ring reset"),
    (1040.000300, 3, A, f"amdgpu {A}: Ring gfx_0.0.0 reset failed"),
    (1040.000400, 6, A, f"amdgpu {A}: GPU reset begin!. Source:  1"),
    (1041.000000, 3, A, f"amdgpu {A}: GPU reset(2) failed"),
    (1041.000100, 6, A, f"amdgpu {A}: GPU reset end with ret = -110"),
    (1041.000200, 6, "0000:03:00.1", "snd_hda_intel 0000:03:00.1: azx_get_response timeout, switching to polling mode"),
    (1042.000000, 3, "0000:0c:00.0", "vfio-pci 0000:0c:00.0: SMU error 0xfd"),
]

EXPECTED = {
    A: {
        "gpu_reset_begin": 1,
        "gpu_reset_failed": 1,
        "ras_fatal": 1,
        "ring_reset_failed": 1,
        "ring_reset_start": 1,
        "ring_timeout": 1,
        "vm_fault": 1,
    },
    B: {
        "gpu_reset_asic_done": 1,
        "gpu_reset_begin": 1,
        "gpu_reset_method": 1,
        "gpu_reset_succeeded": 1,
        "pcie_aer": 1,
        "ring_timeout": 1,
        "vm_fault": 1,
        "vram_lost": 1,  # unprefixed, inside B's open reset sequence (contract section 2)
    },
    "unknown": {"vm_fault_suppressed": 19},
}

FAC = ["kern", "user"]
LVL = ["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"]


def wall(mono: float) -> float:
    return BOOT_WALL + mono


def rows(user_visible: bool) -> list[tuple[float, int, str | None, str]]:
    """The scenario; formats that cannot show the facility leave the user-space line out."""
    return [r for r in SCENARIO if user_visible or r[1] >> 3 == 0]


def ctime(t: float) -> str:
    return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(t))


def main() -> None:
    out: dict[str, str] = {}
    kmsg = []
    for seq, (mono, pri, dev, msg) in enumerate(SCENARIO, 100):
        kmsg.append(f"{pri},{seq},{round(mono * 1e6)},-;{msg}\n")
        if dev is not None and pri >> 3 == 0:
            kmsg.append(f" SUBSYSTEM=pci\n DEVICE=+pci:{dev}\n")
    out["kmsg.txt"] = "".join(kmsg)
    out["dmesg.txt"] = "".join(f"[{mono:12.6f}] {msg}\n" for mono, _, _, msg in rows(False))
    out["dmesg-caller.txt"] = "".join(
        f"[{mono:12.6f}] [  T{609 + i}] {msg}\n" for i, (mono, _, _, msg) in enumerate(rows(False))
    )
    out["dmesg-T.txt"] = "".join(f"[{ctime(wall(mono))}] {msg}\n" for mono, _, _, msg in rows(False))
    out["dmesg-r.txt"] = "".join(f"<{pri}>[{mono:12.6f}] {msg}\n" for mono, pri, _, msg in rows(True))
    out["dmesg-x.txt"] = "".join(
        f"{FAC[pri >> 3]:<6}:{LVL[pri & 7]:<6}: [{mono:12.6f}] {msg}\n" for mono, pri, _, msg in rows(True)
    )
    recs = [{"pri": pri, "time": round(mono, 6), "msg": msg} for mono, pri, _, msg in rows(True)]
    out["dmesg-json.json"] = json.dumps({"dmesg": recs}, indent=3) + "\n"
    recs_x = [
        {"fac": FAC[pri >> 3], "pri": LVL[pri & 7], "time": round(mono, 6), "msg": msg}
        for mono, pri, _, msg in rows(True)
    ]
    out["dmesg-json-x.json"] = json.dumps({"dmesg": recs_x}, indent=3) + "\n"

    def ident(pri: int) -> str:
        return "kernel" if pri >> 3 == 0 else "gpu-forger[4242]"

    short, precise, syslog, rfc, jj = [], [], [], [], []
    short.append(f"-- Boot {BOOT} --\n")
    for mono, pri, dev, msg in rows(True):
        t = wall(mono)
        g = time.gmtime(t)
        usec = round((t % 1) * 1e6)
        short.append(f"{time.strftime('%b %d %H:%M:%S', g)} {HOST} {ident(pri)}: {msg}\n")
        precise.append(f"{time.strftime('%b %d %H:%M:%S', g)}.{usec:06d} {HOST} {ident(pri)}: {msg}\n")
        ts = f"[{mono:12.6f}] " if pri >> 3 == 0 else ""
        syslog.append(f"{time.strftime('%b %e %H:%M:%S', g)} {HOST} {ident(pri)}: {ts}{msg}\n")
        rfc.append(f"{time.strftime('%Y-%m-%dT%H:%M:%S', g)}.{usec:06d}+00:00 {HOST} {ident(pri)}: {msg}\n")
        entry: dict[str, object] = {
            "__REALTIME_TIMESTAMP": str(round(t * 1e6)),
            "__MONOTONIC_TIMESTAMP": str(round(mono * 1e6) + 17),
            "_BOOT_ID": BOOT,
            "_TRANSPORT": "kernel",
            "PRIORITY": str(pri & 7),
            "SYSLOG_FACILITY": str(pri >> 3),
            "SYSLOG_IDENTIFIER": "kernel" if pri >> 3 == 0 else "gpu-forger",
            "_SOURCE_MONOTONIC_TIMESTAMP": str(round(mono * 1e6)),
            "_HOSTNAME": HOST,
            "MESSAGE": msg,
        }
        if dev is not None and pri >> 3 == 0:
            entry["_KERNEL_SUBSYSTEM"] = "pci"
            entry["_KERNEL_DEVICE"] = f"+pci:{dev}"
            entry["_UDEV_SYSNAME"] = dev
        jj.append(json.dumps(entry) + "\n")
    out["journal-short.txt"] = "".join(short)
    out["journal-short-precise.txt"] = "".join(precise)
    out["journal-syslog.txt"] = "".join(syslog)
    out["journal-rfc3339.txt"] = "".join(rfc)
    out["journal.json"] = "".join(jj)
    for name, text in out.items():
        (HERE / name).write_text(text)
    (HERE / "expected-counts.json").write_text(json.dumps(EXPECTED, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
