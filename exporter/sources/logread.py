"""The readers of the kernel-log source: a stream (``/dev/kmsg``, a FIFO of kmsg records) and a followed text
file that survives rotation. Bytes in, parsed records out; the source does the bookkeeping.

A followed file is known by its inode and a fingerprint of its first bytes, so the file being read is found
again wherever rotation moved it, and a file truncated in place (copytruncate) is told from the one read
before:

- rotated while the exporter was stopped: the old file is found among the path's siblings (``kern.log.1``,
  ``kern.log-20261130``...) by inode and fingerprint and read from the saved offset to its end first;
- several rotations between two reads (or while stopped): after the old file, every sibling written after it
  (by modification time, oldest first) is read in full before the file at the path; compressed siblings are
  skipped (their lines were read before they were compressed, or are lost for good);
- truncated in place (copytruncate): the copy (a sibling with the same fingerprint) is read from the offset to
  its end, then the file at the path from its start. Lines written between logrotate's copy and its truncate are
  lost by copytruncate itself, whoever reads the file.

Rotation into another directory (logrotate ``olddir``) is not followed: the file at the path is then read
from its start, with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from exporter.model.kernel import KernelRecord
from exporter.parsers.kernel_log import KernelLogLineParser, LineScanner, SkippedRecords

KMSG_READ_SIZE = 16384  # one /dev/kmsg record per read; a buffer that is too small gives EINVAL
MAX_READS_PER_COLLECT = 200_000  # bounds one collect(); the rest is read on the next call
# Bytes one collect() reads at most, so a large backlog (a multi-GB kern.log on first start, a flood through a
# FIFO) is worked off a slice at a time with bounded memory instead of all at once: the reader says ``more``
# and the source's thread comes back at once.
MAX_BYTES_PER_COLLECT = 512 << 10
MAX_LINE_BYTES = 64 << 10  # a "line" longer than this without a newline is not a log line: dropped, warned
FINGERPRINT_BYTES = 256  # how much of a file's start tells it from another (timestamps make it unique)
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".Z")


class RawReader(Protocol):
    """What the stream reader needs from an open file: ``os.read`` semantics on a non-blocking descriptor.

    ``read`` raises BlockingIOError when nothing is pending, BrokenPipeError (EPIPE) when /dev/kmsg overwrote
    records before they were read, and returns b"" at end of file (a FIFO without a writer).
    """

    def read(self, size: int) -> bytes: ...

    def close(self) -> None: ...


class FdReader:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, size: int) -> bytes:
        return os.read(self.fd, size)

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        os.close(self.fd)


Item = TypeVar("Item", KernelRecord, "KernelRecord | SkippedRecords")


class ReadResult(Generic[Item]):
    """What one ``read_available`` read (a plain class: a dataclass costs every start about a millisecond)."""

    __slots__ = ("bytes_read", "lines_unparsed", "overrun_at", "overruns", "records", "warnings", "writer_gone")

    def __init__(self) -> None:
        self.records: list[Item] = []  # a followed file also gives SkippedRecords
        self.overruns = 0  # EPIPE: the reader fell behind the ring buffer
        self.overrun_at: list[int] = []  # len(records) when each EPIPE came
        self.warnings: list[str] = []
        self.lines_unparsed = 0
        self.writer_gone = False  # a FIFO read returned end of file: no process has it open for writing
        self.bytes_read = 0


def _cap_partial(partial: bytes, out: ReadResult[Item]) -> bytes:
    """An unterminated tail longer than any log line is not one: drop it with a warning, keep memory bounded."""
    if len(partial) <= MAX_LINE_BYTES:
        return partial
    out.warnings.append(f"dropped {len(partial)} bytes without a newline: not a kernel-log line")
    out.lines_unparsed += 1
    return b""


class StreamReader:
    """Reads records from a character device (/dev/kmsg: one record per read) or a FIFO (a byte stream).

    Bytes are split into lines and parsed incrementally; an incomplete last line waits for the next read.
    """

    def __init__(self, raw: RawReader, fmt: str | None) -> None:
        self.raw = raw
        self.parser = KernelLogLineParser(fmt)
        self.more = False  # the last read stopped at the budget with records still pending
        self._partial = b""
        self._lineno = 0

    def _lines(self, data: bytes, out: ReadResult[KernelRecord]) -> None:
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        self._partial = _cap_partial(self._partial, out)
        for raw_line in complete:
            self._lineno += 1
            out.records.extend(self.parser.feed(raw_line.decode("utf-8", "replace"), self._lineno))

    def read_available(self) -> ReadResult[KernelRecord]:
        out: ReadResult[KernelRecord] = ReadResult()
        unparsed_before = self.parser.lines_unparsed
        warned_before = len(self.parser.warnings)
        budget = MAX_BYTES_PER_COLLECT
        drained = False
        for _ in range(MAX_READS_PER_COLLECT):
            if budget <= 0:
                break
            try:
                data = self.raw.read(KMSG_READ_SIZE)
            except BlockingIOError:
                drained = True
                break
            except BrokenPipeError:
                out.records.extend(self.parser.flush())
                out.overruns += 1  # the position already moved to the oldest record; keep reading
                out.overrun_at.append(len(out.records))
                continue
            except InterruptedError:
                continue
            if not data:
                drained = out.writer_gone = True
                break
            budget -= len(data)
            out.bytes_read += len(data)
            self._lines(data, out)
        # A kmsg record read last is complete once nothing more is pending (a kmsg-relay writes each record in one
        # write). Cut off by the budget, its dictionary lines (DEVICE=) may still be in the FIFO: held for the
        # next call, which continues the same stream.
        if drained:
            out.records.extend(self.parser.flush())
        self.more = not drained
        out.lines_unparsed += self.parser.lines_unparsed - unparsed_before
        out.warnings = self.parser.warnings[warned_before:]
        del self.parser.warnings[:]
        return out

    def fileno(self) -> int | None:
        """The descriptor to poll, when the stream has one (an injected test stream may not)."""
        fileno = getattr(self.raw, "fileno", None)
        return fileno() if callable(fileno) else None

    def close(self) -> None:
        self.raw.close()


class FileFollower:
    """Follows a text log file (any dmesg or journal format) across restarts, rotation and truncation.

    ``cursor()`` names the file being read (device, inode, offset, fingerprint); ``open(cursor)`` finds it again.
    ``more`` is True when the last read stopped at MAX_BYTES_PER_COLLECT with bytes left to read.
    """

    def __init__(self, path: Path, scanner: LineScanner | None = None) -> None:
        self.path = path
        self.parser = KernelLogLineParser()
        self.scanner = scanner  # the rules' literal scan: lines without a literal are counted, not parsed
        self.more = False
        self._fd: int | None = None
        self._ident: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of the file being read
        self._name = path.name  # where it was found: the path's name, or a rotated sibling's
        self.offset = 0  # end of the last complete line consumed
        self._fp: str | None = None  # fingerprint of the first _fp_len bytes
        self._fp_len = 0
        self._partial = b""
        self._lineno = 0
        self._notes: list[str] = []  # what rotation handling did, for the source's warnings

    def unread(self) -> tuple[int, int, int] | None:
        """The path's (device, inode, size) when it names another file than the one read, or the file has bytes
        this follower has not read; None when all is read. What a watch armed after the last read cannot tell: a
        write between that read and the arming raises no event."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # gone for now: the directory's watch sees it come back
        now = (st.st_dev, st.st_ino, st.st_size)
        if (st.st_dev, st.st_ino) != self._ident or st.st_size != self.offset + len(self._partial):
            return now
        return None

    # -- identity -------------------------------------------------------------------------------------------
    def cursor(self) -> dict[str, object]:
        return {"dev": self._ident[0], "ino": self._ident[1], "offset": self.offset, "fp": self._fp,
                "fp_len": self._fp_len}  # fmt: skip

    @staticmethod
    def _fingerprint_of(fd: int, length: int) -> str | None:
        data = os.pread(fd, length, 0)
        return hashlib.sha256(data).hexdigest()[:32] if len(data) == length else None

    def _refresh_fingerprint(self, size: int) -> None:
        """A file shorter than FINGERPRINT_BYTES gets its fingerprint lengthened as it grows."""
        if self._fd is not None and self._fp_len < FINGERPRINT_BYTES and size > self._fp_len:
            length = min(size, FINGERPRINT_BYTES)
            self._fp, self._fp_len = self._fingerprint_of(self._fd, length), length

    def _same_start(self, fd: int, fp: object, fp_len: object) -> bool:
        """Whether the file starts as the one fingerprinted did (True when nothing was fingerprinted yet)."""
        if not isinstance(fp_len, int) or fp_len <= 0 or not isinstance(fp, str):
            return True
        return self._fingerprint_of(fd, fp_len) == fp

    def _siblings(self) -> list[tuple[Path, os.stat_result]]:
        """The path and the files rotation made of it in its directory (uncompressed, regular)."""
        out = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.path.parent):
                name = entry.name
                if not name.startswith(self.path.name) or name.endswith(COMPRESSED_SUFFIXES):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat()
                    if stat.S_ISREG(st.st_mode):
                        out.append((Path(entry.path), st))
        return out

    def _find(self, match: Callable[[Path, os.stat_result], bool]) -> tuple[Path, os.stat_result] | None:
        for path, st in self._siblings():
            if match(path, st):
                return path, st
        return None

    def _fingerprint_matches(self, path: Path, fp: object, fp_len: object) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return self._same_start(fd, fp, fp_len)
        finally:
            os.close(fd)

    # -- opening and switching ------------------------------------------------------------------------------
    def _switch(self, path: Path, offset: int) -> None:
        """Read ``path`` from ``offset`` on (the parser's unfinished record ends with the old file)."""
        self.close()
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)
        self._fd, self._ident, self._name = fd, (st.st_dev, st.st_ino), path.name
        self.offset, self._partial, self._lineno = offset, b"", 0
        self._fp, self._fp_len = None, 0
        self._refresh_fingerprint(st.st_size)
        os.lseek(fd, offset, os.SEEK_SET)

    def open(self, cursor: Mapping[str, object] | None) -> None:
        """Open the path, or resume where ``cursor`` left off, wherever rotation moved that file since."""
        current = os.stat(self.path)  # FileNotFoundError etc. go to the source
        here = (current.st_dev, current.st_ino)
        if cursor is None:
            self._switch(self.path, 0)
            return
        ident, offset = (cursor.get("dev"), cursor.get("ino")), cursor.get("offset")
        fp, fp_len = cursor.get("fp"), cursor.get("fp_len")
        if not isinstance(offset, int) or offset < 0:
            self._switch(self.path, 0)
            return
        if ident == here:
            self._switch(self.path, 0)
            assert self._fd is not None
            if offset <= current.st_size and self._same_start(self._fd, fp, fp_len):
                self._fp, self._fp_len = (fp, fp_len) if isinstance(fp, str) and isinstance(fp_len, int) else (None, 0)
                self._refresh_fingerprint(current.st_size)
                self.offset = offset
                os.lseek(self._fd, offset, os.SEEK_SET)
                return
            # truncated in place while stopped (copytruncate): the rest of what was read is in the copy
            if self._resume_in_copy(here, offset, fp, fp_len):
                return
            self._notes.append(f"{self.path} was truncated while the exporter was stopped; read from the start")
            return
        # rotated while stopped: the file that was being read has another name now
        old = self._find(lambda p, st: (st.st_dev, st.st_ino) == ident and self._fingerprint_matches(p, fp, fp_len))
        if old is not None and old[1].st_size >= offset:
            self._switch(old[0], offset)
            self._notes.append(f"{self.path} was rotated while the exporter was stopped; reading the rest of {old[0]}")
            return
        self._notes.append(
            f"{self.path} was rotated while the exporter was stopped and the file it was reading is gone; "
            "reading the new file from the start (lines written to the old one after the exporter stopped are lost)"
        )
        self._switch(self.path, 0)

    def _resume_in_copy(self, here: tuple[int, int], offset: int, fp: object, fp_len: object) -> bool:
        """After a truncation in place: read the copy logrotate made (same start, another inode) from ``offset``."""
        if not isinstance(fp_len, int) or fp_len <= 0:
            return False
        copy = self._find(
            lambda p, st: (
                (st.st_dev, st.st_ino) != here and st.st_size >= offset and self._fingerprint_matches(p, fp, fp_len)
            )
        )
        if copy is None:
            return False
        self._switch(copy[0], offset)
        self._notes.append(f"{self.path} was truncated (copytruncate); reading the rest of its copy {copy[0]} first")
        return True

    def _next_file(self) -> bool:
        """At the end of a file rotation moved away: go on with the oldest sibling written after it (a file
        rotated between two reads), else the file at the path. False when there is nothing to go on with."""
        assert self._fd is not None
        done = os.fstat(self._fd)
        newer = [
            (st.st_mtime_ns, p.name, p)
            for p, st in self._siblings()
            if (st.st_dev, st.st_ino) != self._ident and st.st_mtime_ns > done.st_mtime_ns and p != self.path
        ]
        if newer:
            path = min(newer)[2]
            self._notes.append(f"{path} was rotated between two reads; reading it before {self.path}")
            self._switch(path, 0)
            return True
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # rotated away and not recreated yet: keep the old file open
        if (st.st_dev, st.st_ino) == self._ident:
            return False
        self._switch(self.path, 0)
        return True

    # -- reading --------------------------------------------------------------------------------------------
    def _drain(self, out: ReadResult[KernelRecord | SkippedRecords], budget: int) -> tuple[bool, int]:
        """Read up to ``budget`` bytes: (end of the file reached, bytes read)."""
        assert self._fd is not None
        used = 0
        while used < budget:
            data = os.read(self._fd, min(1 << 20, budget - used))
            if not data:
                return True, used
            used += len(data)
            out.bytes_read += len(data)
            data = self._partial + data
            cut = data.rfind(b"\n") + 1
            complete, self._partial = data[:cut], data[cut:]
            if len(self._partial) > MAX_LINE_BYTES:
                self.offset += len(self._partial)  # skipped: the next line starts after it
            self._partial = _cap_partial(self._partial, out)
            if complete:
                out.records.extend(self.parser.feed_chunk(complete, self._lineno + 1, self.scanner))
                self._lineno += complete.count(b"\n")
                self.offset += len(complete)
        return False, used

    def _at_path(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._ident

    def _check_truncation(self, out: ReadResult[KernelRecord | SkippedRecords]) -> None:
        """The file at the path is shorter than the offset, or starts differently: truncated in place."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size >= self.offset and self._same_start(self._fd, self._fp, self._fp_len):
            self._refresh_fingerprint(size)
            return
        out.records.extend(self.parser.flush())
        if not self._resume_in_copy(self._ident, self.offset, self._fp, self._fp_len):
            out.warnings.append(f"{self.path} was truncated; reading it again from the start")
            self._switch(self.path, 0)

    def read_available(self) -> ReadResult[KernelRecord | SkippedRecords]:
        out: ReadResult[KernelRecord | SkippedRecords] = ReadResult()
        unparsed_before = self.parser.lines_unparsed
        assert self._fd is not None
        if self._at_path():
            self._check_truncation(out)
        budget = MAX_BYTES_PER_COLLECT
        at_end, used = self._drain(out, budget)
        budget -= used
        # At the end of a file that is no longer the one at the path: on to the next (bounded by the siblings).
        for _ in range(64):
            if not at_end or budget <= 0 or self._at_path():
                break
            out.records.extend(self.parser.flush())
            if not self._next_file():
                break
            at_end, used = self._drain(out, budget)
            budget -= used
        self.more = not at_end
        out.records.extend(self.parser.flush())
        out.lines_unparsed += self.parser.lines_unparsed - unparsed_before
        out.warnings.extend(self._notes)
        self._notes.clear()
        out.warnings.extend(self.parser.warnings)
        del self.parser.warnings[:]
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
