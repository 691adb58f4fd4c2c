"""An honest kernel log for the throughput benchmark: what a GPU node's dmesg holds, generated deterministically.

Written before the kernel-log path was tuned on it (issue 25, item 5) and not to be tuned afterwards: the
proportions and the templates are the benchmark's input, not a knob. A log of ``lines`` lines is

- 94 % non-GPU lines: systemd and journald, audit, USB and HID, network (NICs, bridges, veth, firewall), storage
  (NVMe, SCSI, ext4, XFS, md, loop), memory and CPU faults (segfaults, OOM, MCE, EDAC, soft lockups), and the
  other DRM drivers of such hosts (i915, ast, nouveau) where their lines do not say ``drm``; their fields (pids,
  serials, addresses, device numbers, MACs, sectors) vary, so a log of 100,000 lines or more holds well over
  20,000 distinct messages, as a real one does (audit serials alone never repeat);
- 5 % lines that contain ``drm``, ``amdgpu`` or ``kfd`` and match no rule: amdgpu and KFD start-up chatter,
  ``[drm]`` lines of amdgpu, i915, ast and nouveau, the framebuffer consoles;
- 1 % amdgpu lines that match a rule, as they come: in blocks (a page fault with its detail lines, a ring
  timeout and the reset it leads to, a suppressed-callbacks line, RAS counts), on the GPUs given.

Every line is plain ``dmesg`` (``[mono] message``), timestamps rising. ``lines(...)`` also gives each line's
part (``noise``, ``lookalike``, ``rule``), so tests/test_kernel_noise.py can check the claims above with the
classifier itself. Messages follow the kernel's format strings (research/kernel-log-taxonomy.md for amdgpu; the
real logs in tests/data/kernel-log for the line shape); every value is invented.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

SEED = 25  # the constant the generator's random.Random is built with
NOISE, LOOKALIKE, RULE = "noise", "lookalike", "rule"
LOOKALIKE_SHARE = 0.05
RULE_SHARE = 0.01

_Template = Callable[[random.Random], str]

_UNITS = (
    "apt-daily.service", "apt-daily-upgrade.service", "logrotate.service", "man-db.service", "fstrim.service",
    "sysstat-collect.service", "systemd-tmpfiles-clean.service", "phpsessionclean.service", "motd-news.service",
    "certbot.service", "e2scrub_all.service", "session-{n}.scope", "user@{uid}.service", "docker-{hex12}.scope",
    "cri-containerd-{hex12}.scope", "run-containerd-runc-k8s.io-{hex12}-runc.{hex6}.mount",
    "kubepods-burstable-pod{hex8}_{hex4}.slice", "node_exporter.service", "prometheus-node-exporter.service",
)  # fmt: skip
_COMMS = (
    "python3", "bash", "sshd", "containerd", "kubelet", "dockerd", "runc", "java", "node", "nginx", "postgres",
    "rsync", "tar", "gzip", "pt_main_thread", "ray::IDLE", "slurmstepd", "srun", "mpirun", "rccl-tests",
)  # fmt: skip
_USB = (
    ("046d", "c52b", "Logitech", "USB Receiver"), ("0781", "5583", "SanDisk", "Ultra Fit"),
    ("0557", "2419", "ATEN", "KVM Keyboard"), ("1d6b", "0002", "Linux Foundation", "2.0 root hub"),
    ("0bda", "8153", "Realtek", "USB 10/100/1000 LAN"), ("0424", "2514", "Microchip", "USB 2.0 Hub"),
    ("413c", "a001", "Dell", "Virtual Keyboard and Mouse"), ("0930", "6545", "Kingston", "DataTraveler 3.0"),
)  # fmt: skip
_NICS = ("eno1", "eno2", "enp65s0f0", "enp65s0f1", "ens5f0np0", "ens5f1np1", "ib0", "bond0", "eth0")
_DISKS = ("nvme0n1p2", "nvme1n1", "nvme2n1p1", "sda1", "sdb", "md0", "dm-0", "dm-3", "loop7")
_NOUVEAU = ("0000:a1:00.0", "0000:c1:00.0")
_AST = ("0000:02:00.0", "0000:c3:00.0")
_GPU_RINGS = ("gfx_0.0.0", "comp_1.0.0", "comp_1.1.0", "comp_1.2.0", "sdma0", "sdma1", "vcn_dec_0")


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def _mac(rng: random.Random) -> str:
    return ":".join(f"{rng.getrandbits(8):02x}" for _ in range(6))


def _ip(rng: random.Random) -> str:
    return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def _unit(rng: random.Random) -> str:
    return rng.choice(_UNITS).format(
        n=rng.randrange(1, 9000), uid=rng.choice((0, 1000, 1001, 1002)), hex12=_hex(rng, 12), hex8=_hex(rng, 8),
        hex6=_hex(rng, 6), hex4=_hex(rng, 4),
    )  # fmt: skip


def _audit_stamp(rng: random.Random) -> str:
    return f"audit({1764600000 + rng.randrange(10_000_000)}.{rng.randrange(1000):03d}:{rng.randrange(1, 10**6)})"


def _pci(rng: random.Random) -> str:
    return f"0000:{rng.randrange(256):02x}:{rng.randrange(32):02x}.{rng.randrange(8)}"


def _usb_port(rng: random.Random) -> str:
    return f"{rng.randrange(1, 5)}-{rng.randrange(1, 9)}" + (f".{rng.randrange(1, 5)}" if rng.random() < 0.4 else "")


# The non-GPU lines, with how often each comes (weights): systemd and audit most, faults least.
_NOISE: Sequence[tuple[int, _Template]] = (
    # systemd / journald (they log to /dev/kmsg early and on every unit change)
    (8, lambda r: f"systemd[1]: Started {_unit(r)}."),
    (5, lambda r: f"systemd[1]: {_unit(r)}: Deactivated successfully."),
    (4, lambda r: f"systemd[1]: {_unit(r)}: Consumed {r.randrange(60)}.{r.randrange(1000):03d}s CPU time."),
    (2, lambda r: f"systemd[1]: Starting {_unit(r)}..."),
    (1, lambda r: f"systemd-journald[{r.randrange(300, 900)}]: Received client request to flush runtime journal."),
    (1, lambda r: f"systemd-journald[{r.randrange(300, 900)}]: Time spent on flushing to /var/log/journal/"
                  f"{_hex(r, 32)} is {r.randrange(200)}.{r.randrange(1000):03d}ms for {r.randrange(100, 9000)} "
                  "entries."),
    (1, lambda r: f"systemd-logind[{r.randrange(900, 2000)}]: New session {r.randrange(1, 9000)} of user "
                  f"{r.choice(('root', 'slurm', 'ubuntu', 'ci'))}."),
    (1, lambda r: f"systemd-logind[{r.randrange(900, 2000)}]: Session {r.randrange(1, 9000)} logged out. Waiting "
                  "for processes to exit."),
    (1, lambda r: f"systemd-udevd[{r.randrange(400, 60000)}]: Using default interface naming scheme 'v252'."),
    # audit
    (7, lambda r: f"audit: type=1400 {_audit_stamp(r)}: apparmor=\"DENIED\" operation=\"open\" class=\"file\" "
                  f"profile=\"{r.choice(('snap.lxd.daemon', 'cri-containerd.apparmor.d', 'docker-default'))}\" "
                  f"name=\"/proc/{r.randrange(1, 99999)}/mounts\" pid={r.randrange(1, 99999)} "
                  f"comm=\"{r.choice(_COMMS)}\" requested_mask=\"r\" denied_mask=\"r\" fsuid=0 ouid=0"),
    (5, lambda r: f"audit: type={r.choice((1130, 1131))} {_audit_stamp(r)}: pid=1 uid=0 auid=4294967295 "
                  f"ses=4294967295 subj=unconfined msg='unit={_unit(r)} comm=\"systemd\" "
                  "exe=\"/usr/lib/systemd/systemd\" hostname=? addr=? terminal=? res=success'"),
    (3, lambda r: f"audit: type=1334 {_audit_stamp(r)}: prog-id={r.randrange(1, 5000)} "
                  f"op={r.choice(('LOAD', 'UNLOAD'))}"),
    (2, lambda r: f"audit: type=1006 {_audit_stamp(r)}: pid={r.randrange(1, 99999)} uid=0 old-auid=4294967295 "
                  f"auid={r.choice((0, 1000))} tty=(none) old-ses=4294967295 ses={r.randrange(1, 9000)} res=1"),
    (1, lambda r: f"audit: type=1325 {_audit_stamp(r)}: table=filter family={r.choice((2, 10))} "
                  f"entries={r.randrange(200)} op=xt_replace pid={r.randrange(1, 99999)} subj=unconfined "
                  "comm=\"iptables-restor\""),
    (2, lambda r: f"kauditd_printk_skb: {r.randrange(1, 60)} callbacks suppressed"),
    # USB and HID (a KVM and sticks coming and going)
    (2, lambda r: f"usb {_usb_port(r)}: new high-speed USB device number {r.randrange(2, 128)} using xhci_hcd"),
    (1, lambda r: f"usb {_usb_port(r)}: USB disconnect, device number {r.randrange(2, 128)}"),
    (1, lambda r: "usb {}: New USB device found, idVendor={}, idProduct={}, bcdDevice={}.{:02d}".format(
        _usb_port(r), *r.choice(_USB)[:2], r.randrange(1, 10), r.randrange(100))),
    (1, lambda r: f"usb {_usb_port(r)}: Product: {r.choice(_USB)[3]}"),
    (1, lambda r: f"usb {_usb_port(r)}: SerialNumber: {_hex(r, 20).upper()}"),
    (1, lambda r: "hid-generic 0003:{}:{}.{:04X}: input,hidraw{}: USB HID v1.11 Keyboard [{} {}] on "
                  "usb-0000:00:14.0-{}/input0".format(*(x.upper() for x in r.choice(_USB)[:2]), r.randrange(1, 999),
                                                      r.randrange(8), *r.choice(_USB)[2:], r.randrange(1, 9))),
    (1, lambda r: f"usb {_usb_port(r)}: device descriptor read/64, error -{r.choice((71, 110, 32))}"),
    (1, lambda r: f"usb-storage {_usb_port(r)}:1.0: USB Mass Storage device detected"),
    # network
    (3, lambda r: f"IPv6: ADDRCONF(NETDEV_CHANGE): veth{_hex(r, 7)}: link becomes ready"),
    (3, lambda r: f"cni0: port {r.randrange(1, 64)}(veth{_hex(r, 8)}) entered "
                  f"{r.choice(('blocking', 'disabled', 'forwarding'))} state"),
    (2, lambda r: f"device veth{_hex(r, 8)} {r.choice(('entered', 'left'))} promiscuous mode"),
    (2, lambda r: f"[UFW BLOCK] IN={r.choice(_NICS)} OUT= MAC={_mac(r)}:{_mac(r)}:08:00 SRC={_ip(r)} "
                  f"DST={_ip(r)} LEN={r.randrange(40, 1500)} TOS=0x00 PREC=0x00 TTL={r.randrange(30, 128)} "
                  f"ID={r.randrange(65536)} DF PROTO=TCP SPT={r.randrange(1024, 65536)} "
                  f"DPT={r.choice((22, 80, 443, 3306, 9100, 9400))} WINDOW={r.randrange(1024, 65536)} RES=0x00 SYN "
                  "URGP=0"),
    (1, lambda r: f"mlx5_core {_pci(r)} {r.choice(_NICS)}: Link {r.choice(('up', 'down'))}"),
    (1, lambda r: f"igb {_pci(r)} {r.choice(_NICS)}: igb: {r.choice(_NICS)} NIC Link is Up "
                  f"{r.choice((100, 1000))} Mbps Full Duplex, Flow Control: RX/TX"),
    (1, lambda r: f"bond0: (slave {r.choice(_NICS)}): link status definitely {r.choice(('up', 'down'))} for "
                  "interface, 25000 Mbps full duplex"),
    (1, lambda r: f"TCP: request_sock_TCP: Possible SYN flooding on port {r.randrange(1024, 65536)}. Sending "
                  "cookies.  Check SNMP counters."),
    (1, lambda r: f"nf_conntrack: nf_conntrack: table full, dropping packet"),  # noqa: F541 (a constant line)
    (1, lambda r: f"net_ratelimit: {r.randrange(1, 300)} callbacks suppressed"),
    # storage
    (2, lambda r: f"EXT4-fs ({r.choice(_DISKS)}): mounted filesystem {_hex(r, 8)}-{_hex(r, 4)}-{_hex(r, 4)}-"
                  f"{_hex(r, 4)}-{_hex(r, 12)} r/w with ordered data mode. Quota mode: none."),
    (1, lambda r: f"XFS ({r.choice(_DISKS)}): Mounting V5 Filesystem {_hex(r, 8)}-{_hex(r, 4)}-{_hex(r, 4)}-"
                  f"{_hex(r, 4)}-{_hex(r, 12)}"),
    (1, lambda r: f"XFS ({r.choice(_DISKS)}): Ending clean mount"),
    (2, lambda r: f"loop{r.randrange(64)}: detected capacity change from 0 to {r.randrange(8, 4_000_000)}"),
    (1, lambda r: f"nvme nvme{r.randrange(8)}: {r.choice((32, 64, 128))}/0/0 default/read/poll queues"),
    (1, lambda r: f"sd {r.randrange(16)}:0:0:0: [sd{chr(97 + r.randrange(8))}] {r.randrange(10**6, 10**10)} "
                  "512-byte logical blocks: (" + f"{r.randrange(1, 8000)} GB/{r.randrange(1, 8000)} GiB)"),
    (1, lambda r: f"I/O error, dev nvme{r.randrange(8)}n1, sector {r.randrange(10**9)} op 0x1:(WRITE) flags "
                  "0x8800 phys_seg 1 prio class 2"),
    (1, lambda r: f"ata{r.randrange(1, 9)}: SATA link up 6.0 Gbps (SStatus 133 SControl 300)"),
    (1, lambda r: f"md/raid1:md{r.randrange(4)}: active with 2 out of 2 mirrors"),
    (1, lambda r: f"EXT4-fs (loop{r.randrange(64)}): mounted filesystem without journal. Quota mode: none."),
    # memory, CPUs, processes
    (2, lambda r: f"{r.choice(_COMMS)}[{r.randrange(1000, 4_000_000)}]: segfault at {_hex(r, 12)} ip "
                  f"{_hex(r, 16)} sp {_hex(r, 16)} error {r.choice((4, 6, 14))} in "
                  f"{r.choice(('libc.so.6', 'libtorch_cpu.so', 'libpython3.10.so.1.0'))}[{_hex(r, 12)}+{_hex(r, 6)}]"),
    (1, lambda r: f"traps: {r.choice(_COMMS)}[{r.randrange(1000, 4_000_000)}] general protection fault "
                  f"ip:{_hex(r, 12)} sp:{_hex(r, 12)} error:0 in libc.so.6[{_hex(r, 12)}+{_hex(r, 6)}]"),
    (1, lambda r: f"Out of memory: Killed process {r.randrange(1000, 4_000_000)} ({r.choice(_COMMS)}) "
                  f"total-vm:{r.randrange(10**5, 10**9)}kB, anon-rss:{r.randrange(10**5, 10**9)}kB, file-rss:0kB, "
                  f"shmem-rss:0kB, UID:{r.choice((0, 1000))} pgtables:{r.randrange(100, 10**6)}kB oom_score_adj:0"),
    (1, lambda r: f"perf: interrupt took too long ({r.randrange(2500, 9000)} > {r.randrange(2500, 9000)}), "
                  f"lowering kernel.perf_event_max_sample_rate to {r.randrange(10000, 80000)}"),
    (1, lambda r: f"watchdog: BUG: soft lockup - CPU#{r.randrange(256)} stuck for {r.randrange(22, 90)}s! "
                  f"[{r.choice(_COMMS)}:{r.randrange(1000, 4_000_000)}]"),
    (1, lambda r: f"INFO: task {r.choice(_COMMS)}:{r.randrange(1000, 4_000_000)} blocked for more than "
                  f"{r.choice((120, 241, 362))} seconds."),
    (1, lambda r: f"EDAC MC{r.randrange(2)}: 1 CE memory read error on CPU_SrcID#{r.randrange(2)}_MC#"
                  f"{r.randrange(4)}_Chan#{r.randrange(3)}_DIMM#0 (channel:{r.randrange(3)} slot:0 page:0x"
                  f"{_hex(r, 7)} offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x009f)"),
    (1, lambda r: "mce: [Hardware Error]: Machine check events logged"),
    (1, lambda r: f"x86/split lock detection: #AC: {r.choice(_COMMS)}/{r.randrange(1000, 4_000_000)} took a "
                  f"split_lock trap at address: 0x{_hex(r, 12)}"),
    # other DRM drivers of such hosts, where their lines do not say "drm"
    (1, lambda r: f"ast {r.choice(_AST)}: VGA not enabled on entry, requesting chip POST"),
    (1, lambda r: f"ast {r.choice(_AST)}: Using P2A bridge for configuration"),
    (1, lambda r: "i915 0000:00:02.0: vgaarb: deactivate vga console"),
    (1, lambda r: f"nouveau {r.choice(_NOUVEAU)}: fifo: fault 00 [READ] at 0000{_hex(r, 8)} engine 00 [GR] "
                  f"client 0f [GPC0/PROP_0] reason 02 [PTE] on channel {r.randrange(2, 64)} [{_hex(r, 10)} "
                  f"{r.choice(_COMMS)}[{r.randrange(1000, 4_000_000)}]]"),
    (1, lambda r: f"nouveau {r.choice(_NOUVEAU)}: gr: TRAP ch {r.randrange(2, 64)} [{_hex(r, 10)} "
                  f"{r.choice(_COMMS)}[{r.randrange(1000, 4_000_000)}]]"),
)  # fmt: skip


def _bdf(r: random.Random, gpus: Sequence[str]) -> str:
    return r.choice(gpus)


# drm / amdgpu / kfd lines that are no fault: start-up chatter of amdgpu and KFD, the [drm] lines of every DRM
# driver of the host, framebuffer consoles.
def _lookalikes(gpus: Sequence[str]) -> Sequence[tuple[int, _Template]]:
    return (
        (3, lambda r: f"[drm] Initialized amdgpu 3.57.0 20150101 for {_bdf(r, gpus)} on minor {r.randrange(8)}"),
        (2, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: SMU is initialized successfully!"),
        (2, lambda r: "kfd kfd: amdgpu: added device 1002:74a1"),
        (2, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: VRAM: 196592M 0x0000008000000000 - 0x000000BFFEFFFFFF "
                      "(196592M used)"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: GART: 512M 0x00007FFF00000000 - 0x00007FFF1FFFFFFF"),
        (2, lambda r: "[drm] amdgpu: 196592M of VRAM memory ready"),
        (1, lambda r: f"[drm] amdgpu: {r.randrange(100000, 260000)}M of GTT memory ready."),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: SE 4, SH per SE 2, CU per SH 10, active_cu_number 80"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: ATOM BIOS: 113-M3000100-102"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: Fetched VBIOS from IFWI"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: PCIE atomic ops is supported"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: RAP: optional rap ta ucode is not available"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: Using BACO for runtime pm"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: XGMI: Add node {r.randrange(8)}, hive 0x{_hex(r, 16)}"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: amdgpu: [drm] Cannot find any crtc or sizes"),
        (1, lambda r: f"amdgpu {_bdf(r, gpus)}: [drm:jpeg_v4_0_3_hw_init [amdgpu]] JPEG decode initialized "
                      "successfully under SPX Partition Mode."),
        (1, lambda r: f"[drm] PCIE GART of 512M enabled (table at 0x00000{_hex(r, 11).upper()})."),
        (1, lambda r: f"[drm] Loading DMUB firmware via PSP: version=0x0{_hex(r, 7).upper()}"),
        (2, lambda r: f"kfd kfd: amdgpu: Allocated {r.randrange(1, 8) * 3969056} bytes on gart"),
        (1, lambda r: "kfd kfd: amdgpu: Total number of KFD nodes to be created: 8"),
        (1, lambda r: "amdgpu: Topology: Add dGPU node [0x74a1:0x1002]"),
        (1, lambda r: f"amdgpu: Virtual CRAT table created for GPU"),  # noqa: F541 (a constant line)
        (1, lambda r: "amdgpu: [powerplay] hwmgr_sw_init smu backed is vega20_smu"),
        (1, lambda r: f"amdgpu_cs_ioctl: {r.randrange(1, 90)} callbacks suppressed"),
        (1, lambda r: "fbcon: amdgpudrmfb (fb0) is primary device"),
        (1, lambda r: "[drm] Initialized i915 1.6.0 20201103 for 0000:00:02.0 on minor 0"),
        (1, lambda r: f"i915 0000:00:02.0: [drm] GuC firmware i915/tgl_guc_70.bin version 70.{r.randrange(40)}.1"),
        (1, lambda r: "i915 0000:00:02.0: [drm] *ERROR* CPU pipe A FIFO underrun"),
        (1, lambda r: f"[drm] Initialized ast 0.1.0 20120228 for {r.choice(_AST)} on minor 0"),
        (1, lambda r: f"ast {r.choice(_AST)}: [drm] Using analog VGA"),
        (1, lambda r: f"ast {r.choice(_AST)}: [drm] fb0: astdrmfb frame buffer device"),
        (1, lambda r: f"nouveau {r.choice(_NOUVEAU)}: [drm] fb1: nouveaudrmfb frame buffer device"),
        (1, lambda r: f"[drm] Initialized nouveau 1.3.1 20120801 for {r.choice(_NOUVEAU)} on minor 1"),
        (1, lambda r: f"[drm:drm_atomic_helper_wait_for_dependencies] *ERROR* [CRTC:{r.randrange(40, 90)}:crtc-0] "
                      "commit wait timed out"),
    )  # fmt: skip


# Rule lines come in the blocks the driver prints them in (real messages, invented values).
def _rule_block(r: random.Random, gpus: Sequence[str]) -> list[str]:
    b = _bdf(r, gpus)
    kind = r.random()
    pid = r.randrange(1000, 4_000_000)
    comm = r.choice(_COMMS)
    if kind < 0.55:  # a page fault and its details (gmc_v9_0_process_interrupt)
        return [
            f"amdgpu {b}: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:{r.randrange(1, 16)} "
            f"pasid:{r.randrange(32768, 32800)})",
            f"amdgpu {b}: amdgpu:  in process {comm} pid {pid} thread {comm} pid {pid}",
            f"amdgpu {b}: amdgpu:   in page starting at address 0x{r.randrange(1 << 36) << 12:016x} from IH client "
            "0x1b (UTCL2)",
            f"amdgpu {b}: amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x{r.choice((0x00800932, 0x00840A51, 0x0)):08X}",
            f"amdgpu {b}: amdgpu: \t Faulty UTCL2 client ID: {r.choice(('CB/DB (0x0)', 'TCP (0x8)', 'SQC (0x9)'))}",
            f"amdgpu {b}: amdgpu: \t MORE_FAULTS: 0x{r.randrange(2)}",
        ]
    if kind < 0.7:
        return [f"gmc_v9_0_process_interrupt: {r.randrange(1, 400)} callbacks suppressed"]
    if kind < 0.85:  # a ring timeout and the reset it leads to (amdgpu_job_timedout, amdgpu_device_gpu_recover)
        seq = r.randrange(1, 1 << 24)
        return [
            f"amdgpu {b}: amdgpu: ring {r.choice(_GPU_RINGS)} timeout, signaled seq={seq}, emitted seq={seq + 2}",
            f"amdgpu {b}: amdgpu:  Process {comm} pid {pid} thread {comm} pid {pid}",
            f"amdgpu {b}: amdgpu: GPU reset begin!",
            f"amdgpu {b}: amdgpu: MODE1 reset",
            f"amdgpu {b}: amdgpu: GPU reset succeeded, trying to resume",
            "[drm] VRAM is lost due to GPU reset!",
            f"amdgpu {b}: amdgpu: GPU reset({r.randrange(1, 40)}) succeeded!",
        ]
    if kind < 0.95:  # RAS counts (amdgpu_ras_error_generate_report)
        block = r.choice(("umc", "gfx", "sdma", "mmhub", "xgmi_wafl"))
        which = r.choice(("correctable", "uncorrectable"))
        return [f"amdgpu {b}: amdgpu: {r.randrange(1, 30)} {which} hardware errors detected in {block} block"]
    return [f"amdgpu {b}: amdgpu: Fence fallback timer expired on ring {r.choice(_GPU_RINGS)}"]


def _picker(templates: Sequence[tuple[int, _Template]]) -> Callable[[random.Random], str]:
    functions = [t for _w, t in templates]
    weights = [w for w, _t in templates]

    def pick(r: random.Random) -> str:
        return r.choices(functions, weights)[0](r)

    return pick


def lines(count: int, gpus: Sequence[str], seed: int = SEED) -> list[tuple[str, str]]:
    """``count`` messages as (part, message), in log order: parts ``noise``, ``lookalike`` and ``rule`` in the
    proportions of the module's docstring (exact: the rule lines are ``count // 100``)."""
    rng = random.Random(seed)
    rules = count // 100
    lookalikes = round(count * LOOKALIKE_SHARE)
    others = [LOOKALIKE] * lookalikes + [NOISE] * (count - rules - lookalikes)
    rng.shuffle(others)
    noise, lookalike = _picker(_NOISE), _picker(_lookalikes(gpus))
    blocks: list[list[str]] = []
    left = rules
    while left > 0:
        block = _rule_block(rng, gpus)[:left]
        blocks.append(block)
        left -= len(block)
    at = sorted(rng.randrange(len(others) + 1) for _ in blocks)
    out: list[tuple[str, str]] = []
    pos = 0
    for where, block in zip(at, blocks, strict=True):
        out.extend((part, noise(rng) if part == NOISE else lookalike(rng)) for part in others[pos:where])
        out.extend((RULE, message) for message in block)
        pos = where
    out.extend((part, noise(rng) if part == NOISE else lookalike(rng)) for part in others[pos:])
    return out


def generate(count: int, gpus: Sequence[str], seed: int = SEED) -> str:
    """The log as plain ``dmesg`` prints it: ``[   12.345678] message`` lines, 100 us apart."""
    return "".join(f"[{10.0 + i * 0.0001:12.6f}] {msg}\n" for i, (_part, msg) in enumerate(lines(count, gpus, seed)))
