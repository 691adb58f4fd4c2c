"""What ``check`` reads of the host's configuration beyond the device nodes (``exporter.sources.hostconfig``
reads it, ``exporter.watchdog.hostconfig`` judges it)."""

from __future__ import annotations

import msgspec

from exporter.model.devices import KfdProcess
from exporter.parsers.udev import RulesFile, SysfsDevice


class UdevInputs(msgspec.Struct, frozen=True):
    """The rules as udev would read them under --path.rootfs, and each node's sysfs device chain."""

    rootfs: str
    dirs_found: tuple[str, ...]  # the rules directories that exist (host paths)
    files: tuple[RulesFile, ...]  # in udev's order
    masked: tuple[str, ...] = ()  # file names masked by a symlink to /dev/null
    chains: tuple[tuple[str, tuple[SysfsDevice, ...]], ...] = ()  # (node host path, its device chain)
    errors: tuple[str, ...] = ()  # files that could not be read
    # the root is this container's own (--path.rootfs not set, in a container): its rules are the image's, not the
    # host's, so they are not judged
    container_root: bool = False

    def chain(self, path: str) -> tuple[SysfsDevice, ...] | None:
        for p, c in self.chains:
            if p == path:
                return c
        return None


class HostInputs(msgspec.Struct, frozen=True):
    """Everything ``exporter.watchdog.hostconfig`` judges, read once by ``check``."""

    udev: UdevInputs
    rocm_version: str | None = None  # first line of /opt/rocm/.info/version (under --path.rootfs)
    rocm_version_path: str = "/opt/rocm/.info/version"
    shm_bytes: int | None = None  # size of the filesystem at <devfs>/shm; None: absent
    procfs_is_host: bool = False  # --path.procfs shows the initial pid namespace (kthreadd is pid 2)
    kfd_processes: tuple[KfdProcess, ...] = ()
    amd_smi_enabled: bool = False
