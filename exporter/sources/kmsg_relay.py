"""``rocm-watchdog kmsg-relay``: the one privileged piece of a non-root deployment.

A non-root container gets no ambient capabilities, and ``allowPrivilegeEscalation: false`` (no_new_privs) makes
the kernel ignore file capabilities, so an exporter running as uid 10001 cannot open ``/dev/kmsg`` where
``kernel.dmesg_restrict=1``; nor can any unprivileged container, whose device cgroup does not allow the device.
The relay runs beside the exporter as uid 0, opens ``/dev/kmsg`` (CAP_SYSLOG and the device allowed are all it
needs for that), and copies the kernel's records into a FIFO the exporter reads (``--kernel-log.path=<FIFO>``):

- Each record is written as one ``read()`` of ``/dev/kmsg`` returned it (``prio,seq,usec,flags;message`` plus
  its dictionary lines), in one ``write()``, so the exporter parses the FIFO exactly like ``/dev/kmsg`` and its
  sequence numbers give exactly-once counting and lost-record accounting. The relay classifies nothing, opens no
  socket, runs no program and holds one record in memory.
- The FIFO is made fresh under a temp name and renamed over ``--to``: whatever was there (a stale FIFO, a file,
  a symlink) is replaced, never followed, opened or written. It is mode 0644, owned by root: the exporter's uid
  may read it, nobody but root can write into it, so nobody can forge kernel records.
- When the reader goes away (the exporter restarts), the relay waits for the next one and starts again at the
  oldest record still in the ring buffer; the restarted exporter skips what its cursor already counted.
- Records the kernel overwrote before the relay read them (EPIPE from ``/dev/kmsg``) are passed on as what they
  are: a gap in the sequence numbers, which the exporter counts in ``rocm_kernel_log_records_lost_total``.
- Once ``/dev/kmsg`` is open nothing else needs a privilege (reads and seeks on an open kmsg fd are not checked
  again), so the relay drops every capability (the bounding set too, where it may) and sets no_new_privs. In
  Kubernetes its container must be privileged to be allowed the device; the process holds what that gives for
  the milliseconds before the open only.
- SIGTERM (or SIGINT) ends it within ``WAIT_SECONDS``: every wait is a poll with that timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import stat
import time
from collections.abc import Callable
from pathlib import Path

from exporter.logging import get_logger

log = get_logger("kmsg-relay")

KMSG_READ_SIZE = 16384  # one /dev/kmsg record per read; a buffer that is too small gives EINVAL
WAIT_SECONDS = 0.25  # longest single wait: how soon a stop request is seen
MAX_RECORDS_PER_WAKE = 1024  # then look at the reader and the stop flag again
FIFO_MODE = 0o644  # the exporter may read, only root may write

_GONE = select.POLLERR | select.POLLHUP | select.POLLNVAL  # a FIFO writer sees POLLERR once no reader is left

_CAP_SYSLOG = 34
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_MAX_CAPS = 64  # capability numbers the kernel's bitmaps can hold; unknown ones give EINVAL and are skipped


class RelayError(Exception):
    """The relay cannot run: the message says why and what to change."""


def _has_cap_syslog() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYSLOG & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def drop_privileges() -> None:
    """No capability left (effective, permitted, inheritable, ambient; the bounding set while CAP_SETPCAP allows)
    and no_new_privs: an exec could never regain any. RelayError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(_MAX_CAPS):  # EPERM without CAP_SETPCAP: that bounding set was limited before we started
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)  # version, pid 0: this thread
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2 words, all zero
    if libc.capset(header, data) != 0 or libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise RelayError(f"cannot drop capabilities after opening the source: {os.strerror(code)}")


class KmsgRelay:
    """Copies kmsg records from ``source`` into a FIFO at ``fifo`` until ``stop()``.

    ``read`` is ``os.read`` unless a test gives another (to produce EPIPE the way an overrun ring buffer does);
    ``drop_privileges=False`` keeps the capabilities (tests running it in their own process).
    """

    def __init__(
        self, source: Path, fifo: Path, read: Callable[[int, int], bytes] = os.read, drop_privileges: bool = True
    ) -> None:
        self.source = source
        self.fifo = fifo
        self._read = read
        self._drop = drop_privileges
        self._stopping = False
        self._fifo_ident: tuple[int, int] | None = None
        self.connected = False  # a reader has the FIFO open and records are being copied to it
        self.records = 0  # records written since start (all readers)
        self.overruns = 0  # EPIPE from the source: records overwritten before they were read

    def stop(self) -> None:
        """Safe from a signal handler: only sets a flag every wait looks at."""
        self._stopping = True

    # -- the source ----------------------------------------------------------------------------------------
    def _open_source(self) -> int:
        try:
            fd = os.open(self.source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except PermissionError as exc:
            if _has_cap_syslog():
                why = (
                    "this process has CAP_SYSLOG, so the device cgroup (or an LSM) refuses the device: an "
                    "unprivileged container may not open /dev/kmsg, the relay's container must be privileged"
                )
            else:
                why = (
                    "reading it needs CAP_SYSLOG where kernel.dmesg_restrict=1: run the relay as uid 0 with "
                    "capabilities add [SYSLOG]"
                )
            raise RelayError(f"cannot open {self.source}: permission denied; {why}") from exc
        except OSError as exc:
            raise RelayError(f"cannot open {self.source}: {exc.strerror or exc}") from exc
        if not stat.S_ISCHR(os.fstat(fd).st_mode):
            os.close(fd)
            raise RelayError(f"{self.source} is not a character device: --from takes a kmsg device (/dev/kmsg)")
        return fd

    # -- the FIFO ------------------------------------------------------------------------------------------
    def _make_fifo(self) -> None:
        """A fresh FIFO renamed over the path: atomic, and never follows or writes what was there."""
        parent = self.fifo.parent
        temp = parent / f".{self.fifo.name}.{os.getpid()}.tmp"
        try:
            parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)  # left by an earlier relay with our pid (a restarted container)
            old_umask = os.umask(0o022)
            try:
                os.mkfifo(temp, FIFO_MODE)
            finally:
                os.umask(old_umask)
            os.rename(temp, self.fifo)
            st = os.lstat(self.fifo)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise RelayError(f"cannot create the FIFO {self.fifo}: {exc.strerror or exc}") from exc
        self._fifo_ident = (st.st_dev, st.st_ino)
        log.info("fifo_created", path=str(self.fifo), mode=oct(FIFO_MODE))

    def _ours(self, st: os.stat_result) -> bool:
        return stat.S_ISFIFO(st.st_mode) and (st.st_dev, st.st_ino) == self._fifo_ident

    def _wait_for_reader(self) -> int | None:
        """The FIFO's write end once a reader has it open; None when stopping. Recreates a FIFO gone or replaced."""
        while not self._stopping:
            try:
                ours = self._ours(os.lstat(self.fifo))
            except FileNotFoundError:
                ours = False
            if not ours:
                log.warning("fifo_replaced", path=str(self.fifo))
                self._make_fifo()
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.ENXIO, errno.ENOENT, errno.ELOOP):
                    # ENXIO: a FIFO without a reader, the exporter is not there (yet); the others: swapped since
                    # the lstat, looked at again after the wait
                    time.sleep(WAIT_SECONDS)
                    continue
                raise RelayError(f"cannot open the FIFO {self.fifo}: {exc.strerror or exc}") from exc
            if self._ours(os.fstat(fd)):
                return fd
            os.close(fd)  # swapped between the lstat and the open: nothing was written
        return None

    def _write_record(self, out: int, record: bytes) -> bool:
        """The whole record into the FIFO; False when the reader went away or we are stopping."""
        view = memoryview(record)
        poller = select.poll()
        poller.register(out, select.POLLOUT)
        while view:
            try:
                view = view[os.write(out, view) :]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                return False
            while True:  # the FIFO is full: the exporter reads it once per collect
                if self._stopping:
                    return False
                events = dict(poller.poll(int(WAIT_SECONDS * 1000))).get(out, 0)
                if events & _GONE:
                    return False
                if events & select.POLLOUT:
                    break
        return True

    def _copy(self, source: int, out: int) -> None:
        """Records from ``source`` into ``out`` until the reader goes away or we are stopping."""
        poller = select.poll()
        poller.register(source, select.POLLIN)
        poller.register(out, 0)  # POLLERR and POLLHUP are always reported
        while not self._stopping:
            events = dict(poller.poll(int(WAIT_SECONDS * 1000)))
            if events.get(out, 0) & _GONE:
                return
            if events.get(source) and not self._copy_pending(source, out):
                return

    def _copy_pending(self, source: int, out: int) -> bool:
        """The records pending now, at most MAX_RECORDS_PER_WAKE; False when the reader went away or we stop."""
        overruns = 0
        try:
            for _ in range(MAX_RECORDS_PER_WAKE):
                try:
                    record = self._read(source, KMSG_READ_SIZE)
                except BlockingIOError:
                    return True
                except BrokenPipeError:
                    overruns += 1  # the next read gives the oldest record left: the gap shows in its number
                    self.overruns += 1
                    continue
                except InterruptedError:
                    continue
                if not record:
                    return True
                if not self._write_record(out, record):
                    return False
                self.records += 1
            return True
        finally:
            if overruns:
                log.warning("kmsg_overrun", overruns=overruns, overruns_total=self.overruns)

    # -- the loop ------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Relay until ``stop()``, with no privilege left once the source is open. RelayError when the source or
        the FIFO cannot be used."""
        source = self._open_source()
        try:
            if self._drop:
                drop_privileges()
            self._make_fifo()
            while True:
                out = self._wait_for_reader()
                if out is None:
                    break
                try:
                    with contextlib.suppress(OSError):  # from the oldest record still in the ring buffer
                        os.lseek(source, 0, os.SEEK_SET)
                    log.info("reader_connected", path=str(self.fifo))
                    self.connected = True
                    self._copy(source, out)
                finally:
                    os.close(out)
                    self.connected = False
                if self._stopping:
                    break
                log.info("reader_gone", path=str(self.fifo), records_total=self.records)
        finally:
            os.close(source)
        log.info("relay_stopped", records_total=self.records, overruns_total=self.overruns)
