"""Runtime failures of a command, said as what they are (a port in use, a file that cannot be written), never as
"invalid configuration": the configuration was valid, this machine refused it. Each function returns the message;
``report`` prints it and gives the exit code (2, as docs/exit-codes.md says for an output that cannot be written
and a ``serve`` that cannot listen).

Imported only when something failed (or, for ``output_problem``, by ``once --output`` before it collects).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path

from exporter.exitcodes import ExitCode

# Filesystems whose files are the kernel's: nothing can be created in them, so an atomic write cannot work.
VIRTUAL_FILESYSTEMS = frozenset(
    {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "configfs",
     "pstore", "bpf", "efivarfs", "fusectl", "mqueue", "hugetlbfs", "binfmt_misc", "autofs", "nsfs"}
)  # fmt: skip


def report(command: str, message: str) -> int:
    print(f"rocm-watchdog {command}: {message}", file=sys.stderr)
    return ExitCode.USAGE


def filesystem_of(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> tuple[str, str] | None:
    """(filesystem type, mount point) of the mount holding ``path`` (which must exist), from mountinfo."""
    try:
        target = os.path.realpath(path)
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[1])):
            best = (right.split()[0], point)
    return best


def output_problem(path: Path) -> str | None:
    """Why ``--output PATH`` cannot be written, checked before collecting; None when it may be. Never creates
    anything: a directory that does not exist is an error, not made."""
    parent = path.parent
    if path.is_dir():
        return (
            f"cannot write --output {path}: it is a directory; give a file name in it ({path / 'rocm-watchdog.prom'})"
        )
    if not parent.exists():
        return f"cannot write --output {path}: the directory {parent} does not exist (--output creates no directories)"
    if not parent.is_dir():
        return f"cannot write --output {path}: {parent} is not a directory"
    fs = filesystem_of(parent)
    if fs is not None and fs[0] in VIRTUAL_FILESYSTEMS:
        kind, point = fs
        return (
            f"cannot write --output {path}: it is on the kernel's {kind} filesystem (mounted at {point}), where no "
            "file can be created; give a path on a disk (the file is written atomically: a temp file beside it, "
            "then a rename)"
        )
    if path.exists() and not path.is_file():
        return f"cannot write --output {path}: it exists and is not a regular file"
    return None


def output_failure(path: Path, exc: OSError) -> str:
    """What writing ``--output`` failed on, with its reason in words."""
    found = output_problem(path)
    if found is not None:
        return found
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"cannot write --output {path}: {reason}: the directory {path.parent} must be writable by this user"
    if exc.errno == errno.EROFS:
        return f"cannot write --output {path}: {reason}: {path.parent} is on a read-only filesystem"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"cannot write --output {path}: {reason}: free space on its filesystem"
    return f"cannot write --output {path}: {reason}"


def unprivileged_port_start(path: Path = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 1024


def listen_failure(address: str, port: int | None, exc: OSError) -> str:
    """Why ``serve`` cannot listen on ``--web.listen-address``: the port is taken, or privileged, or the address
    is not this host's."""
    where = f"cannot listen on {address}"
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where}: the port is in use by another process (`ss -ltnp 'sport = :{port}'` names it): stop it or "
            "give another --web.listen-address"
        )
    if exc.errno in (errno.EACCES, errno.EPERM) and port is not None and port < unprivileged_port_start():
        start = unprivileged_port_start()
        return (
            f"{where}: {reason}: ports below {start} need root or CAP_NET_BIND_SERVICE "
            f"(net.ipv4.ip_unprivileged_port_start={start}); use a port of {start} or above (the default is 9862)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{where}: {reason}: the host part is not an address of this machine"
    if isinstance(exc, socket.gaierror):
        return f"{where}: the host name does not resolve ({reason})"
    return f"{where}: {reason}"
