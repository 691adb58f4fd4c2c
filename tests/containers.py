"""What a container is to the kernel, for tests that run the real command as one: a cgroup v1 devices cgroup with
the allow-list a runtime writes, and an interpreter an unprivileged uid can run this checkout with.

Shared by tests/test_nonroot_pod.py (the DaemonSet's processes) and tests/test_check_probe.py (``check`` asking the
kernel).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
DEVICES_CGROUP = Path("/sys/fs/cgroup/devices")

# The devices an unprivileged container may open: the allow-list runc and containerd give by default (null, zero,
# full, random, urandom, tty, console, ptmx, pts, tun; mknod of any). /dev/kmsg (c 1:11) is not on it: mounting
# the host's /dev/kmsg into a container does not make it openable. A privileged container gets "a *:* rwm".
CONTAINER_DEVICES = (
    *("c *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm"),
    *("c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm"),
)


def devices_controller_missing() -> str | None:
    """Why a devices cgroup cannot be made here, naming what is missing; None when it can."""
    if os.geteuid() != 0:
        return "creating a cgroup v1 devices cgroup needs root"
    if not DEVICES_CGROUP.is_dir():
        return f"no cgroup v1 devices controller mounted at {DEVICES_CGROUP} (cgroup v2 decides with BPF programs)"
    if not (DEVICES_CGROUP / "devices.allow").exists():
        return f"{DEVICES_CGROUP} has no devices.allow: not a cgroup v1 devices hierarchy"
    return None


class DeviceCgroup:
    """A child of the devices hierarchy: ``devices.deny`` "a" then ``allow`` written to ``devices.allow``, as runc
    does for a container. ``join`` (a preexec_fn) moves the child into it before it execs; ``close`` removes it."""

    def __init__(self, allow: tuple[str, ...] = CONTAINER_DEVICES, deny: tuple[str, ...] = ()) -> None:
        self.path = DEVICES_CGROUP / f"rocm-watchdog-test-{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir()
        (self.path / "devices.deny").write_text("a")
        for rule in allow:
            (self.path / "devices.allow").write_text(rule)
        for rule in deny:
            (self.path / "devices.deny").write_text(rule)
        self._procs = str(self.path / "cgroup.procs")

    @property
    def name(self) -> str:
        """The path /proc/<pid>/cgroup shows: below the hierarchy's root."""
        return "/" + self.path.relative_to(DEVICES_CGROUP).as_posix()

    def join(self) -> None:
        with open(self._procs, "w") as f:
            f.write(str(os.getpid()))

    def close(self) -> None:
        for _ in range(50):  # bounded: the cgroup empties as soon as its (reaped) processes are gone
            try:
                self.path.rmdir()
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)


def reachable_by_others(path: str) -> bool:
    real = Path(os.path.realpath(path))
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in (real, *real.parents))


def interpreter(uid: int) -> tuple[list[str], dict[str, str]]:
    """An interpreter ``uid`` can run, with this project and its dependencies on its path: this one when others
    can reach it, else the system's Python of the same version (a pyenv under /root is closed to others)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    python = next((c for c in candidates if os.path.exists(c) and reachable_by_others(c)), None)
    if python is None:
        pytest.skip(f"no Python {version} that uid {uid} may run")
    paths = dict.fromkeys([str(PROJECT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(paths),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    return [python, "-s", "-m", "exporter"], env


@contextlib.contextmanager
def checkout_open_to_others() -> Iterator[None]:
    """A checkout in a private directory (``mktemp -d`` is 0700, as CI's clone may be) opened for traversal while
    the tests run: the files are world-readable already, only the closed directories stop another uid."""
    opened: list[tuple[Path, int]] = []
    for top in (PROJECT, Path(sysconfig.get_paths()["purelib"])):
        real = Path(os.path.realpath(top))
        for directory in (real, *real.parents):
            # the import path itself must be listable (Python's finder reads the directory), its ancestors passable
            need = stat.S_IXOTH | (stat.S_IROTH if directory == real else 0)
            mode = stat.S_IMODE(os.stat(directory).st_mode)
            if mode & need != need and directory not in {d for d, _ in opened}:
                opened.append((directory, mode))
                os.chmod(directory, mode | need)
    try:
        yield
    finally:
        for directory, mode in reversed(opened):
            os.chmod(directory, mode)


@contextlib.contextmanager
def nodev_devfs(dev: Path) -> Iterator[Path]:
    """``dev`` (a fake root's /dev) on a tmpfs mounted ``nodev``, as a container given its own /dev that way
    has it: the same directories, links and nodes, recreated on the mount; unmounted at the end."""
    built = dev.with_name(dev.name + ".built")
    dev.rename(built)
    dev.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nodev,mode=755", "tmpfs", str(dev)], check=True, timeout=30)
    try:
        for top, dirs, files in os.walk(built):
            dest = dev / Path(top).relative_to(built)
            for d in dirs:
                (dest / d).mkdir()
                os.chmod(dest / d, stat.S_IMODE(os.stat(Path(top) / d).st_mode))
            for f in files:
                src = Path(top) / f
                st = os.lstat(src)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(src), dest / f)
                else:
                    os.mknod(dest / f, st.st_mode, st.st_rdev)
                    os.chown(dest / f, st.st_uid, st.st_gid)
                    os.chmod(dest / f, stat.S_IMODE(st.st_mode))
        yield dev
    finally:
        subprocess.run(["umount", str(dev)], check=True, timeout=30)
        dev.rmdir()
        built.rename(dev)
