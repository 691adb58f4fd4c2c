"""Kernel-log record formats: kmsg, dmesg (plain, -T, -r, -x, --json), journal (short, precise, syslog, RFC 3339,
-o json), auto-detection, warnings and errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.model import ParseError
from exporter.parsers import kernel_log
from exporter.parsers.kernel_log import (
    DEVICE_PREFIX,
    KernelLogLineParser,
    amdgpu_device,
    parse_kernel_log_records,
    parse_kmsg_record,
    split_message,
)


def test_kmsg_record_with_dictionary() -> None:
    r = parse_kmsg_record(
        "3,1234,104528304,-;amdgpu 0000:03:00.0: amdgpu: GPU reset begin!\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n"
    )
    assert (r.facility, r.level, r.seq, r.monotonic_seconds) == (0, 3, 1234, 104.528304)
    assert r.device == "0000:03:00.0"
    assert r.dictionary == (("SUBSYSTEM", "pci"), ("DEVICE", "+pci:0000:03:00.0"))
    assert r.text == "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!" and r.is_kernel


def test_kmsg_record_from_user_space_and_extra_header_fields() -> None:
    r = parse_kmsg_record("12,77,5000,-,caller=T123;amdgpu 0000:03:00.0: amdgpu: GPU reset begin!\n")
    assert (r.facility, r.level, r.seq) == (1, 4, 77)
    assert not r.is_kernel
    other = parse_kmsg_record("6,5,1,c;usb 1-1: new device\n DEVICE=c189:1\n")
    assert other.device is None  # not a PCI device


@pytest.mark.parametrize("bad", ["hello world\n", "6,1,2,-;ok\nno-space=dict\n"])
def test_kmsg_record_errors(bad: str) -> None:
    with pytest.raises(ParseError):
        parse_kmsg_record(bad)


@pytest.mark.parametrize(
    ("line", "fmt", "facility", "mono", "text"),
    [
        ("[   12.345678] amdgpu 0000:03:00.0: x", "dmesg", None, 12.345678, "amdgpu 0000:03:00.0: x"),
        ("[   12.345678] [  T609] msg", "dmesg", None, 12.345678, "msg"),
        ("[Thu Sep 10 14:36:15 2026] msg", "dmesg", None, None, "msg"),
        ("[Sat Jan  7 01:02:03 2026] msg", "dmesg", None, None, "msg"),
        ("<6>[   12.345678] msg", "dmesg", 0, 12.345678, "msg"),
        ("<14>[   12.345678] msg", "dmesg", 1, 12.345678, "msg"),
        ("<3>msg without time", "dmesg", 0, None, "msg without time"),
        ("kern  :err   : [   12.345678] msg", "dmesg", 0, 12.345678, "msg"),
        ("user  :warn  : [   12.345678] msg", "dmesg", 1, 12.345678, "msg"),
        ("Oct 07 15:47:47 host kernel: msg", "journal-short", None, None, "msg"),
        ("feb 20 01:02:03 host kernel: msg", "journal-short", None, None, "msg"),
        ("Aug 09 11:36:30.370347 kernel: msg", "journal-short", None, None, "msg"),
        ("Oct  7 15:47:47 host kernel: [37932.038809] msg", "journal-short", None, 37932.038809, "msg"),
        ("2024-08-18T01:19:31.351160+00:00 host kernel: msg", "journal-rfc3339", None, None, "msg"),
        ("6,1,2000000,-;msg", "kmsg", 0, 2.0, "msg"),
    ],
)
def test_every_line_format(line: str, fmt: str, facility: int | None, mono: float | None, text: str) -> None:
    parsed = parse_kernel_log_records(line + "\n")
    assert parsed.format == fmt
    [r] = parsed.records
    assert (r.facility, r.monotonic_seconds, r.text) == (facility, mono, text)
    assert parsed.warnings == ()


def test_journal_identifiers_decide_kernel_or_not() -> None:
    parsed = parse_kernel_log_records(
        "Oct 07 15:47:47 host kernel: a\nOct 07 15:47:48 host myapp[42]: amdgpu 0000:03:00.0: GPU reset begin!\n"
    )
    assert [r.is_kernel for r in parsed.records] == [True, False]
    assert parsed.records[1].identifier == "myapp"


def test_rfc3339_wall_time() -> None:
    [r] = parse_kernel_log_records("2024-08-18T01:19:31.500000+02:00 host kernel: msg\n").records
    assert r.wall_time == pytest.approx(1723936771.5)


def test_journal_json_fields_and_byte_array_message() -> None:
    entries = [
        {
            "MESSAGE": "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
            "PRIORITY": "6",
            "SYSLOG_FACILITY": "0",
            "_TRANSPORT": "kernel",
            "_KERNEL_SUBSYSTEM": "pci",
            "_KERNEL_DEVICE": "+pci:0000:03:00.0",
            "_SOURCE_MONOTONIC_TIMESTAMP": "104528304",
            "__REALTIME_TIMESTAMP": "1700000000123456",
            "_BOOT_ID": "abc",
        },
        {"MESSAGE": list(b"caf\xc3\xa9 \xff"), "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0"},
        {
            "MESSAGE": "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
            "_TRANSPORT": "syslog",
            "SYSLOG_IDENTIFIER": "kernel",
        },
    ]
    parsed = parse_kernel_log_records("".join(json.dumps(e) + "\n" for e in entries))
    assert parsed.format == "journal-json"
    a, b, c = parsed.records
    assert (a.device, a.monotonic_seconds, a.wall_time, a.level, a.boot_id) == (
        "0000:03:00.0",
        104.528304,
        1700000000.123456,
        6,
        "abc",
    )
    assert b.text == "café \ufffd" and b.is_kernel
    assert not c.is_kernel  # SYSLOG_IDENTIFIER=kernel from syslog is a forgery: _TRANSPORT is trusted


def test_dmesg_json_line_numbers_and_decoded_names() -> None:
    doc = {"dmesg": [{"pri": 3, "time": 1.5, "msg": "a"}, {"fac": "user", "pri": "warn", "time": 2.0, "msg": "b"}]}
    text = json.dumps(doc, indent=3)
    parsed = parse_kernel_log_records(text)
    assert parsed.format == "dmesg-json"
    a, b = parsed.records
    assert (a.facility, a.level, a.monotonic_seconds) == (0, 3, 1.5)
    assert (b.facility, b.level) == (1, 4)
    lines = text.splitlines()
    assert '"a"' in lines[a.line - 1] and '"b"' in lines[b.line - 1]
    with pytest.raises(ParseError):
        parse_kernel_log_records('{"dmesg": [{"pri": 3}]}')
    with pytest.raises(ParseError):
        parse_kernel_log_records('{"dmesg": [')


def test_garbage_lines_are_warnings_and_continuations_keep_metadata() -> None:
    parsed = parse_kernel_log_records(
        "[  1.000000] first\n             continued line\nthis is not a log line\n\n[  2.000000] second\n"
    )
    assert [(r.line, r.text, r.monotonic_seconds) for r in parsed.records] == [
        (1, "first", 1.0),
        (2, "continued line", 1.0),
        (5, "second", 2.0),
    ]
    assert parsed.warnings == ("line 3: not a kernel-log line: 'this is not a log line'",)


def test_not_a_kernel_log_at_all() -> None:
    with pytest.raises(ParseError, match="not a kernel log"):
        parse_kernel_log_records("GPU  Temp  Power\n0  45C  100W\n")
    assert parse_kernel_log_records("").records == ()


def test_incremental_parser_holds_kmsg_record_until_its_dictionary_ends() -> None:
    p = KernelLogLineParser()
    assert p.feed("6,1,1000,-;amdgpu 0000:03:00.0: hello", 1) == []
    assert p.feed(" SUBSYSTEM=pci", 2) == []
    assert p.feed(" DEVICE=+pci:0000:03:00.0", 3) == []
    [r] = p.feed("6,2,2000,-;next", 4)
    assert r.device == "0000:03:00.0" and r.seq == 1
    [r2] = p.flush()
    assert r2.seq == 2 and p.flush() == []


@pytest.mark.parametrize(
    ("text", "driver", "bdf", "body"),
    [
        ("amdgpu 0000:03:00.0: amdgpu: GPU reset begin!", "amdgpu", "0000:03:00.0", "GPU reset begin!"),
        ("amdgpu 0000:03:00.0: GPU reset begin!", "amdgpu", "0000:03:00.0", "GPU reset begin!"),
        ("amdgpu 0000:03:00.0: [drm] *ERROR* [CRTC:72:crtc-0] x", "amdgpu", "0000:03:00.0", "[CRTC:72:crtc-0] x"),
        ("amdgpu 0000:03:00.0: [drm:amdgpu_foo [amdgpu]] *ERROR* x", "amdgpu", "0000:03:00.0", "x"),
        ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx", None, None, "ring gfx"),
        ("[drm:amdgpu_job_timedout] *ERROR* ring gfx", None, None, "ring gfx"),
        ("amdgpu: [powerplay] Failed", "amdgpu", None, "Failed"),
        ("amdgpu 0000:03:00.0: amdgpu: {7}uncorrectable", "amdgpu", "0000:03:00.0", "uncorrectable"),
        ("pcieport 0000:00:01.1: AER: x", "pcieport", "0000:00:01.1", "AER: x"),
        ("kfd kfd: amdgpu: Failed to evict", None, None, "Failed to evict"),
    ],
)
def test_split_message(text: str, driver: str | None, bdf: str | None, body: str) -> None:
    parts = split_message(text)
    assert (parts.driver, parts.bdf, parts.body) == (driver, bdf, body)


@given(st.text(max_size=400))
def test_parser_raises_only_parse_error(text: str) -> None:
    try:
        parsed = parse_kernel_log_records(text)
    except ParseError:
        return
    for record in parsed.records:
        assert 1 <= record.line <= max(1, len(text.splitlines()))


@pytest.mark.parametrize(
    ("line", "fmt", "mono", "text"),
    [
        ("kvě 25 19:29:48 host kernel: msg", "journal-short", None, "msg"),  # locale month with a non-ASCII letter
        ("Jan 02 21:35:19  kernel: msg", "journal-short", None, "msg"),  # empty host name
        ("kernel: [ 2484.374025] msg", "journal-short", 2484.374025, "msg"),  # syslog line with date and host cut
        ("/var/log/kern.log:Feb  2 08:03:20 h kernel: [1.5] msg", "journal-short", 1.5, "msg"),  # grep -r
        ("kern.log.1:12:Feb  2 08:03:20 h kernel: msg", "journal-short", None, "msg"),  # grep -rn
        (">[  312.518980] msg", "dmesg", 312.518980, "msg"),  # markdown quote
        ("    [  312.518980] msg", "dmesg", 312.518980, "msg"),  # markdown indented code block
        ("\u2502[  1.000000] msg   \u2502", "dmesg", 1.0, "msg"),  # box-drawing borders of a TUI
        (
            "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
            "plain",
            None,
            "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
        ),
        ("[drm] VRAM is lost due to GPU reset!", "plain", None, "[drm] VRAM is lost due to GPU reset!"),
        ("drmn0: GPU reset begin!", "plain", None, "drmn0: GPU reset begin!"),
    ],
)
def test_paste_styles(line: str, fmt: str, mono: float | None, text: str) -> None:
    parsed = parse_kernel_log_records(line + "\r\n")
    assert parsed.format == fmt and parsed.warnings == ()
    [r] = parsed.records
    assert (r.monotonic_seconds, r.text) == (mono, text)


def test_log_without_timestamps_keeps_kernel_lines_and_warns_about_paste_junk() -> None:
    parsed = parse_kernel_log_records(
        "Here is my dmesg:\n```\n[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, "
        "emitted seq=3\nqcm fence wait loop timeout expired\nrfkill: input handler enabled\n...\n$ uname -r\n```\n"
    )
    assert parsed.format == "plain"
    assert [r.line for r in parsed.records] == [3, 4, 5]
    assert [w.split(":")[0] for w in parsed.warnings] == ["line 1", "line 2", "line 6", "line 7", "line 8"]


def test_headed_log_takes_unmistakable_bare_kernel_lines_only() -> None:
    parsed = parse_kernel_log_records(
        "[  1.000000] first\namdgpu 0000:03:00.0: amdgpu: GPU reset begin!\nNote: then it froze\n"
    )
    assert parsed.format == "dmesg"
    assert [(r.line, r.monotonic_seconds) for r in parsed.records] == [(1, 1.0), (2, None)]
    assert parsed.warnings == ("line 3: not a kernel-log line: 'Note: then it froze'",)


_ONE_TAG = re.compile(kernel_log._TAG)


def _reference_split(text: str) -> tuple[str | None, str | None, str, int, str | None]:
    """split_message and amdgpu_device as DEVICE_PREFIX and one tag at a time read a message: (driver, bdf, body,
    start, amdgpu device)."""
    driver = bdf = None
    pos, end = 0, len(text)
    m = DEVICE_PREFIX.match(text)
    if m is not None:
        driver, bdf, pos, end = m["drv"], m["bdf"].lower(), m.start("rest"), m.end("rest")
    first = None
    for _ in range(5):
        t = _ONE_TAG.match(text, pos, end)
        if t is None:
            break
        first = first or t.group(0)
        pos = t.end()
    if driver is None and first is not None and first.startswith("amdgpu:"):
        driver = "amdgpu"
    gpu = m["bdf"].lower() if m is not None and text.startswith("amdgpu ") else None
    return driver, bdf, text[pos:end], pos, gpu


_PIECES = st.sampled_from(
    [
        *("amdgpu ", "pcieport ", "0000:03:00.0", "0000:0G:00.0", ": ", ":", " ", "\n", "\r", "\t", "x", "AER: "),
        *("amdgpu:", "amdgpu: ", "kfd kfd: ", "kfd: ", "drmn0: ", "drmn: ", "[drm] ", "[drm:f [amdgpu]] "),
        *("*ERROR* ", "[drm ERROR :f] ", "[powerplay] ", "{12}", "{x}", "GPU reset begin!"),
    ]
)


@given(st.lists(_PIECES, max_size=12))
def test_split_message_reads_prefix_and_tags_as_the_patterns_do(pieces: list[str]) -> None:
    """The split takes the prefix and the usual tag without a pattern where it can: what it gives is what
    DEVICE_PREFIX and the tag pattern, one tag at a time, give (newlines, stacked tags, no prefix...)."""
    text = "".join(pieces)
    parts = split_message(text)
    assert (parts.driver, parts.bdf, parts.body, parts.start, amdgpu_device(text)) == _reference_split(text)


def test_module_patterns_are_compiled_on_first_use_and_then_used_directly() -> None:
    source = Path(kernel_log.__file__).read_text(encoding="utf-8")
    names = re.findall(r'^(\w+)(?:: [^=]+)? = _deferred\(\s*"(\w+)"', source, re.M)
    assert len(names) == source.count(" = _deferred(") > 10
    assert all(name == given_name for name, given_name in names)  # each replaces itself, not another global
    for name, _ in names:
        value = getattr(kernel_log, name)
        assert isinstance(value, (re.Pattern, kernel_log._Deferred))
        assert value.pattern  # used through the stand-in (as a module that imported the name does)
        assert isinstance(getattr(kernel_log, name), re.Pattern)  # the module now has the compiled pattern


def test_freebsd_and_old_kfd_prefixes() -> None:
    assert split_message("drmn0: [drm] *ERROR* [drm ERROR :f] sw_init of IP block <psp> failed -2").body == (
        "sw_init of IP block <psp> failed -2"
    )
    assert split_message("kfd: qcm fence wait loop timeout expired").body == "qcm fence wait loop timeout expired"
