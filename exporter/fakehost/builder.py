"""A realistic fake host root for tests: ``<root>/sys``, ``<root>/dev``, ``<root>/proc``, ``<root>/etc``.

Built the way the kernel and udev lay a real AMD GPU node out (sysfs-devfs.md section 1), with real
relative symlinks, real character devices (``os.mknod``; the tests run as root) and real files:

- ``sys/devices/pci<dom>:<bus>/<dom>:<bus>:01.1/<bdf>/``: the PCI function of each GPU with its amdgpu
  attributes, ``driver``/``subsystem`` links, ``hwmon/hwmonN/``, ``ras/`` and ``drm/{cardN,renderDN}/``
  (each with ``dev``, ``uevent`` and a ``device`` link back to the function, ``../../../<bdf>``). A function
  on bus 0 sits on the root bus (``pci0000:00/0000:00:02.0``); ``pci_path`` gives any other parent chain;
  ``card_switch`` puts a GPU behind its board's own AMD switch (upstream/downstream ports at bus-2/bus-1).
  The uevent is the PCI core's (``PCI_CLASS`` in ``%X``, ``PCI_ID``, ``PCI_SUBSYS_ID``, ``MODALIAS``).
- ``sys/class/drm/<minor>`` -> ``../../devices/.../drm/<minor>``; connectors (``card1-DP-1``) as
  subdirectories of the card and as class links; ``sys/dev/char/226:N`` links; ``sys/class/hwmon``.
- ``sys/bus/pci/drivers/amdgpu/<bdf>`` (with ``bind``/``unbind``/``new_id``/``module`` beside them),
  ``sys/bus/pci/devices/<bdf>``, ``sys/module/amdgpu/drivers/pci:amdgpu``.
- ``sys/devices/platform/amdgpu_xcp.N/drm/...`` for MI300-class partitions (partition 0 of a GPU is the
  PCI function itself; partitions 1..7 are platform devices numbered across all GPUs).
- ``sys/class/kfd/kfd`` -> ``../../devices/virtual/kfd/kfd`` with ``dev`` (``<kfd major>:0``) and
  ``topology/{generation_id,system_properties,nodes/<N>/{properties,gpu_id,name}}``: CPU nodes first, then
  the GPU nodes at the numbers the spec gives. Properties are generated, or copied verbatim from a
  ``shared/fixtures/sysfs/kfd-topology`` capture (``capture_gpus``).
- ``dev/kfd``, ``dev/dri/card*``, ``dev/dri/renderD*``: character devices with mode, uid and gid as a
  udev rule set would leave them; ``dev/dri/by-path/pci-<bdf>-{card,render}`` -> ``../<minor>``
  (``platform-<name>-...`` for platform devices).
- ``legacy_drm``: what older kernels also had, ``class/drm/<name>`` (``ttm``; ``amdttm`` from the amdgpu-pro
  DKMS module) and ``drm/controlD<64+N> -> card<N>``.
- ``etc/group``, ``etc/passwd``, ``proc/sys/kernel/random/boot_id``, and an empty ``var/lib/rocm-watchdog``
  to use as the state dir.

The spec (``FakeRoot.gpus``, ``others``, ``kfd_major``, permissions...) is kept on the object; the
mutators change it and rebuild ``sys`` and ``dev`` the way a reboot would, leaving ``etc``, ``proc`` and
the state dir alone. Per-node permission overrides (``chmod``/``chown``/``chgrp``) are applied directly
and survive rebuilds, like a site udev rule would.

Example::

    root = build_root(tmp_path, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)],
                      others=[FakeOther.bmc("0000:63:00.0", card=0)])
    snap = read_sysfs(root.sys)
    root.renumber("0000:03:00.0", card=2, render=129)   # a reboot that moved the nodes
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from exporter.config import Config
from exporter.fakehost.tables import pack_table
from exporter.model.gpu_metrics import FieldValue
from exporter.parsers.gpu_metrics.layouts import ALL_LAYOUTS

DRM_MAJOR = 226

DATA = Path(__file__).parent / "data"
# Where capture_gpus looks a KFD topology capture up by name: the one the package ships (data/kfd-topology,
# with its provenance), then any directory a caller adds (the tests add the shared captures).
KFD_CAPTURE_DIRS: list[Path] = [DATA / "kfd-topology"]

DEFAULT_GIDS: dict[str, int] = {"video": 44, "render": 109}  # Debian/Ubuntu: static video, dynamic render
DEFAULT_MODES: dict[str, int] = {"card": 0o660, "render": 0o660, "kfd": 0o660}
DEFAULT_GROUPS: dict[str, str | int] = {"card": "video", "render": "render", "kfd": "render"}

_KFD_GPU_KEYS = [
    "cpu_cores_count",
    "simd_count",
    "mem_banks_count",
    "caches_count",
    "io_links_count",
    "p2p_links_count",
    "cpu_core_id_base",
    "simd_id_base",
    "max_waves_per_simd",
    "lds_size_in_kb",
    "gds_size_in_kb",
    "num_gws",
    "wave_front_size",
    "array_count",
    "simd_arrays_per_engine",
    "cu_per_simd_array",
    "simd_per_cu",
    "max_slots_scratch_cu",
    "gfx_target_version",
    "vendor_id",
    "device_id",
    "location_id",
    "domain",
    "drm_render_minor",
    "hive_id",
    "num_sdma_engines",
    "num_sdma_xgmi_engines",
    "num_sdma_queues_per_engine",
    "num_cp_queues",
    "max_engine_clk_fcompute",
    "local_mem_size",
    "fw_version",
    "capability",
    "debug_prop",
    "sdma_fw_version",
    "unique_id",
    "num_xcc",
    "max_engine_clk_ccompute",
]


def _bdf_parts(bdf: str) -> tuple[int, int, int, int]:
    m = re.match(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", bdf)
    if not m:
        raise ValueError(f"not a lower-case BDF: {bdf!r}")
    return int(m[1], 16), int(m[2], 16), int(m[3], 16), int(m[4])


def location_id(bdf: str) -> int:
    """``0000:63:00.0`` -> 0x6300: the KFD encoding, ``(bus << 8) | (dev << 3) | fn``."""
    _, bus, dev, fn = _bdf_parts(bdf)
    return (bus << 8) | (dev << 3) | fn


@dataclass
class FakeXcp:
    """One partition of an MI300-class GPU on the platform device ``amdgpu_xcp.<xcp>``.

    ``index`` (1..7) is the partition number KFD puts in the BDF function bits. ``kfd_node`` None: the
    partition has DRM minors but KFD does not list it (spare render nodes in SPX/DPX mode).
    ``card``/``render`` None: that minor is absent (the registration failed, e.g. past 64 primaries).
    """

    xcp: int
    index: int
    card: int | None
    render: int | None
    kfd_node: int | None = None
    gpu_id: int | None = None
    kfd_properties: str | None = None  # verbatim text; drm_render_minor is rewritten to ``render``
    kfd_name: str | None = None
    separator: str = "."  # the kernel names it amdgpu_xcp.N; "_" for the spelling k8s-device-plugin globs

    @property
    def name(self) -> str:
        return f"amdgpu_xcp{self.separator}{self.xcp}"


@dataclass
class FakeGpu:
    """One amdgpu PCI function. Every attribute file can be dropped with ``omit`` (its file name) or made
    unreadable with ``unreadable`` (the file becomes a directory, so reading it fails with EISDIR; root
    ignores permission bits, and this stands in for EBUSY/ENODATA during a reset)."""

    bdf: str
    card: int | None = None
    render: int | None = None
    kfd_node: int | None = None  # None: no KFD topology node for this GPU
    unique_id: int | None = 0x5A4AD1C2A8BA3E1F  # written as amdgpu does, %016x; KFD gets it in decimal
    device_id: int = 0x740F
    vendor_id: int = 0x1002
    gpu_id: int | None = None
    kfd_properties: str | None = None  # verbatim text from a capture; drm_render_minor is rewritten
    kfd_name: str | None = None
    kfd_location: str | None = None  # the BDF KFD reports, when it must disagree with ``bdf``
    numa_node: int = -1
    product_name: str = "AMD Instinct MI210"
    vbios: str = "113-D67301-063"
    vram_total: int | None = 68_702_699_520
    vram_used: int | None = 10_485_760
    busy_percent: int | None = 0
    temps_millidegrees: tuple[tuple[str, int], ...] = (("edge", 35000), ("junction", 38000), ("mem", 33000))
    power_microwatts: int | None = 42_000_000
    power_file: str = "power1_average"  # power1_input on newer ASICs
    link_speed: str | None = "16.0 GT/s PCIe"
    link_width: int | None = 16
    ras: tuple[tuple[str, str], ...] = (("umc", "ue: 0\nce: 0\n"), ("gfx", "ue: 0\nce: 0\n"))
    compute_partition: str | None = None  # "SPX".."CPX"; None: the file does not exist (pre-MI300)
    memory_partition: str | None = None
    connectors: tuple[str, ...] = ()  # ("DP-1",) -> card<N>-DP-1
    partitions: tuple[FakeXcp, ...] = ()
    omit: frozenset[str] = frozenset()
    unreadable: frozenset[str] = frozenset()
    pci_path: str | None = None  # parents under devices/, e.g. "pci0000:00/0000:00:01.1"; derived by default
    hwmon: int | None = None  # hwmonN number; assigned in order when None
    pci_class: int = 0x038000  # 0x030000 for a VGA-class part (consumer cards, APUs); Instinct parts are 0x038000
    subsystem: tuple[int, int] = (0x1002, 0x0C34)  # subsystem vendor, subsystem device
    # An on-card AMD PCIe switch (Vega/Navi boards: upstream port 0x1478 at bus-2, downstream 0x1479 at bus-1):
    # the GPU function then reports the switch-internal link, and the slot link is on the upstream port.
    # Value: the upstream port's (current_link_speed, current_link_width).
    card_switch: tuple[str, int] | None = None
    # More files, written after (and over) the defaults: ``files`` relative to the PCI function (``pp_dpm_sclk``,
    # ``ras/gpu_vram_bad_pages``), ``hwmon_files`` in its hwmonN directory (``fan1_input``, ``freq1_label``).
    files: dict[str, str] = field(default_factory=dict)
    hwmon_files: dict[str, str] = field(default_factory=dict)
    # The binary ``gpu_metrics`` table of the PCI function (``gpu_metrics_file``, or a real capture); None: no file.
    gpu_metrics: bytes | None = None
    gfx_target_version: int = 90010  # KFD's gfx_target_version of generated properties (90010: gfx90a, MI210)


@dataclass
class FakeOther:
    """A DRM device that is not amdgpu: BMC (ast/mgag200), iGPU (i915/xe), simpledrm, virtio-gpu.

    ``bdf`` set: a PCI function bound to ``driver``. Otherwise ``device_path`` (under ``devices/``) is the
    parent, e.g. ``platform/simple-framebuffer.0``.
    """

    driver: str
    card: int | None
    render: int | None = None
    bdf: str | None = None
    device_path: str | None = None
    connectors: tuple[str, ...] = ()
    pci_path: str | None = None  # parents under devices/ of a PCI function; derived from the BDF by default
    pci_class: int = 0x030000
    pci_id: tuple[int, int] | None = None  # (vendor, device) for the uevent's PCI_ID/MODALIAS; omitted when None

    @classmethod
    def bmc(cls, bdf: str = "0000:c2:00.0", card: int = 0, driver: str = "ast") -> FakeOther:
        return cls(driver=driver, card=card, bdf=bdf, connectors=("VGA-1",))

    @classmethod
    def igpu(cls, bdf: str = "0000:00:02.0", card: int = 0, render: int = 128, driver: str = "i915") -> FakeOther:
        return cls(driver=driver, card=card, render=render, bdf=bdf, connectors=("eDP-1", "DP-1"))

    @classmethod
    def simpledrm(cls, card: int = 0) -> FakeOther:
        return cls(driver="simple-framebuffer", card=card, device_path="platform/simple-framebuffer.0")

    @classmethod
    def virtio(cls, card: int = 0, render: int = 128) -> FakeOther:
        return cls(driver="virtio_gpu", card=card, render=render, device_path="pci0000:00/0000:00:02.0/virtio0")


@dataclass
class NodeAttrs:
    """Permission override for one /dev node (path relative to ``dev``): None keeps the default."""

    mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass
class FakeRoot:
    """The built tree and the spec it was built from. Paths: ``root``, ``sys``, ``dev``, ``proc``, ``etc``."""

    root: Path
    gpus: list[FakeGpu]
    others: list[FakeOther] = field(default_factory=list)
    kfd_major: int | None = 510  # None: amdgpu loaded without KFD (no /dev/kfd, no class/kfd)
    cpu_nodes: int = 1  # KFD CPU nodes, numbered first
    modes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MODES))
    groups: dict[str, str | int] = field(default_factory=lambda: dict(DEFAULT_GROUPS))  # kind -> name or gid
    gids: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_GIDS))  # the host's etc/group
    overrides: dict[str, NodeAttrs] = field(default_factory=dict)
    by_path: bool = True
    group_file: str | None = None  # verbatim etc/group; None: generated from ``gids``
    kfd_generation_id: str = "2\n"
    kfd_system_properties: str = "platform_oem 0\nplatform_id 0\nplatform_rev 0\n"
    # what kernels before ~5.x also had: class/drm/<legacy_drm> (the "ttm" virtual device, "amdttm" with the
    # amdgpu-pro DKMS module) and, in each card's drm/ directory, the compatibility link controlD<64+N> -> card<N>
    legacy_drm: str | None = None
    # False: no character devices under dev/ (mknod needs CAP_MKNOD in the initial user namespace, which a user
    # does not have): dev/dri is there, empty, as in a container given no --device
    device_nodes: bool = True
    # node name ("kfd", "renderD128") -> the major:minor sysfs and /dev give it instead of the driver's: numbers
    # with a driver on the machine the tests run on (1:3, /dev/null's), so that the kernel opens the node
    devs: dict[str, tuple[int, int]] = field(default_factory=dict)

    def dev_of(self, name: str, major: int, minor: int) -> tuple[int, int]:
        return self.devs.get(name, (major, minor))

    # sys/module/amdgpu/version: what an amdgpu-dkms build writes ("6.12.12"); None: the in-tree driver (no file)
    driver_version: str | None = None

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def state_dir(self) -> Path:
        return self.root / "var" / "lib" / "rocm-watchdog"

    @property
    def boot_id_path(self) -> Path:
        return self.proc / "sys" / "kernel" / "random" / "boot_id"

    def config(self, **overrides: object) -> Config:
        """A Config pointing every host path into this root. ``check`` does not ask the kernel (``check_probe``
        off): the fake nodes' numbers (510:0, 226:N) have no driver here, so every open would say ENXIO. A test of
        the probe turns it on, on nodes the kernel can open (``devs``)."""
        kw: dict[str, object] = {
            "rootfs": self.root,
            "sysfs": self.sys,
            "devfs": self.dev,
            "procfs": self.proc,
            "state_dir": self.state_dir,
            "check_probe": False,
        }
        kw.update(overrides)
        return Config(**kw)  # type: ignore[arg-type]

    def gpu(self, bdf: str) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.bdf == bdf:
                return gpu
        raise KeyError(bdf)

    def pci_dir(self, bdf: str) -> Path:
        """The PCI function's directory under ``sys/devices`` (the resolved target of class/drm/X/device)."""
        for gpu in self.gpus:
            if gpu.bdf == bdf:
                return self.sys / "devices" / _pci_rel(gpu.bdf, gpu.pci_path, gpu.card_switch is not None)
        for other in self.others:
            if other.bdf == bdf:
                return self.sys / "devices" / _pci_rel(bdf, other.pci_path)
        raise KeyError(bdf)

    # ---- mutators -------------------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Rebuild ``sys`` and ``dev`` from the spec (what a reboot does); etc, proc, state dir are kept."""
        for sub in (self.sys, self.dev):
            if sub.exists():
                shutil.rmtree(sub)
        _build_sys(self)
        _build_dev(self)

    def reboot(self, boot_id: str | None = None) -> str:
        """A reboot: new boot id, tree rebuilt from the (possibly changed) spec. Returns the new boot id."""
        new = boot_id or str(uuid.uuid4())
        self.set_boot_id(new)
        self.rebuild()
        return new

    def renumber(
        self, bdf: str, card: int | None = None, render: int | None = None, kfd_node: int | None = None
    ) -> None:
        """Give a GPU new card/render/KFD numbers (None: unchanged) and rebuild."""
        gpu = self.gpu(bdf)
        if card is not None:
            gpu.card = card
        if render is not None:
            gpu.render = render
        if kfd_node is not None:
            gpu.kfd_node = kfd_node
        self.rebuild()

    def staged_rebuild(self) -> Callable[[], None]:
        """``rebuild`` for a tree that is read while it changes (``rocm-watchdog demo``): the new ``sys`` and
        ``dev`` are built aside now (``<root>/.staged``), and the function returned swaps each in with one atomic
        exchange (renameat2 RENAME_EXCHANGE), so that a reader sees the old tree or the new one, never a half-built
        one."""
        staging = self.root / ".staged"
        if staging.exists():
            shutil.rmtree(staging)
        shadow = dataclasses.replace(self, root=staging)
        _build_sys(shadow)
        _build_dev(shadow)

        def swap_in() -> None:
            for name in ("sys", "dev"):
                _exchange(staging / name, self.root / name)
            shutil.rmtree(staging)

        return swap_in

    def relabel(self) -> None:
        """Set every node's mode, owner and group from the spec again, in place (what ``udevadm trigger`` does
        after a rule or a group changed); nothing is rebuilt."""
        for rel, kind in _node_kinds(self):
            path = self.dev / rel
            if path.exists():
                mode, uid, gid = _node_attrs(self, rel, kind)
                os.chown(path, uid, gid, follow_symlinks=False)
                os.chmod(path, mode)

    def swap_probe_order(self, a: str, b: str, boot_id: str | None = None, rebuild: bool = True) -> str:
        """A reboot in which GPUs ``a`` and ``b`` probed in each other's place: they trade card, render and KFD
        node numbers, and their partitions (pairwise, so the two need as many) their numbers and amdgpu_xcp
        devices too. Returns the new boot id. ``rebuild`` False: only the spec changes (then ``staged_rebuild``
        and ``set_boot_id`` it)."""
        ga, gb = self.gpu(a), self.gpu(b)
        if len(ga.partitions) != len(gb.partitions):
            raise ValueError(f"{a} has {len(ga.partitions)} partitions, {b} {len(gb.partitions)}: cannot trade places")
        for x, y in zip(ga.partitions, gb.partitions, strict=True):
            x.xcp, y.xcp = y.xcp, x.xcp
        pairs: list[tuple[FakeGpu | FakeXcp, FakeGpu | FakeXcp]] = [(ga, gb)]
        pairs += zip(ga.partitions, gb.partitions, strict=True)
        for p, q in pairs:
            p.card, q.card = q.card, p.card
            p.render, q.render = q.render, p.render
            p.kfd_node, q.kfd_node = q.kfd_node, p.kfd_node
        if not rebuild:
            return boot_id or str(uuid.uuid4())
        return self.reboot(boot_id)

    def remove_gpu(self, bdf: str) -> FakeGpu:
        gpu = self.gpu(bdf)
        self.gpus.remove(gpu)
        self.rebuild()
        return gpu

    def add_gpu(self, gpu: FakeGpu) -> None:
        self.gpus.append(gpu)
        self.rebuild()

    def add_other(self, other: FakeOther) -> None:
        self.others.append(other)
        self.rebuild()

    def remove_other(self, other: FakeOther) -> None:
        self.others.remove(other)
        self.rebuild()

    def set_kfd_major(self, major: int | None) -> None:
        self.kfd_major = major
        self.rebuild()

    def set_partition(self, bdf: str, compute: str | None, memory: str | None = None) -> None:
        """Write current_compute_partition / current_memory_partition in place (no rebuild)."""
        gpu = self.gpu(bdf)
        gpu.compute_partition = compute
        gpu.memory_partition = memory if memory is not None else gpu.memory_partition
        d = self.pci_dir(bdf)
        for name, value in (("current_compute_partition", compute), ("current_memory_partition", memory)):
            if value is not None:
                (d / name).write_text(value + "\n")

    def write_attr(self, bdf: str, name: str, text: str) -> None:
        """Overwrite one attribute file of a GPU's PCI function (relative path, e.g. ``ras/umc_err_count``)."""
        (self.pci_dir(bdf) / name).write_text(text)

    def chmod(self, path: str, mode: int) -> None:
        """Change a /dev node's mode (path relative to ``dev``: ``kfd``, ``dri/renderD128``); survives rebuilds."""
        self.overrides.setdefault(path, NodeAttrs()).mode = mode
        os.chmod(self.dev / path, mode)

    def chown(self, path: str, uid: int | None = None, gid: int | None = None) -> None:
        attrs = self.overrides.setdefault(path, NodeAttrs())
        if uid is not None:
            attrs.uid = uid
        if gid is not None:
            attrs.gid = gid
        os.chown(self.dev / path, -1 if uid is None else uid, -1 if gid is None else gid, follow_symlinks=False)

    def chgrp(self, path: str, group: str | int) -> None:
        """chgrp by host group name (looked up in ``gids``) or numeric gid."""
        self.chown(path, gid=self.gids[group] if isinstance(group, str) else group)

    def set_gid(self, group: str, gid: int, relabel: bool = True) -> None:
        """The host's gid of ``group`` changed (an OS reinstall). ``relabel``: the nodes follow, as udev would."""
        self.gids[group] = gid
        _write_etc(self)
        if relabel:
            self.rebuild()

    def set_boot_id(self, boot_id: str) -> None:
        self.boot_id_path.parent.mkdir(parents=True, exist_ok=True)
        self.boot_id_path.write_text(boot_id + "\n")

    def mknod(self, path: str, major: int, minor: int, mode: int = 0o660, uid: int = 0, gid: int = 0) -> None:
        """Replace (or create) a /dev node with an arbitrary major:minor, e.g. a stale static /dev entry."""
        target = self.dev / path
        if target.exists() or target.is_symlink():
            target.unlink()
        _mknod(target, major, minor, mode, uid, gid)

    def remove_node(self, path: str) -> None:
        (self.dev / path).unlink()

    def write_file(self, path: str, text: str) -> Path:
        """A file of the root outside sys and dev, by its host path: ``/etc/udev/rules.d/70-kfd.rules``,
        ``/opt/rocm/.info/version``. Kept across rebuilds."""
        target = self.root / path.lstrip("/")
        _write(target, text)
        return target

    def mask(self, path: str) -> None:
        """Replace a file of the root by a symlink to /dev/null (how udev rules and systemd units are masked)."""
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        os.symlink("/dev/null", target)

    def add_kfd_process(self, pid: int, vram: dict[int, int] | None = None) -> None:
        """KFD's ``class/kfd/kfd/proc/<pid>`` with a ``vram_<gpu_id>`` file per GPU (gone at the next rebuild)."""
        d = self.sys / "class" / "kfd" / "kfd" / "proc" / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        for gpu_id, used in (vram or {}).items():
            _write(d / f"vram_{gpu_id}", f"{used}\n")


# ---- building -------------------------------------------------------------------------------------------


def build_root(
    tmp_path: Path,
    gpus: list[FakeGpu],
    others: list[FakeOther] | None = None,
    *,
    kfd_major: int | None = 510,
    cpu_nodes: int = 1,
    modes: dict[str, int] | None = None,
    groups: dict[str, str | int] | None = None,
    gids: dict[str, int] | None = None,
    group_file: str | None = None,
    by_path: bool = True,
    legacy_drm: str | None = None,
    boot_id: str = "8f2d4c1e-6b3a-4f59-9d0e-2a7c5b1e3f40",
    kfd_generation_id: str = "2\n",
    kfd_system_properties: str | None = None,
    name: str = "root",
    device_nodes: bool = True,
    devs: dict[str, tuple[int, int]] | None = None,
) -> FakeRoot:
    """Build a fake root at ``tmp_path/name``. ``modes``/``groups`` are per node kind (card, render, kfd);
    ``gids`` maps host group names to gids for etc/group (``group_file`` replaces it verbatim); ``devs`` gives
    nodes other numbers (``{"kfd": (1, 3)}``: /dev/null's, which the kernel opens)."""
    root = FakeRoot(
        root=tmp_path / name,
        gpus=list(gpus),
        others=list(others or []),
        kfd_major=kfd_major,
        cpu_nodes=cpu_nodes,
        modes={**DEFAULT_MODES, **(modes or {})},
        groups={**DEFAULT_GROUPS, **(groups or {})},
        gids=dict(gids if gids is not None else DEFAULT_GIDS),
        by_path=by_path,
        group_file=group_file,
        kfd_generation_id=kfd_generation_id,
        legacy_drm=legacy_drm,
        device_nodes=device_nodes,
        devs=dict(devs or {}),
    )
    if kfd_system_properties is not None:
        root.kfd_system_properties = kfd_system_properties
    root.root.mkdir(parents=True, exist_ok=False)
    root.state_dir.mkdir(parents=True)
    _write_etc(root)
    root.set_boot_id(boot_id)
    root.rebuild()
    return root


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(link: Path, target: Path) -> None:
    """A relative symlink the way sysfs writes them: ``../../../0000:03:00.0`` for an ancestor."""
    link.parent.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(target, link.parent)
    if all(part == ".." for part in Path(rel).parts):
        rel = os.path.join(rel, "..", target.name)
    os.symlink(rel, link)


def _mknod(path: Path, major: int, minor: int, mode: int, uid: int, gid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chown(path, uid, gid)
    os.chmod(path, mode)  # mknod's mode went through the umask


def _write_etc(root: FakeRoot) -> None:
    if root.group_file is not None:
        text = root.group_file
    else:
        lines = ["root:x:0:", "daemon:x:1:", "adm:x:4:", "tty:x:5:", "disk:x:6:"]
        lines += [f"{name}:x:{gid}:" for name, gid in sorted(root.gids.items(), key=lambda kv: kv[1])]
        lines += ["nogroup:x:65534:"]
        text = "\n".join(lines) + "\n"
    _write(root.etc / "group.new", text)
    os.replace(root.etc / "group.new", root.etc / "group")  # a reader sees the old file or the new one
    _write(root.etc / "passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n")


def _pci_rel(bdf: str, pci_path: str | None, card_switch: bool = False) -> str:
    """The PCI function's path under ``devices/``: ``pci0000:60/0000:60:01.1/0000:63:00.0`` by default.

    A function on bus 0 sits on the root bus itself, ``pci0000:00/0000:00:02.0`` (an iGPU, a virtio GPU).
    ``card_switch``: behind an on-card switch, ``.../0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0``.
    """
    if pci_path is not None:
        return f"{pci_path}/{bdf}"
    domain, bus, _, _ = _bdf_parts(bdf)
    root_bus = bus & 0xE0
    host = f"pci{domain:04x}:{root_bus:02x}"
    if bus == 0:
        return f"{host}/{bdf}"
    port = f"{domain:04x}:{root_bus:02x}:01.1"
    if card_switch:
        if bus - 2 <= root_bus:
            raise ValueError(f"{bdf}: an on-card switch needs two bus numbers below the GPU's on the same root")
        return f"{host}/{port}/{domain:04x}:{bus - 2:02x}:00.0/{domain:04x}:{bus - 1:02x}:00.0/{bdf}"
    return f"{host}/{port}/{bdf}"


def _pci_uevent(
    driver: str, bdf: str, pci_class: int, pci_id: tuple[int, int] | None, subsys: tuple[int, int] | None
) -> str:
    """A PCI function's uevent as the PCI core writes it: ``PCI_CLASS`` is ``%X`` of the class (``30000``)."""
    lines = [f"DRIVER={driver}", f"PCI_CLASS={pci_class:X}"]
    if pci_id is not None:
        lines.append(f"PCI_ID={pci_id[0]:04X}:{pci_id[1]:04X}")
        if subsys is not None:
            lines.append(f"PCI_SUBSYS_ID={subsys[0]:04X}:{subsys[1]:04X}")
    lines.append(f"PCI_SLOT_NAME={bdf}")
    if pci_id is not None and subsys is not None:
        cls, sub, prog = pci_class >> 16, (pci_class >> 8) & 0xFF, pci_class & 0xFF
        lines.append(
            f"MODALIAS=pci:v0000{pci_id[0]:04X}d0000{pci_id[1]:04X}sv0000{subsys[0]:04X}sd0000{subsys[1]:04X}"
            f"bc{cls:02X}sc{sub:02X}i{prog:02X}"
        )
    return "\n".join(lines) + "\n"


def _write_bridges(root: FakeRoot, pci: Path, gpu: FakeGpu) -> None:
    """Attribute files of the PCI bridges above a GPU: the CPU root port (vendor 0x1022) and, with
    ``card_switch``, the card's own upstream (0x1478) and downstream (0x1479) switch ports."""
    chain: list[Path] = []  # the bridges, nearest first, up to the host bridge pciDDDD:BB
    for d in pci.parents:
        if not _BDF_DIR.match(d.name):
            break
        chain.append(d)
    for height, bridge in enumerate(chain):  # 0 is the GPU's own parent
        on_card = gpu.card_switch is not None and height < 2
        upstream = on_card and height == 1
        files = {
            "vendor": "0x1002\n" if on_card else "0x1022\n",
            "device": ("0x1478\n" if upstream else "0x1479\n") if on_card else "0x1483\n",
            "class": "0x060400\n",
        }
        if upstream and gpu.card_switch is not None:
            files["current_link_speed"] = f"{gpu.card_switch[0]}\n"
            files["current_link_width"] = f"{gpu.card_switch[1]}\n"
        for name, text in files.items():
            if not (bridge / name).exists():
                _write(bridge / name, text)


_BDF_DIR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _drm_minor(root: FakeRoot, parent: Path, name: str, minor: int, connectors: tuple[str, ...] = ()) -> None:
    """``<parent>/drm/<name>`` with dev, uevent, device and subsystem links; class/drm and dev/char links."""
    sys = root.sys
    d = parent / "drm" / name
    d.mkdir(parents=True)
    major, number = root.dev_of(name, DRM_MAJOR, minor)
    _write(d / "dev", f"{major}:{number}\n")
    _write(d / "uevent", f"MAJOR={major}\nMINOR={number}\nDEVNAME=dri/{name}\nDEVTYPE=drm_minor\n")
    _link(d / "device", parent)
    _link(d / "subsystem", sys / "class" / "drm")
    _link(sys / "class" / "drm" / name, d)
    if not os.path.lexists(sys / "dev" / "char" / f"{major}:{number}"):  # two nodes on one borrowed number
        _link(sys / "dev" / "char" / f"{major}:{number}", d)
    for conn in connectors:
        c = d / f"{name}-{conn}"
        c.mkdir()
        _write(c / "uevent", "DEVTYPE=drm_connector\n")
        _write(c / "status", "disconnected\n")
        _write(c / "enabled", "disabled\n")
        _write(c / "dpms", "Off\n")
        _link(c / "device", d)
        _link(sys / "class" / "drm" / c.name, c)


def _kfd_props(
    root_gpu: FakeGpu, render: int | None, location: str, verbatim: str | None, unique_id: int | None
) -> str:
    if verbatim is not None:
        text = verbatim
        if render is not None:
            text = re.sub(r"(?m)^drm_render_minor \d+$", f"drm_render_minor {render}", text)
        return text
    domain, *_ = _bdf_parts(location)
    values = {
        "simd_count": 416,
        "mem_banks_count": 1,
        "io_links_count": 1,
        "simd_id_base": 2147487744,
        "max_waves_per_simd": 8,
        "lds_size_in_kb": 64,
        "num_gws": 64,
        "wave_front_size": 64,
        "array_count": 8,
        "simd_arrays_per_engine": 1,
        "cu_per_simd_array": 14,
        "simd_per_cu": 4,
        "max_slots_scratch_cu": 32,
        "gfx_target_version": root_gpu.gfx_target_version,
        "vendor_id": root_gpu.vendor_id,
        "device_id": root_gpu.device_id,
        "location_id": location_id(location),
        "domain": domain,
        "drm_render_minor": render or 0,
        "num_sdma_engines": 2,
        "num_cp_queues": 24,
        "max_engine_clk_fcompute": 1700,
        "fw_version": 92,
        "unique_id": unique_id or 0,
        "num_xcc": 1,
        "max_engine_clk_ccompute": 2450,
    }
    return "".join(f"{key} {values.get(key, 0)}\n" for key in _KFD_GPU_KEYS)


def _cpu_props(node: int) -> str:
    values = {"cpu_cores_count": 64, "mem_banks_count": 1, "io_links_count": 1, "cpu_core_id_base": 64 * node}
    keys = [k for k in _KFD_GPU_KEYS[:29]] + ["max_engine_clk_ccompute"]
    return "".join(f"{key} {values.get(key, 0)}\n" for key in keys)


def _build_sys(root: FakeRoot) -> None:
    sys = root.sys
    bdfs = [g.bdf for g in root.gpus] + [o.bdf for o in root.others if o.bdf]
    if len(set(bdfs)) != len(bdfs):
        raise ValueError(f"two fake devices share a PCI address: {sorted(bdfs)}")
    for d in ("class/drm", "class/hwmon", "dev/char", "bus/pci/devices", "bus/platform/devices", "module/amdgpu"):
        (sys / d).mkdir(parents=True, exist_ok=True)
    _write(sys / "class" / "drm" / "version", "drm 1.1.0 20060810\n")
    if root.driver_version is not None:
        _write(sys / "module" / "amdgpu" / "version", root.driver_version + "\n")
    drv = sys / "bus" / "pci" / "drivers" / "amdgpu"
    drv.mkdir(parents=True)
    for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
        _write(drv / name, "")
    _link(drv / "module", sys / "module" / "amdgpu")
    (sys / "module" / "amdgpu" / "drivers").mkdir()
    _link(sys / "module" / "amdgpu" / "drivers" / "pci:amdgpu", drv)

    hwmon_next = 0
    kfd_nodes: dict[int, tuple[str, str | None, int | None]] = {}  # node -> (properties, name, gpu_id)
    for gpu in root.gpus:
        pci = sys / "devices" / _pci_rel(gpu.bdf, gpu.pci_path, gpu.card_switch is not None)
        pci.mkdir(parents=True)
        _write_bridges(root, pci, gpu)
        _link(pci / "driver", drv)
        _link(pci / "subsystem", sys / "bus" / "pci")
        _link(drv / gpu.bdf, pci)
        _link(sys / "bus" / "pci" / "devices" / gpu.bdf, pci)
        attrs: dict[str, str | None] = {
            "uevent": _pci_uevent("amdgpu", gpu.bdf, gpu.pci_class, (gpu.vendor_id, gpu.device_id), gpu.subsystem),
            "vendor": f"0x{gpu.vendor_id:04x}\n",
            "device": f"0x{gpu.device_id:04x}\n",
            "subsystem_vendor": f"0x{gpu.subsystem[0]:04x}\n",
            "subsystem_device": f"0x{gpu.subsystem[1]:04x}\n",
            "class": f"0x{gpu.pci_class:06x}\n",
            "numa_node": f"{gpu.numa_node}\n",
            "unique_id": f"{gpu.unique_id:016x}\n" if gpu.unique_id is not None else None,
            "serial_number": "\n",
            "product_name": f"{gpu.product_name}\n",
            "product_number": "\n",
            "vbios_version": f"{gpu.vbios}\n",
            "mem_info_vram_total": None if gpu.vram_total is None else f"{gpu.vram_total}\n",
            "mem_info_vram_used": None if gpu.vram_used is None else f"{gpu.vram_used}\n",
            "mem_info_vram_vendor": "hynix\n",
            "gpu_busy_percent": None if gpu.busy_percent is None else f"{gpu.busy_percent}\n",
            "mem_busy_percent": "0\n",
            "current_link_speed": None if gpu.link_speed is None else f"{gpu.link_speed}\n",
            "current_link_width": None if gpu.link_width is None else f"{gpu.link_width}\n",
            "max_link_speed": "16.0 GT/s PCIe\n",
            "max_link_width": "16\n",
            "pcie_replay_count": "0\n",
            "power_dpm_force_performance_level": "auto\n",
            "current_compute_partition": None if gpu.compute_partition is None else f"{gpu.compute_partition}\n",
            "available_compute_partition": "SPX, DPX, QPX, CPX\n" if gpu.compute_partition else None,
            "current_memory_partition": None if gpu.memory_partition is None else f"{gpu.memory_partition}\n",
        }
        for fname, text in attrs.items():
            if text is not None and fname not in gpu.omit:
                _write(pci / fname, text)
        if gpu.power_microwatts is not None or gpu.temps_millidegrees or gpu.hwmon_files:
            hw_num = gpu.hwmon if gpu.hwmon is not None else hwmon_next
            hwmon_next = max(hwmon_next, hw_num) + 1
            hw = pci / "hwmon" / f"hwmon{hw_num}"
            hw.mkdir(parents=True)
            _write(hw / "name", "amdgpu\n")
            _link(hw / "device", pci)
            _link(sys / "class" / "hwmon" / hw.name, hw)
            for i, (label, value) in enumerate(gpu.temps_millidegrees, start=1):
                for fname, text in ((f"temp{i}_input", f"{value}\n"), (f"temp{i}_label", f"{label}\n")):
                    if fname not in gpu.omit:
                        _write(hw / fname, text)
            if gpu.power_microwatts is not None and gpu.power_file not in gpu.omit:
                _write(hw / gpu.power_file, f"{gpu.power_microwatts}\n")
                if "power1_cap" not in gpu.omit:
                    _write(hw / "power1_cap", "300000000\n")
            for fname, text in gpu.hwmon_files.items():
                _write(hw / fname, text)
        if gpu.ras:
            _write(pci / "ras" / "features", "feature mask: 0x3fbf\n")
            for block, text in gpu.ras:
                if f"{block}_err_count" not in gpu.omit:
                    _write(pci / "ras" / f"{block}_err_count", text)
        for fname, text in gpu.files.items():
            _write(pci / fname, text)
        if gpu.gpu_metrics is not None and "gpu_metrics" not in gpu.omit:
            (pci / "gpu_metrics").write_bytes(gpu.gpu_metrics)
        for fname in gpu.unreadable:
            target = pci / fname
            if target.exists():
                target.unlink()
            target.mkdir(parents=True)
        if gpu.card is not None:
            _drm_minor(root, pci, f"card{gpu.card}", gpu.card, tuple(gpu.connectors))
        if gpu.render is not None:
            _drm_minor(root, pci, f"renderD{gpu.render}", gpu.render)
        if gpu.kfd_node is not None:
            location = gpu.kfd_location or gpu.bdf
            props = _kfd_props(gpu, gpu.render, location, gpu.kfd_properties, gpu.unique_id)
            kfd_nodes[gpu.kfd_node] = (props, gpu.kfd_name, gpu.gpu_id)
        for part in gpu.partitions:
            plat = sys / "devices" / "platform" / part.name
            plat.mkdir(parents=True)
            _write(plat / "uevent", "MODALIAS=platform:amdgpu_xcp\n")
            _write(plat / "modalias", "platform:amdgpu_xcp\n")
            _link(plat / "subsystem", sys / "bus" / "platform")
            _link(sys / "bus" / "platform" / "devices" / part.name, plat)
            if part.card is not None:
                _drm_minor(root, plat, f"card{part.card}", part.card)
            if part.render is not None:
                _drm_minor(root, plat, f"renderD{part.render}", part.render)
            if part.kfd_node is not None:
                domain, bus, dev, _ = _bdf_parts(gpu.bdf)
                location = f"{domain:04x}:{bus:02x}:{dev:02x}.{part.index}"
                props = _kfd_props(gpu, part.render, location, part.kfd_properties, gpu.unique_id)
                kfd_nodes[part.kfd_node] = (props, part.kfd_name, part.gpu_id)

    for other in root.others:
        if other.bdf is not None:
            parent = sys / "devices" / _pci_rel(other.bdf, other.pci_path)
            odrv = sys / "bus" / "pci" / "drivers" / other.driver
            uevent = _pci_uevent(other.driver, other.bdf, other.pci_class, other.pci_id, other.pci_id)
            _link(sys / "bus" / "pci" / "devices" / other.bdf, parent)
        else:
            assert other.device_path is not None, "FakeOther needs a bdf or a device_path"
            parent = sys / "devices" / other.device_path
            odrv = sys / "bus" / "platform" / "drivers" / other.driver
            uevent = f"DRIVER={other.driver}\n"
        parent.mkdir(parents=True, exist_ok=True)
        _write(parent / "uevent", uevent)
        odrv.mkdir(parents=True, exist_ok=True)
        _link(parent / "driver", odrv)
        _link(odrv / parent.name, parent)
        if other.card is not None:
            _drm_minor(root, parent, f"card{other.card}", other.card, other.connectors)
        if other.render is not None:
            _drm_minor(root, parent, f"renderD{other.render}", other.render)

    if root.legacy_drm is not None:
        ttm = sys / "devices" / "virtual" / "drm" / root.legacy_drm
        _write(ttm / "uevent", "")
        _link(ttm / "subsystem", sys / "class" / "drm")
        _link(sys / "class" / "drm" / root.legacy_drm, ttm)
        for name in os.listdir(sys / "class" / "drm"):
            m = re.match(r"^card([0-9]+)$", name)
            if m and int(m[1]) < 64:
                card_dir = Path(os.path.realpath(sys / "class" / "drm" / name))
                os.symlink(name, card_dir.parent / f"controlD{64 + int(m[1])}")

    if root.kfd_major is not None:
        kfd = sys / "devices" / "virtual" / "kfd" / "kfd"
        kfd.mkdir(parents=True)
        kfd_major, kfd_minor = root.dev_of("kfd", root.kfd_major, 0)
        _write(kfd / "dev", f"{kfd_major}:{kfd_minor}\n")
        _write(kfd / "uevent", f"MAJOR={kfd_major}\nMINOR={kfd_minor}\nDEVNAME=kfd\n")
        (sys / "class" / "kfd").mkdir(parents=True)
        _link(sys / "class" / "kfd" / "kfd", kfd)
        if not os.path.lexists(sys / "dev" / "char" / f"{kfd_major}:{kfd_minor}"):
            _link(sys / "dev" / "char" / f"{kfd_major}:{kfd_minor}", kfd)
        topo = kfd / "topology"
        _write(topo / "generation_id", root.kfd_generation_id)
        _write(topo / "system_properties", root.kfd_system_properties)
        for n in range(root.cpu_nodes):
            if n in kfd_nodes:
                raise ValueError(f"KFD node {n} is a CPU node (cpu_nodes={root.cpu_nodes})")
            _write(topo / "nodes" / str(n) / "properties", _cpu_props(n))
            _write(topo / "nodes" / str(n) / "gpu_id", "0\n")
            _write(topo / "nodes" / str(n) / "name", "\n")
        for n, (props, node_name, gpu_id) in kfd_nodes.items():
            node_dir = topo / "nodes" / str(n)
            _write(node_dir / "properties", props)
            if gpu_id is not None:
                _write(node_dir / "gpu_id", f"{gpu_id}\n")
            if node_name is not None:
                _write(node_dir / "name", f"{node_name}\n")


def _node_attrs(root: FakeRoot, rel: str, kind: str) -> tuple[int, int, int]:
    group = root.groups[kind]
    gid = root.gids.get(group, 0) if isinstance(group, str) else group
    mode, uid = root.modes[kind], 0
    o = root.overrides.get(rel)
    if o is not None:
        mode = o.mode if o.mode is not None else mode
        uid = o.uid if o.uid is not None else uid
        gid = o.gid if o.gid is not None else gid
    return mode, uid, gid


def _node_kinds(root: FakeRoot) -> list[tuple[str, str]]:
    """Every node of the spec as (path relative to dev, kind)."""
    nodes = [("kfd", "kfd")] if root.kfd_major is not None else []
    numbers: list[tuple[int | None, int | None]] = []
    for gpu in root.gpus:
        numbers.append((gpu.card, gpu.render))
        numbers += [(p.card, p.render) for p in gpu.partitions]
    numbers += [(o.card, o.render) for o in root.others]
    for card, render in numbers:
        nodes += [(f"dri/card{card}", "card")] if card is not None else []
        nodes += [(f"dri/renderD{render}", "render")] if render is not None else []
    return nodes


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories atomically (renameat2 RENAME_EXCHANGE, Linux 3.15, glibc 2.28); where the file
    system or libc cannot, with two renames (a reader may then find ``b`` missing for a moment)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(a))
    aside = b.with_name(b.name + ".old")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _build_dev(root: FakeRoot) -> None:
    dri = root.dev / "dri"
    dri.mkdir(parents=True)
    os.chmod(dri, 0o755)
    if not root.device_nodes:
        return
    if root.kfd_major is not None:
        _mknod(root.dev / "kfd", *root.dev_of("kfd", root.kfd_major, 0), *_node_attrs(root, "kfd", "kfd"))
    by_path = dri / "by-path"
    # (by-path name prefix, card, render)
    devices: list[tuple[str, int | None, int | None]] = []
    for gpu in root.gpus:
        devices.append((f"pci-{gpu.bdf}", gpu.card, gpu.render))
        devices += [(f"platform-{p.name}", p.card, p.render) for p in gpu.partitions]
    for other in root.others:
        prefix = f"pci-{other.bdf}" if other.bdf else f"platform-{Path(other.device_path or 'x').name}"
        devices.append((prefix, other.card, other.render))
    for prefix, card, render in devices:
        for kind, number, suffix in (("card", card, "card"), ("render", render, "render")):
            if number is None:
                continue
            name = f"card{number}" if kind == "card" else f"renderD{number}"
            _mknod(dri / name, *root.dev_of(name, DRM_MAJOR, number), *_node_attrs(root, f"dri/{name}", kind))
            if root.by_path:
                by_path.mkdir(exist_ok=True)
                os.symlink(f"../{name}", by_path / f"{prefix}-{suffix}")


# ---- the real captures ------------------------------------------------------------------------------------


def capture_dir(capture: str) -> Path:
    """The directory of the KFD topology capture named ``capture``, from the first of ``KFD_CAPTURE_DIRS`` that
    has it."""
    for parent in KFD_CAPTURE_DIRS:
        if (parent / capture).is_dir():
            return parent / capture
    raise FileNotFoundError(f"no KFD topology capture {capture!r} in {', '.join(map(str, KFD_CAPTURE_DIRS))}")


def _capture_nodes(capture: str) -> Path:
    base = capture_dir(capture)
    return base / "topology" / "nodes" if (base / "topology").is_dir() else base / "nodes"


def capture_gpus(capture: str, *, first_card: int = 1, product_name: str = "AMD Instinct") -> list[FakeGpu]:
    """FakeGpus for a KFD topology capture (``capture_dir``): one per physical GPU, its KFD node
    properties copied verbatim, partitions (nodes whose ``location_id`` function bits are set) as FakeXcp.

    Numbering follows the kernel: every DRM device takes a card and a render minor at the same time, so
    ``card = first_card + (render - 128)`` (``first_card=1`` when a BMC holds card0). An MI300-class GPU
    (one with partitions) always has 7 ``amdgpu_xcp`` devices; the ones KFD does not list get the render
    minors of the gaps, and one whose card would pass 63 is not created (registration fails past 64
    primary minors on kernels without extended minors, which is what the 63-node MI300X capture shows;
    newer kernels register it at card192 instead, as ROCm/k8s-device-plugin#157 shows: build that with
    FakeXcp(card=192) by hand).
    """
    nodes_dir = _capture_nodes(capture)
    gpus: dict[tuple[int, int], FakeGpu] = {}
    parts: dict[tuple[int, int], list[FakeXcp]] = {}
    for n in sorted(int(x) for x in os.listdir(nodes_dir) if x.isdigit()):
        text = (nodes_dir / str(n) / "properties").read_text()
        props = {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}
        if props["simd_count"] == 0:
            continue
        gpu_id_path, name_path = nodes_dir / str(n) / "gpu_id", nodes_dir / str(n) / "name"
        gpu_id = int(gpu_id_path.read_text()) if gpu_id_path.exists() else None
        name = name_path.read_text().strip() or None if name_path.exists() else None
        domain, loc, render = props.get("domain", 0), props["location_id"], props["drm_render_minor"]
        key = (domain, loc & ~7)
        if loc & 7 == 0:
            if key in gpus:
                # mi25-1gpu-plus-copy: node 2 is an upstream-made copy of node 1 at the same address
                raise ValueError(f"{capture}: nodes {gpus[key].kfd_node} and {n} share location_id {loc}")
            bdf = f"{domain:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1F:02x}.0"
            gpus[key] = FakeGpu(
                bdf=bdf,
                card=first_card + render - 128,
                render=render,
                kfd_node=n,
                unique_id=props.get("unique_id"),
                device_id=props["device_id"],
                gpu_id=gpu_id,
                kfd_properties=text,
                kfd_name=name,
                product_name=product_name,
            )
        else:
            parts.setdefault(key, []).append(
                FakeXcp(
                    xcp=-1,
                    index=loc & 7,
                    card=first_card + render - 128,
                    render=render,
                    kfd_node=n,
                    gpu_id=gpu_id,
                    kfd_properties=text,
                    kfd_name=name,
                )
            )
    out: list[FakeGpu] = []
    xcp_next = 0
    for key, gpu in gpus.items():  # KFD node order, which is the probe order
        listed = {p.index: p for p in parts.get(key, [])}
        if listed:
            gpu.compute_partition = "CPX"
            gpu.memory_partition = "NPS1"
            assert gpu.render is not None
            slots: list[FakeXcp] = []
            for index in range(1, 8):
                part = listed.get(index) or FakeXcp(
                    xcp=-1, index=index, card=first_card + gpu.render - 128 + index, render=gpu.render + index
                )
                part.xcp = xcp_next
                xcp_next += 1
                if part.card is not None and part.card > 63:
                    part.card = part.render = None
                slots.append(part)
            gpu.partitions = tuple(slots)
        out.append(gpu)
    return out


TWO_GPUS = ("0000:03:00.0", "0000:83:00.0")


def two_gpu_root(base: Path, **kw: object) -> FakeRoot:
    """The common test host: two GPUs (03:00.0 as card1/renderD128, 83:00.0 as card2/renderD129) and a BMC on
    card0. ``kw`` goes to ``build_root``."""
    a, b = TWO_GPUS
    return build_root(
        base,
        [FakeGpu(a, card=1, render=128, kfd_node=1), FakeGpu(b, card=2, render=129, kfd_node=2, unique_id=0x1234)],
        others=[FakeOther.bmc("0000:63:00.0", card=0)],
        **kw,  # type: ignore[arg-type]
    )


# ---- telemetry presets (issue 10) ---------------------------------------------------------------------------
# The file sets amdgpu gives two very different parts, in the formats amdgpu_pm.c, the swsmu ppt code and
# amdgpu_ras.c print. Values are plausible for the part, not a capture. Pass ``files``/``hwmon_files`` to
# override single files, ``omit`` to drop defaults.


def radeon_gpu(
    bdf: str = "0000:0b:00.0", card: int = 1, render: int = 128, kfd_node: int | None = 1, **kw: object
) -> FakeGpu:
    """A Radeon RX 7900 XTX (Navi 31, VGA class): fan and PWM, a vddgfx rail, hwmon sclk/mclk, a deep-sleep
    vclk, a dclk table with no level starred; no RAS directory, no partitions, no fclk/socclk/dcefclk tables,
    no product_name (consumer boards have no FRU), no unique_id."""
    files = {
        "pp_dpm_sclk": "0: 500Mhz \n1: 1800Mhz *\n2: 2526Mhz \n",  # hwmon freq1_input is exact and wins
        "pp_dpm_mclk": "0: 96Mhz \n1: 456Mhz \n2: 772Mhz \n3: 1249Mhz *\n",
        "pp_dpm_vclk": "S: 29Mhz *\n0: 500Mhz\n1: 1800Mhz\n",
        "pp_dpm_dclk": "0: 500Mhz \n1: 1600Mhz \n",
        "mem_busy_percent": "7\n",
        "mem_info_gtt_total": "17179869184\n",
        "mem_info_gtt_used": "118636544\n",
        "mem_info_vis_vram_total": "25753026560\n",
        "mem_info_vis_vram_used": "1627340800\n",
        "pcie_replay_count": "0\n",
    }
    hwmon = {
        "power1_cap": "355000000\n",
        "power1_cap_max": "402000000\n",
        "power1_cap_min": "320000000\n",
        "fan1_input": "1187\n",
        "pwm1": "77\n",
        "in0_input": "812\n",
        "in0_label": "vddgfx\n",
        "freq1_input": "1825000000\n",
        "freq1_label": "sclk\n",
        "freq2_input": "1249000000\n",
        "freq2_label": "mclk\n",
    }
    spec: dict[str, object] = {
        "device_id": 0x744C,
        "pci_class": 0x030000,
        "subsystem": (0x1002, 0x0E3B),
        "unique_id": None,
        "vbios": "113-D7020100-102",
        "vram_total": 25_753_026_560,
        "vram_used": 1_627_340_800,
        "busy_percent": 3,
        "temps_millidegrees": (("edge", 45000), ("junction", 52000), ("mem", 60000)),
        "power_microwatts": 38_000_000,
        "power_file": "power1_average",
        "ras": (),
        "omit": frozenset({"product_name"}),
        "files": files,
        "hwmon_files": hwmon,
    }
    spec.update(kw)
    return FakeGpu(bdf, card=card, render=render, kfd_node=kfd_node, **spec)  # type: ignore[arg-type]


def mi300x_gpu(
    bdf: str = "0000:05:00.0", card: int = 1, render: int = 128, kfd_node: int | None = 1, **kw: object
) -> FakeGpu:
    """An Instinct MI300X (OAM, passively cooled): pp_dpm tables for sclk (in deep sleep), mclk, fclk, socclk,
    vclk, dclk and no dcefclk (no display engine), power1_input and a 750 W cap, no fan, no pwm1, no voltage
    rails, no hwmon clocks, RAS with two retired pages and one pending, SPX/NPS1 partition files."""
    files = {
        "pp_dpm_sclk": "S: 19Mhz *\n0: 500Mhz\n1: 2100Mhz\n",
        "pp_dpm_mclk": "0: 900Mhz \n1: 1100Mhz \n2: 1200Mhz \n3: 1300Mhz *\n",
        "pp_dpm_fclk": "0: 1200Mhz \n1: 1400Mhz \n2: 1600Mhz \n3: 2000Mhz *\n",
        "pp_dpm_socclk": "0: 1200Mhz *\n1: 1400Mhz \n2: 1600Mhz \n3: 1700Mhz \n",
        "pp_dpm_vclk": "0: 914Mhz *\n1: 1143Mhz \n",
        "pp_dpm_dclk": "0: 711Mhz *\n1: 1400Mhz \n",
        "mem_busy_percent": "12\n",
        "mem_info_gtt_total": "1099511627776\n",
        "mem_info_gtt_used": "56623104\n",
        "mem_info_vis_vram_total": "206158430208\n",
        "mem_info_vis_vram_used": "1610612736\n",
        "pcie_replay_count": "3\n",
        "ras/gpu_vram_bad_pages": (
            "0x0001a2b3 : 0x00001000 : R\n0x0001a2b4 : 0x00001000 : R\n0x00c0ffee : 0x00001000 : P\n"
        ),
    }
    hwmon = {"power1_cap": "750000000\n", "power1_cap_max": "750000000\n", "power1_cap_min": "0\n"}
    spec: dict[str, object] = {
        "device_id": 0x74A1,
        "product_name": "AMD Instinct MI300X",
        "vbios": "113-M3000100-102",
        "vram_total": 206_158_430_208,
        "vram_used": 1_610_612_736,
        "busy_percent": 0,
        "temps_millidegrees": (("junction", 41000), ("mem", 36000)),
        "power_microwatts": 172_000_000,
        "power_file": "power1_input",
        "compute_partition": "SPX",
        "memory_partition": "NPS1",
        "files": files,
        "hwmon_files": hwmon,
    }
    spec.update(kw)
    return FakeGpu(bdf, card=card, render=render, kfd_node=kfd_node, **spec)  # type: ignore[arg-type]


# ---- gpu_metrics tables (issue 10 item 2) ----------------------------------------------------------------------
# Tables built member by member at the kernel structs' offsets (exporter/fakehost/tables.py); every member not
# given is all ones, "not available", as the kernel leaves a field the firmware does not fill. Values are plausible
# for the part, distinct per GPU, not a capture.

GPU_METRICS_CAPTURES = DATA / "gpu_metrics"
_LAYOUTS = {layout.name: layout for layout in ALL_LAYOUTS}


def gpu_metrics_file(layout: str, fields: dict[str, FieldValue], size: int | None = None) -> bytes:
    """The bytes of a ``gpu_metrics`` file of struct ``layout`` (``gpu_metrics_v1_8``) with ``fields`` set."""
    return pack_table(_LAYOUTS[layout], fields, size=size)


MI300X_XCCS = 8  # compute dies (XCCs) of an MI300X, split evenly among its partitions
MI300X_PARTITIONS = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}


def mi300x_metrics_fields(seed: int, partitions: int = 1) -> dict[str, FieldValue]:
    """gpu_metrics v1.8 fields of an MI300X (smu_v13_0_6) with ``partitions`` XCPs, distinct per ``seed``: each
    XCP has its share of the 8 XCCs, one VCN and 4 JPEG engines (the rest not available), and XGMI links 0-6 up
    with link 7 not available."""
    xccs = MI300X_XCCS // partitions
    xcp_stats: list[FieldValue] = []
    for k in range(partitions):
        base = 10 * seed + k
        xcp_stats.append(
            {
                "gfx_busy_inst": [(base + 7 * j) % 101 for j in range(xccs)],
                "jpeg_busy": [(base + j) % 50 for j in range(4)],
                "vcn_busy": [(3 * base) % 97],
                "gfx_busy_acc": [1_000_000 * base + j for j in range(xccs)],
                "gfx_below_host_limit_ppt_acc": [100 * base + j for j in range(xccs)],
                "gfx_below_host_limit_thm_acc": [200 * base + j for j in range(xccs)],
                "gfx_low_utilization_acc": [300 * base + j for j in range(xccs)],
                "gfx_below_host_limit_total_acc": [400 * base + j for j in range(xccs)],
            }
        )
    return {
        "temperature_hotspot": 40 + seed,
        "temperature_mem": 35 + seed,
        "temperature_vrsoc": 30 + seed,
        "curr_socket_power": 170 + seed,
        "average_gfx_activity": 11 + seed,
        "average_umc_activity": 21 + seed,
        "mem_max_bandwidth": 5300,
        "energy_accumulator": 0x1_2345_6789 + seed * 0x10000,
        "system_clock_counter": 1_700_000_000_000 + seed,
        "accumulation_counter": 500_000 + seed,
        "prochot_residency_acc": 1 + seed,
        "ppt_residency_acc": 4000 + seed,
        "socket_thm_residency_acc": 30 + seed,
        "vr_thm_residency_acc": 0,
        "hbm_thm_residency_acc": 2 + seed,
        "gfxclk_lock_status": 0,
        "pcie_link_width": 16,
        "pcie_link_speed": 320,
        "xgmi_link_width": 16,
        "xgmi_link_speed": 32,
        "gfx_activity_acc": 123_456 + seed,
        "mem_activity_acc": 654_321 + seed,
        "pcie_bandwidth_acc": 9_999_999 + seed,
        "pcie_bandwidth_inst": 3 + seed,
        "pcie_l0_to_recov_count_acc": 5 + seed,
        "pcie_replay_count_acc": 40 + seed,
        "pcie_replay_rover_count_acc": seed,
        "pcie_nak_sent_count_acc": 6 + seed,
        "pcie_nak_rcvd_count_acc": 7 + seed,
        "xgmi_read_data_acc": [1_000_000 * (seed + 1) + link for link in range(7)],
        "xgmi_write_data_acc": [2_000_000 * (seed + 1) + link for link in range(7)],
        "xgmi_link_status": [1, 1, 1, 1, 1, 1, 0 if seed % 2 else 1, 2],
        "firmware_timestamp": 1_000_000 + seed,
        "current_gfxclk": [132 + seed] * MI300X_XCCS,
        "current_socclk": [1200] * 4,
        "current_vclk0": [914] * 4,
        "current_dclk0": [711] * 4,
        "current_uclk": 1300,
        "num_partition": partitions,
        "xcp_stats": xcp_stats,
        "pcie_lc_perf_other_end_recovery": 8 + seed,
    }


def mi300x_node(
    base: Path,
    modes: tuple[str, ...] = ("CPX", "DPX", "SPX", "SPX", "SPX", "SPX", "SPX", "SPX"),
    *,
    gpu_metrics: bool = True,
    name: str = "mi300x-node",
    kfd_capture: str | None = None,
    device_nodes: bool = True,
    **kw: object,
) -> FakeRoot:
    """An 8x MI300X node (``mi300x_gpu`` each), GPU i in compute mode ``modes[i]`` with its partitions 1..n-1 as
    amdgpu_xcp devices KFD lists, and (``gpu_metrics``) a v1.8 table ``mi300x_metrics_fields(i, n)`` on each PCI
    function. Cards, render minors, KFD nodes (after 2 CPU nodes) and amdgpu_xcp numbers follow probe order.
    ``kw`` goes to ``mi300x_gpu`` for every GPU.

    ``kfd_capture`` (``"mi300x-cpx-8gpu"``, shipped in ``data/kfd-topology``): the GPUs, their partitions, PCI
    addresses, numbers and KFD node properties are the capture's (``capture_gpus``, a BMC on card0) instead, each
    with the MI300X preset's sysfs files and a v1.8 table for its partition count; ``modes`` is not used."""
    if kfd_capture is not None:
        return _mi300x_capture_node(base, kfd_capture, gpu_metrics, name, device_nodes, **kw)
    gpus: list[FakeGpu] = []
    minor = 0  # card1/renderD128 for the first DRM device
    kfd_node = 2
    xcp = 0
    for i, mode in enumerate(modes):
        bdf = f"0000:{0x05 + 0x10 * i:02x}:00.0"
        n = MI300X_PARTITIONS[mode]
        parts: list[FakeXcp] = []
        gpu_minor, gpu_node = minor, kfd_node
        for index in range(1, n):
            parts.append(FakeXcp(xcp=xcp, index=index, card=2 + minor + index - 1, render=129 + minor + index - 1,
                                 kfd_node=kfd_node + index))  # fmt: skip
            xcp += 1
        spec: dict[str, object] = {
            "compute_partition": mode,
            "memory_partition": "NPS1",
            "unique_id": 0x4D49_3330_0000 + i,
            "numa_node": i // 4,
            "partitions": tuple(parts),
            **kw,
        }
        if gpu_metrics:
            spec["gpu_metrics"] = gpu_metrics_file("gpu_metrics_v1_8", mi300x_metrics_fields(i, n))
        gpus.append(mi300x_gpu(bdf, card=1 + gpu_minor, render=128 + gpu_minor, kfd_node=gpu_node, **spec))
        minor += n
        kfd_node += n
    return build_root(base, gpus, cpu_nodes=2, name=name, device_nodes=device_nodes)


def _mi300x_capture_node(
    base: Path, capture: str, gpu_metrics: bool, name: str, device_nodes: bool, **kw: object
) -> FakeRoot:
    gpus: list[FakeGpu] = []
    for i, found in enumerate(capture_gpus(capture, product_name="AMD Instinct MI300X")):
        n = 1 + len(found.partitions)
        mode = next((m for m, count in MI300X_PARTITIONS.items() if count == n), None)
        if mode is None:
            raise ValueError(f"{capture}: {found.bdf} has {n} partitions, not an MI300X compute mode")
        spec: dict[str, object] = {
            "compute_partition": mode,
            "memory_partition": "NPS1",
            "numa_node": i // 4,
            "unique_id": found.unique_id,
            "device_id": found.device_id,
            "gpu_id": found.gpu_id,
            "kfd_properties": found.kfd_properties,
            "kfd_name": found.kfd_name,
            "partitions": found.partitions,
            **kw,
        }
        if gpu_metrics:
            spec["gpu_metrics"] = gpu_metrics_file("gpu_metrics_v1_8", mi300x_metrics_fields(i, n))
        assert found.card is not None and found.render is not None, found.bdf  # a PCI function registers both
        gpus.append(mi300x_gpu(found.bdf, card=found.card, render=found.render, kfd_node=found.kfd_node, **spec))
    return build_root(base, gpus, others=[FakeOther.bmc()], cpu_nodes=2, name=name, device_nodes=device_nodes)


def radeon_metrics_fields() -> dict[str, FieldValue]:
    """gpu_metrics v1.3 fields of the ``radeon_gpu`` RX 7900 XTX (smu_v13_0_0 fills v1.3): PPT0 and TEMP_HOTSPOT
    throttling, one VCN pair, no HBM."""
    return {
        "temperature_edge": 45,
        "temperature_hotspot": 52,
        "temperature_mem": 60,
        "temperature_vrgfx": 48,
        "temperature_vrsoc": 47,
        "temperature_vrmem": 50,
        "average_gfx_activity": 3,
        "average_umc_activity": 7,
        "average_mm_activity": 2,
        "average_socket_power": 38,
        "energy_accumulator": 0x7_0000_1234,
        "system_clock_counter": 987_654_321_000,
        "average_gfxclk_frequency": 1790,
        "average_socclk_frequency": 1200,
        "average_uclk_frequency": 1249,
        "average_vclk0_frequency": 29,
        "average_dclk0_frequency": 29,
        "current_gfxclk": 1825,
        "current_socclk": 1200,
        "current_uclk": 1249,
        "current_vclk0": 29,
        "current_dclk0": 25,
        "throttle_status": 0x11,
        "current_fan_speed": 1187,
        "pcie_link_width": 16,
        "pcie_link_speed": 160,
        "gfx_activity_acc": 5_000_000,
        "mem_activity_acc": 9_000_000,
        "firmware_timestamp": 0x1234_5678,
        "voltage_soc": 900,
        "voltage_gfx": 812,
        "voltage_mem": 1250,
        "indep_throttle_status": 1 << 0 | 1 << 36,  # PPT0, TEMP_HOTSPOT
    }


def mi100_gpu(
    bdf: str = "0000:43:00.0", card: int = 1, render: int = 128, kfd_node: int | None = 1, **kw: object
) -> FakeGpu:
    """An Instinct MI100 (Arcturus, 0x738c) carrying the real v1.3 capture ``mi100_arcturus_v1_3_a.bin``
    (tests/fixtures/gpu_metrics) as its gpu_metrics: hwmon edge/junction/mem and power1_average, pp_dpm tables for
    sclk, mclk, socclk and fclk, no vclk/dclk table, no partitions."""
    files = {
        "pp_dpm_sclk": "0: 300Mhz *\n1: 1502Mhz \n",
        "pp_dpm_mclk": "0: 1200Mhz *\n",
        "pp_dpm_socclk": "0: 1000Mhz *\n1: 1090Mhz \n",
        "pp_dpm_fclk": "0: 1402Mhz *\n",
        "mem_busy_percent": "0\n",
    }
    spec: dict[str, object] = {
        "device_id": 0x738C,
        "product_name": "AMD Instinct MI100",
        "vbios": "113-D3430401-100",
        "vram_total": 34_342_961_152,
        "temps_millidegrees": (("edge", 45000), ("junction", 49000), ("mem", 45000)),
        "power_microwatts": 36_000_000,
        "power_file": "power1_average",
        "files": files,
        "gpu_metrics": (GPU_METRICS_CAPTURES / "mi100_arcturus_v1_3_a.bin").read_bytes(),
    }
    spec.update(kw)
    return FakeGpu(bdf, card=card, render=render, kfd_node=kfd_node, **spec)  # type: ignore[arg-type]


_BDF = re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")


def capture_for_host(capture: Path, bdfs: list[str], dest: Path) -> Path:
    """A copy of ``capture`` whose PCI addresses are the host's, in order of first appearance (case kept): a tool
    reports the GPUs of the host it runs on (the stub tools of the benchmarks and the long tests)."""
    mapping: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        found = match.group(0)
        new = mapping.setdefault(found.lower(), bdfs[len(mapping) % len(bdfs)])
        return new.upper() if found != found.lower() else new

    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(_BDF.sub(replace, capture.read_text(errors="replace")))
    return dest
