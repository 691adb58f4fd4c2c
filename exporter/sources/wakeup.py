"""Waiting for input without a tick: poll(2) on a device or FIFO, inotify for a followed file, a pipe to stop.

A quiet host costs nothing: the kernel-log thread sleeps in poll(2) until the kernel has a record, the followed
file changes, its heartbeat is due or the daemon stops. inotify is Linux's own file-change notification,
called through libc (``inotify_init1``/``inotify_add_watch``); where it is unavailable (a libc without it, a
file system that does not report changes, such as some network mounts) the file is looked at every
``FALLBACK_POLL_SECONDS`` instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
from collections.abc import Sequence
from pathlib import Path

FALLBACK_POLL_SECONDS = 0.1  # a followed file without inotify: still counted within 100 ms

# <sys/inotify.h>
_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004  # truncation changes the size and the mtime
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
# The file itself: written, truncated, rotated away. Its directory: a new file of that name (rotation), which
# only names-changes report; a write to another file of the directory does not wake us.
_FILE_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVE_SELF | _IN_DELETE_SELF
_DIR_MASK = _IN_CREATE | _IN_MOVED_TO | _IN_MOVED_FROM | _IN_DELETE


class Interrupt:
    """A self-pipe: ``set`` from any thread (or a signal handler) wakes a ``wait`` at once."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._set = False

    def fileno(self) -> int:
        return self._read

    def set(self) -> None:
        self._set = True
        with contextlib.suppress(BlockingIOError, OSError):  # already signalled, or closed
            os.write(self._write, b"x")

    def is_set(self) -> bool:
        return self._set

    def write_fileno(self) -> int:
        """The pipe's write end: ``signal.set_wakeup_fd`` takes it, so that a signal wakes a ``wait`` on this pipe
        whichever thread the kernel delivered it to."""
        return self._write

    def clear(self) -> None:
        """Empty the pipe and forget ``set``: the next wait sleeps until the next ``set`` or signal."""
        self._set = False
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read, 4096):
                pass

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


def _libc_inotify() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class FileWatch:
    """inotify watches on a followed file and on its directory; ``fileno`` is readable when either changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        libc = _libc_inotify()
        if libc is None:
            return
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return
        if libc.inotify_add_watch(fd, os.fsencode(path.parent), _DIR_MASK) < 0:
            os.close(fd)
            return
        self._libc, self._fd = libc, fd
        self.rearm()

    @property
    def available(self) -> bool:
        return self._fd is not None

    def fileno(self) -> int | None:
        return self._fd

    def rearm(self) -> None:
        """Watch whatever file the path names now (after a rotation it is a new inode; the same inode keeps its
        watch). A path that is missing for now is seen again through the directory's watch."""
        if self._fd is not None:
            self._libc.inotify_add_watch(self._fd, os.fsencode(self.path), _FILE_MASK)

    def drain(self) -> None:
        """Consume the pending notifications: the caller reads the file itself, the events only woke it."""
        if self._fd is None:
            return
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self._fd, 65536):
                pass

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def wait_readable(fds: Sequence[int], timeout_seconds: float) -> list[int]:
    """Block until one of ``fds`` is readable (or hung up) or the timeout passes; the ready descriptors."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    try:
        ready = poller.poll(max(0, int(timeout_seconds * 1000)))
    except InterruptedError:  # a signal: the caller loops and works out the time left
        return []
    return [fd for fd, _ in ready]
