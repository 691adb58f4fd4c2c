"""``rocm-watchdog capture --output FILE``: what a maintainer needs from a node whose GPUs misparse or misbehave,
in one text archive a user attaches to a bug report and a test turns back into a fake host.

What it gathers (it writes nothing but FILE, and opens no GPU node: ``/dev/kfd`` and ``/dev/dri/*`` are only
``lstat``-ed):

- the sysfs files the sources read: ``class/drm`` and the DRM minors, their PCI (or ``amdgpu_xcp`` platform)
  functions with hwmon, ras and ``gpu_metrics`` (as bytes), the files of the PCI devices above them, ``class/kfd``
  and the KFD topology, ``bus/pci/drivers/amdgpu``, ``module/amdgpu`` (version, parameters), the
  ``dev/char`` and ``class/hwmon`` links. Each read is bounded in time (a hung GPU can block one) and size;
  register windows (``config``, ``rom``, ``resource*``) are never read;
- the device nodes' metadata (``devices.txt``, ``ls -l``-like: type, mode, uid, gid, major:minor) and the
  ``dri/by-path`` links; ``etc/group`` and ``etc/passwd`` (the devices source reads names there); the boot id;
- the lines of the host's udev rules that match the GPU nodes (``udev-rules.txt``);
- each tool's output for the commands the sources run, through the sources themselves with the same runner
  and timeouts (argv, exit code, stdout, stderr, duration), and the tool's version (``commands.json``);
- the amdgpu lines of the kernel log, read from ``--kernel-log.path`` (a kmsg device without blocking, or a file;
  a kmsg-relay FIFO is not read: that would take its records from the exporter): every line the kernel-log
  classifier makes an event of, and every line naming amdgpu/amdkfd/drm (``kernel.log``, dmesg format);
- ``check --json`` (``check.json``) with the kernel probe off: this version's check judges the nodes from their
  modes, owners, groups and ACLs and opens none;
- the exporter's version, platform and flags (``exporter.json``).

Redaction (``redactions.json`` says what was replaced, never the original values): unique ids (sysfs
``%016llx``, KFD decimal, the tools' ``0x`` and bare hex, ``GPU-<16 hex>``) to fake ids in the same form, so a GPU
keeps one id everywhere and joins survive; serial numbers; UUIDs (the boot id among them); host names; user names
(``etc/passwd`` accounts with uid >= 1000, group members, the invoking user).

The archive is ttar (``exporter.fakehost.ttar``): ``root/...`` is the host tree as the fake host builder
recreates it (``exporter.fakehost.from_capture``), ``capture/...`` the rest. ``parse`` reads a capture too.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config import Config
from exporter.fakehost.ttar import Entry, write_ttar
from exporter.sources.runner import CommandResult, run

READ_TIMEOUT_SECONDS = 2.0  # one sysfs file; a GPU stuck in a reset can block a read for minutes
READ_BUDGET_SECONDS = 60.0  # every file together: past it, what is left is listed as not read
MAX_FILE_BYTES = 4 << 20
MAX_FILES = 20000
MAX_KERNEL_LOG_BYTES = 32 << 20
# Never read: register windows and writes-only triggers (reading them is pointless at best).
_SKIP_NAMES = re.compile(r"^(?:config|rom|vpd|resource\d*(?:_wc)?|remove|rescan|reset|new_id|remove_id|bind|unbind)$")
_SKIP_DIRS = frozenset({"power", "msi_irqs", "subsystem", "firmware_node", "iommu", "iommu_group", "driver"})
_UDEV_DIRS = ("etc/udev/rules.d", "lib/udev/rules.d", "usr/lib/udev/rules.d", "run/udev/rules.d")
_UDEV_MATCH = re.compile(r"kfd|renderD|card\*|\bdrm\b|amdgpu|GROUP=\"(?:render|video)\"", re.IGNORECASE)
_KERNEL_MATCH = re.compile(r"amdgpu|amdkfd|\[drm", re.IGNORECASE)
KERNEL_PROBE_NOTE = (
    "off: check --json ran without the kernel probe (this version's check opens no device node; it judges "
    "access from modes, owners, groups and ACLs)"
)


# ---- redaction -------------------------------------------------------------------------------------------


_UUID = re.compile(
    r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z])"
)
_HIP_UUID = re.compile(r"GPU-([0-9a-fA-F]{16})(?![0-9A-Za-z])")
_SERIAL_KEYS = re.compile(
    r"(?P<key>\b(?:serial[ _]number|product_serial|asic_serial|board_serial|serial|fru_serial)\b\"?\s*[:=]\s*\"?)"
    r"(?P<value>[^\s\",}]+)",
    re.IGNORECASE,
)
_UNIQUE_KEYS = re.compile(
    # ``Unique ID: 0x...`` (text), ``"Unique ID": "..."`` (JSON); not KFD's ``unique_id <decimal>`` (read apart)
    r"(?P<key>\b(?:unique[ _]id)\b\"?\s*[:=]\s*\"?)(?P<value>(?:0[xX])?[0-9a-fA-F]{4,16})(?![0-9A-Za-z])",
    re.IGNORECASE,
)
FAKE_ID_BASE = 0x5AFE_0000_0000_0000
# Host and user names are replaced wherever they stand as a word: one that is also a word the tools, the kernel or
# the files print (a host called "gpu") would take that word out of every output, so such names are kept (and
# listed in redactions.json as not replaced).
_COMMON_WORDS = frozenset(
    {"localhost", "gpu", "gpus", "node", "nodes", "card", "render", "video", "amd", "amdgpu", "kernel", "root"}
    | {"host", "user", "system", "default", "none", "auto", "true", "false", "name", "data", "test", "local", "admin"}
)


def _replaceable_name(value: str) -> bool:
    return len(value) >= 3 and value.lower() not in _COMMON_WORDS and not value.startswith("redacted-host")


@dataclass
class Redactor:
    """Collects the values to hide, then replaces every occurrence, in every form, with a stable stand-in."""

    ids: dict[int, int] = field(default_factory=dict)
    serials: dict[str, str] = field(default_factory=dict)
    uuids: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    where: dict[str, set[str]] = field(default_factory=dict)  # kind -> archive paths where it was replaced
    kept: dict[str, set[str]] = field(default_factory=dict)  # names not replaced (too short, a common word)
    _pattern: re.Pattern[str] | None = None
    _table: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add_id(self, value: int) -> None:
        if 0 < value < 1 << 64 and value not in self.ids and not FAKE_ID_BASE <= value < FAKE_ID_BASE + (1 << 16):
            self.ids[value] = FAKE_ID_BASE + len(self.ids) + 1
            self._pattern = None

    def add_serial(self, value: str) -> None:
        value = value.strip()
        if len(value) >= 4 and value.upper() not in ("N/A", "NONE", "UNKNOWN") and "REDACTED" not in value.upper():
            if value.lower().startswith("0x") or re.fullmatch(r"[0-9a-fA-F]{16}", value):
                try:
                    self.add_id(int(value, 16))
                    return
                except ValueError:
                    pass
            if value not in self.serials and not re.fullmatch(r"0+", value):
                self.serials[value] = f"SERIAL{len(self.serials) + 1:04d}REDACTED"
                self._pattern = None

    def add_uuid(self, value: str) -> None:
        key = value.strip().lower()
        if _UUID.fullmatch(key) and key not in self.uuids and not key.startswith("00000000-0000-4000-8000-"):
            self.uuids[key] = f"00000000-0000-4000-8000-{len(self.uuids) + 1:012x}"
            self._pattern = None

    def add_host(self, value: str) -> None:
        value = value.strip()
        if not _replaceable_name(value):
            self.kept.setdefault("host name", set()).add(value)
        elif value not in self.hosts:
            self.hosts[value] = f"redacted-host-{len(self.hosts) + 1}"
            self._pattern = None

    def add_user(self, value: str) -> None:
        value = value.strip()
        if value == "root":
            return
        if not _replaceable_name(value):
            self.kept.setdefault("user name", set()).add(value)
        elif value not in self.users:
            self.users[value] = f"user{len(self.users) + 1}"
            self._pattern = None

    def fake_id(self, value: int) -> int | None:
        return self.ids.get(value)

    def _build(self) -> re.Pattern[str] | None:
        table: dict[str, tuple[str, str]] = {}
        for real, fake in self.ids.items():
            forms = (
                (f"{real:016x}", f"{fake:016x}"),
                (f"{real:016X}", f"{fake:016X}"),
                (hex(real), hex(fake)),
                (f"0x{real:X}", f"0x{fake:X}"),
                (f"0X{real:X}", f"0X{fake:X}"),
                (f"0x{real:016x}", f"0x{fake:016x}"),
                (f"0x{real:016X}", f"0x{fake:016X}"),
                (f"{real:x}", f"{fake:x}"),
                (f"{real:X}", f"{fake:X}"),
                (str(real), str(fake)),
            )
            for token, replacement in forms:
                table.setdefault(token, (replacement, "unique_id"))
        for serial, stand_in in self.serials.items():
            table.setdefault(serial, (stand_in, "serial"))
        for uuid, stand_in in self.uuids.items():
            table.setdefault(uuid, (stand_in, "uuid"))
            table.setdefault(uuid.upper(), (stand_in.upper(), "uuid"))
        for host, stand_in in self.hosts.items():
            table.setdefault(host, (stand_in, "host name"))
        for user, stand_in in self.users.items():
            table.setdefault(user, (stand_in, "user name"))
        self._table = table
        if not table:
            return None
        alternatives = "|".join(re.escape(t) for t in sorted(table, key=len, reverse=True))
        return re.compile(rf"(?<![0-9A-Za-z_])(?:{alternatives})(?![0-9A-Za-z_])")

    def scan(self, text: str) -> None:
        """Find what to hide in a tool's or a file's text: serial and unique-id fields, UUIDs, HIP UUIDs."""
        for m in _SERIAL_KEYS.finditer(text):
            self.add_serial(m["value"])
        for m in _UNIQUE_KEYS.finditer(text):
            raw = m["value"]
            try:
                self.add_id(int(raw, 16))
            except ValueError:
                continue
        for m in _HIP_UUID.finditer(text):
            self.add_id(int(m[1], 16))
        for m in _UUID.finditer(text):
            self.add_uuid(m.group(0))

    def apply(self, text: str, path: str = "") -> str:
        if self._pattern is None:
            self._pattern = self._build()
        pattern = self._pattern
        if pattern is None:
            return text

        def replace(m: re.Match[str]) -> str:
            replacement, kind = self._table[m.group(0)]
            self.where.setdefault(kind, set()).add(path)
            return replacement

        return pattern.sub(replace, text)

    def apply_bytes(self, data: bytes, path: str = "") -> bytes:
        """Text files only: a binary file (``gpu_metrics``) holds no printed id and is kept byte for byte."""
        if b"\x00" in data:
            return data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        return self.apply(text, path).encode("utf-8")

    def report(self) -> dict[str, Any]:
        kinds = {
            "unique_id": (len(self.ids), "fake ids 0x5afe000000000001.. in the form each file printed"),
            "serial": (len(self.serials), "SERIAL0001REDACTED.."),
            "uuid": (len(self.uuids), "00000000-0000-4000-8000-000000000001.."),
            "host name": (len(self.hosts), "redacted-host-1.."),
            "user name": (len(self.users), "user1.."),
        }
        out: dict[str, Any] = {
            kind: {"distinct_values": count, "replaced_by": how, "files": sorted(self.where.get(kind, ()))}
            for kind, (count, how) in kinds.items()
        }
        for kind, names in self.kept.items():
            out[kind]["not_replaced"] = (
                f"{len(names)} name(s) shorter than 3 characters or a word the outputs use: replacing them would "
                "change the outputs"
            )
        return out


# ---- reading the host without blocking on it ---------------------------------------------------------------


def _read_bounded(path: str, limit: int = MAX_FILE_BYTES) -> tuple[bytes | None, str | None]:
    """A file's bytes, read in a daemon thread so that a read blocked in the kernel costs READ_TIMEOUT_SECONDS."""
    result: list[bytes] = []
    error: list[str] = []

    def read() -> None:
        # In chunks: one read as large as the limit fails with ENOMEM on procfs' sysctl files (boot_id)
        chunks: list[bytes] = []
        size = 0
        try:
            with open(path, "rb", buffering=0) as f:
                while size <= limit:
                    chunk = f.read(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
        except OSError as exc:
            error.append(exc.strerror or type(exc).__name__)
            return
        result.append(b"".join(chunks))

    worker = threading.Thread(target=read, name="capture-read", daemon=True)
    worker.start()
    worker.join(READ_TIMEOUT_SECONDS)
    if worker.is_alive():
        return None, f"read blocked for more than {READ_TIMEOUT_SECONDS:g}s"
    if error:
        return None, error[0]
    data = result[0] if result else b""
    if len(data) > limit:
        return None, f"larger than {limit} bytes"
    return data, None


class _Tree:
    """The ``root/...`` entries of the archive, keyed by path, each added once."""

    def __init__(self, base: Path, prefix: str) -> None:
        self.base = os.path.realpath(base)
        self.prefix = prefix
        self.entries: dict[str, Entry] = {}
        self.problems: list[str] = []
        self.deadline = time.monotonic() + READ_BUDGET_SECONDS
        self.blocked: set[str] = set()  # directories where a read blocked: the rest of them is not tried

    def rel(self, path: str) -> str | None:
        real_parent = os.path.realpath(os.path.dirname(path))
        full = os.path.join(real_parent, os.path.basename(path))
        if full != self.base and not full.startswith(self.base + os.sep):
            return None
        inner = os.path.relpath(full, self.base)
        return self.prefix if inner == "." else f"{self.prefix}/{inner}"

    def _dirs(self, archive_path: str) -> None:
        parts = archive_path.split("/")
        for k in range(1, len(parts)):
            parent = "/".join(parts[:k])
            if parent not in self.entries:
                self.entries[parent] = Entry(parent, "dir", 0o755)

    def add(self, path: str, depth: int = 0, follow: bool = False) -> str | None:
        """Add ``path`` (a file, a link, or a directory with ``depth`` levels below it); the target of a link is
        added too when ``follow``. Returns the archive path."""
        archive_path = self.rel(path)
        if archive_path is None or len(self.entries) >= MAX_FILES:
            return None
        try:
            st = os.lstat(path)
        except OSError as exc:
            self.problems.append(f"{archive_path}: {exc.strerror}")
            return None
        name = os.path.basename(path)
        self._dirs(archive_path)
        if stat.S_ISLNK(st.st_mode):
            if archive_path not in self.entries:
                self.entries[archive_path] = Entry(archive_path, "link", target=os.readlink(path))
            if follow:
                self.add(os.path.realpath(path), depth)
        elif stat.S_ISDIR(st.st_mode):
            known = self.entries.get(archive_path)
            if known is None or known.kind != "dir" or depth > 0:
                self.entries[archive_path] = Entry(archive_path, "dir", stat.S_IMODE(st.st_mode))
            if depth > 0:
                try:
                    children = sorted(os.listdir(path))
                except OSError as exc:
                    self.problems.append(f"{archive_path}: cannot list ({exc.strerror})")
                    return archive_path
                for child in children:
                    full = os.path.join(path, child)
                    if child in _SKIP_DIRS and not os.path.islink(full):
                        continue
                    self.add(full, depth - 1)
        elif stat.S_ISREG(st.st_mode) and not _SKIP_NAMES.match(name) and archive_path not in self.entries:
            parent = os.path.dirname(archive_path)
            if parent in self.blocked or time.monotonic() > self.deadline:
                why = "a read in this directory blocked" if parent in self.blocked else "the read budget is spent"
                self.problems.append(f"{archive_path}: not read ({why})")
                return archive_path
            data, problem = _read_bounded(path)
            if data is None:
                self.problems.append(f"{archive_path}: not read ({problem})")
                if problem is not None and problem.startswith("read blocked"):
                    self.blocked.add(parent)
            else:
                self.entries[archive_path] = Entry(archive_path, "file", stat.S_IMODE(st.st_mode), data=data)
        return archive_path


def _gather_sysfs(sysfs: Path, tree: _Tree) -> list[str]:
    """The sysfs files the sources read; returns the PCI addresses of the DRM/KFD devices found."""
    base = str(sysfs)
    functions: set[str] = set()
    drm = os.path.join(base, "class", "drm")
    tree.add(drm)
    for name in _listdir(drm):
        entry = os.path.join(drm, name)
        tree.add(entry, depth=0)
        minor = os.path.realpath(entry)
        if os.path.isdir(minor):
            tree.add(minor, depth=2)
            device = os.path.join(minor, "device")
            if os.path.exists(device):
                functions.add(os.path.realpath(device))
    kfd = os.path.join(base, "class", "kfd")
    tree.add(kfd)
    for name in _listdir(kfd):
        tree.add(os.path.join(kfd, name), depth=8, follow=True)
    driver = os.path.join(base, "bus", "pci", "drivers", "amdgpu")
    tree.add(driver, depth=1)
    for name in _listdir(driver):
        target = os.path.join(driver, name)
        if os.path.islink(target) and re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", name):
            functions.add(os.path.realpath(target))
    for function in sorted(functions):
        tree.add(function, depth=3)
        parent = os.path.dirname(function)
        while tree.rel(parent) is not None and os.path.basename(parent) != "devices":
            tree.add(parent, depth=0)
            for name in _listdir(parent):
                full = os.path.join(parent, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    tree.add(full)
            parent = os.path.dirname(parent)
    bdfs = sorted(os.path.basename(f) for f in functions if re.fullmatch(r"[0-9a-f]{4}:.*", os.path.basename(f)))
    for bdf in bdfs:
        tree.add(os.path.join(base, "bus", "pci", "devices", bdf))
    module = os.path.join(base, "module", "amdgpu")
    tree.add(module, depth=1)
    tree.add(os.path.join(module, "drivers"), depth=1)
    tree.add(os.path.join(module, "parameters"), depth=1)
    wanted = {os.path.realpath(f) for f in functions}
    hwmon = os.path.join(base, "class", "hwmon")
    for name in _listdir(hwmon):
        link = os.path.join(hwmon, name)
        if os.path.dirname(os.path.dirname(os.path.realpath(link))) in wanted:
            tree.add(link)
    char = os.path.join(base, "dev", "char")
    majors = {"226"}
    kfd_dev = tree.entries.get(f"{tree.prefix}/devices/virtual/kfd/kfd/dev")
    if kfd_dev is not None:
        majors.add(kfd_dev.data.decode(errors="replace").split(":", 1)[0].strip())
    for name in _listdir(char):
        if name.split(":", 1)[0] in majors:
            tree.add(os.path.join(char, name))
    return bdfs


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


_TYPE = {stat.S_IFCHR: "c", stat.S_IFBLK: "b", stat.S_IFDIR: "d", stat.S_IFLNK: "l", stat.S_IFIFO: "p"}


_BITS = (0o400, 0o200, 0o100, 0o40, 0o20, 0o10, 0o4, 0o2, 0o1)


def _mode_string(mode: int) -> str:
    kind = _TYPE.get(stat.S_IFMT(mode), "-")
    bits = "".join(ch if mode & bit else "-" for ch, bit in zip("rwxrwxrwx", _BITS, strict=True))
    return kind + bits


def _gather_dev(devfs: Path, tree: _Tree, names: Mapping[int, str], groups: Mapping[int, str]) -> str:
    """``devices.txt``: one line per node under /dev/kfd and /dev/dri, from lstat (never opened); the
    ``dri/by-path`` links go into the tree."""
    lines = ["# type+mode uid gid major,minor path  # owner group  (lstat of each node; none was opened)"]
    candidates = [os.path.join(devfs, "kfd")]
    dri = os.path.join(devfs, "dri")
    candidates += [os.path.join(dri, n) for n in _listdir(dri)]
    for path in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        rel = os.path.relpath(path, devfs)
        if stat.S_ISDIR(st.st_mode):
            tree.add(path, depth=1)  # dri/by-path: links only
            continue
        if stat.S_ISLNK(st.st_mode):
            tree.add(path)
            continue
        major = os.major(st.st_rdev) if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else 0
        minor = os.minor(st.st_rdev) if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else 0
        owner, group = names.get(st.st_uid, str(st.st_uid)), groups.get(st.st_gid, str(st.st_gid))
        lines.append(f"{_mode_string(st.st_mode)} {st.st_uid} {st.st_gid} {major},{minor} {rel}  # {owner} {group}")
    tree.add(dri)
    return "\n".join(lines) + "\n"


def _id_names(text: str, field_no: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) > field_no and parts[field_no].strip().isdigit():
            out.setdefault(int(parts[field_no]), parts[0])
    return out


def _people(passwd: str, group: str) -> list[str]:
    """User names to hide: accounts with uid >= 1000 (not nobody), and every group member."""
    found: list[str] = []
    for line in passwd.splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2].isdigit() and 1000 <= int(parts[2]) < 65534:
            found.append(parts[0])
    for line in group.splitlines():
        parts = line.split(":")
        if len(parts) > 3 and parts[3].strip():
            found.extend(m.strip() for m in parts[3].split(",") if m.strip())
    return found


def _blank_gecos(passwd: str) -> str:
    """``etc/passwd`` with the GECOS field (a person's name, room, phone) of accounts with uid >= 1000 emptied."""
    out = []
    for line in passwd.splitlines():
        parts = line.split(":")
        if len(parts) == 7 and parts[2].isdigit() and 1000 <= int(parts[2]) < 65534:
            parts[4] = ""
        out.append(":".join(parts))
    return "\n".join(out) + ("\n" if passwd.endswith("\n") else "")


def _udev_lines(rootfs: Path) -> str:
    lines: list[str] = []
    for directory in _UDEV_DIRS:
        full = rootfs / directory
        for name in _listdir(str(full)):
            if not name.endswith(".rules"):
                continue
            data, _ = _read_bounded(str(full / name), 1 << 20)
            for number, line in enumerate((data or b"").decode("utf-8", "replace").splitlines(), start=1):
                if _UDEV_MATCH.search(line) and not line.lstrip().startswith("#"):
                    lines.append(f"/{directory}/{name}:{number}: {line}")
    return "\n".join(lines) + ("\n" if lines else "")


# ---- tools ---------------------------------------------------------------------------------------------------


class _Recorder:
    """The sources' runner, recording every run (the same ``run`` and the timeouts the sources pass)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.runs: list[CommandResult] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        result = run(argv, timeout)
        self.runs.append(result)
        return result


def _run_json(tool: str, result: CommandResult, purpose: str) -> dict[str, Any]:
    return {
        "tool": tool,
        "purpose": purpose,
        "args": list(result.argv[1:]),
        "returncode": result.returncode,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "error": result.error,
        "duration_seconds": round(result.duration_seconds, 3),
        "stdout": result.stdout,
        "stderr": result.stderr,
    }


def _gather_tools(config: Config) -> tuple[list[dict[str, Any]], list[str]]:
    from exporter.sources import SourceError
    from exporter.sources.smi import AmdSmiSource, RocmSmiSource

    runs: list[dict[str, Any]] = []
    notes: list[str] = []
    plan: list[tuple[str, str, Callable[[_Recorder], Any], tuple[str, ...]]] = []
    if config.enabled("amd-smi"):
        plan.append(("amd-smi", config.amd_smi_path, lambda r: AmdSmiSource(config, r).collect(), ("version",)))
    if config.enabled("rocm-smi"):
        plan.append(("rocm-smi", config.rocm_smi_path, lambda r: RocmSmiSource(config, r).collect(), ("--version",)))
    for tool, path, collect, version_args in plan:
        recorder = _Recorder(tool)
        try:
            collect(recorder)
        except SourceError as exc:
            notes.append(f"{tool}: {exc}")
        runs.extend(_run_json(tool, r, "source") for r in recorder.runs)
        if recorder.runs and recorder.runs[0].error is None:
            runs.append(_run_json(tool, run((path, *version_args), config.smi_timeout_seconds), "version"))
    return runs, notes


# ---- kernel log -----------------------------------------------------------------------------------------------

_KMSG = re.compile(r"^(?P<pri>\d+),(?P<seq>\d+),(?P<us>\d+),[^;]*;(?P<msg>.*)$")


def _read_kmsg(path: str) -> tuple[str, str | None]:
    """Every record /dev/kmsg holds now, as dmesg lines; read without blocking (EAGAIN ends it)."""
    lines: list[str] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return "", f"{path}: {exc.strerror}"
    try:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                record = os.read(fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten before they were read: go on with the next
                continue
            if not record:
                break
            head = record.decode("utf-8", "replace").split("\n", 1)[0]
            m = _KMSG.match(head)
            if m is not None:
                us = int(m["us"])
                lines.append(f"[{us // 1_000_000:5d}.{us % 1_000_000:06d}] {m['msg']}")
    finally:
        os.close(fd)
    return "\n".join(lines) + ("\n" if lines else ""), None


def _gather_kernel_log(config: Config) -> tuple[str, str | None]:
    """The amdgpu lines of the kernel log, as the kernel-log source reads it (the same path, the same rules)."""
    from exporter.watchdog.kernel_classify import kernel_log_report
    from exporter.watchdog.kernel_rules import KernelRulesError, load_rules

    path = str(config.kernel_log_path)
    try:
        st = os.stat(path)
    except OSError as exc:
        return "", f"{path}: {exc.strerror}"
    if stat.S_ISCHR(st.st_mode):
        text, problem = _read_kmsg(path)
    elif stat.S_ISFIFO(st.st_mode):
        return "", f"{path} is a FIFO (a kmsg-relay's): not read, that would take its records from the exporter"
    else:
        size = st.st_size
        try:
            with open(path, "rb") as f:
                if size > MAX_KERNEL_LOG_BYTES:
                    f.seek(size - MAX_KERNEL_LOG_BYTES)
                    f.readline()
                text, problem = f.read(MAX_KERNEL_LOG_BYTES).decode("utf-8", "replace"), None
        except OSError as exc:
            return "", f"{path}: {exc.strerror}"
    if not text:
        return "", problem
    try:
        rules = load_rules(config.kernel_log_rules)
    except KernelRulesError as exc:
        return "", f"kernel-log rules: {exc}"
    report = kernel_log_report(text, rules)
    events = report.get("events")
    anchors = {int(e["line"]) for e in events if isinstance(e, dict)} if isinstance(events, list) else set()
    kept = [
        line
        for number, line in enumerate(text.splitlines(), start=1)
        if number in anchors or _KERNEL_MATCH.search(line)
    ]
    return "\n".join(kept) + ("\n" if kept else ""), problem


# ---- the archive ----------------------------------------------------------------------------------------------


@dataclass
class Capture:
    archive: bytes
    redactor: Redactor
    notes: list[str]


def _check_json(config: Config) -> dict[str, Any]:
    from exporter.sources import SourceError
    from exporter.watchdog.baseline import BaselineStore
    from exporter.watchdog.check import build_report
    from exporter.watchdog.commands import read_current

    try:
        sysfs, devices = read_current(config, None)
    except (SourceError, OSError) as exc:
        return {"ok": False, "error": str(exc), "kernel_probe": KERNEL_PROBE_NOTE}
    store = BaselineStore(config.state_dir)
    baseline, problem = store.load(move_corrupt=False)
    report = build_report(sysfs, devices, baseline, problem, str(store.path), os.environ, time.time())
    return {"kernel_probe": KERNEL_PROBE_NOTE, **report}


def collect_capture(config: Config, argv: Sequence[str] = ()) -> Capture:
    """Gather everything (see the module docstring) and build the redacted archive; writes nothing."""
    from exporter.build import build_info

    started = time.time()
    notes: list[str] = []
    tree = _Tree(config.sysfs, "root/sys")
    bdfs = _gather_sysfs(config.sysfs, tree)
    etc = _Tree(config.rootfs, "root")
    group_text = passwd_text = ""
    for name in ("etc/group", "etc/passwd"):
        path = str(config.rootfs / name)
        if os.path.isfile(path):
            etc.add(path)
    group_entry, passwd_entry = etc.entries.get("root/etc/group"), etc.entries.get("root/etc/passwd")
    group_text = group_entry.data.decode("utf-8", "replace") if group_entry else ""
    passwd_text = passwd_entry.data.decode("utf-8", "replace") if passwd_entry else ""
    if passwd_entry is not None:  # people's full names (GECOS) go; their user names are redacted below
        blanked = _blank_gecos(passwd_text)
        etc.entries["root/etc/passwd"] = Entry(passwd_entry.path, "file", passwd_entry.mode, blanked.encode("utf-8"))
    dev_tree = _Tree(config.devfs, "root/dev")
    devices_txt = _gather_dev(config.devfs, dev_tree, _id_names(passwd_text, 2), _id_names(group_text, 2))
    proc = _Tree(config.procfs, "root/proc")
    proc.add(str(config.procfs / "sys" / "kernel" / "random" / "boot_id"))
    udev = _udev_lines(config.rootfs)
    runs, tool_notes = _gather_tools(config)
    notes.extend(tool_notes)
    kernel_log, kernel_problem = ("", None) if not config.enabled("kernel-log") else _gather_kernel_log(config)
    if kernel_problem:
        notes.append(f"kernel log: {kernel_problem}")
    check = _check_json(config)
    info = build_info()
    exporter_json = {
        "version": info.version,
        "revision": info.revision,
        "branch": info.branch,
        "python": info.python_version,
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "argv": list(argv),
        "config": {
            "rootfs": str(config.rootfs),
            "sysfs": str(config.sysfs),
            "devfs": str(config.devfs),
            "procfs": str(config.procfs),
            "kernel_log_path": str(config.kernel_log_path),
            "rocm_smi_path": config.rocm_smi_path,
            "amd_smi_path": config.amd_smi_path,
            "smi_backend": config.smi_backend,
            "smi_timeout_seconds": config.smi_timeout_seconds,
            "collectors": dict(config.collectors),
            "nodename": config.nodename,
        },
        "kernel_probe": KERNEL_PROBE_NOTE,
        "gpus": bdfs,
        "captured_at_unix": round(started),
        "took_seconds": round(time.time() - started, 3),
        "problems": [*tree.problems, *etc.problems, *dev_tree.problems, *proc.problems, *notes],
    }

    # What to hide: ids, serials, UUIDs from the files the tools and the kernel printed, names from the host.
    redactor = Redactor()
    entries: dict[str, Entry] = {**tree.entries, **etc.entries, **dev_tree.entries, **proc.entries}
    for path, entry in entries.items():
        if entry.kind != "file":
            continue
        name = path.rsplit("/", 1)[-1]
        text = entry.data.decode("utf-8", "replace")
        if name == "unique_id":
            with contextlib.suppress(ValueError):
                redactor.add_id(int(text.strip() or "0", 16))
        elif name in ("serial_number", "product_serial", "board_serial"):
            redactor.add_serial(text)
        elif name == "properties":  # KFD: "unique_id <decimal>"
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "unique_id" and value.strip().isdigit():
                    redactor.add_id(int(value))
        elif name == "boot_id":
            redactor.add_uuid(text)
        if b"\x00" not in entry.data:
            redactor.scan(text)
    for item in runs:
        redactor.scan(item["stdout"])
        redactor.scan(item["stderr"])
    redactor.scan(kernel_log)
    for host in {os.uname().nodename, os.uname().nodename.split(".")[0], config.nodename, os.environ.get("NODE_NAME")}:
        if host:
            redactor.add_host(host)
    for user in [*_people(passwd_text, group_text), os.environ.get("SUDO_USER") or "", os.environ.get("USER") or ""]:
        if user:
            redactor.add_user(user)

    out: list[Entry] = []
    for path in sorted(entries):
        entry = entries[path]
        if entry.kind == "file":
            entry = Entry(path, "file", entry.mode, data=redactor.apply_bytes(entry.data, path))
        out.append(entry)

    def text_file(path: str, text: str) -> Entry:
        return Entry(path, "file", 0o644, data=redactor.apply(text, path).encode("utf-8"))

    commands = [
        {k: redactor.apply(v, "capture/commands.json") if isinstance(v, str) else v for k, v in item.items()}
        for item in runs
    ]
    for item in commands:
        item["args"] = [redactor.apply(a, "capture/commands.json") for a in item["args"]]
    out += [
        Entry("capture", "dir", 0o755),
        text_file("capture/README", README),
        text_file("capture/devices.txt", devices_txt),
        text_file("capture/udev-rules.txt", udev),
        Entry("capture/commands.json", "file", 0o644, json.dumps(commands, indent=1).encode() + b"\n"),
        text_file("capture/kernel.log", kernel_log),
        text_file("capture/check.json", json.dumps(check, indent=1, default=str) + "\n"),
        text_file("capture/exporter.json", json.dumps(exporter_json, indent=1, default=str) + "\n"),
    ]
    out.append(
        Entry("capture/redactions.json", "file", 0o644, json.dumps(redactor.report(), indent=1).encode() + b"\n")
    )
    return Capture(write_ttar(out), redactor, notes)


README = """\
A rocm-watchdog capture (rocm-watchdog capture --output FILE), in the ttar text format of prometheus/procfs
fixtures. root/ is the host tree (sysfs excerpt, /dev links, etc/group, etc/passwd, boot id) as the fake host
builder recreates it (python -m exporter.fakehost.from_capture FILE DIR); capture/ holds the device nodes'
metadata (devices.txt: nothing was opened), the matching udev rule lines, every command the tool sources ran
(commands.json: args, exit code, stdout, stderr), the amdgpu lines of the kernel log (kernel.log), check --json
with the kernel probe off (check.json), the exporter's version and flags (exporter.json) and what was redacted
(redactions.json: kinds and counts, never the original values). rocm-watchdog parse {amd-smi|rocm-smi|
kernel-log|gpu-metrics} FILE reads the matching part.
"""


def cmd_capture(config: Config, output: Path | None, argv: Sequence[str]) -> int:
    """Write the archive to ``output`` atomically; exit 0, or 2 when it cannot be written."""
    import sys

    from exporter.statefile import write_atomic

    if output is None:
        print("rocm-watchdog capture: --output FILE is required (the archive is written there)", file=sys.stderr)
        return 2
    capture = collect_capture(config, _redact_argv(argv))
    try:
        write_atomic(output, capture.archive)
    except OSError as exc:
        print(f"rocm-watchdog capture: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    redacted = {k: v["distinct_values"] for k, v in capture.redactor.report().items() if v["distinct_values"]}
    summary = ", ".join(f"{n} {kind}(s)" for kind, n in redacted.items()) or "nothing"
    print(f"rocm-watchdog capture: wrote {output} ({len(capture.archive)} bytes); redacted {summary}")
    for note in capture.notes:
        print(f"  note: {note}")
    return 0


def _redact_argv(argv: Iterable[str]) -> list[str]:
    """The flags as given, a --host.name value hidden (the redactor hides it everywhere else)."""
    out: list[str] = []
    hide = False
    for token in argv:
        if hide:
            out.append("<redacted>")
            hide = False
        elif token == "--host.name":
            out.append(token)
            hide = True
        elif token.startswith("--host.name="):
            out.append("--host.name=<redacted>")
        else:
            out.append(token)
    return out


def cmd_capture_args(args: Any) -> int:
    """``rocm-watchdog capture``: once's flags (it runs the sources as once does), then :func:`cmd_capture`."""
    from exporter.cli import ConfigError, _fail_config, load_config
    from exporter.logging import configure

    flags = [f"--{key}={value}" for key, value in sorted(vars(args).items()) if value not in (None, False)]
    flags = [f for f in flags if not f.startswith("--command=")]
    args.command = "once"
    try:
        config, _ignored = load_config(args)
    except ConfigError as exc:
        return _fail_config(exc.problems, "capture")
    configure(config.log_level, config.log_format)
    return cmd_capture(config, config.once_output, flags)
