"""``rocm-watchdog capture``: a fake host with real device nodes, stub tools printing real captures and a kernel log
-> the archive -> the fake host builder's root from it -> ``once`` gives the same exposition; nothing in the archive
names a serial, UUID or host name; the capture opened no GPU node and wrote nothing but its output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fakeroot import FakeGpu, FakeOther, build_root, gpu_metrics_file, radeon_metrics_fields
from paths import FIXTURES
from stubs import amd_smi_stub, rocm_smi_stub

from exporter.fakehost.from_capture import build_from_capture, capture_input
from exporter.fakehost.ttar import read_ttar

PROJECT = Path(__file__).resolve().parents[1]
MI100 = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"
BDFS = ("0000:1e:00.0", "0000:22:00.0")
IDS = (0x5A4AD1C2A8BA3E1F, 0x0012_34AB_CDEF_0099)
SERIALS = ("PCB069429-0042", "692233000123")
BOOT_ID = "8f2d4c1e-6b3a-4f59-9d0e-2a7c5b1e3f40"
UUIDS = ("a1ff740f-0000-1000-80e6-5a4ad1c2a8ba", "c3ff740f-0000-1000-8099-0012345abcde")
HOST = "gpu-node-17.example.org"
USER = "alice.smith"
KERNEL_LOG = f"""\
[    3.000000] usb 1-1: new high-speed USB device number 2 using xhci_hcd
[  104.528300] amdgpu {BDFS[0]}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1234, emitted seq=1236
[  104.528304] amdgpu {BDFS[0]}: amdgpu: GPU reset begin!
[  104.600000] systemd[1]: Started session of user {USER} on {HOST}.
[  105.100000] amdgpu {BDFS[0]}: amdgpu: GPU reset succeeded, trying to resume
[  106.000000] amdgpu {BDFS[1]}: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32769)
"""
LIST_JSON = [
    {"gpu": i, "bdf": BDFS[i], "uuid": UUIDS[i], "kfd_id": 1000 + i, "node_id": i + 1, "partition_id": 0}
    for i in range(2)
]
STATIC_JSON = [
    {
        "gpu": i,
        "asic": {"market_name": "AMD Instinct MI210", "device_id": "0x740f", "asic_serial": f"0x{IDS[i]:016X}"},
        "board": {"product_serial": SERIALS[i]},
        "bus": {"bdf": BDFS[i]},
        "numa": {"node": 0, "affinity": -1},
    }
    for i in range(2)
]
METRIC_JSON = [{"gpu": i, "mem_usage": {"total_vram": 65520, "used_vram": 10}} for i in range(2)]
TIMING = re.compile(r"^(?:rocm_watchdog_\w*duration\w*|\w+_timestamp_seconds)(?:\{|\s)")


def _host(tmp_path: Path) -> tuple[list[str], Path]:
    table = gpu_metrics_file("gpu_metrics_v1_3", radeon_metrics_fields())
    gpus = [
        FakeGpu(BDFS[i], card=i + 1, render=128 + i, kfd_node=i + 1, gpu_id=11111 * (i + 1), unique_id=IDS[i],
                files={"serial_number": SERIALS[i] + "\n"}, gpu_metrics=table if i == 0 else None)
        for i in range(2)
    ]  # fmt: skip
    root = build_root(tmp_path, gpus, others=[FakeOther.bmc("0000:63:00.0", card=0)], boot_id=BOOT_ID, name="host")
    (root.etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\nrender:x:998:109::/:/usr/sbin/nologin\n"
        f"{USER}:x:1000:1000:Alice Smith:/home/{USER}:/bin/bash\n"
    )
    with (root.etc / "group").open("a") as group:
        group.write(f"{USER}:x:1000:\n")
    text = (root.etc / "group").read_text()
    (root.etc / "group").write_text(text.replace("render:x:109:", f"render:x:109:{USER}"))
    rules = root.root / "etc" / "udev" / "rules.d"
    rules.mkdir(parents=True)
    (rules / "70-amdgpu.rules").write_text(
        '# site rules\nKERNEL=="kfd", GROUP="render", MODE="0660"\nSUBSYSTEM=="drm", KERNEL=="renderD*", '
        'GROUP="render", MODE="0660"\nSUBSYSTEM=="usb", MODE="0664"\n'
    )
    (root.root / "kern.log").write_text(KERNEL_LOG)
    tools = tmp_path / "bin"
    rocm_smi_stub(tools, MI100)
    outputs = {}
    for name, doc in (("list", LIST_JSON), ("static", STATIC_JSON), ("metric", METRIC_JSON)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc, indent=4))
        outputs[name] = path
    amd_smi_stub(tools, outputs)
    flags = [
        "--path.rootfs", str(root.root), "--state.dir", str(root.state_dir),
        "--kernel-log.path", str(root.root / "kern.log"),
        "--rocm-smi.path", str(tools / "rocm-smi"), "--amd-smi.path", str(tools / "amd-smi"),
        "--smi.backend", "both", "--smi.timeout", "10s", "--host.name", HOST,
    ]  # fmt: skip
    return flags, root.root


def _run(*argv: str, audit: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "NODE_NAME": HOST, "USER": USER}
    if audit is None:
        code = "import sys; from exporter.cli import main; sys.exit(main(sys.argv[1:]))"
    else:  # every file this process opens, with its flags (sys.addaudithook: open and os.open both raise it)
        code = (
            "import atexit, json, os, sys\n"
            "seen = []\n"
            "def hook(event, args):\n"
            "    if event == 'open' and isinstance(args[0], (str, bytes)):\n"
            "        seen.append([os.fsdecode(args[0]), args[1], args[2]])\n"
            "sys.addaudithook(hook)\n"
            f"atexit.register(lambda: open({str(audit)!r}, 'w').write(json.dumps(seen[:])))\n"
            "from exporter.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n"
        )
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def _comparable(exposition: str, roots: tuple[Path, ...]) -> list[str]:
    """Samples without the exporter's own timing series, with the redacted labels' values and the roots' paths
    blanked."""
    out = []
    for line in exposition.splitlines():
        if TIMING.match(line):
            continue
        line = re.sub(r'(unique_id|nodename)="[^"]*"', r'\1="-"', line)
        for root in roots:
            line = line.replace(str(root), "<root>")
        out.append(line)
    return out


def _forms(value: int) -> list[str]:
    return [f"{value:016x}", f"{value:016X}", hex(value), f"{value:X}", str(value)]


def test_capture_rebuilds_a_host_that_exports_the_same(tmp_path: Path) -> None:
    flags, host_root = _host(tmp_path)
    archive = tmp_path / "out" / "capture.ttar"
    archive.parent.mkdir()
    audit = tmp_path / "audit.json"
    proc = _run("capture", "--output", str(archive), *flags, audit=audit)
    assert proc.returncode == 0, proc.stderr
    assert "redacted" in proc.stdout and str(archive) in proc.stdout
    data = archive.read_bytes()

    # It opened no GPU node, and wrote nothing but its output (and the output's temp file beside it).
    opened = json.loads(audit.read_text())
    dev = str(host_root / "dev")
    assert not [p for p, _m, _f in opened if p.startswith(dev + "/")], "a device node was opened"
    writes = [
        p
        for p, mode, flags_ in opened
        if p not in (os.devnull, str(audit))  # the tools' stdin, this test's own record
        and (
            (isinstance(mode, str) and any(c in mode for c in "wax+"))
            or (isinstance(flags_, int) and flags_ & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        )
    ]
    assert writes and all(Path(p).parent == archive.parent for p in writes), writes
    assert sorted(archive.parent.iterdir()) == [archive]

    # Nothing in it names a serial, UUID, host name or user name.
    text = data.decode("utf-8", "replace")
    for secret in [*SERIALS, *UUIDS, BOOT_ID, HOST, "gpu-node-17", USER, "Alice Smith"]:
        assert secret not in text and secret.upper() not in text, secret
    for value in IDS:
        for form in _forms(value):
            assert not re.search(rf"(?<![0-9A-Za-z]){form}(?![0-9A-Za-z])", text), form
    entries = {e.path: e for e in read_ttar(data)}
    redactions = json.loads(entries["capture/redactions.json"].data)
    assert redactions["unique_id"]["distinct_values"] == 2
    assert redactions["serial"]["distinct_values"] == 2
    assert redactions["uuid"]["distinct_values"] == 3  # the boot id and the two amd-smi UUIDs
    assert redactions["host name"]["distinct_values"] >= 1 and redactions["user name"]["distinct_values"] == 1
    # what was gathered
    fn = next(p for p in entries if p.endswith(f"/{BDFS[0]}/gpu_metrics"))
    assert entries[fn].data == gpu_metrics_file("gpu_metrics_v1_3", radeon_metrics_fields())  # bytes, untouched
    devices = entries["capture/devices.txt"].data.decode()
    assert re.search(r"^crw-rw---- 0 109 226,128 dri/renderD128 ", devices, re.M)
    assert re.search(r"^crw-rw---- 0 109 510,0 kfd ", devices, re.M)
    udev = entries["capture/udev-rules.txt"].data.decode()
    assert 'KERNEL=="kfd"' in udev and "usb" not in udev
    kernel = entries["capture/kernel.log"].data.decode()
    assert "GPU reset begin!" in kernel and "page fault" in kernel and "usb 1-1" not in kernel
    check = json.loads(entries["capture/check.json"].data)
    assert check["kernel_probe"].startswith("off")
    exporter_json = json.loads(entries["capture/exporter.json"].data)
    assert exporter_json["kernel_probe"].startswith("off") and "--smi.backend=both" in exporter_json["argv"]
    commands = json.loads(entries["capture/commands.json"].data)
    assert {c["tool"] for c in commands} == {"amd-smi", "rocm-smi"}
    assert all("returncode" in c and "stdout" in c for c in commands)
    assert any(c["purpose"] == "version" for c in commands)

    # parse reads the archive back
    for kind, needle in (
        ("rocm-smi", '"pci_bus": "0000:1e:00.0"'),
        ("amd-smi", '"unique_id": "0x5afe'),
        ("kernel-log", '"gpu_reset_begin"'),
        ("gpu-metrics", '"layout": "gpu_metrics_v1_3"'),
    ):
        parsed = _run("parse", kind, str(archive))
        assert parsed.returncode == 0, (kind, parsed.stderr)
        assert needle in parsed.stdout, (kind, parsed.stdout[:500])  # fmt: skip

    # the fake host builder turns it into a root on which once exports the same
    rebuilt = build_from_capture(archive, tmp_path / "rebuilt")
    assert rebuilt.problems == []
    assert os.major(os.lstat(rebuilt.root / "dev" / "dri" / "renderD129").st_rdev) == 226
    before = _run("once", *flags)
    after = _run("once", *rebuilt.flags, "--host.name", HOST)
    assert before.returncode == 0 and after.returncode == 0, (before.stderr, after.stderr)
    assert "rocm_gpu_info{" in before.stdout and "rocm_kernel_events_total{" in before.stdout
    assert _comparable(after.stdout, (rebuilt.root,)) == _comparable(before.stdout, (host_root,))
    # joins survive: each GPU keeps one (fake) unique id, the one the tools' outputs were given too
    ids = dict(re.findall(r'rocm_gpu_info\{[^}]*pci_bus="([^"]+)"[^}]*unique_id="([^"]+)"', after.stdout))
    assert sorted(ids) == sorted(BDFS) and len(set(ids.values())) == 2
    assert all(v.startswith("0x5afe") for v in ids.values())
    amd = json.loads(_run("parse", "amd-smi", str(archive)).stdout)
    assert {g["pci_bus"]: g["unique_id"] for g in amd["gpus"]} == ids


def test_parse_says_what_an_archive_lacks(tmp_path: Path) -> None:
    flags, _root = _host(tmp_path)
    archive = tmp_path / "capture.ttar"
    proc = _run("capture", "--output", str(archive), *flags, "--no-collector.amd-smi", "--no-collector.kernel-log")
    assert proc.returncode == 0, proc.stderr
    for kind, message in (("amd-smi", "no amd-smi output"), ("kernel-log", "no kernel-log lines")):
        parsed = _run("parse", kind, str(archive))
        assert parsed.returncode == 1 and message in parsed.stderr and len(parsed.stderr.splitlines()) == 1
    assert capture_input("rocm-smi", (FIXTURES / "sysfs" / "procfs-drm-amdgpu.ttar").read_bytes()) is None


def test_capture_needs_an_output() -> None:
    proc = _run("capture")
    assert proc.returncode == 2 and "--output FILE is required" in proc.stderr


def test_a_read_that_blocks_costs_the_read_timeout_and_is_reported(tmp_path: Path) -> None:
    """A FIFO without a writer blocks open() as a hung GPU's sysfs file blocks read(): the capture moves on."""
    import time

    from exporter.capture import READ_TIMEOUT_SECONDS, _read_bounded

    fifo = tmp_path / "gpu_metrics"
    os.mkfifo(fifo)
    started = time.monotonic()
    data, problem = _read_bounded(str(fifo))
    took = time.monotonic() - started
    assert data is None and problem is not None and problem.startswith("read blocked")
    assert READ_TIMEOUT_SECONDS <= took < READ_TIMEOUT_SECONDS + 30  # a failure guard only
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # let the abandoned reader go (it reads end of file)
    os.close(writer)
    regular = tmp_path / "unique_id"
    regular.write_text("5a4ad1c2a8ba3e1f\n")
    assert _read_bounded(str(regular)) == (b"5a4ad1c2a8ba3e1f\n", None)
    # procfs' sysctl files refuse one read as large as the size limit (ENOMEM): read in chunks
    boot_id, problem = _read_bounded("/proc/sys/kernel/random/boot_id")
    assert problem is None and boot_id is not None and len(boot_id.strip()) == 36


def test_an_archive_cannot_write_out_of_its_root_through_its_own_links(tmp_path: Path) -> None:
    from exporter.fakehost.ttar import Entry, write_ttar

    outside = tmp_path / "outside"
    outside.mkdir()
    archive = write_ttar(
        [
            Entry("root/sys/escape", "link", target=str(outside)),
            Entry("root/sys/escape/passwd", "file", 0o644, b"owned\n"),
            Entry("root/sys/ok", "file", 0o444, b"1\n"),
            Entry("capture/devices.txt", "file", 0o644, b"crw-rw---- 0 0 226,128 ../evil\n"),
            Entry("capture/exporter.json", "file", 0o644, b"{}"),
        ]
    )
    host = build_from_capture(archive, tmp_path / "dest")
    assert list(outside.iterdir()) == []
    assert (host.root / "sys" / "ok").read_bytes() == b"1\n"
    assert any("leads out of the root" in p for p in host.problems)
    assert any("unsafe path" in p for p in host.problems)
