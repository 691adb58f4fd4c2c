"""The sysfs source: amdgpu GPUs, their DRM minors, KFD topology nodes and cheap state, keyed by PCI address.

Pure file reads under ``--path.sysfs``, no subprocess: cheap enough for every interval. The identity walk
follows sysfs-devfs.md section 3:

1. amdgpu PCI functions: ``bus/pci/drivers/amdgpu/<bdf>``, plus any ``class/drm`` minor whose parent's
   uevent says ``DRIVER=amdgpu`` (a root without ``bus/``, as in the procfs fixture).
2. ``class/drm/card<N>`` and ``renderD<N>`` (connectors such as ``card1-DP-1`` are not minors), each
   resolved through its ``device`` link to a PCI function or a platform device. Parents that are not
   amdgpu (ast/mgag200 BMC, i915/xe, simpledrm, virtio) become ``OtherDrmDevice``.
3. KFD ``class/kfd/kfd/topology/nodes/*``: GPU nodes join a DRM render minor on ``drm_render_minor``,
   checked against ``domain``/``location_id`` and ``unique_id``. MI300-class partitions live on
   ``devices/platform/amdgpu_xcp.N`` (``amdgpu_xcp_N`` accepted too); their BDF, parent and partition
   index come from KFD only (the function bits of ``location_id``).

4. Per-interval state of each amdgpu PCI function (``with_state``): VRAM, busy, PCIe link, RAS counters,
   the telemetry of ``GpuTelemetry`` (clocks, power cap, fan, voltages, GTT, bad pages...) and the binary
   ``gpu_metrics`` table (``GpuMetricsReading``: throttling, residency counters, activity, XGMI, PCIe counters,
   energy). Partitions have no such files of their own: each gets its XCP's activity from its physical GPU's
   table (``GpuIdentity.xcp``, XCP index = partition index).

A missing file leaves that one field None. An unreadable one (EBUSY/ENODATA during a GPU reset,
EACCES, EIO, a directory or FIFO in its place, a dangling link) or unparsable one does too, adds a line to
``SysfsSnapshot.warnings`` and a ``SysfsReadErrors`` count; it never fails the GPU or the walk. A well-formed
reading outside its physical range (the parsers reject it) is counted as ``out_of_range`` but is no warning
line: a sensor glitch, not garbage. The source logs each (GPU, file, error) once.

No read can wedge the source (``exporter.sources.deadline``): every file is opened with ``O_NONBLOCK`` and read
only when it is a regular file, and ``SysfsSource`` reads each GPU's files in a daemon thread of its own under a
per-GPU deadline. A GPU whose read passes the deadline (a hung SMU blocks ``read()`` inside the driver) is
reported with ``sysfs_read="timeout"`` and its last identity, without state; the other GPUs are read as usual,
and no new read of it starts until the stuck one returns, so at most one thread per GPU is ever stuck.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from functools import lru_cache, partial
from typing import Literal, TypeVar, cast

import msgspec
from msgspec.structs import replace

from exporter.config import Config
from exporter.logging import get_logger
from exporter.model import ParseError
from exporter.model.gpu import (
    DrmMinor,
    GpuIdentity,
    GpuMetricsReading,
    GpuTelemetry,
    KfdNode,
    OtherDrmDevice,
    RasCount,
    SysfsReadErrors,
    SysfsSnapshot,
)
from exporter.parsers import sysfs as p
from exporter.parsers.common import normalize_bdf
from exporter.sources import SourceError, deadline

T = TypeVar("T")

log = get_logger("sysfs")

# How long one GPU's files may take to read. A healthy GPU takes milliseconds (each pp_dpm_* or hwmon read asks
# the SMU); a hung one blocks in read() for as long as it is hung.
GPU_READ_DEADLINE_SECONDS = 2.0

_CARD = re.compile(r"^card([0-9]+)$")
_RENDER = re.compile(r"^renderD([0-9]+)$")
_BDF_NAME = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_XCP = re.compile(r"^amdgpu_xcp[._][0-9]+$")
_HWMON_INPUT = re.compile(r"^(temp|in|freq)([0-9]+)_input$")
_MAX_READ = 1 << 16  # sysfs attributes are one page; anything larger is not an attribute we read
# the binary gpu_metrics table: 3872 bytes for v1.8, one page at most (the attribute's buffer)
GPU_METRICS_FILE = "gpu_metrics"
_MAX_GPU_METRICS_READ = 1 << 16
# ras/gpu_vram_bad_pages is a binary attribute of 28 bytes per page with no size limit of its own
_MAX_BAD_PAGES_READ = 1 << 22
# pp_dpm_<domain> clock tables, in export order; vclk1/dclk1 are the second VCN instance (Navi 2x/3x)
DPM_DOMAINS = ("sclk", "mclk", "fclk", "socclk", "dcefclk", "vclk", "dclk", "vclk1", "dclk1")
# amdgpu_pm.c labels freq1 "sclk" and freq2 "mclk"; the mapping stands in for a missing label
_FREQ_DOMAINS = {1: "sclk", 2: "mclk"}

_KINDS = {
    "ast": "bmc",
    "mgag200": "bmc",
    "aspeed": "bmc",
    "hibmc-drm": "bmc",
    "i915": "igpu",
    "xe": "igpu",
    "simpledrm": "firmware",
    "simple-framebuffer": "firmware",
    "efifb": "firmware",
    "vesafb": "firmware",
    "efidrm": "firmware",
    "vesadrm": "firmware",
    "ofdrm": "firmware",
    "virtio_gpu": "virtual",
    "virtio-pci": "virtual",
    "vkms": "virtual",
    "bochs-drm": "virtual",
    "qxl": "virtual",
    "vmwgfx": "virtual",
    "cirrus": "virtual",
    "cirrus-qemu": "virtual",
    "hyperv_drm": "virtual",
    "vboxvideo": "virtual",
}
# platform devices the kernel's sysfb code creates for a boot framebuffer
_FIRMWARE_PARENTS = ("simple-framebuffer", "simpledrm", "efi-framebuffer", "vesa-framebuffer", "platform-framebuffer")


def other_kind(driver: str | None, parent: str | None) -> str:
    """What a non-amdgpu DRM device probably is, from its driver (or platform device) name."""
    for key in (driver, parent):
        if key is None:
            continue
        kind = _KINDS.get(key)
        if kind is None and key.startswith(_FIRMWARE_PARENTS):
            kind = "firmware"
        if kind is None and key.startswith("virtio"):
            kind = "virtual"
        if kind is not None:
            return kind
    return "other"


class _OutOfRange(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _integer(text: str) -> int | None:
    try:
        return p.parse_int_value(text)
    except ParseError:
        return None


def _ranged(parse: Callable[[str], T | None]) -> Callable[[str], T | None]:
    """``parse`` for a quantity with a physical range. The parsers turn a well-formed integer outside the range
    into None (``parse_busy_percent``: a ParseError); here that case raises _OutOfRange instead, so the reader
    counts it and the source logs it, where a None alone would make the value vanish without a word."""

    def checked(text: str) -> T | None:
        try:
            value = parse(text)
        except ParseError:
            raw = _integer(text)
            if raw is None:
                raise
            raise _OutOfRange(raw) from None
        if value is None:
            raw = _integer(text)
            if raw is not None:
                raise _OutOfRange(raw)
        return value

    return checked


_BUSY = _ranged(p.parse_busy_percent)
_CELSIUS = _ranged(p.parse_millidegrees)
_VOLTS = _ranged(p.parse_millivolts)
_HERTZ = _ranged(p.parse_hwmon_hertz)
_WATTS = _ranged(p.parse_microwatts)
_RPM = _ranged(p.parse_fan_rpm)
_PWM = _ranged(p.parse_pwm_ratio)


# A node's properties do not change between walks (64 of them on a partitioned MI300X host, read twice per
# interval): parsed once per distinct text. The dict is only read (kfd_node_from_properties).
_kfd_properties = lru_cache(maxsize=1024)(p.parse_kfd_properties)


class FixedValues:
    """What the files that never change while their sysfs directory exists said, kept between walks.

    A GPU's identity (vendor and device ids, ``unique_id``, product name, VBIOS version, NUMA node), its totals
    (VRAM, visible VRAM, GTT), its power cap limits and sensor labels and the bridges above it are set when the
    driver binds it; a KFD node's ``properties``, ``gpu_id`` and ``name`` when the topology is built; a DRM
    minor's ``dev`` when the minor is registered. The kernel gives a re-created directory (the GPU's ``drm``
    directory when it is bound again, a KFD node when the topology is rebuilt for a new partition mode, a minor)
    a new inode number, so each directory's values are kept under its inode and read again when it changes: one
    ``stat`` instead of a read per file, 205 reads instead of 354 in a walk of 8 MI210s. Only values read
    successfully are kept; a file that could not be read is tried again on the next walk. The telemetry source
    and the devices source each keep one; a walk without one (``check``, ``once``, tests) reads every file.
    """

    def __init__(self) -> None:
        self._dirs: dict[str, tuple[tuple[int, int], dict[str, object]]] = {}
        self._seen: set[str] = set()

    def of(self, directory: str) -> dict[str, object] | None:
        """The values kept for ``directory`` (empty when it is new or was re-created); None if it cannot be
        stat'ed (its files are then read, and their errors reported, as usual)."""
        try:
            st = os.stat(directory)
        except OSError:
            return None
        self._seen.add(directory)
        # with its change time: a file system that reuses a freed inode number (a fake root on ext4) still tells
        # a re-created directory apart; kernfs sets it when it creates the directory
        key = (st.st_ino, st.st_ctime_ns)
        entry = self._dirs.get(directory)
        if entry is None or entry[0] != key:
            entry = self._dirs[directory] = (key, {})
        return entry[1]

    def end_walk(self) -> None:
        """Forget the directories this walk did not visit (removed GPUs, minors, KFD nodes)."""
        for directory in self._dirs.keys() - self._seen:
            del self._dirs[directory]
        self._seen = set()


class _Reader:
    """File access with the source's error policy: missing -> None quietly, unreadable -> None + warning + a
    counted error. ``for_gpu`` gives a reader of its own to each GPU, so a GPU read in another thread (and
    perhaps abandoned there) never writes into the walk's lists.

    Paths are plain strings joined with ``/``: a walk reads some 40 files per GPU every interval, and pathlib's
    parsing of each joined path cost three times the reads themselves (BENCHMARKS.md, idle cost)."""

    def __init__(
        self,
        sysfs: str | tuple[str, str],  # the root, or the root and its resolved path
        pci_bus: str = "",
        device: str | None = None,
        fixed_values: FixedValues | None = None,
    ) -> None:
        self.bases = (sysfs, os.path.realpath(sysfs)) if isinstance(sysfs, str) else sysfs
        self.fixed_values = fixed_values
        self.pci_bus = pci_bus
        self.device = device
        self.warnings: list[str] = []
        self.errors: list[SysfsReadErrors] = []
        self.reads_ok = 0
        self.reads_failed = 0
        self.reading: str | None = None  # the file being read now: the one a stuck read is blocked on
        # directory -> its entries, listed once per walk: a file the listing lacks is absent without an open()
        # that fails (most telemetry files are absent on most GPUs, and each failed open costs an exception)
        self._listings: dict[str, frozenset[str] | None] = {}

    def for_gpu(self, pci_bus: str, device: str) -> _Reader:
        return _Reader(self.bases, pci_bus, device, self.fixed_values)

    def merge(self, other: _Reader) -> None:
        self.warnings += other.warnings
        self.errors += other.errors

    def rel(self, path: str) -> str:
        """The path relative to the sysfs root, for messages."""
        for base in self.bases:
            if path.startswith(base.rstrip("/") + "/"):
                return path[len(base.rstrip("/")) + 1 :]
        return path

    def in_device(self, path: str) -> str | None:
        """The path relative to this reader's GPU directory, if it is under it."""
        if self.device is not None and path.startswith(self.device + "/"):
            return path[len(self.device) + 1 :]
        return None

    def _fail(self, path: str, error: str, detail: str, variant: str = "") -> None:
        name = self.in_device(path) or self.rel(path)
        self.errors.append(SysfsReadErrors(self.pci_bus, name, error, 1, detail, variant))

    def text(self, path: str, limit: int = _MAX_READ) -> str | None:
        data = self.data(path, limit)
        return None if data is None else data.decode("utf-8", errors="replace")

    def _absent(self, path: str) -> bool:
        """Whether ``path``'s directory listing (made once per walk) shows it is not there."""
        directory, _, name = path.rpartition("/")
        try:
            names = self._listings[directory]
        except KeyError:
            try:
                names = frozenset(os.listdir(directory))
            except OSError:
                names = None  # unlistable: open() will say what is wrong
            self._listings[directory] = names
        return names is not None and name not in names

    def data(self, path: str, limit: int = _MAX_READ) -> bytes | None:
        """The bytes of ``path`` (at most ``limit``), with the policy of the class; None when absent, unreadable
        or larger than ``limit``."""
        if self.device is not None and self._absent(path):  # a GPU's own files: many of them are absent
            return None  # absent: this GPU does not have the file
        self.reading = path
        try:
            data = deadline.read_regular(path, limit)
        except (FileNotFoundError, NotADirectoryError) as exc:
            if isinstance(exc, FileNotFoundError) and os.path.islink(path):
                # A sysfs attribute is never a link: this one points nowhere.
                self.warnings.append(f"{self.rel(path)}: unreadable (ENOENT: dangling link)")
                self._fail(path, "ENOENT", "dangling link")
                self.reads_failed += 1
            return None  # absent: this GPU does not have the file
        except OSError as exc:
            kind = deadline.error_kind(exc)
            self.warnings.append(f"{self.rel(path)}: unreadable ({kind}: {exc.strerror})")
            self._fail(path, kind, str(exc.strerror))
            self.reads_failed += 1
            return None
        self.reads_ok += 1
        if len(data) > limit:
            # a truncated table would be a wrong count, not a partial one
            self.warnings.append(f"{self.rel(path)}: larger than {limit} bytes, not read")
            self._fail(path, "too_large", f"larger than {limit} bytes")
            return None
        return data

    def value(self, path: str, parse: Callable[[str], T | None], limit: int = _MAX_READ) -> T | None:
        data = self.data(path, limit)
        if data is None:
            return None
        try:
            return parse(data.decode("utf-8", errors="replace"))
        except _OutOfRange as exc:
            self._fail(path, "out_of_range", f"{exc.value} is outside the physical range, rejected")
            return None
        except ParseError as exc:
            self.warnings.append(f"{self.rel(path)}: {exc}")
            self._fail(path, "unparsable", str(exc))
            return None

    def memo(self, directory: str) -> dict[str, object] | None:
        """``directory``'s entry in the walk's ``FixedValues``; None without one."""
        return None if self.fixed_values is None else self.fixed_values.of(directory)

    def fixed(self, memo: dict[str, object] | None, path: str, parse: Callable[[str], T | None]) -> T | None:
        """``value(path, parse)`` of a file whose value is fixed while its directory exists, from ``memo`` (the
        directory's entry in ``FixedValues``) when it is there; None: no memo, read it."""
        if memo is not None and path in memo:
            return cast(T, memo[path])
        value = self.value(path, parse)
        if memo is not None and value is not None:
            memo[path] = value
        return value

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            kind = deadline.error_kind(exc)
            self.warnings.append(f"{self.rel(path)}: cannot list ({kind}: {exc.strerror})")
            self._fail(path, kind, str(exc.strerror))
            return []


class _Parent(msgspec.Struct):
    """A device that owns DRM minors (or an amdgpu PCI function without any)."""

    path: str  # resolved path
    name: str  # basename: a BDF or a platform device name
    bdf: str | None
    driver: str | None
    minors: list[DrmMinor] = msgspec.field(default_factory=list)

    @property
    def card(self) -> DrmMinor | None:
        cards = [m for m in self.minors if m.kind == "card"]
        return min(cards, key=lambda m: m.minor) if cards else None

    @property
    def render(self) -> DrmMinor | None:
        renders = [m for m in self.minors if m.kind == "render"]
        return min(renders, key=lambda m: m.minor) if renders else None


def _driver_of(reader: _Reader, device: str, uevent: dict[str, str]) -> str | None:
    if "DRIVER" in uevent:
        return uevent["DRIVER"] or None
    try:
        return os.path.basename(os.readlink(f"{device}/driver"))
    except OSError:
        return None


def _parent_of(reader: _Reader, real: str) -> _Parent:
    name = os.path.basename(real)
    # DRIVER changes when the device is bound to another driver, which re-creates the drm directory
    uevent = reader.fixed(reader.memo(f"{real}/drm"), f"{real}/uevent", p.parse_uevent) or {}
    bdf = normalize_bdf(name) if _BDF_NAME.match(name) else normalize_bdf(uevent.get("PCI_SLOT_NAME"))
    return _Parent(path=real, name=name, bdf=bdf, driver=_driver_of(reader, real, uevent))


def _resolve_link(link: str) -> str | None:
    """Where a sysfs symlink points, as a normalised absolute path; None if ``link`` is not a symlink.

    One readlink instead of realpath's lstat per component: the kernel's links are relative and nothing
    under ``devices/`` is itself a symlink, so normalising the joined text is exact. ``link``'s directory
    must already be resolved (the caller starts from ``realpath(sysfs)``).
    """
    try:
        target = os.readlink(link)
    except OSError:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(link), target))


def _drm_parent(entry: str) -> str | None:
    """The resolved parent device of a ``class/drm`` entry, or None when it has no ``device``."""
    minor_dir = _resolve_link(entry)
    if minor_dir is not None and os.path.basename(os.path.dirname(minor_dir)) == "drm":
        parent = os.path.dirname(os.path.dirname(minor_dir))  # .../<parent>/drm/<minor>
        if os.path.isdir(parent):
            return parent
    device = os.path.join(entry, "device")  # plain directories (the procfs fixture), or an odd layout
    return os.path.realpath(device) if os.path.exists(device) else None


def _read_drm(reader: _Reader, sysfs: str) -> list[tuple[DrmMinor, str]]:
    """Every card/render minor in ``class/drm`` with its parent's resolved path."""
    out: list[tuple[DrmMinor, str]] = []
    class_drm = os.path.realpath(f"{sysfs}/class/drm")
    for name in reader.listdir(class_drm):
        card, render = _CARD.match(name), _RENDER.match(name)
        if not card and not render:
            continue  # connectors (card1-DP-1), controlD*, version
        entry = f"{class_drm}/{name}"
        real = _drm_parent(entry)
        if real is None:
            reader.warnings.append(f"class/drm/{name}: no device link, skipped")
            continue
        number = int((card or render)[1])  # type: ignore[index]
        dev = reader.fixed(reader.memo(entry), f"{entry}/dev", p.parse_dev)
        if dev is not None and dev[1] != number:
            reader.warnings.append(f"class/drm/{name}: dev {dev[0]}:{dev[1]} does not match the name")
        minor = DrmMinor(
            name=name,
            kind="card" if card else "render",
            minor=number,
            dev=dev,
            parent=None,  # filled in once the parent is known
        )
        out.append((minor, real))
    return out


def _read_kfd(reader: _Reader, sysfs: str) -> tuple[list[KfdNode], tuple[int, int] | None]:
    kfd = f"{sysfs}/class/kfd/kfd"
    kfd_dev = reader.value(f"{kfd}/dev", p.parse_dev)
    nodes_dir = f"{kfd}/topology/nodes"
    numbers = sorted(int(n) for n in reader.listdir(nodes_dir) if n.isdigit())
    nodes: list[KfdNode] = []
    for number in numbers:
        node_dir = f"{nodes_dir}/{number}"
        memo = reader.memo(node_dir)
        props = reader.fixed(memo, f"{node_dir}/properties", _kfd_properties)
        if props is None:
            if os.path.exists(f"{node_dir}/properties"):
                continue  # unreadable or garbage: already a warning
            reader.warnings.append(f"{reader.rel(node_dir)}: no properties file")
            continue
        gpu_id = reader.fixed(memo, f"{node_dir}/gpu_id", _GPU_ID)
        name = reader.fixed(memo, f"{node_dir}/name", p.parse_string)
        try:
            node = p.kfd_node_from_properties(number, props, gpu_id, name)
        except ParseError as exc:
            reader.warnings.append(f"{reader.rel(node_dir)}: {exc}")
            continue
        if node is not None:
            nodes.append(node)
    return nodes, kfd_dev


class _Hwmon(msgspec.Struct):
    """What the amdgpu hwmon directory says: sensors by (index, label), the rest the first value found."""

    temps: list[tuple[int, str, float]] = msgspec.field(default_factory=list)
    voltages: list[tuple[int, str, float]] = msgspec.field(default_factory=list)
    clocks: dict[str, float] = msgspec.field(default_factory=dict)  # freqN_label -> hertz
    power: float | None = None
    cap: float | None = None
    cap_max: float | None = None
    cap_min: float | None = None
    fan_rpm: int | None = None
    pwm: float | None = None


def _first(current: T | None, reader: _Reader, path: str, parse: Callable[[str], T | None]) -> T | None:
    return current if current is not None else reader.value(path, parse)


def _read_hwmon(reader: _Reader, device: str, memo: dict[str, object] | None) -> _Hwmon:
    out = _Hwmon()
    for hw in reader.listdir(f"{device}/hwmon"):
        if not hw.startswith("hwmon"):
            continue
        hw_dir = f"{device}/hwmon/{hw}"
        for name in reader.listdir(hw_dir):
            m = _HWMON_INPUT.match(name)
            if not m:
                continue
            kind, index = m[1], int(m[2])
            if kind == "temp":
                temp = reader.value(f"{hw_dir}/{name}", _CELSIUS)
                if temp is not None:
                    label = reader.fixed(memo, f"{hw_dir}/temp{index}_label", p.parse_string) or f"temp{index}"
                    out.temps.append((index, label, temp))
            elif kind == "in":
                volts = reader.value(f"{hw_dir}/{name}", _VOLTS)
                if volts is not None:
                    label = reader.fixed(memo, f"{hw_dir}/in{index}_label", p.parse_string) or f"in{index}"
                    out.voltages.append((index, label, volts))
            else:
                hertz = reader.value(f"{hw_dir}/{name}", _HERTZ)
                if hertz is not None:
                    domain = reader.fixed(memo, f"{hw_dir}/freq{index}_label", p.parse_string)
                    out.clocks.setdefault(domain or _FREQ_DOMAINS.get(index, f"freq{index}"), hertz)
        if out.power is None:
            # power1_average on older ASICs, power1_input on newer ones (MI300): the average wins when both exist.
            for name in ("power1_average", "power1_input"):
                out.power = reader.value(f"{hw_dir}/{name}", _WATTS)
                if out.power is not None:
                    break
        out.cap = _first(out.cap, reader, f"{hw_dir}/power1_cap", _WATTS)
        if out.cap_max is None:
            out.cap_max = reader.fixed(memo, f"{hw_dir}/power1_cap_max", _WATTS)
        if out.cap_min is None:
            out.cap_min = reader.fixed(memo, f"{hw_dir}/power1_cap_min", _WATTS)
        out.fan_rpm = _first(out.fan_rpm, reader, f"{hw_dir}/fan1_input", _RPM)
        out.pwm = _first(out.pwm, reader, f"{hw_dir}/pwm1", _PWM)
    out.temps.sort()
    out.voltages.sort()
    return out


def _clocks(reader: _Reader, device: str, hwmon: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """The current clock per domain: hwmon's ``freqN_input`` (the SMU's reading, in Hz) where it has the
    domain, else the starred level of ``pp_dpm_<domain>`` (each read of those asks the SMU, so the domains
    hwmon already gave are not read again)."""
    out: list[tuple[str, float]] = []
    for domain in DPM_DOMAINS:
        hertz = hwmon.get(domain)
        if hertz is None:
            hertz = reader.value(f"{device}/pp_dpm_{domain}", p.parse_dpm_clock_hz)
        if hertz is not None:
            out.append((domain, hertz))
    out += sorted((d, hz) for d, hz in hwmon.items() if d not in DPM_DOMAINS)
    return tuple(out)


def _u64(what: str) -> Callable[[str], int | None]:
    return _ranged(partial(p.parse_u64, what=what))


_U64 = {
    name: _u64(name)
    for name in (
        "mem_info_gtt_total",
        "mem_info_gtt_used",
        "mem_info_vis_vram_total",
        "mem_info_vis_vram_used",
        "pcie_replay_count",
    )
}
_GPU_ID = partial(p.parse_int_value, what="gpu_id")


def _read_telemetry(reader: _Reader, device: str, hw: _Hwmon, memo: dict[str, object] | None) -> GpuTelemetry:
    return GpuTelemetry(
        clocks_hertz=_clocks(reader, device, hw.clocks),
        power_cap_watts=hw.cap,
        power_cap_max_watts=hw.cap_max,
        power_cap_min_watts=hw.cap_min,
        fan_speed_rpm=hw.fan_rpm,
        fan_pwm_ratio=hw.pwm,
        voltages_volts=tuple((label, volts) for _, label, volts in hw.voltages),
        memory_busy_ratio=reader.value(f"{device}/mem_busy_percent", _BUSY),
        gtt_total_bytes=reader.fixed(memo, f"{device}/mem_info_gtt_total", _U64["mem_info_gtt_total"]),
        gtt_used_bytes=reader.value(f"{device}/mem_info_gtt_used", _U64["mem_info_gtt_used"]),
        visible_vram_total_bytes=reader.fixed(
            memo, f"{device}/mem_info_vis_vram_total", _U64["mem_info_vis_vram_total"]
        ),
        visible_vram_used_bytes=reader.value(f"{device}/mem_info_vis_vram_used", _U64["mem_info_vis_vram_used"]),
        pcie_replays=reader.value(f"{device}/pcie_replay_count", _U64["pcie_replay_count"]),
        vram_bad_pages=reader.value(
            f"{device}/ras/gpu_vram_bad_pages", p.parse_vram_bad_pages, limit=_MAX_BAD_PAGES_READ
        ),
    )


def _read_gpu_metrics(reader: _Reader, device: str, device_id: str | None) -> GpuMetricsReading | None:
    """The GPU's binary ``gpu_metrics`` table, decoded and normalised; None when the file is absent or empty (the
    driver returns nothing when the SMU gives no table), unreadable, or not a table at all.

    A table decoded with a warning (truncated, a newer or inconsistent revision) gives what it can and counts as
    ``partial``; one that is not a table (fewer than 4 bytes) or of an unknown format counts as ``unparsable``.
    The error carries the header's revision (``variant``): the source logs it once per GPU and revision.
    """
    path = f"{device}/{GPU_METRICS_FILE}"
    data = reader.data(path, _MAX_GPU_METRICS_READ)
    if not data:
        return None
    try:
        from exporter.parsers.gpu_metrics import parse_gpu_metrics  # not for identity-only walks (check)

        table = parse_gpu_metrics(data)
    except ParseError as exc:
        reader.warnings.append(f"{reader.rel(path)}: {exc}")
        reader._fail(path, "unparsable", str(exc))
        return None
    revision = f"v{table.format_revision}.{table.content_revision}"
    warning = table.warnings[0] if table.warnings else None
    if table.layout is None:
        reader.warnings.append(f"{reader.rel(path)}: {warning}")
        reader._fail(path, "unparsable", warning or "no layout", revision)
        return None
    if warning is not None:
        reader.warnings.append(f"{reader.rel(path)}: {revision}: {warning}")
        reader._fail(path, "partial", warning, revision)
    from exporter.parsers.gpu_metrics.reading import gpu_metrics_reading

    return gpu_metrics_reading(table, device_id)


def _read_ras(reader: _Reader, device: str) -> tuple[RasCount, ...]:
    out: list[RasCount] = []
    for name in reader.listdir(f"{device}/ras"):
        if not name.endswith("_err_count"):
            continue
        block = name[: -len("_err_count")]
        count = reader.value(f"{device}/ras/{name}", lambda t, b=block: p.parse_ras_count(b, t))  # type: ignore[misc]
        if count is not None:
            out.append(count)
    return tuple(out)


def _slot_link_dir(reader: _Reader, device: str, memo: dict[str, object] | None) -> str:
    """Where a GPU's slot link is reported: the GPU function itself, or the topmost port of an on-card AMD
    PCIe switch above it.

    Vega and Navi boards put their own switch (vendor 0x1002, class 0x0604xx: upstream 0x1470/0x1478,
    downstream 0x1471/0x1479) between the slot and the GPU; the GPU function then shows the switch-internal
    link (often 32.0 GT/s x16) and only the upstream port shows what the slot negotiated. The walk stops at
    the first bridge that is not AMD's (the CPU's root port, vendor 0x1022, or a platform switch).
    """
    best = device
    bridge = os.path.dirname(device)
    while _BDF_NAME.match(os.path.basename(bridge)):
        if reader.fixed(memo, f"{bridge}/vendor", p.parse_hex_id) != "0x1002":
            break
        cls = reader.fixed(memo, f"{bridge}/class", p.parse_hex_id)
        if cls is None or int(cls, 16) >> 8 != 0x0604:
            break
        best = bridge
        bridge = os.path.dirname(bridge)
    return best


def _pci_gpu(reader: _Reader, parent: _Parent, with_state: bool) -> GpuIdentity:
    d = parent.path
    assert parent.bdf is not None
    # kept under the GPU's drm directory, which the driver creates when it binds: a GPU bound again (perhaps with
    # new firmware) is read afresh, though its PCI directory stays
    memo = reader.memo(f"{d}/drm")
    device_id = reader.fixed(memo, f"{d}/device", p.parse_hex_id)
    gpu = GpuIdentity(
        pci_bus=parent.bdf,
        unique_id=reader.fixed(memo, f"{d}/unique_id", p.canonical_unique_id),
        card=parent.card,
        render=parent.render,
        compute_partition=reader.value(f"{d}/current_compute_partition", p.parse_string),
        memory_partition=reader.value(f"{d}/current_memory_partition", p.parse_string),
        driver=parent.driver or "amdgpu",
        vendor_id=reader.fixed(memo, f"{d}/vendor", p.parse_hex_id),
        device_id=device_id,
        model=reader.fixed(memo, f"{d}/product_name", p.parse_string),
        vbios=reader.fixed(memo, f"{d}/vbios_version", p.parse_string),
        numa_node=reader.fixed(memo, f"{d}/numa_node", p.parse_int_value),
    )
    if not with_state:
        return gpu
    hw = _read_hwmon(reader, d, memo)
    link = _slot_link_dir(reader, d, memo)
    return replace(
        gpu,
        vram_total_bytes=reader.fixed(memo, f"{d}/mem_info_vram_total", p.parse_int_value),
        vram_used_bytes=reader.value(f"{d}/mem_info_vram_used", p.parse_int_value),
        busy_ratio=reader.value(f"{d}/gpu_busy_percent", _BUSY),
        temperatures_celsius=tuple((label, value) for _, label, value in hw.temps),
        power_watts=hw.power,
        pcie_link_speed_gts=reader.value(f"{link}/current_link_speed", p.parse_link_speed),
        pcie_link_width=reader.value(f"{link}/current_link_width", p.parse_link_width),
        ras=_read_ras(reader, d),
        telemetry=_read_telemetry(reader, d, hw, memo),
        gpu_metrics=_read_gpu_metrics(reader, d, device_id),
    )


class GpuReads:
    """What outlives one walk when each GPU's files are read under a deadline (``SysfsSource``): the runner, which
    knows the GPUs whose read is still stuck, each GPU's last identity, which stands in while it cannot be read
    (so ``rocm_gpu_info`` keeps its labels while the GPU hangs), and the values of the files that do not change
    (``FixedValues``)."""

    def __init__(self, deadline_seconds: float = GPU_READ_DEADLINE_SECONDS) -> None:
        self.deadline_seconds = deadline_seconds
        self.runner: deadline.DeadlineRunner[GpuIdentity] = deadline.DeadlineRunner("sysfs-gpu")
        self.last: dict[str, GpuIdentity] = {}
        self.stuck: dict[str, _Reader] = {}  # the reader of each GPU's abandoned read, to say what it is blocked on
        self.fixed = FixedValues()

    def blocked_on(self, pci_bus: str) -> str | None:
        """The file (relative to the GPU's directory) the GPU's stuck read is blocked on, if known."""
        reader = self.stuck.get(pci_bus)
        path = reader.reading if reader is not None else None
        if reader is None or path is None:
            return None
        return reader.in_device(path) or reader.rel(path)

    def stand_in(self, parent: _Parent, status: str) -> GpuIdentity:
        """The GPU as far as this walk and its last read know it, without state."""
        assert parent.bdf is not None
        last = self.last.get(parent.bdf) or GpuIdentity(pci_bus=parent.bdf)
        return GpuIdentity(
            pci_bus=parent.bdf,
            unique_id=last.unique_id,
            card=parent.card,
            render=parent.render,
            compute_partition=last.compute_partition,
            memory_partition=last.memory_partition,
            driver=parent.driver or "amdgpu",
            vendor_id=last.vendor_id,
            device_id=last.device_id,
            model=last.model,
            vbios=last.vbios,
            numa_node=last.numa_node,
            sysfs_read=status,
        )


def _read_status(reader: _Reader) -> str:
    return "error" if reader.reads_failed and not reader.reads_ok else "ok"


def _read_gpus(
    reader: _Reader, parents: dict[str, _Parent], with_state: bool, gpu_reads: GpuReads | None
) -> dict[str, GpuIdentity]:
    """Every amdgpu PCI function's identity (and state): in this thread, or each in a thread of its own under
    ``gpu_reads``' deadline. Each GPU gets a reader of its own, merged into ``reader`` once its read returned."""
    subs = {bdf: reader.for_gpu(bdf, parent.path) for bdf, parent in parents.items()}
    out: dict[str, GpuIdentity] = {}
    if gpu_reads is None:
        for bdf, parent in parents.items():
            gpu = _pci_gpu(subs[bdf], parent, with_state)
            reader.merge(subs[bdf])
            out[bdf] = replace(gpu, sysfs_read=_read_status(subs[bdf])) if with_state else gpu
        return out
    calls = {bdf: partial(_pci_gpu, subs[bdf], parent, with_state) for bdf, parent in parents.items()}
    outcomes = gpu_reads.runner.run(calls, gpu_reads.deadline_seconds)
    for bdf, parent in parents.items():
        outcome, sub = outcomes[bdf], subs[bdf]
        if outcome.status != "stuck":
            gpu_reads.stuck.pop(bdf, None)
        if outcome.status == "done" and outcome.value is not None:
            reader.merge(sub)
            gpu = replace(outcome.value, sysfs_read=_read_status(sub)) if with_state else outcome.value
            gpu_reads.last[bdf] = gpu
        elif outcome.status == "error":
            reader.merge(sub)
            reader.warnings.append(f"{bdf}: reading its files failed: {outcome.error!r}")
            gpu = gpu_reads.stand_in(parent, "error")
        else:  # timeout, or stuck since an earlier walk: that thread may still write to its reader
            if outcome.status == "timeout":
                gpu_reads.stuck[bdf] = sub
            reader.warnings.append(
                f"{bdf}: files not read within {gpu_reads.deadline_seconds:g}s (a read of "
                f"{gpu_reads.blocked_on(bdf) or 'a file'} has been blocked for {outcome.running_seconds:.1f}s)"
            )
            gpu = gpu_reads.stand_in(parent, "timeout")
        out[bdf] = gpu
    return out


def read_sysfs(
    sysfs: str | os.PathLike[str],
    with_state: bool = True,
    gpu_reads: GpuReads | None = None,
    fixed: FixedValues | None = None,
) -> SysfsSnapshot:
    """Walk ``sysfs`` (the directory that plays ``/sys``) once. See the module docstring.

    ``with_state=False`` skips the per-interval values (VRAM, busy, hwmon, link, RAS, telemetry) and keeps the
    identity (BDF, unique_id, minors, KFD, partition modes, ids, numa node). ``gpu_reads``: read each GPU's
    files in a thread of its own under its deadline (else here, one after the other); the values of files that do
    not change are then kept in ``gpu_reads.fixed``, else in ``fixed`` if given (else every file is read).
    Raises SourceError only
    when ``sysfs`` itself cannot be listed; no amdgpu at all is an empty snapshot.
    """
    sysfs = os.fspath(sysfs)
    try:
        os.listdir(sysfs)
    except OSError as exc:
        raise SourceError(f"sysfs root {sysfs} is unusable: {exc.strerror or exc}") from exc
    if gpu_reads is not None:
        fixed = gpu_reads.fixed
    reader = _Reader(sysfs, fixed_values=fixed)

    # 1. amdgpu PCI functions bound to the driver, by resolved path.
    parents: dict[str, _Parent] = {}
    amdgpu_paths: set[str] = set()
    drv = os.path.realpath(f"{sysfs}/bus/pci/drivers/amdgpu")
    for name in reader.listdir(drv):
        if not _BDF_NAME.match(name):
            continue  # bind, unbind, new_id, module, uevent
        real = _resolve_link(f"{drv}/{name}") or os.path.realpath(f"{drv}/{name}")
        if not os.path.isdir(real):
            reader.warnings.append(f"bus/pci/drivers/amdgpu/{name}: dangling link")
            continue
        # bound to amdgpu by definition: no need to read the uevent for the driver or the address
        parents[real] = _Parent(path=real, name=os.path.basename(real), bdf=normalize_bdf(name), driver="amdgpu")
        amdgpu_paths.add(real)

    # 2. DRM minors, grouped by parent device.
    for minor, real in _read_drm(reader, sysfs):
        if real not in parents:
            parent = parents[real] = _parent_of(reader, real)
            if parent.driver == "amdgpu" and parent.bdf is not None and not _XCP.match(parent.name):
                amdgpu_paths.add(real)
        parent = parents[real]
        parent.minors.append(replace(minor, parent=parent.bdf or parent.name))

    kfd_nodes, kfd_dev = _read_kfd(reader, sysfs)

    gpu_parents: dict[str, _Parent] = {}
    for real in sorted(amdgpu_paths, key=lambda r: parents[r].bdf or ""):
        parent = parents[real]
        assert parent.bdf is not None
        if parent.bdf in gpu_parents:
            reader.warnings.append(f"{parent.bdf}: two devices claim this PCI address, kept the first")
            continue
        gpu_parents[parent.bdf] = parent
    pci_gpus = _read_gpus(reader, gpu_parents, with_state, gpu_reads)

    xcps = {parents[r].name: parents[r] for r in parents if r not in amdgpu_paths and _XCP.match(parents[r].name)}
    others = [par for r, par in parents.items() if r not in amdgpu_paths and not _XCP.match(par.name) and par.minors]

    # Which device owns each render minor.
    owner: dict[int, tuple[Literal["pci", "xcp"], str]] = {}
    for bdf, gpu in pci_gpus.items():
        if gpu.render is not None:
            owner[gpu.render.minor] = ("pci", bdf)
    for name, par in xcps.items():
        if par.render is not None:
            owner[par.render.minor] = ("xcp", name)

    # 3. Join KFD GPU nodes.
    partitions: dict[str, GpuIdentity] = {}
    joined_xcp: set[str] = set()
    seen_pci: dict[str, int] = {}
    for hip_index, node in enumerate(kfd_nodes):
        where = f"KFD node {node.node}"
        if node.render_minor is None:
            reader.warnings.append(f"{where}: no drm_render_minor, not joined")
            continue
        found = owner.get(node.render_minor)
        if found is None:
            reader.warnings.append(f"{where}: render minor {node.render_minor} has no DRM render node in class/drm")
            continue
        kind, key = found
        if kind == "pci":
            gpu = pci_gpus[key]
            if key in seen_pci:
                reader.warnings.append(f"{where}: renderD{node.render_minor} already joined to node {seen_pci[key]}")
                continue
            seen_pci[key] = node.node
            if node.pci_bus is not None and node.pci_bus != key:
                reader.warnings.append(
                    f"{where}: location_id/domain say {node.pci_bus} but renderD{node.render_minor} belongs to {key}"
                )
            _check_unique_id(reader, where, node, gpu.unique_id, key)
            pci_gpus[key] = replace(gpu, kfd_node=node.node, gpu_id=node.gpu_id, hip_index=hip_index)
            continue
        xcp = xcps[key]
        if node.pci_bus is None:
            reader.warnings.append(f"{where}: partition {key} has no location_id, parent unknown")
            continue
        bdf = node.pci_bus
        parent_bdf = p.physical_bdf(bdf)
        if bdf in pci_gpus or bdf in partitions:
            reader.warnings.append(f"{where}: partition {key} claims {bdf}, which is already taken")
            continue
        parent_gpu = pci_gpus.get(parent_bdf)
        if parent_gpu is None:
            reader.warnings.append(f"{where}: partition {key} at {bdf} has no amdgpu parent at {parent_bdf}")
        else:
            _check_unique_id(reader, where, node, parent_gpu.unique_id, parent_bdf)
        joined_xcp.add(key)
        partitions[bdf] = GpuIdentity(
            pci_bus=bdf,
            unique_id=node.unique_id or (parent_gpu.unique_id if parent_gpu else None),
            card=xcp.card,
            render=xcp.render,
            kfd_node=node.node,
            gpu_id=node.gpu_id,
            parent_pci_bus=parent_bdf,
            partition_index=int(bdf[-1]),
            compute_partition=parent_gpu.compute_partition if parent_gpu else None,
            memory_partition=parent_gpu.memory_partition if parent_gpu else None,
            driver="amdgpu",
            vendor_id=parent_gpu.vendor_id if parent_gpu else None,
            device_id=(parent_gpu.device_id if parent_gpu else None) or node.device_id,
            model=parent_gpu.model if parent_gpu else None,
            vbios=parent_gpu.vbios if parent_gpu else None,
            numa_node=parent_gpu.numa_node if parent_gpu else None,
            hip_index=hip_index,
            partition_device=key,
        )

    # Partition 0 of a partitioned GPU is the PCI function itself.
    for part in partitions.values():
        parent_gpu = pci_gpus.get(part.parent_pci_bus or "")
        if parent_gpu is not None and parent_gpu.partition_index is None:
            pci_gpus[parent_gpu.pci_bus] = replace(parent_gpu, parent_pci_bus=parent_gpu.pci_bus, partition_index=0)

    gpus = sorted([*pci_gpus.values(), *partitions.values()], key=lambda g: g.pci_bus)
    gpus = [_with_xcp(g, pci_gpus) for g in gpus]
    with_card = sorted((g for g in gpus if g.card is not None), key=lambda g: g.card.minor if g.card else 0)
    smi_rank = {g.pci_bus: i for i, g in enumerate(with_card)}
    gpus = [replace(g, rocm_smi_index=smi_rank.get(g.pci_bus)) for g in gpus]

    def as_other(par: _Parent, kind: str) -> OtherDrmDevice:
        minors = tuple(sorted(par.minors, key=lambda m: (m.kind != "card", m.minor)))
        return OtherDrmDevice(
            name=minors[0].name if minors else par.name,
            driver=par.driver,
            parent=par.bdf or par.name,
            minors=minors,
            kind=kind,
        )

    other_drm = sorted(
        (as_other(par, other_kind(par.driver, par.name)) for par in others), key=lambda o: (len(o.name), o.name)
    )
    idle = sorted(
        (as_other(par, "amdgpu") for name, par in xcps.items() if name not in joined_xcp and par.minors),
        key=lambda o: (len(o.name), o.name),
    )
    driver_version = (reader.text(f"{sysfs}/module/amdgpu/version") or "").strip() or None
    if fixed is not None:
        fixed.end_walk()
    return SysfsSnapshot(
        gpus=tuple(gpus),
        other_drm=tuple(other_drm),
        kfd_nodes=tuple(kfd_nodes),
        kfd_dev=kfd_dev,
        warnings=tuple(reader.warnings),
        idle_partitions=tuple(idle),
        driver_version=driver_version,
        read_errors=tuple(reader.errors),
    )


def _with_xcp(gpu: GpuIdentity, pci_gpus: dict[str, GpuIdentity]) -> GpuIdentity:
    """``gpu`` with its XCP's activity from its physical GPU's ``gpu_metrics``: XCP index = partition index (0 for
    a GPU that is not partitioned, and for partition 0, which is the PCI function itself)."""
    physical = pci_gpus.get(gpu.parent_pci_bus or gpu.pci_bus)
    table = physical.gpu_metrics if physical is not None else None
    if table is None:
        return gpu
    index = gpu.partition_index or 0
    xcp = next((x for x in table.xcps if x.index == index), None)
    return gpu if xcp is None else replace(gpu, xcp=xcp)


def _check_unique_id(reader: _Reader, where: str, node: KfdNode, sysfs_uid: str | None, bdf: str) -> None:
    if node.unique_id is not None and sysfs_uid is not None and node.unique_id != sysfs_uid:
        reader.warnings.append(f"{where}: unique_id {node.unique_id} differs from {bdf}'s {sysfs_uid}")


class SysfsSource:
    """The ``sysfs`` source: ``read_sysfs(config.sysfs)`` on every interval, each GPU under a deadline.

    ``up`` says the walk ran; each GPU's ``sysfs_read`` says whether its files could be read. Read errors are
    counted since start (``SysfsSnapshot.read_errors``) and each (GPU, file, error) is logged once; a GPU that
    stops or starts being readable is logged when it changes.
    """

    name = "sysfs"

    def __init__(
        self, config: Config, with_state: bool = True, deadline_seconds: float = GPU_READ_DEADLINE_SECONDS
    ) -> None:
        self._sysfs = config.sysfs
        self._with_state = with_state
        self._gpu_reads = GpuReads(deadline_seconds)
        self._errors: dict[tuple[str, str, str], SysfsReadErrors] = {}
        self._logged: set[tuple[str, str, str, str]] = set()  # (GPU, file, error, variant) already logged
        self._status: dict[str, str] = {}  # pci_bus -> last sysfs_read, to log changes

    def collect(self) -> SysfsSnapshot:
        snap = read_sysfs(self._sysfs, with_state=self._with_state, gpu_reads=self._gpu_reads)
        self._count(snap.read_errors)
        self._log_status(snap.gpus)
        return replace(snap, read_errors=tuple(self._errors[k] for k in sorted(self._errors)))

    def _count(self, errors: Iterable[SysfsReadErrors]) -> None:
        for e in errors:
            key = (e.pci_bus, e.file, e.error)
            old = self._errors.get(key)
            if (*key, e.variant) not in self._logged:  # the first of its kind: logged once, counted every time
                self._logged.add((*key, e.variant))
                if e.file == GPU_METRICS_FILE and e.variant:  # once per GPU and table revision
                    log.warning(
                        "gpu_metrics_decode_warning",
                        pci_bus=e.pci_bus or None,
                        revision=e.variant,
                        error=e.error,
                        detail=e.detail,
                    )
                else:
                    event = "sysfs_value_out_of_range" if e.error == "out_of_range" else "sysfs_read_error"
                    log.warning(event, pci_bus=e.pci_bus or None, file=e.file, error=e.error, detail=e.detail)
            self._errors[key] = replace(e, count=(old.count if old else 0) + e.count)

    def _log_status(self, gpus: Iterable[GpuIdentity]) -> None:
        for gpu in gpus:
            if gpu.sysfs_read is None:
                continue
            old = self._status.get(gpu.pci_bus)
            self._status[gpu.pci_bus] = gpu.sysfs_read
            if gpu.sysfs_read == old or (old is None and gpu.sysfs_read == "ok"):
                continue
            if gpu.sysfs_read == "ok":
                log.info("gpu_sysfs_readable", pci_bus=gpu.pci_bus)
            else:
                stuck = self._gpu_reads.runner.stuck().get(gpu.pci_bus)
                log.warning(
                    "gpu_sysfs_unreadable",
                    pci_bus=gpu.pci_bus,
                    reason=gpu.sysfs_read,
                    deadline_seconds=self._gpu_reads.deadline_seconds,
                    blocked_seconds=None if stuck is None else round(stuck, 1),
                    blocked_on=self._gpu_reads.blocked_on(gpu.pci_bus),
                )

    def close(self) -> None:
        """Nothing is held open between runs."""
