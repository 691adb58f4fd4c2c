"""``rocm-watchdog prepare-state``: hand the state dir to the unprivileged exporter (a Kubernetes initContainer).

Kubernetes creates a hostPath directory root-owned 0755 and does not apply ``fsGroup`` to hostPath volumes, so
an exporter running as uid 10001 could never save its baseline and kernel-log cursor. This runs first, as uid 0
with no capability but CAP_CHOWN, and gives the directory and what is in it to the exporter's uid and gid,
mode 0700.

It never follows a symlink out of the directory: the directory itself must not be one, symlinks inside are left
alone, and so are hard-linked files (another name of the same file may live anywhere on the filesystem), device
nodes, FIFOs and sockets. A directory already given away (0700, another owner) is closed even to uid 0 without
CAP_DAC_OVERRIDE, so each directory is first taken back (owned by this process's uid): while it is, nobody but
root can change it, so nothing can be swapped under the walk, and a run that fails gives it back as it was.
Running it again changes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import msgspec

DIR_MODE = 0o700
MAX_DEPTH = 8  # the exporter writes files only; a deeper tree is not its own
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PrepareError(Exception):
    """The state dir could not be prepared; the message names the path, the operation and the fix."""


class PrepareResult(msgspec.Struct):
    changed: list[str] = msgspec.field(default_factory=list)  # entries whose owner was changed
    skipped: list[str] = msgspec.field(default_factory=list)  # entries left alone, with why


def parse_owner(text: str) -> tuple[int, int]:
    """``UID:GID`` (numbers: the container has no user database of the host) -> (uid, gid); ValueError."""
    uid_text, sep, gid_text = text.partition(":")
    if not sep or not uid_text.isdigit() or not gid_text.isdigit():
        raise ValueError(f"expected UID:GID as numbers, e.g. 10001:10001, got {text!r}")
    uid, gid = int(uid_text), int(gid_text)
    if uid >= 0xFFFFFFFF or gid >= 0xFFFFFFFF:
        raise ValueError(f"uid and gid must be below 4294967295, got {text!r}")
    return uid, gid


def _fail(action: str, path: Path, exc: OSError) -> PrepareError:
    hint = ""
    if exc.errno in (errno.EPERM, errno.EACCES):
        hint = (
            ". prepare-state needs uid 0 with CAP_CHOWN (Kubernetes: runAsUser: 0, capabilities drop [ALL], "
            "add [CHOWN])"
        )
    return PrepareError(f"cannot {action} {path}: {exc.strerror or exc}{hint}")


class _Walk:
    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self.me = (os.geteuid(), os.getegid())
        self.result = PrepareResult()

    def take(self, name: str | Path, where: Path, dir_fd: int | None, st: os.stat_result) -> int:
        """Own the directory for the walk (closed to others, open to us) and open it; its fd. A directory that is
        ours and open to us already is not touched, so a run without CAP_CHOWN changes nothing before it fails."""
        try:
            if (st.st_uid, st.st_gid) != self.me:
                os.chown(name, *self.me, dir_fd=dir_fd, follow_symlinks=False)
            if st.st_mode & 0o500 != 0o500:  # the owner (now us) cannot list and enter it
                # no symlink can be here: the directory holding it is root's (or the top, named by the admin)
                os.chmod(name, DIR_MODE, dir_fd=dir_fd)
        except OSError as exc:
            raise _fail("change the owner of", where, exc) from exc
        try:
            fd = os.open(name, _OPEN_DIR, dir_fd=dir_fd)
        except OSError as exc:
            raise _fail("open", where, exc) from exc
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise PrepareError(f"{where} was replaced while it was being prepared; run prepare-state again")
        return fd

    def give(self, fd: int, where: Path, st: os.stat_result) -> None:
        """0700 while it is still ours, then to the exporter: CAP_CHOWN is all this needs."""
        try:
            os.fchmod(fd, DIR_MODE)
            os.fchown(fd, self.uid, self.gid)
        except OSError as exc:
            raise _fail("change the owner of", where, exc) from exc
        if (st.st_uid, st.st_gid) != (self.uid, self.gid):
            self.result.changed.append(str(where))

    def prepare(self, fd: int, where: Path, st: os.stat_result, depth: int) -> None:
        """The directory's entries, then the directory; on failure it is given back as it was (not left ours)."""
        try:
            self.directory(fd, where, depth)
            self.give(fd, where, st)
        except BaseException:
            with contextlib.suppress(OSError):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            with contextlib.suppress(OSError):
                os.fchown(fd, st.st_uid, st.st_gid)
            raise

    def directory(self, fd: int, where: Path, depth: int) -> None:
        try:
            names = sorted(os.listdir(fd))
        except OSError as exc:
            raise _fail("list", where, exc) from exc
        for name in names:
            path = where / name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _fail("stat", path, exc) from exc
            if stat.S_ISDIR(st.st_mode):
                if depth >= MAX_DEPTH:
                    self.result.skipped.append(f"{path}: deeper than {MAX_DEPTH} levels")
                    continue
                sub = self.take(name, path, fd, st)
                try:
                    self.prepare(sub, path, st, depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                if (st.st_uid, st.st_gid) == (self.uid, self.gid):
                    continue
                try:
                    os.chown(name, self.uid, self.gid, dir_fd=fd, follow_symlinks=False)
                except OSError as exc:
                    raise _fail("change the owner of", path, exc) from exc
                self.result.changed.append(str(path))
            elif stat.S_ISREG(st.st_mode):
                self.result.skipped.append(f"{path}: a file with {st.st_nlink} hard links")
            else:
                self.result.skipped.append(f"{path}: {_kind(st.st_mode)}")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file or directory"


def prepare_state_dir(path: Path, uid: int, gid: int) -> PrepareResult:
    """Create ``path`` if missing; give it and its regular files and directories to ``uid:gid``, directories
    0700. Idempotent. PrepareError (with the fix) when it cannot."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            os.mkdir(path, DIR_MODE)
            st = os.lstat(path)
        except OSError as exc:
            raise _fail("create", path, exc) from exc
    except OSError as exc:
        raise _fail("stat", path, exc) from exc
    if stat.S_ISLNK(st.st_mode):
        raise PrepareError(f"{path} is a symlink: not following it; mount or name the real directory")
    if not stat.S_ISDIR(st.st_mode):
        raise PrepareError(f"{path} is not a directory")
    walk = _Walk(uid, gid)
    fd = walk.take(path, path, None, st)
    try:
        walk.prepare(fd, path, st, 1)
    finally:
        os.close(fd)
    return walk.result
