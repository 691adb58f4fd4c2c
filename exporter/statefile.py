"""Durable, atomic file replacement: the one way state files and textfile output are written.

A temp file in the same directory, fsync, rename over the target, fsync of the directory. A reader (or a
crash at any point) sees the old file or the new one, whole; never half of either.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(path: Path, data: bytes, prefix: str | None = None, mode: int = 0o644) -> Path:
    """The new content, durable, under a temp name beside ``path`` (the first half of ``write_atomic``)."""
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


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    temp = write_temp(path, data, mode=mode)
    try:
        commit(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
