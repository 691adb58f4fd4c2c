"""Kernel-log record formats: ``/dev/kmsg``, dmesg (plain, -T, -r, -x, --json) and journald (short, short-precise,
syslog, RFC 3339, -o json). Pure: text in, ``KernelRecord``s out.

Formats are auto-detected from the first line any of them can read, then every line is tried with that format
first and the others after (a concatenated capture may mix them). A line no format can read becomes a warning;
an input in which no line is readable at all raises ``ParseError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec
from msgspec.structs import replace

from exporter.model import ParseError
from exporter.model.kernel import KernelRecord
from exporter.parsers.common import normalize_bdf


class _Deferred:
    """A module-level pattern compiled when it is first used, not at import: most of them serve inputs a given
    process never sees (pastes, other formats), and compiling them all cost every start several milliseconds.
    The first use compiles the pattern and puts it in the module's namespace in place of this stand-in, so the
    module's own functions use the compiled pattern itself from then on; a reference taken before (an import of
    the name) keeps working through ``__getattr__``."""

    __slots__ = ("_flags", "_name", "_pattern")

    def __init__(self, name: str, pattern: str | bytes, flags: int) -> None:
        self._name, self._pattern, self._flags = name, pattern, flags

    def compile(self) -> re.Pattern[Any]:
        compiled = re.compile(self._pattern, self._flags)
        globals()[self._name] = compiled
        return compiled

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.compile(), attr)


def _deferred(name: str, pattern: str | bytes, flags: int = 0) -> Any:
    """``re.compile(pattern, flags)`` on first use, for the module global ``name`` (see ``_Deferred``)."""
    return _Deferred(name, pattern, flags)


FORMATS = ("kmsg", "dmesg", "journal-short", "journal-rfc3339", "journal-json", "dmesg-json", "plain")

# /dev/kmsg: "PRI,SEQ,TS_USEC,FLAGS[,...];message" then " KEY=value" dictionary lines.
_KMSG: re.Pattern[str] = _deferred(
    "_KMSG", r"^(?P<pri>\d+),(?P<seq>\d+),(?P<ts>\d+),(?P<flags>[^,;]*)(?:,[^;]*)?;(?P<msg>.*)$"
)
_KMSG_DICT: re.Pattern[str] = _deferred("_KMSG_DICT", r"^ (?P<key>[A-Z_][A-Z0-9_]*)=(?P<val>.*)$")

# dmesg: optional raw "<N>" or decoded "kern  :err   : ", then "[ mono]" or "[wall]", optional caller "[  T609]".
# dmesg -H / -e (what people paste from a terminal): "[Nov19 10:34]" (locale month) then "[  +0.000007]" deltas
# ("+0,000007" in comma locales). Neither is the kernel's clock, so they give no timestamp.
_DMESG: re.Pattern[str] = _deferred(
    "_DMESG",
    r"^(?:<(?P<pri>\d+)>|(?P<fac>[a-z]+[0-7]?)\s*:(?P<lvl>[a-z]+)\s*: )?"
    r"(?:\[\s*(?P<mono>\d+\.\d+)\]|\[(?P<wall>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"
    r"|\[(?P<human>\s*\+\d+[.,]\d+|[^\W\d_]{3}\d{1,2} \d\d:\d\d)\])?"
    r"(?: ?\[\s*[TC]\d+\])? ?(?P<msg>.*)$",
)
_ANSI: re.Pattern[str] = _deferred("_ANSI", r"\x1b\[[0-9;]*[A-Za-z]")  # dmesg --color, copied from a terminal
_KERNEL_TS = r"(?:\[\s*(?P<mono>\d+\.\d+)\] ?)?"
_IDENT = r"(?P<ident>[^\s:\[\]]+)(?:\[\d+\])?: "
_JOURNAL_RFC3339: re.Pattern[str] = _deferred(
    "_JOURNAL_RFC3339",
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)) (?P<host>\S+) " + _IDENT + _KERNEL_TS,
)
# Month names follow the locale ("Oct", "feb", "kvě", "févr."); a host name may be empty ("Jan 02 21:35:19  kernel:").
_JOURNAL_SHORT: re.Pattern[str] = _deferred(
    "_JOURNAL_SHORT",
    r"^(?P<ts>[^\W\d_]{2,5}\.? [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?) +(?:(?P<host>\S+) +)??" + _IDENT + _KERNEL_TS,
)
# A syslog file with the date and host cut off ("kernel: [ 2484.374025] msg"): only the kernel's own identifier.
_SYSLOG_BARE: re.Pattern[str] = _deferred("_SYSLOG_BARE", r"^(?P<ident>kernel): " + _KERNEL_TS)
_JOURNAL_META: re.Pattern[str] = _deferred(
    "_JOURNAL_META", r"^-- (?:Boot [0-9a-f]+|Reboot|Logs begin at|Journal begins at|No entries|Logs end).*--?$"
)

FACILITY_NAMES = (
    *("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp"),
    *("res0", "res1", "res2", "res3", *(f"local{n}" for n in range(8))),
)
LEVEL_NAMES = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")

# What people paste around a log: indentation (markdown code blocks), "> " quotes, box-drawing borders, HTML tags
# opening the first line ("<pre><code>[ 1.0] ..."), the file
# name grep puts before each match ("/var/log/syslog:", "kern.log.1:") and grep -n line numbers. Stripped (at most a
# few times) only when what follows is a line of a format with a header.
_PASTE_PREFIX: re.Pattern[str] = _deferred(
    "_PASTE_PREFIX",
    r"^(?:\s+|>+ ?|[\u2502|] ?|(?:</?[A-Za-z][\w-]*[^<>]*>)+"
    r"|(?:\S*/)?[\w.-]*(?:log|syslog|messages)(?:\.\d+)?(?:\.gz)?:(?:\d+[:-])?|\d+[:-])",
)
_PASTE_SUFFIX: re.Pattern[str] = _deferred("_PASTE_SUFFIX", r"\s*[\u2502|]?\s*$")

# Messages without any header (dmesg --notime, or timestamps cut off by whoever pasted the log). A line is taken as
# a kernel message when it starts the way kernel messages start: a dev_printk prefix, a DRM tag, a RAS/APEI tag or
# an amdgpu/kfd/FreeBSD drmn prefix; in a log without any header also "subsystem: text".
_PLAIN_STRICT: re.Pattern[str] = _deferred(
    "_PLAIN_STRICT",
    r"^(?:[\w.-]+ [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: |\[drm[\]: ]|(?:\{\d+\})?\[Hardware Error\]"
    r"|(?:amdgpu|amdkfd|kfd(?: kfd)?|drmn\d+): \S)",
)
_PLAIN_SUBSYSTEM: re.Pattern[str] = _deferred("_PLAIN_SUBSYSTEM", r"^[\w.-]+(?: [\w.:-]+)?: \S")
# Lines of a paste that are not log lines: code fences, elisions, HTML tags, shell prompts, prose ending in ":".
_PASTE_JUNK: re.Pattern[str] = _deferred(
    "_PASTE_JUNK", r"^(?:[`~]{1,}.*|\.{3,}|\u2026|</?[A-Za-z][^>]*>.*|\S*[$#] .*|\$|.*:)$"
)

# The device prefix dev_printk puts in the text: "<driver> <bdf>: [amdgpu: ]message".
DEVICE_PREFIX: re.Pattern[str] = _deferred(
    "DEVICE_PREFIX", r"^(?P<drv>[\w.-]+) (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?P<rest>.*)$"
)


class KernelLogParse(msgspec.Struct, frozen=True):
    format: str | None
    records: tuple[KernelRecord, ...]
    warnings: tuple[str, ...]


def _pci_device(value: str | None) -> str | None:
    """kmsg ``DEVICE=+pci:0000:03:00.0`` / journald ``_KERNEL_DEVICE`` -> BDF; None for other subsystems."""
    if value is None or not value.startswith("+pci:"):
        return None
    return normalize_bdf(value[5:])


def _kmsg_record(m: re.Match[str], lineno: int) -> KernelRecord:
    pri = int(m["pri"])
    return KernelRecord(
        line=lineno,
        text=m["msg"],
        facility=pri >> 3,
        level=pri & 7,
        seq=int(m["seq"]),
        monotonic_seconds=int(m["ts"]) / 1_000_000,
    )


def parse_kmsg_record(data: str, lineno: int = 1) -> KernelRecord:
    """One record as one ``read()`` of ``/dev/kmsg`` returns it (header line plus dictionary lines)."""
    lines = data.rstrip("\n").split("\n")
    m = _KMSG.match(lines[0])
    if m is None:
        raise ParseError(f"not a /dev/kmsg record: {lines[0][:80]!r}", lineno)
    record = _kmsg_record(m, lineno)
    pairs = []
    for extra in lines[1:]:
        d = _KMSG_DICT.match(extra)
        if d is None:
            raise ParseError(f"not a /dev/kmsg dictionary line: {extra[:80]!r}", lineno)
        pairs.append((d["key"], d["val"]))
    return _with_dictionary(record, pairs)


def _with_dictionary(record: KernelRecord, pairs: Sequence[tuple[str, str]]) -> KernelRecord:
    if not pairs:
        return record
    device = next((_pci_device(v) for k, v in pairs if k == "DEVICE"), None)
    return replace(record, dictionary=tuple(pairs), device=device)


def _dmesg_record(m: re.Match[str], lineno: int) -> KernelRecord | None:
    if m["pri"] is None and m["fac"] is None and m["mono"] is None and m["wall"] is None and m["human"] is None:
        return None
    facility = level = None
    if m["pri"] is not None:
        pri = int(m["pri"])
        facility, level = pri >> 3, pri & 7
    elif m["fac"] is not None:
        if m["fac"] not in FACILITY_NAMES or m["lvl"] not in LEVEL_NAMES:
            return None
        facility, level = FACILITY_NAMES.index(m["fac"]), LEVEL_NAMES.index(m["lvl"])
    mono = float(m["mono"]) if m["mono"] is not None else None
    return KernelRecord(line=lineno, text=m["msg"], facility=facility, level=level, monotonic_seconds=mono)


def _rfc3339_seconds(ts: str) -> float | None:
    text = ts.replace(",", ".").replace("Z", "+00:00")
    if re.search(r"[+-]\d\d\d\d$", text):
        text = text[:-2] + ":" + text[-2:]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _journal_text_record(m: re.Match[str], lineno: int, rfc3339: bool) -> KernelRecord:
    mono = float(m["mono"]) if m["mono"] is not None else None
    wall = _rfc3339_seconds(m["ts"]) if rfc3339 else None
    return KernelRecord(
        line=lineno,
        text=m.string[m.end() :],
        monotonic_seconds=mono,
        wall_time=wall,
        identifier=m["ident"],
    )


def _journal_json_record(obj: dict[str, object], lineno: int) -> KernelRecord | None:
    message = obj.get("MESSAGE")
    if isinstance(message, list):  # journald gives non-UTF-8 messages as an array of bytes
        try:
            message = bytes(int(b) for b in message).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
    if not isinstance(message, str):
        return None

    def num(key: str) -> int | None:
        value = obj.get(key)
        if isinstance(value, str) and value.isdigit():
            return int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    transport = obj.get("_TRANSPORT")
    facility = num("SYSLOG_FACILITY")
    if transport is not None and transport != "kernel":
        facility = 1 if facility is None or facility == 0 else facility  # not from the kernel whatever it claims
    mono_us = num("_SOURCE_MONOTONIC_TIMESTAMP")
    real_us = num("__REALTIME_TIMESTAMP")
    kernel_device = obj.get("_KERNEL_DEVICE")
    pairs = tuple((k, str(obj[k])) for k in ("_KERNEL_SUBSYSTEM", "_KERNEL_DEVICE") if isinstance(obj.get(k), str))
    ident = obj.get("SYSLOG_IDENTIFIER")
    boot = obj.get("_BOOT_ID")
    return KernelRecord(
        line=lineno,
        text=message.rstrip("\n"),
        facility=facility,
        level=num("PRIORITY"),
        monotonic_seconds=mono_us / 1_000_000 if mono_us is not None else None,
        wall_time=real_us / 1_000_000 if real_us is not None else None,
        device=_pci_device(kernel_device if isinstance(kernel_device, str) else None),
        dictionary=pairs,
        identifier=ident if isinstance(ident, str) else None,
        boot_id=boot if isinstance(boot, str) else None,
    )


# What _DMESG reads from a line that opens with "[ mono]" (the usual dmesg line), without trying its other forms.
_DMESG_MONO: re.Pattern[str] = _deferred("_DMESG_MONO", r"\[\s*(\d+\.\d+)\](?: ?\[\s*[TC]\d+\])? ?(.*)")
# The same, for every such line of a decoded chunk in one pass (whitespace that is not a newline for \s, a line
# end for the end of the text).
_DMESG_LINES: re.Pattern[str] = _deferred(
    "_DMESG_LINES", r"^\[[^\S\n]*(\d+\.\d+)\](?: ?\[[^\S\n]*[TC]\d+\])? ?([^\n]*)\n", re.M
)
# A chunk in which at least one line in DENSE_FRACTION holds a literal is read in one pass (_dense_dmesg) rather
# than literal by literal with the runs between them skipped.
DENSE_FRACTION = 4
DENSE_SAMPLE_BYTES = 16 << 10  # the start of a chunk that decides
# The parser's last record while it is the last line of a run of skipped records: read from the chunk only when a
# continuation line asks for it (a run of a busy log is a few dozen lines; most are followed by a candidate line).
_UNREAD = KernelRecord(line=0, text="")


def _try_format(fmt: str, line: str, lineno: int) -> KernelRecord | None:
    if fmt == "dmesg" and line[:1] == "[":
        m = _DMESG_MONO.match(line)
        if m is not None:
            return KernelRecord(line=lineno, text=m[2], monotonic_seconds=float(m[1]))
    if fmt == "kmsg":
        m = _KMSG.match(line)
        return _kmsg_record(m, lineno) if m else None
    if fmt == "journal-rfc3339":
        m = _JOURNAL_RFC3339.match(line)
        return _journal_text_record(m, lineno, True) if m else None
    if fmt == "journal-short":
        m = _JOURNAL_SHORT.match(line) or _SYSLOG_BARE.match(line)
        return _journal_text_record(m, lineno, False) if m else None
    if fmt == "journal-json":
        if not line.startswith("{"):
            return None
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        return _journal_json_record(obj, lineno) if isinstance(obj, dict) and "MESSAGE" in obj else None
    if fmt == "dmesg":
        m = _DMESG.match(line)
        return _dmesg_record(m, lineno) if m else None
    return None


# Most specific first: a kmsg header or a journal header would also pass the loose dmesg pattern's "no header".
_DETECT_ORDER = ("kmsg", "journal-json", "journal-rfc3339", "journal-short", "dmesg")


class KernelLogLineParser:
    """Incremental line parser (the followed-file and FIFO readers feed it; ``parse_kernel_log_records`` too).

    ``feed`` returns the records completed by the line; a kmsg record is held until the next header line or
    ``flush`` because dictionary lines follow it. Indented lines without a header continue the previous
    record (dmesg prints the lines of a multi-line record that way) and become records with its metadata.
    """

    def __init__(self, fmt: str | None = None) -> None:
        self.format = fmt
        self.warnings: list[str] = []
        self.lines_unparsed = 0
        self._held: KernelRecord | None = None
        self._held_dict: list[tuple[str, str]] = []
        self._last: KernelRecord | None = None  # _UNREAD: the line of _last_at
        self._last_at: tuple[bytes, int, int, int] = (b"", 0, 0, 0)  # chunk, begin, end, line number

    def _warn(self, lineno: int, message: str) -> None:
        self.lines_unparsed += 1
        if len(self.warnings) < 1000:
            self.warnings.append(f"line {lineno}: {message}")

    def feed(self, line: str, lineno: int) -> list[KernelRecord]:
        line = line.rstrip()  # CRLF, and the blanks some pastes pad every line with
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        if self._held is not None:
            d = _KMSG_DICT.match(line)
            if d is not None:
                self._held_dict.append((d["key"], d["val"]))
                return []
        out = self.flush()
        if not line.strip() or _JOURNAL_META.match(line.strip()):
            return out
        headed = self._headed(line, lineno) or self._headed(_PASTE_SUFFIX.sub("", line), lineno)
        candidate = line
        for _ in range(3):
            if headed is not None:
                break
            stripped = _PASTE_PREFIX.sub("", candidate, count=1)
            if stripped == candidate:
                break
            candidate = stripped
            headed = self._headed(_PASTE_SUFFIX.sub("", candidate), lineno)
        if headed is not None:
            fmt, record = headed
            if fmt == "kmsg":
                self._held, self._held_dict = record, []
            else:
                out.append(record)
                self._last = record
            return out
        last = self._last if self._last is not _UNREAD else self._read_last()
        if line[:1] in (" ", "\t") and last is not None and self.format != "plain":
            out.append(replace(last, line=lineno, text=line.strip()))
            return out
        plain = self._plain(line, lineno)
        if plain is not None:
            out.append(plain)
            self._last = plain
            return out
        self._warn(lineno, f"not a kernel-log line: {line[:120]!r}")
        return out

    def _headed(self, line: str, lineno: int) -> tuple[str, KernelRecord] | None:
        """The line read by the detected format, else by the first format that can read it."""
        if self.format == "plain":
            order: tuple[str | None, ...] = _DETECT_ORDER
        else:
            order = (self.format, *_DETECT_ORDER) if self.format else _DETECT_ORDER
        for fmt in order:
            if fmt is None:
                continue
            record = _try_format(fmt, line, lineno)
            if record is None:
                continue
            if self.format is None:
                self.format = fmt
            return fmt, record
        return None

    def _plain(self, line: str, lineno: int) -> KernelRecord | None:
        """A message with no header at all (dmesg --notime, a paste with the timestamps cut off)."""
        text = _PASTE_SUFFIX.sub("", line).strip()
        if self.format is not None and self.format != "plain":
            # A log with headers: a bare line counts only when it is unmistakably a kernel message.
            return KernelRecord(line=lineno, text=text) if _PLAIN_STRICT.match(text) else None
        if self.format is None:
            if not (_PLAIN_STRICT.match(text) or _PLAIN_SUBSYSTEM.match(text)) or _PASTE_JUNK.match(text):
                return None
            self.format = "plain"
        elif _PASTE_JUNK.match(text) and not _PLAIN_STRICT.match(text):
            return None
        return KernelRecord(line=lineno, text=text)

    def flush(self) -> list[KernelRecord]:
        if self._held is None:
            return []
        record = _with_dictionary(self._held, self._held_dict)
        self._held, self._held_dict = None, []
        self._last = record
        return [record]

    def feed_chunk(
        self, data: bytes, first_line: int, scanner: LineScanner | None
    ) -> list[KernelRecord | SkippedRecords]:
        """Complete lines (each ending in a newline, numbered from ``first_line``), scanned once for the rules'
        literals: lines that hold none and are plain kernel records of the detected format become
        ``SkippedRecords`` without being decoded or parsed; every other line goes through ``feed``. The result
        is what ``feed`` gives line by line, with runs of such records in place of the records themselves.
        """
        out: list[KernelRecord | SkippedRecords] = []
        pos, size, line = 0, len(data), first_line
        fast = _fast(self.format) if scanner is not None else None
        while fast is None and pos < size:  # the format is not known yet, or has no fast path
            end = data.index(b"\n", pos)
            out.extend(self.feed(data[pos:end].decode("utf-8", "replace"), line))
            pos, line = end + 1, line + 1
            fast = _fast(self.format) if scanner is not None else None
        if fast is None or pos >= size:
            return out
        assert scanner is not None and self.format is not None
        simple, not_simple = fast
        dmesg = self.format == "dmesg"
        view = memoryview(data)[pos:]
        if dmesg:  # how dense the literals are, from a sample: a dense chunk is not scanned at all
            sample_end = data.find(b"\n", pos + DENSE_SAMPLE_BYTES) + 1 or size
            sample = scanner.find(view[: sample_end - pos])
            if len(sample) * DENSE_FRACTION >= data.count(b"\n", pos, sample_end):
                self._dense_dmesg(data, pos, line, out)
                return out
        starts = [pos + offset for offset in scanner.find(view)]
        # Terminal colour codes are removed before matching, which can join a literal: such lines are candidates.
        esc = data.find(b"\x1b", pos)
        while esc >= 0:
            starts.append(esc)
            esc = data.find(b"\x1b", esc + 1)
        if len(starts) > 1:
            starts.sort()
        for hit in starts:
            if hit < pos:
                continue  # the line of this hit was handled with an earlier one
            begin = data.rfind(b"\n", pos, hit) + 1 or pos
            end = data.index(b"\n", hit)
            if begin > pos:
                line = self._plain_records(data, pos, begin, line, simple, not_simple, out)
            self._candidate(data[begin:end].decode("utf-8", "replace").rstrip(), line, dmesg, out)
            pos, line = end + 1, line + 1
        self._plain_records(data, pos, size, line, simple, not_simple, out)
        if self._last is _UNREAD:
            self._read_last()  # the chunk is not kept past the call
        return out

    def _read_last(self) -> KernelRecord | None:
        """The last line of the last run of skipped records, read now (see _UNREAD)."""
        data, begin, end, line = self._last_at
        assert self.format is not None
        self._last = _try_format(self.format, data[begin:end].decode("utf-8", "replace").rstrip(), line)
        self._last_at = (b"", 0, 0, 0)
        return self._last

    def _candidate(self, text: str, line: int, dmesg: bool, out: list[KernelRecord | SkippedRecords]) -> None:
        """One line that may hold a literal (``text`` decoded and stripped on the right): what ``feed`` gives a
        line of the detected format, without its detours."""
        record = None
        if "\x1b" not in text:
            m = _DMESG_MONO.match(text) if dmesg and text[:1] == "[" else None
            if m is not None:  # the usual dmesg line, read as _try_format reads it
                record = KernelRecord(line=line, text=m[2], monotonic_seconds=float(m[1]))
            else:
                record = _try_format(self.format or "", text, line)
        if record is not None:
            out.append(record)
            self._last = record
        else:
            out.extend(self.feed(text, line))

    def _dense_dmesg(self, data: bytes, pos: int, line: int, out: list[KernelRecord | SkippedRecords]) -> None:
        """Complete dmesg lines ``data[pos:]`` of which many hold a literal (an amdgpu-heavy log): decoded at once
        and read by one pattern in one pass; a line it does not read takes ``_candidate``. Every line becomes a
        record (a line without a literal too: the classifier does with it what it does with a skipped one)."""
        text = data[pos:].decode("utf-8", "replace")
        if "\x1b" not in text:
            # [gap, timestamp, message, gap, ...]: split() makes one list of strings, findall() a tuple a line
            parts = _DMESG_LINES.split(text)
            if len(parts) // 3 == text.count("\n"):  # every line is the usual dmesg line: no gaps to look after
                record = KernelRecord  # fields in order: line, text, facility, level, seq, monotonic_seconds
                out.extend(
                    [
                        record(n, body.rstrip(), None, None, None, float(mono))
                        for n, mono, body in zip(
                            range(line, line + len(parts) // 3), parts[1::3], parts[2::3], strict=True
                        )
                    ]
                )
                if len(parts) > 1:
                    self._last = out[-1]  # type: ignore[assignment]  # a KernelRecord: appended just above
                return
        at, last = 0, self._last if self._last is not _UNREAD else self._read_last()
        for m in _DMESG_LINES.finditer(text):
            start = m.start()
            if start != at:  # lines the pattern does not read (continuations, other forms): one by one
                self._last = last
                for other in text[at : start - 1].split("\n"):
                    self._candidate(other.rstrip(), line, True, out)
                    line += 1
                last = self._last
            body = m[2]
            if "\x1b" in body:  # colour codes are stripped by feed(), which can join a literal
                self._last = last
                self._candidate(m[0].rstrip(), line, True, out)
                last = self._last
            else:
                last = KernelRecord(line, body.rstrip(), None, None, None, float(m[1]))
                out.append(last)
            line += 1
            at = m.end()
        self._last = last
        if at < len(text):
            for other in text[at:-1].split("\n"):
                self._candidate(other.rstrip(), line, True, out)
                line += 1

    def _plain_records(
        self,
        data: bytes,
        pos: int,
        stop: int,
        line: int,
        simple: re.Pattern[bytes],
        not_simple: re.Pattern[bytes],
        out: list[KernelRecord | SkippedRecords],
    ) -> int:
        """Lines ``data[pos:stop]`` hold no literal: runs of plain kernel records become ``SkippedRecords``, the
        other lines (continuations, blank or unreadable lines, user-space records) go through ``feed``. Returns
        the number of the line at ``stop``."""
        assert self.format is not None
        while pos < stop:
            if simple.match(data, pos) is None:
                other = pos
            else:
                m = not_simple.search(data, pos, stop - 1)  # a newline followed by a line that is not plain
                other = m.start() + 1 if m is not None else stop
            if other > pos:
                count = data.count(b"\n", pos, other)
                out.append(SkippedRecords(count, line, self.format, data, pos, other))
                # a continuation line's metadata, read when one comes (_UNREAD)
                self._last = _UNREAD
                self._last_at = (data, data.rfind(b"\n", pos, other - 1) + 1 or pos, other - 1, line + count - 1)
                line += count
            if other >= stop:
                break
            end = data.index(b"\n", other)
            out.extend(self.feed(data[other:end].decode("utf-8", "replace"), line))
            pos, line = end + 1, line + 1
        return line


class LineScanner(Protocol):
    """Finds the rules' literals in raw log bytes (``KernelRules.line_scanner``)."""

    def find(self, data: bytes | memoryview) -> Sequence[int]:
        """Offsets where a literal occurs; every line some rule can match holds at least one."""
        ...


# Lines that are plainly one record from the kernel in a format with a fast path: read by the format's own
# pattern on the first try (a subset of what it accepts), from the kernel (dmesg <0-7> / kern, journal
# identifier "kernel"), no continuation, no dictionary line. Anything else takes the line-by-line path.
_SIMPLE = {
    "dmesg": rb"(?:<[0-7]>|kern *:(?:emerg|alert|crit|err|warn|notice|info|debug) *: )?"
    rb"(?:\[ *\d+\.\d+\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\])",
    # the host must not look like an identifier ("foo: kernel: x" is identifier foo), so no ":", "[" or "]"
    "journal-short": rb"(?:[A-Za-z]{2,5}\.? [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? +(?:[^\s:\[\]]+ +)?)?kernel: ",
    "journal-rfc3339": rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) \S+ kernel: ",
}
_FAST: dict[str, tuple[re.Pattern[bytes], re.Pattern[bytes]]] = {}  # compiled on first use, as _deferred


def _fast(fmt: str | None) -> tuple[re.Pattern[bytes], re.Pattern[bytes]] | None:
    """The fast path's patterns of a format (a plain record; a newline followed by a line that is not one)."""
    fast = _FAST.get(fmt or "")
    if fast is None and fmt in _SIMPLE:
        simple = _SIMPLE[fmt]
        fast = _FAST[fmt] = (re.compile(simple), re.compile(rb"\n(?!" + simple + rb")"))
    return fast


_AMDGPU_PREFIX: re.Pattern[bytes] = _deferred(
    "_AMDGPU_PREFIX", rb"amdgpu ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): "
)


def amdgpu_prefixes(data: bytes, begin: int, end: int) -> set[str]:
    """The BDFs (lower case) after ``amdgpu `` anywhere in ``data[begin:end]``: a superset of the GPUs its
    records' amdgpu prefixes name."""
    return {bdf.decode().lower() for bdf in set(_AMDGPU_PREFIX.findall(data, begin, end))}


class SkippedRecords(msgspec.Struct, frozen=True, eq=False):
    """Consecutive records from the kernel in which no rule literal occurs: they are counted, not parsed.

    The classifier still learns the GPUs their amdgpu prefixes name, and takes the records one by one while a
    look-ahead waits (their timestamps decide when it expires).
    """

    count: int
    first_line: int
    format: str
    data: bytes  # the chunk read, shared by every run of it: data[start:end] are the records
    start: int
    end: int

    def __repr__(self) -> str:
        return f"SkippedRecords(count={self.count}, first_line={self.first_line}, format={self.format!r})"

    def records(self) -> Iterator[KernelRecord]:
        pos, line = self.start, self.first_line
        while pos < self.end:
            end = self.data.index(b"\n", pos)
            record = _try_format(self.format, self.data[pos:end].decode("utf-8", "replace").rstrip(), line)
            if record is not None:
                yield record
            pos, line = end + 1, line + 1

    def amdgpu_devices(self, known: Collection[str]) -> set[str]:
        """The GPUs named by an amdgpu dev_printk prefix of these records that are not in ``known``."""
        new = amdgpu_prefixes(self.data, self.start, self.end).difference(known)
        if not new:
            return set()
        out: set[str] = set()
        for m in _AMDGPU_PREFIX.finditer(self.data, self.start, self.end):  # the prefix must open the message
            if m[1].decode().lower() in new:
                begin = self.data.rfind(b"\n", self.start, m.start()) + 1 or self.start
                end = self.data.index(b"\n", m.start())
                text = self.data[begin:end].decode("utf-8", "replace").rstrip()
                record = _try_format(self.format, text, 0)
                bdf = amdgpu_device(record.text) if record is not None else None
                if bdf is not None:
                    out.add(bdf)
        return out.difference(known)


def _dmesg_json_records(doc: dict[str, object], text: str) -> Iterator[KernelRecord]:
    entries = doc.get("dmesg")
    if not isinstance(entries, list):
        raise ParseError("dmesg JSON without a 'dmesg' array", 1)
    # dmesg --json prints one key per line: the n-th "msg" key sits on the n-th record's line.
    msg_lines = [i for i, line in enumerate(text.splitlines(), 1) if re.search(r'(?<!\\)"msg"\s*:', line)]
    for n, entry in enumerate(entries):
        lineno = msg_lines[n] if len(msg_lines) == len(entries) else 1
        if not isinstance(entry, dict) or not isinstance(entry.get("msg"), str):
            raise ParseError(f"dmesg JSON record {n} has no 'msg'", lineno)
        facility = level = None
        pri, fac = entry.get("pri"), entry.get("fac")
        if isinstance(pri, int):  # raw: facility * 8 + level
            facility, level = pri >> 3, pri & 7
        elif isinstance(pri, str) and pri in LEVEL_NAMES:  # -x: decoded names
            level = LEVEL_NAMES.index(pri)
            if isinstance(fac, str) and fac in FACILITY_NAMES:
                facility = FACILITY_NAMES.index(fac)
        mono = entry.get("time")
        yield KernelRecord(
            line=lineno,
            text=str(entry["msg"]),
            facility=facility,
            level=level,
            monotonic_seconds=float(mono) if isinstance(mono, (int, float)) else None,
        )


def parse_kernel_log_records(text: str) -> KernelLogParse:
    """Every record of a captured kernel log, any supported format. Raises ParseError when nothing is readable."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"dmesg"' in stripped[:200]:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ParseError(f"dmesg JSON does not parse: {exc}", getattr(exc, "lineno", None)) from exc
        if isinstance(doc, dict) and "dmesg" in doc:
            return KernelLogParse("dmesg-json", tuple(_dmesg_json_records(doc, text)), ())
    parser = KernelLogLineParser()
    records: list[KernelRecord] = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        records.extend(parser.feed(line, lineno))
    records.extend(parser.flush())
    if not records and parser.lines_unparsed:
        raise ParseError("not a kernel log in any known format (kmsg, dmesg, journal)", 1)
    return KernelLogParse(parser.format, tuple(records), tuple(parser.warnings))


class KernelLogItems(msgspec.Struct, frozen=True):
    format: str | None
    items: tuple[KernelRecord | SkippedRecords, ...]
    warnings: tuple[str, ...]


# Line ends str.splitlines() knows besides "\n" (and "\r\n", which the parser's rstrip() makes the same).
_OTHER_LINE_ENDS: re.Pattern[str] = _deferred("_OTHER_LINE_ENDS", "\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def parse_kernel_log_items(text: str, scanner: LineScanner | None) -> KernelLogItems:
    """``parse_kernel_log_records`` with the lines that hold no rule literal skipped (``feed_chunk``)."""
    data = b""
    if scanner is not None and not _OTHER_LINE_ENDS.search(text):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: the bytes would not decode back to the same lines
            scanner = None
    stripped = text.lstrip()
    if scanner is None or not data or (stripped.startswith("{") and '"dmesg"' in stripped[:200]):
        parsed = parse_kernel_log_records(text)
        return KernelLogItems(parsed.format, parsed.records, parsed.warnings)
    if not data.endswith(b"\n"):
        data += b"\n"
    parser = KernelLogLineParser()
    items = parser.feed_chunk(data, 1, scanner)
    items.extend(parser.flush())
    if not items and parser.lines_unparsed:
        raise ParseError("not a kernel log in any known format (kmsg, dmesg, journal)", 1)
    return KernelLogItems(parser.format, tuple(items), tuple(parser.warnings))


class MessageParts(msgspec.Struct, frozen=True, gc=False):
    """A message split into the device prefix and the text the class rules match (one per candidate line: a
    msgspec struct, made faster than a tuple and never tracked by the garbage collector)."""

    driver: str | None  # "amdgpu", "pcieport", ... when the line carries a dev_printk prefix
    bdf: str | None
    body: str  # prefix, "amdgpu: ", DRM tag, "[powerplay] " stripped
    start: int = 0  # where the body begins in the message


# The tags a message may open with, as many as there are up to five ("drmn0: [drm] *ERROR* [drm ERROR :f] ..."
# stacks a few): "drmn0: " is the FreeBSD drm-kmod device name (it names no PCI address); "kfd: " is the old amdkfd
# pr_fmt. None of them can hold a newline. Matched at a position (no "^"): Pattern.match(text, pos) anchors there
# without copying the rest of the text.
_TAG = (
    r"(?:amdgpu: ?|kfd kfd: (?:amdgpu: )?|kfd: |drmn\d+: |\[drm(?::[\w.]+(?: \[[\w]+\])?)?\] (?:\*ERROR\* )?"
    r"|\[drm ERROR :[\w.]+\] |\[powerplay\] |\{\d+\})"
)
_TAGS: re.Pattern[str] = _deferred("_TAGS", _TAG + "{0,5}")
_MORE_TAGS: re.Pattern[str] = _deferred("_MORE_TAGS", _TAG + "{0,4}")  # after an "amdgpu:" taken without a pattern
_TAG_FIRST = frozenset("akd[{")  # what a tag begins with: with anything else, the message has none (most have one)
# DEVICE_PREFIX without the rest of the line: it ends at the line's first ": ". Whether it holds one is remembered
# per such head (a flood's lines share a few), and that the rest holds no newline but one that ends the text
# (DEVICE_PREFIX's "(?P<rest>.*)$") is told by find(): a message is split without a pattern most of the time (a
# call into re costs about as much as the rest of the split).
_PREFIX: re.Pattern[str] = _deferred("_PREFIX", r"([\w.-]+) ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): ")
_HEADS: dict[str, tuple[str, str] | None] = {}  # head -> (driver, lower-case BDF), or None: no device prefix
_MAX_HEADS = 1024
_UNSEEN = ("", "")


def _device_prefix(text: str) -> tuple[str, str, int, int] | None:
    """What DEVICE_PREFIX reads from a message: (driver, lower-case BDF, start and end of the rest), or None."""
    colon = text.find(": ")
    if colon <= 0:
        return None
    head = text[: colon + 2]
    device = _HEADS.get(head, _UNSEEN)
    if device is _UNSEEN:
        m = _PREFIX.fullmatch(head)
        # the prefix pattern admits 4-digit domains only, so lower() is what normalize_bdf() would give
        device = (m[1], m[2].lower()) if m is not None else None
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        _HEADS[head] = device
    if device is None:
        return None
    end = len(text)
    newline = text.find("\n", colon)
    if newline < 0:
        return device[0], device[1], colon + 2, end
    return (device[0], device[1], colon + 2, newline) if newline == end - 1 else None


def split_message(text: str) -> MessageParts:
    """Strip the dev_printk prefix, the ``amdgpu:`` dev_fmt, a DRM tag and a RAS ``{event id}``."""
    prefix = _device_prefix(text)
    driver: str | None
    bdf: str | None
    if prefix is not None:
        driver, bdf, pos, end = prefix
    else:
        # the amdgpu dev_fmt without a device prefix names the driver (the first tag)
        driver = "amdgpu" if text.startswith("amdgpu:") else None
        bdf, pos, end = None, 0, len(text)
    tags = _TAGS
    if text.startswith("amdgpu:", pos):  # the usual tag, taken as the pattern's first alternative takes it
        pos += 8 if text.startswith(" ", pos + 7) else 7
        tags = _MORE_TAGS
    if pos < end and text[pos] in _TAG_FIRST:
        m = tags.match(text, pos, end)
        assert m is not None  # no tag matches too
        pos = m.end()
    return MessageParts(driver, bdf, text[pos:end], pos)


def amdgpu_device(text: str) -> str | None:
    """The GPU an amdgpu dev_printk line names (``amdgpu 0000:03:00.0: ...``), lower-case; None for other lines."""
    if not text.startswith("amdgpu "):
        return None
    prefix = _device_prefix(text)
    return prefix[1] if prefix is not None else None
