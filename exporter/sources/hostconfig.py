"""What ``check`` reads of the host's configuration beyond the device nodes: the udev rules files, the ROCm user
space version, ``/dev/shm``'s size and the running KFD processes' groups. Every path comes from the config
(``--path.rootfs``, ``--path.sysfs``, ``--path.devfs``, ``--path.procfs``); nothing is executed, every file is
read with ``deadline.read_regular`` (regular files only, capped), so a FIFO in place of a rules file cannot block.

The judging is pure and lives elsewhere: ``exporter.parsers.udev`` (rule semantics) and
``exporter.watchdog.hostconfig`` (verdicts).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import msgspec

from exporter.config import Config
from exporter.model.devices import Baseline, DevicesSnapshot, KfdProcess
from exporter.model.hostconfig import HostInputs, UdevInputs
from exporter.parsers.host import parse_cgroup
from exporter.parsers.udev import RULES_DIRS, RulesFile, SysfsDevice, attrs_wanted, order_files, parse_rules
from exporter.sources import deadline

_MAX_RULES_FILE = 1 << 20  # a rules file is a few KiB; systemd's largest is ~60 KiB
_MAX_SMALL = 1 << 16
_MAX_RULES_FILES = 1000
_MAX_CHAIN = 32  # sysfs parents of a node: a handful (the PCI bridges)


def _read(path: Path, limit: int = _MAX_SMALL) -> str | None:
    try:
        data = deadline.read_regular(path, limit)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace") if len(data) <= limit else None


def _under(rootfs: Path, host_path: str) -> Path:
    """``host_path`` inside ``rootfs``, following a symlinked directory (``/lib -> usr/lib``) inside the root."""
    out = rootfs
    for part in Path(host_path).relative_to("/").parts:
        out = out / part
        for _ in range(8):  # a loop of links is not followed forever
            if not out.is_symlink():
                break
            target = os.readlink(out)
            out = (rootfs / target.lstrip("/")) if target.startswith("/") else (out.parent / target)
    return out


def read_rules(rootfs: Path) -> tuple[tuple[str, ...], list[RulesFile], list[str], list[str]]:
    """(directories found, rules files in order, masked names, unreadable files) under ``rootfs``."""
    found: dict[str, list[tuple[str, bool]]] = {}
    dirs: list[str] = []
    seen_dirs: set[Path] = set()
    for directory in RULES_DIRS:
        real = _under(rootfs, directory)
        try:
            entries = sorted(os.scandir(real), key=lambda e: e.name)[:_MAX_RULES_FILES]
        except OSError:
            continue
        dirs.append(directory)
        resolved = real.resolve()
        if resolved in seen_dirs:  # /lib/udev/rules.d is /usr/lib/udev/rules.d on a merged-/usr host
            continue
        seen_dirs.add(resolved)
        found[directory] = [(e.name, e.is_symlink() and os.readlink(e.path) == "/dev/null") for e in entries]
    paths, masked = order_files(found)
    files: list[RulesFile] = []
    errors: list[str] = []
    for host_path in paths:
        text = _read(_under(rootfs, host_path), _MAX_RULES_FILE)
        if text is None:
            errors.append(host_path)
            continue
        files.append(parse_rules(text, host_path))
    return tuple(dirs), files, masked, errors


def _link_name(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def device_chain(sysfs: Path, class_dir: str, name: str, wanted: Iterable[str]) -> tuple[SysfsDevice, ...]:
    """The node's device and its sysfs parents (``class/<class_dir>/<name>`` resolved), with the attributes
    the rules ask for."""
    start = sysfs / "class" / class_dir / name
    try:
        current = start.resolve(strict=True)
    except OSError:
        return ()
    top = (sysfs / "devices").resolve()
    wanted = sorted(set(wanted))
    chain: list[SysfsDevice] = []
    while len(chain) < _MAX_CHAIN and current != top and top in current.parents:
        if (current / "uevent").exists() or (current / "subsystem").exists():
            subsystem = _link_name(current / "subsystem") or (class_dir if not chain else None)
            attrs = []
            for attr in wanted:
                text = _read(current / attr)
                if text is not None:
                    attrs.append((attr, text.strip()))
            chain.append(
                SysfsDevice(
                    kernel=current.name,
                    subsystem=subsystem,
                    driver=_link_name(current / "driver"),
                    devpath="/" + current.relative_to(top.parent).as_posix(),
                    attrs=tuple(attrs),
                )
            )
        current = current.parent
    return tuple(chain)


def in_container() -> bool:
    """Docker, Podman or Kubernetes (their marker files and variable): the root filesystem is an image's."""
    return (
        os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv") or "KUBERNETES_SERVICE_HOST" in os.environ
    )


def read_udev(config: Config, devices: DevicesSnapshot) -> UdevInputs:
    if config.rootfs == Path("/") and in_container():
        return UdevInputs(rootfs="/", dirs_found=(), files=(), container_root=True)
    dirs, files, masked, errors = read_rules(config.rootfs)
    wanted = attrs_wanted(files)
    chains = []
    for n in devices.nodes:
        class_dir = "kfd" if n.kind == "kfd" else "drm"
        chains.append((n.path, device_chain(config.sysfs, class_dir, n.name, wanted)))
    return UdevInputs(
        rootfs=str(config.rootfs),
        dirs_found=dirs,
        files=tuple(files),
        masked=tuple(masked),
        chains=tuple(chains),
        errors=tuple(errors),
    )


def read_rocm_version(rootfs: Path) -> str | None:
    text = _read(rootfs / "opt" / "rocm" / ".info" / "version")
    if text is None:
        return None
    first = text.strip().splitlines()
    return first[0].strip() if first and first[0].strip() else None


def shm_size(devfs: Path) -> int | None:
    try:
        st = os.statvfs(devfs / "shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def procfs_is_host(procfs: Path) -> bool:
    """pid 2 is kthreadd only in the initial pid namespace: a container's own /proc never shows it, so KFD's host
    pids can be looked up in this procfs."""
    return (_read(procfs / "2" / "comm") or "").strip() == "kthreadd"


def _status_ids(text: str, key: str) -> list[int] | None:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            try:
                return [int(x) for x in line.split(":", 1)[1].split()]
            except ValueError:
                return None
    return None


def read_kfd_processes(sysfs: Path, procfs: Path) -> tuple[KfdProcess, ...]:
    """The pids KFD lists, with their name, effective uid/gid and supplementary groups from procfs."""
    try:
        pids = sorted(int(e.name) for e in os.scandir(sysfs / "class" / "kfd" / "kfd" / "proc") if e.name.isdigit())
    except OSError:
        return ()
    out = []
    for pid in pids:
        status = _read(procfs / str(pid) / "status")
        if status is None:
            out.append(KfdProcess(pid))
            continue
        uids = _status_ids(status, "Uid") or []
        gids = _status_ids(status, "Gid") or []
        groups = _status_ids(status, "Groups")
        comm = _read(procfs / str(pid) / "comm")
        container, pod = parse_cgroup(_read(procfs / str(pid) / "cgroup") or "")
        out.append(
            KfdProcess(
                pid=pid,
                name=comm.strip() if comm else None,
                uid=uids[1] if len(uids) > 1 else None,
                gid=gids[1] if len(gids) > 1 else None,
                groups=tuple(groups) if groups is not None else None,
                pod_uid=pod,
                container_id=container,
            )
        )
    return tuple(out)


def group_gid_changed(devices: DevicesSnapshot, baseline: Baseline | None) -> bool:
    """A host group's gid differs from the baseline: the one case where the processes' groups are worth reading."""
    if baseline is None or not devices.group_file_read:
        return False
    return any(gid is not None and devices.host_gid(name) != gid for name, gid in baseline.groups)


def with_kfd_processes(config: Config, devices: DevicesSnapshot, baseline: Baseline | None) -> DevicesSnapshot:
    """``devices`` with the running KFD processes, read only while a group's gid drifted and procfs is the
    host's (KFD names host pids)."""
    if not group_gid_changed(devices, baseline) or not procfs_is_host(config.procfs):
        return devices
    return msgspec.structs.replace(devices, kfd_processes=read_kfd_processes(config.sysfs, config.procfs))


def with_udev(config: Config, devices: DevicesSnapshot) -> DevicesSnapshot:
    """``devices`` with what the udev rules give each node (the devices source calls it only while a node's mode,
    owner or group is wrong: the rules are read then, not every interval)."""
    from exporter.watchdog.hostconfig import udev_verdicts

    return msgspec.structs.replace(devices, udev=udev_verdicts(read_udev(config, devices), devices))


def read_host_inputs(config: Config, devices: DevicesSnapshot) -> HostInputs:
    is_host = procfs_is_host(config.procfs)
    return HostInputs(
        udev=read_udev(config, devices),
        rocm_version=read_rocm_version(config.rootfs),
        shm_bytes=shm_size(config.devfs),
        procfs_is_host=is_host,
        kfd_processes=devices.kfd_processes,
        amd_smi_enabled=amd_smi_on(config),
    )


def amd_smi_on(config: Config) -> bool:
    """The exporter would run amd-smi: its source is on and the backend names it, or picks it (``auto``) because
    it is installed. Found on PATH, never run."""
    if not config.enabled("amd-smi"):
        return False
    if config.smi_backend in ("amd-smi", "both"):
        return True
    return config.smi_backend == "auto" and shutil.which(config.amd_smi_path) is not None
