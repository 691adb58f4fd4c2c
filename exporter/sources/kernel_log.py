"""The kernel-log source: reads ``/dev/kmsg`` (or a FIFO, or a followed dmesg/journal file) without blocking,
classifies every kernel record, counts events per (GPU, class) exactly once across restarts, and returns an
immutable cumulative ``KernelLogState``. In a non-root pod the FIFO is a kmsg-relay's: its kmsg records carry
their sequence numbers, so they get the same exactly-once and lost-record bookkeeping as ``/dev/kmsg`` itself.

Exactly once: the cursor (boot id and last kmsg sequence number, or the followed file's device, inode and
offset) is persisted in ``--state.dir`` together with the counts, the events still waiting for their
lookahead and the GPUs whose reset sequence is open (the classifier's state), in one atomic write (temp file,
fsync, rename, fsync dir). After a restart in the same boot the records up to the saved sequence number are
skipped; on a new boot the whole ring buffer is counted. Counts are persisted too, so the counters continue
across restarts and reboots; they reset only when the state file is lost or corrupt (a corrupt file is moved
aside and reported in the state).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from exporter.clock import wall_time
from exporter.config import Config
from exporter.heap import trim_heap
from exporter.logging import get_logger
from exporter.model.kernel import KernelEvent, KernelLogState, KernelRecord
from exporter.parsers.common import normalize_bdf
from exporter.parsers.kernel_log import SkippedRecords
from exporter.sources import SourceError
from exporter.sources.logread import FdReader, FileFollower, RawReader, ReadResult, StreamReader
from exporter.sources.wakeup import FALLBACK_POLL_SECONDS, FileWatch, Interrupt, wait_readable
from exporter.statefile import remove_stale_temps, write_atomic
from exporter.watchdog.kernel_classify import KernelClassifier, aer_severity
from exporter.watchdog.kernel_rules import KernelRules, load_rules

log = get_logger("kernel-log")

CURSOR_FILE = "kernel-log-cursor.json"
# What the operator does when the cursor cannot be written (the ``action`` of state_write_failed, as the other
# state files' lines have one).
CURSOR_UNSAVED_ACTION = (
    "counting goes on in memory; what was counted since the last save is not kept across a restart (exactly-once "
    "is lost): fix the owner and mode of --state.dir (writable by the exporter's user) or free the disk"
)
CURSOR_VERSION = 1
MAX_WARNINGS = 20
# A FIFO nobody writes to reads as end of file. Briefly normal (the kmsg-relay reconnects after the exporter
# opened the FIFO, or restarts); for longer, the exporter is blind: the source fails until a writer is back.
FIFO_WRITER_GRACE_SECONDS = 10.0
# The follower thread collects as soon as a record arrives; the cursor file (an fsync'd atomic write) is written
# at most this often while records keep coming, and at once when they stop. Counts and cursor are written
# together, so a kill in between re-reads those records and counts them once, as after any restart.
PERSIST_EVERY_SECONDS = 1.0
TRIM_AFTER_BYTES = 16 << 20  # a backlog this large read in one go: its memory is given back once it is done
# Lookaheads waiting for their event are decided on a clock: looked at this often while any are waiting.
PENDING_CHECK_SECONDS = 1.0
# A FIFO whose writer is gone reads as hung up at once: looked at this often until a writer is back.
FIFO_NO_WRITER_POLL_SECONDS = 0.5
AMD_VENDOR = 0x1002


def gpu_ports(sysfs: Path, gpus: Sequence[str]) -> dict[str, str]:
    """``port BDF -> GPU BDF`` for the PCIe ports directly above each GPU.

    The GPU's parent port always; further up while the port below is AMD's own (the switch inside a Navi or
    MI card, vendor 0x1002), since those ports are the same physical card.
    """
    ports: dict[str, str] = {}
    for gpu in gpus:
        try:
            real = Path(os.path.realpath(sysfs / "bus" / "pci" / "devices" / gpu))
        except OSError:
            continue
        node = real.parent
        while normalize_bdf(node.name) is not None:
            bdf = normalize_bdf(node.name)
            assert bdf is not None
            ports.setdefault(bdf, gpu)
            try:
                vendor = int((node / "vendor").read_text().strip(), 16)
            except (OSError, ValueError):
                break
            if vendor != AMD_VENDOR:
                break
            node = node.parent
    return ports


def _event_to_json(event: KernelEvent) -> dict[str, object]:
    return {
        "line": event.line,
        "class": event.event_class,
        "severity": event.severity,
        "message": event.message,
        "monotonic_seconds": event.monotonic_seconds,
        "count": event.count,
        "seq": event.seq,
        "wall_time": event.wall_time,
    }


def _event_from_json(raw: Mapping[str, object]) -> KernelEvent:
    def num(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    seq, line, count = raw.get("seq"), raw.get("line"), raw.get("count")
    return KernelEvent(
        line=line if isinstance(line, int) else 0,
        event_class=str(raw["class"]),
        pci_bus="unknown",
        severity=str(raw.get("severity", "")),
        message=str(raw.get("message", "")),
        monotonic_seconds=num("monotonic_seconds"),
        count=count if isinstance(count, int) else 1,
        seq=seq if isinstance(seq, int) else None,
        wall_time=num("wall_time"),
    )


class CursorError(ValueError):
    pass


class _Cursor:
    """What the cursor file keeps (a plain class: a dataclass costs every start about a millisecond)."""

    __slots__ = ("aer", "boot_id", "counts", "file", "last", "last_seq", "pending", "records_lost", "resets")

    def __init__(self) -> None:
        self.boot_id: str | None = None
        self.last_seq: int | None = None
        self.file: dict[str, object] | None = None
        self.counts: dict[tuple[str, str], int] = {}
        self.last: dict[tuple[str, str], float] = {}
        self.records_lost = 0
        self.pending: list[KernelEvent] = []
        self.aer: dict[tuple[str, str], int] = {}  # (pci_bus, aer_severity) -> pcie_aer events
        # GPUs whose reset sequence is open, with its kernel time (KernelClassifier.open_resets)
        self.resets: tuple[tuple[str, float | None], ...] = ()


def parse_cursor(text: str) -> _Cursor:
    """The persisted cursor; CursorError when it is not one this version wrote."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CursorError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != CURSOR_VERSION:
        raise CursorError("not a kernel-log cursor of version 1")
    try:
        cur = _Cursor()
        boot = doc.get("boot_id")
        cur.boot_id = boot if isinstance(boot, str) else None
        seq = doc.get("last_seq")
        if seq is not None and (not isinstance(seq, int) or seq < 0):
            raise CursorError(f"bad last_seq {seq!r}")
        cur.last_seq = seq
        f = doc.get("file")
        cur.file = dict(f) if isinstance(f, dict) else None
        for bus, cls, n in doc.get("counts", []):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise CursorError(f"bad count {n!r}")
            cur.counts[(str(bus), str(cls))] = n
        for bus, sev, n in doc.get("aer", []):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise CursorError(f"bad AER count {n!r}")
            cur.aer[(str(bus), str(sev))] = n
        for bus, cls, t in doc.get("last", []):
            cur.last[(str(bus), str(cls))] = float(t)
        lost = doc.get("records_lost", 0)
        if not isinstance(lost, int) or lost < 0:
            raise CursorError(f"bad records_lost {lost!r}")
        cur.records_lost = lost
        pending = doc.get("pending", [])
        if not isinstance(pending, list) or not all(isinstance(e, dict) for e in pending):
            raise CursorError("bad pending events")
        cur.pending = [_event_from_json(e) for e in pending]
        resets = doc.get("resets", [])  # absent in a cursor written before reset sequences were kept
        if not isinstance(resets, list):
            raise CursorError("bad open resets")
        cur.resets = tuple((str(bus), None if began is None else float(began)) for bus, began in resets)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        if isinstance(exc, CursorError):
            raise
        raise CursorError(f"malformed: {exc}") from exc
    return cur


class KernelLogSource:
    """Source protocol, plus ``wait``: the scheduler's follower thread alternates ``collect()`` (never blocking)
    with ``wait()`` (blocking until there may be something to read, or the heartbeat
    ``intervals_seconds["kernel-log"]`` is due), so a record is counted as soon as it is written and a quiet host
    costs one collect per heartbeat."""

    name = "kernel-log"

    def __init__(
        self,
        config: Config,
        known_gpus: Callable[[], Sequence[str]],
        rules: KernelRules | None = None,
        wall_clock: Callable[[], float] = wall_time,
        monotonic_clock: Callable[[], float] = time.monotonic,
        kmsg_stream: RawReader | None = None,
        persist_every_seconds: float = 0.0,
    ) -> None:
        """``kmsg_stream``: an already open stream of kmsg records to read instead of ``kernel_log_path``.
        ``persist_every_seconds``: write the cursor at most this often (the daemon: PERSIST_EVERY_SECONDS); 0
        writes it at the end of every collect that changed it."""
        self.config = config
        self.path = config.kernel_log_path
        self._known_gpus = known_gpus
        self.rules = rules if rules is not None else load_rules(config.kernel_log_rules)
        self._wall = wall_clock
        self._mono = monotonic_clock
        self.cursor_path = config.state_dir / CURSOR_FILE
        self.classifier = KernelClassifier(self.rules)
        self._topology: tuple[str, ...] | None = None
        self._reader: StreamReader | FileFollower | None = None
        self._kind = ""
        if kmsg_stream is not None:
            self._reader, self._kind = StreamReader(kmsg_stream, "kmsg"), "kmsg"
        self._cursor = _Cursor()
        self._boot_id: str | None = None
        self._loaded = False
        self._cursor_corrupt = False
        self._unsaved_error: str | None = None
        self._count_initial_gap = False
        self._stream_ident: tuple[int, int] | None = None
        self._overrun_pending = False
        self._no_writer_since: float | None = None
        self._records_read = 0
        self._records_ignored = 0
        self._lines_unparsed = 0
        self._warnings: list[str] = []
        self._dirty = False
        self._persist_every = persist_every_seconds
        self._backlog_bytes = 0  # read since the reader last found nothing new
        self._persisted_at: float | None = None  # time.monotonic() of the last cursor write
        self._watch: FileWatch | None = None
        self._unread_seen: tuple[int, int, int] | None = None  # what wait() last saw unread (FileFollower.unread)

    # -- set-up -------------------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        self._warnings.append(message)
        del self._warnings[:-MAX_WARNINGS]

    def _read_boot_id(self) -> str | None:
        try:
            return (self.config.procfs / "sys" / "kernel" / "random" / "boot_id").read_text().strip() or None
        except OSError:
            return None

    def _load_cursor(self) -> None:
        try:
            raw = self.cursor_path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):  # no cursor yet, or no state dir: counting starts anew
            return
        except OSError as exc:
            raise SourceError(f"cannot read the kernel-log cursor {self.cursor_path}: {exc.strerror}") from exc
        try:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CursorError(f"not UTF-8: {exc}") from exc
            self._cursor = parse_cursor(text)
        except CursorError as exc:
            aside = self.cursor_path.with_name(f"{CURSOR_FILE}.corrupt-{int(self._wall())}")
            try:
                os.replace(self.cursor_path, aside)
                where = f"moved to {aside}"
            except OSError as move_error:  # a read-only state dir: count anew from memory all the same
                where = f"left in place, it could not be moved aside ({move_error.strerror or move_error})"
            self._cursor_corrupt = True
            self._warn(f"kernel-log cursor {self.cursor_path} is corrupt ({exc}); {where}, counting anew")
            log.error("state_file_corrupt", file=CURSOR_FILE, path=str(self.cursor_path), reason=str(exc), where=where)
            self._cursor = _Cursor()

    def _open(self) -> None:
        path = self.path
        try:
            st = os.stat(path)
            if stat.S_ISREG(st.st_mode):
                follower = FileFollower(path, self.rules.line_scanner())
                follower.open(self._cursor.file)
                self._reader, self._kind = follower, "file"
                return
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except PermissionError as exc:
            raise SourceError(
                f"cannot open {path}: permission denied. Reading /dev/kmsg needs CAP_SYSLOG when "
                "kernel.dmesg_restrict=1 (run as root, or as a user with AmbientCapabilities=CAP_SYSLOG in the "
                "systemd unit; a non-root container never has it: run `rocm-watchdog kmsg-relay` beside it and "
                "read its FIFO); a log file needs read permission (usually group adm or systemd-journal)"
            ) from exc
        except OSError as exc:
            raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from exc
        if stat.S_ISCHR(st.st_mode):
            with contextlib.suppress(OSError):  # from the oldest record still in the ring buffer
                os.lseek(fd, 0, os.SEEK_SET)
            self._reader, self._kind = StreamReader(FdReader(fd), "kmsg"), "kmsg"
        else:
            self._reader, self._kind = StreamReader(FdReader(fd), None), "fifo"
        self._stream_ident = (st.st_dev, st.st_ino)
        self._no_writer_since = None

    def _fifo_replaced(self) -> bool:
        """A FIFO path that now names another FIFO (the writer recreated it): ours will never see data again."""
        if self._kind != "fifo":
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # gone for now: keep the old one until a new one appears
        return (st.st_dev, st.st_ino) != self._stream_ident

    def _start(self) -> None:
        with contextlib.suppress(OSError):  # an unusable state dir shows when the cursor is written
            self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self._load_cursor()
        for temp in remove_stale_temps(self.cursor_path):
            log.info("stale_temp_file_removed", path=str(temp))
        self._boot_id = self._read_boot_id()
        # Records the ring buffer dropped before the first one read count as lost only after a reboot the
        # exporter was installed for (an early-boot flood hid GPU errors); on a first start, or with the cursor
        # lost, the sequence number of the oldest record only says how long the host has been up.
        self._count_initial_gap = self._cursor.boot_id is not None and self._cursor.boot_id != self._boot_id
        if self._cursor.boot_id != self._boot_id:
            self._cursor.last_seq = None  # a new boot: sequence numbers restarted, the whole buffer is new
        self._cursor.boot_id = self._boot_id
        self.classifier.restore_pending(self._cursor.pending)
        if not self._count_initial_gap:  # a reset open in an older boot ended with it
            self.classifier.restore_open_resets(self._cursor.resets)
        self._loaded = True

    def _update_topology(self) -> None:
        gpus = tuple(sorted({b for b in (normalize_bdf(g) for g in self._known_gpus()) if b}))
        if gpus != self._topology:
            self._topology = gpus
            self.classifier.set_topology(gpus, gpu_ports(self.config.sysfs, gpus))

    # -- counting -----------------------------------------------------------------------------------------
    def _event_time(self, event: KernelEvent, now: float) -> float:
        if event.wall_time is not None:
            return event.wall_time
        mono = event.monotonic_seconds
        if mono is not None and (self._kind == "kmsg" or (self._kind == "fifo" and event.seq is not None)):
            # printk timestamps and CLOCK_MONOTONIC both count from boot (neither counts suspend). A FIFO's kmsg
            # records (sequence numbers: the kmsg-relay's) come from this node's kernel, whose clock this container
            # shares: the health verdict's window needs their own time, not when they were read (a relay replays
            # the whole ring buffer to a new reader). A record later than our clock is from no clock of ours.
            mono_now = self._mono()
            if self._kind == "kmsg" or mono <= mono_now:
                return min(now, now - mono_now + mono)
        return now

    def _count(self, events: Sequence[KernelEvent], now: float) -> None:
        if not events:
            return
        counts, last, aer = self._cursor.counts, self._cursor.last, self._cursor.aer
        kmsg = self._kind in ("kmsg", "fifo")  # a FIFO's records carry the kernel clock when they are kmsg's
        get = counts.get
        for event in events:
            key = (event.pci_bus, event.event_class)
            counts[key] = get(key, 0) + event.count
            wall = event.wall_time
            last[key] = wall if wall is not None else (self._event_time(event, now) if kmsg else now)
            if key[1] == "pcie_aer":
                by_severity = (key[0], aer_severity(event.message))
                aer[by_severity] = aer.get(by_severity, 0) + event.count
        self._dirty = True

    def _take(self, record: KernelRecord) -> bool:
        """Sequence bookkeeping: False for a record already counted before a restart."""
        if record.seq is None:
            return True
        last = self._cursor.last_seq
        if last is not None and record.seq <= last:
            return False
        # Before the first record of this boot that we read, only after a reboot (see _start).
        first_gap = record.seq if self._count_initial_gap else 0
        gap = record.seq - (last + 1) if last is not None else first_gap
        if self._overrun_pending:
            gap = max(gap, 1)
            self._overrun_pending = False
        if gap > 0:
            self._cursor.records_lost += gap
        self._cursor.last_seq = record.seq
        self._dirty = True
        return True

    def collect(self) -> KernelLogState:
        if not self._loaded:
            self._start()
        if self._reader is not None and self._fifo_replaced():
            self.close()
        if self._reader is None:
            self._open()
        assert self._reader is not None
        self._update_topology()
        now = self._wall()
        try:
            result = self._reader.read_available()
        except OSError as exc:
            self.close()
            raise SourceError(f"reading {self.path} failed: {exc.strerror or exc}") from exc
        self._backlog_bytes += result.bytes_read
        worked_off = self._backlog_bytes >= TRIM_AFTER_BYTES and not self._reader.more
        if worked_off:
            log.info("backlog_read", bytes=self._backlog_bytes, path=str(self.path))
        if worked_off or not result.bytes_read:
            self._backlog_bytes = 0
        if result.overruns:
            self._warn(f"{self.path}: reader fell behind the kernel ring buffer ({result.overruns} overruns)")
        for warning in result.warnings:
            self._warn(warning)
        self._lines_unparsed += result.lines_unparsed
        if isinstance(self._reader, FileFollower):
            self._take_file_records(result.records, now)
        else:
            self._take_stream_records(result.records, set(result.overrun_at), now)  # type: ignore[arg-type]
        self._count(self.classifier.expire(self._mono() if self._kind == "kmsg" else None), now)
        if isinstance(self._reader, FileFollower) and self._reader.cursor() != self._cursor.file:
            self._cursor.file = self._reader.cursor()
            self._dirty = True
        pending = [e for e, _ in self.classifier.pending()]
        if pending != self._cursor.pending:
            self._cursor.pending = pending
            self._dirty = True
        resets = self.classifier.open_resets()
        if resets != self._cursor.resets:
            self._cursor.resets = resets
            self._dirty = True
        if self._dirty and self._persist_due() <= 0:
            self._persist()
        self._check_fifo_writer(result)
        if worked_off:
            # A backlog was worked off, this batch included: its records are garbage once ``result`` goes, and so
            # are the plans of its texts, which would pin the heap's pages they are scattered over (a 1M-line
            # all-amdgpu backlog: +20.8 MiB kept with them, +11.9 with the plans of the last batch alone).
            del result
            self.classifier.drop_cache()
            gc.collect()  # the cycles among them too, which a daemon's rare full collections would leave for long
            trim_heap()
        return self.state()

    def _take_file_records(self, records: Sequence[KernelRecord | SkippedRecords], now: float) -> None:
        """A followed file: no sequence numbers, no overruns; the classifier takes the whole batch in one loop."""
        events: list[KernelEvent] = []
        read, ignored = self.classifier.feed_many(records, events)
        self._count(events, now)
        self._records_read += read
        self._records_ignored += ignored

    def _take_stream_records(self, records: Sequence[KernelRecord], overrun_at: set[int], now: float) -> None:
        """kmsg records: each sequence number taken once (restarts, replays) and its gaps counted as lost."""
        for index, record in enumerate(records):
            if index in overrun_at:
                self._overrun_pending = True
            if not self._take(record):
                continue
            self._records_read += 1
            if not record.is_kernel:
                self._records_ignored += 1
                continue
            self._count(self.classifier.feed(record), now)
        if len(records) in overrun_at:
            self._overrun_pending = True  # the loss shows in the next record's sequence number

    def _check_fifo_writer(self, result: ReadResult[KernelRecord] | ReadResult[KernelRecord | SkippedRecords]) -> None:
        """SourceError when the FIFO has had no writer (the kmsg-relay) for FIFO_WRITER_GRACE_SECONDS."""
        if self._kind != "fifo" or not result.writer_gone or result.records:
            self._no_writer_since = None
            return
        now = self._mono()
        if self._no_writer_since is None:
            self._no_writer_since = now
            return
        absent = now - self._no_writer_since
        if absent >= FIFO_WRITER_GRACE_SECONDS:
            raise SourceError(
                f"{self.path}: no process has had the FIFO open for writing for {absent:.0f} s; nothing is read "
                "(is the kmsg-relay running?)"
            )

    def _persist_due(self) -> float:
        """Seconds until the cursor may be written again (0 or less: now)."""
        if self._persisted_at is None or self._persist_every <= 0:
            return 0.0
        return self._persist_every - (time.monotonic() - self._persisted_at)

    # -- waiting (the follower thread) -----------------------------------------------------------------
    def wait(self, timeout_seconds: float, interrupt: Interrupt) -> None:
        """Block until the log may have something new, ``timeout_seconds`` pass, deferred work is due (a cursor
        write, a lookahead to decide) or ``interrupt`` is set."""
        timeout = timeout_seconds
        if self._reader is not None and self._reader.more:  # a backlog cut off by the read budget: go on at once
            timeout = 0.0
        if self._dirty:
            timeout = min(timeout, max(0.0, self._persist_due()))
        if self.classifier.pending():
            timeout = min(timeout, PENDING_CHECK_SECONDS)
        fds = [interrupt.fileno()]
        reader = self._reader
        if isinstance(reader, StreamReader):
            fd = reader.fileno()
            if self._no_writer_since is not None:  # a FIFO without writer polls as hung up: look now and then
                timeout = min(timeout, FIFO_NO_WRITER_POLL_SECONDS)
            elif fd is None:
                timeout = min(timeout, FALLBACK_POLL_SECONDS)
            else:
                fds.append(fd)
        elif isinstance(reader, FileFollower):
            if self._watch is None:
                self._watch = FileWatch(self.path)
            self._watch.rearm()
            watch_fd = self._watch.fileno()
            if watch_fd is None:
                timeout = min(timeout, FALLBACK_POLL_SECONDS)
            else:
                fds.append(watch_fd)
            # Armed first, then looked at: a write before the arming is seen here, one after it wakes the poll. The
            # same unread state twice (a file the follower does not switch to yet) waits for the watch, not a spin.
            unread = reader.unread()
            if unread is not None and unread != self._unread_seen:
                timeout = 0.0
            self._unread_seen = unread
        wait_readable(fds, timeout)
        if self._watch is not None:
            self._watch.drain()

    def _persist(self) -> None:
        cur = self._cursor
        doc = {
            "version": CURSOR_VERSION,
            "boot_id": cur.boot_id,
            "last_seq": cur.last_seq,
            "file": cur.file,
            "counts": [[b, c, n] for (b, c), n in sorted(cur.counts.items())],
            "last": [[b, c, t] for (b, c), t in sorted(cur.last.items())],
            "records_lost": cur.records_lost,
            "aer": [[b, sev, n] for (b, sev), n in sorted(cur.aer.items())],
            "pending": [_event_to_json(e) for e in cur.pending],
            "resets": [[b, t] for b, t in cur.resets],
        }
        try:
            write_atomic(self.cursor_path, json.dumps(doc, indent=1).encode())
        except OSError as exc:
            # Counting goes on from memory; only exactly-once across a restart is lost. Said once, then again
            # when it recovers, and in rocm_watchdog_state_file_unsaved.
            error = f"{exc.strerror or exc}"
            if self._unsaved_error != error:
                log.error(
                    "state_write_failed",
                    file=CURSOR_FILE,
                    path=str(self.cursor_path),
                    error=error,
                    action=CURSOR_UNSAVED_ACTION,
                )
            self._unsaved_error = error
            self._persisted_at = time.monotonic()  # tried: again in PERSIST_EVERY_SECONDS, not in a busy loop
            return
        if self._unsaved_error is not None:
            log.info("state_write_recovered", file=CURSOR_FILE, path=str(self.cursor_path))
        self._unsaved_error = None
        self._dirty = False
        self._persisted_at = time.monotonic()

    def state(self) -> KernelLogState:
        cur = self._cursor
        return KernelLogState(
            counts=MappingProxyType(dict(cur.counts)),
            last_event_seconds=MappingProxyType(dict(cur.last)),
            aer_counts=MappingProxyType(dict(cur.aer)),
            records_lost=cur.records_lost,
            records_read=self._records_read,
            records_ignored=self._records_ignored,
            lines_unparsed=self._lines_unparsed,
            boot_id=cur.boot_id,
            last_seq=cur.last_seq,
            source_kind=self._kind,
            cursor_corrupt=self._cursor_corrupt,
            cursor_unsaved=self._unsaved_error is not None,
            warnings=tuple(self._warnings),
        )

    def close(self) -> None:
        if self._dirty and self._loaded:  # a write deferred by PERSIST_EVERY_SECONDS
            self._persist()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
