"""Listening sockets: bound from ``--web.listen-address``, or handed over by systemd socket activation."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

DEFAULT_BACKLOG = 1024
SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): passed sockets start at fd 3


def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9862`` -> ("", 9862) (every address); ``127.0.0.1:9862``; ``[::1]:9862``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected [host]:port (such as 127.0.0.1:9862, [::1]:9862 or :9862), got {address!r}")
    return host.strip("[]"), int(port)


def somaxconn() -> int | None:
    """The kernel's cap on any listen backlog (net.core.somaxconn), if readable."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return None


def effective_backlog(requested: int = DEFAULT_BACKLOG) -> int:
    """What the kernel will hold: ``listen()`` silently truncates to somaxconn."""
    cap = somaxconn()
    return min(requested, cap) if cap else requested


def bind_listener(address: str, backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """A non-blocking listening TCP socket. ``:port`` listens on every IPv6 and IPv4 address (IPv4 only where
    the host has no IPv6), as node_exporter does."""
    host, port = parse_listen_address(address)
    candidates: list[tuple[socket.AddressFamily, Any]] = []
    if host == "":
        if socket.has_ipv6:
            candidates.append((socket.AF_INET6, ("::", port)))
        candidates.append((socket.AF_INET, ("0.0.0.0", port)))
    else:
        for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
            candidates.append((info[0], info[4]))
    error: OSError | None = None
    for family, sockaddr in candidates:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:  # a kernel booted without IPv6
            error = error or exc
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and host == "":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
            sock.listen(backlog)
        except OSError as exc:
            sock.close()
            if error is None or family == socket.AF_INET6:
                error = exc
            continue
        sock.setblocking(False)
        return sock
    raise error if error is not None else OSError(f"cannot resolve {host!r}")


class SystemdSocketError(RuntimeError):
    pass


def systemd_listeners(environ: MutableMapping[str, str] | None = None) -> list[socket.socket]:
    """The sockets systemd passed (``LISTEN_PID`` names this process, ``LISTEN_FDS`` counts them, from fd 3).

    The variables are removed afterwards, so a tool this process runs does not take the sockets for its own;
    the fds are not inherited either.
    """
    env = os.environ if environ is None else environ
    pid, count = env.get("LISTEN_PID", ""), env.get("LISTEN_FDS", "")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    if not pid.isdigit() or int(pid) != os.getpid():
        raise SystemdSocketError("no socket activation file descriptors found (LISTEN_PID is not this process)")
    if not count.isdigit() or int(count) < 1:
        raise SystemdSocketError("no socket activation file descriptors found (LISTEN_FDS)")
    sockets: list[socket.socket] = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count)):
        try:
            sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise SystemdSocketError(f"fd {fd} from systemd is not a socket: {exc.strerror}") from None
        if sock.type != socket.SOCK_STREAM or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            with contextlib.suppress(OSError):
                sock.detach()
            raise SystemdSocketError(f"fd {fd} from systemd is not a listening stream socket")
        sock.set_inheritable(False)
        sock.setblocking(False)
        sockets.append(sock)
    return sockets
