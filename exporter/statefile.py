"""Durable, atomic file replacement: the one way state files and textfile output are written; and the three ways
a state file of ``--state.dir`` can fail, told apart.

A temp file in the same directory, fsync, rename over the target, fsync of the directory. A reader (or a
crash at any point) sees the old file or the new one, whole; never half of either.

A state file is **unreadable** when it exists but reading it fails (permission denied, EIO, a directory in its
place): nothing is moved or replaced, the operator must fix access. It is **corrupt** when it was read but is
not valid: it is moved aside to ``<file>.corrupt-<UTC time>`` (left in place when the state dir refuses the
move) and kept for inspection. It is **unsaved** when writing it failed: its state lives in memory until a write
succeeds. ``StateFileHealth`` logs each state once when it begins, with what to do, and once when it ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from exporter.logging import get_logger
from exporter.model.devices import StateFileState, StateFileStatus

log = get_logger(__name__)

EVENT_UNREADABLE = "state_file_unreadable"
EVENT_READABLE = "state_file_readable"
EVENT_CORRUPT = "state_file_corrupt"
EVENT_WRITE_FAILED = "state_write_failed"  # the kernel-log cursor logs the same events
EVENT_WRITE_RECOVERED = "state_write_recovered"
CORRUPT_INFIX = ".corrupt-"

# What the operator should do, per state, unless a file says better.
DEFAULT_ACTIONS: Mapping[StateFileState, str] = {
    "unreadable": "make it readable by the exporter's user (owner/mode of the file and of --state.dir), or "
    "check the disk for I/O errors; it is not moved or replaced",
    "corrupt": "nothing to restore: it was kept aside for inspection and the state starts over",
    "unsaved": "fix the owner and mode of --state.dir (systemd StateDirectory= creates it for the service user) "
    "or free the disk; the state lives in memory until a write succeeds",
}


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(
    path: Path, data: bytes, prefix: str | None = None, mode: int = 0o644, make_parents: bool = True
) -> Path:
    """The new content, durable, under a temp name beside ``path`` (the first half of ``write_atomic``); the
    directory is made first unless ``make_parents`` is false (``once --output`` makes none)."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=prefix or f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(name, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return Path(name)


def commit(temp: Path, path: Path) -> None:
    """Rename ``temp`` over ``path`` and make the rename durable."""
    os.replace(temp, path)
    fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, make_parents: bool = True) -> None:
    temp = write_temp(path, data, mode=mode, make_parents=make_parents)
    try:
        commit(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete the temp files an interrupted ``write_atomic`` of ``path`` left (a kill between the temp write and
    the rename). Called before the first write of a state file, by its only writer; returns what was removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if entry.name.startswith(f".{path.name}.") and entry.name.endswith(".tmp") and entry.is_file():
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def read_state_file(path: Path) -> bytes | None:
    """The file's content; None when it does not exist (nor the state dir: nothing was persisted yet).

    Raises OSError when it exists but cannot be read (EACCES, EIO, EISDIR): the caller reports it unreadable and
    must not replace it.
    """
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def move_aside(path: Path, now: float | None = None) -> Path:
    """Rename a corrupt state file to ``<name>.corrupt-<UTC time>`` beside it (durably); returns the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = path.with_name(f"{path.name}{CORRUPT_INFIX}{stamp}")
    n = 1
    while target.exists():  # two corrupt files within one second
        n += 1
        target = path.with_name(f"{path.name}{CORRUPT_INFIX}{stamp}.{n}")
    os.rename(path, target)
    fsync_dir(path.parent)
    return target


def _why(error: OSError | str) -> str:
    return error if isinstance(error, str) else (error.strerror or str(error))


class StateFileHealth:
    """How one state file fares in this process, logged once per change: never every interval.

    ``actions`` overrides what ``DEFAULT_ACTIONS`` tells the operator for this file (what it means for it).
    """

    def __init__(self, path: Path, actions: Mapping[StateFileState, str] | None = None) -> None:
        self.path = path
        self.file = path.name
        self.actions = {**DEFAULT_ACTIONS, **(actions or {})}
        self.unreadable: str | None = None
        self.corrupt: str | None = None
        self.moved_to: str | None = None
        self.unsaved: str | None = None

    def _fields(self) -> dict[str, str]:
        return {"file": self.file, "path": str(self.path)}

    def read_failed(self, error: OSError | str) -> None:
        why = _why(error)
        if self.unreadable != why:
            log.error(EVENT_UNREADABLE, **self._fields(), error=why, action=self.actions["unreadable"])
        self.unreadable = why

    def read_ok(self) -> None:
        if self.unreadable is not None:
            log.info(EVENT_READABLE, **self._fields())
        self.unreadable = None

    def found_corrupt(self, reason: str, moved_to: str | None) -> None:
        """A corrupt file was found (and moved aside to ``moved_to``, or left where it is when None)."""
        if self.corrupt is None or moved_to != self.moved_to:
            log.error(
                EVENT_CORRUPT,
                **self._fields(),
                reason=reason,
                moved_to=moved_to,
                action=self.actions["corrupt"],
            )
        self.corrupt, self.moved_to = reason, moved_to

    def corrupt_cleared(self) -> None:
        self.corrupt = self.moved_to = None

    def write_failed(self, error: OSError | str) -> None:
        why = _why(error)
        if self.unsaved != why:
            log.error(EVENT_WRITE_FAILED, **self._fields(), error=why, action=self.actions["unsaved"])
        self.unsaved = why

    def write_ok(self) -> None:
        if self.unsaved is not None:
            log.info(EVENT_WRITE_RECOVERED, **self._fields())
        self.unsaved = None

    def status(self) -> StateFileStatus:
        return StateFileStatus(self.file, self.unreadable, self.corrupt, self.moved_to, self.unsaved)
