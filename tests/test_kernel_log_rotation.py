"""Followed log files lose nothing to rotation: rotated while the exporter was stopped, copytruncate while stopped
and while running, several rotations between two reads; every line still on disk is counted exactly once.

Each test writes numbered GPU reset lines (one event each) through the rotation a logrotate configuration does
(rename + create, or copy + truncate), with the source stopped or running in between, and checks the count.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from test_kernel_log_source import A, Host

from exporter.sources import logread
from exporter.sources.kernel_log import CURSOR_FILE, KernelLogSource

RESET = "gpu_reset_begin"


def lines(first: int, count: int) -> bytes:
    """``count`` dmesg lines, each one GPU reset of A, numbered from ``first``."""
    return b"".join(
        f"[{100 + n / 1000:12.6f}] amdgpu {A}: amdgpu: GPU reset begin! (line {n})\n".encode()
        for n in range(first, first + count)
    )


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def resets(source: KernelLogSource) -> int:
    return source.collect().counts.get((A, RESET), 0)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    h = Host(tmp_path)
    h.log = tmp_path / "log" / "kern.log"
    h.log.parent.mkdir()
    h.log.write_bytes(b"")
    return h


def test_a_rotation_while_stopped_reads_the_rest_of_the_old_file_first(host: Host) -> None:
    append(host.log, lines(0, 30))
    src = host.source()
    assert resets(src) == 30
    src.close()
    append(host.log, lines(30, 30))  # written while the exporter is stopped, then rotated away
    host.log.rename(host.log.with_name("kern.log.1"))
    host.log.write_bytes(lines(60, 10))
    src = host.source()
    state = src.collect()
    assert state.counts[(A, RESET)] == 70
    assert any("rotated while the exporter was stopped" in w for w in state.warnings)
    append(host.log, lines(70, 5))
    assert resets(src) == 75
    src.close()


def test_copytruncate_while_stopped_reads_the_copy_from_the_saved_offset(host: Host) -> None:
    append(host.log, lines(0, 30))
    src = host.source()
    assert resets(src) == 30
    src.close()
    append(host.log, lines(30, 30))
    shutil.copyfile(host.log, host.log.with_name("kern.log.1"))  # logrotate copytruncate: copy, then truncate
    with host.log.open("r+b") as f:
        f.truncate(0)
    append(host.log, lines(60, 40))  # the new file grows past the old offset before the exporter starts again
    src = host.source()
    state = src.collect()
    assert state.counts[(A, RESET)] == 100  # the issue measured 30 of 60 lost here
    assert any("copytruncate" in w for w in state.warnings)
    src.close()


def test_copytruncate_between_two_reads_reads_the_copy_then_the_new_file(host: Host) -> None:
    append(host.log, lines(0, 20))
    src = host.source()
    assert resets(src) == 20
    append(host.log, lines(20, 20))
    shutil.copyfile(host.log, host.log.with_name("kern.log.1"))
    with host.log.open("r+b") as f:
        f.truncate(0)
    append(host.log, lines(40, 50))  # longer than before: the size alone would not show the truncation
    assert resets(src) == 90
    src.close()


def test_two_rotations_between_two_reads_lose_nothing_still_on_disk(host: Host) -> None:
    append(host.log, lines(0, 10))
    src = host.source()
    assert resets(src) == 10
    log1, log2 = host.log.with_name("kern.log.1"), host.log.with_name("kern.log.2")
    append(host.log, lines(10, 10))
    host.log.rename(log1)  # first rotation
    host.log.write_bytes(lines(20, 10))  # the middle file
    time.sleep(0.01)  # modification times in order, as real rotations minutes apart have them
    log1.rename(log2)  # second rotation: the middle file becomes .1, the first .2
    host.log.rename(log1)
    host.log.write_bytes(lines(30, 10))
    state = src.collect()
    assert state.counts[(A, RESET)] == 40  # the issue: the middle file was never read
    assert any("rotated between two reads" in w for w in state.warnings)
    src.close()


def test_two_rotations_while_stopped_read_the_old_tail_and_the_middle_file(host: Host) -> None:
    append(host.log, lines(0, 10))
    src = host.source()
    assert resets(src) == 10
    src.close()
    append(host.log, lines(10, 5))
    host.log.rename(host.log.with_name("kern.log.1"))
    host.log.write_bytes(lines(15, 5))
    time.sleep(0.01)
    host.log.with_name("kern.log.1").rename(host.log.with_name("kern.log.2"))
    host.log.rename(host.log.with_name("kern.log.1"))
    host.log.write_bytes(lines(20, 5))
    src = host.source()
    assert resets(src) == 25
    src.close()


def test_older_rotated_and_compressed_files_are_not_read_again(host: Host) -> None:
    host.log.with_name("kern.log.3").write_bytes(lines(900, 50))  # old rotations, read long ago
    host.log.with_name("kern.log.2.gz").write_bytes(b"\x1f\x8b not read")
    time.sleep(0.01)
    append(host.log, lines(0, 10))
    src = host.source()
    assert resets(src) == 10
    append(host.log, lines(10, 5))
    host.log.rename(host.log.with_name("kern.log.1"))
    host.log.write_bytes(lines(15, 5))
    assert resets(src) == 20
    src.close()


def test_a_restart_in_the_middle_of_a_rotated_file_resumes_there(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logread, "MAX_BYTES_PER_COLLECT", 2000)  # a slice at a time: a restart lands mid-file
    append(host.log, lines(0, 10))
    src = host.source()
    assert resets(src) == 10
    append(host.log, lines(10, 100))
    host.log.rename(host.log.with_name("kern.log.1"))
    host.log.write_bytes(lines(110, 10))
    first = resets(src)
    assert 10 < first < 110  # part of the old file's tail
    src.close()
    src = host.source()
    total = first
    for _ in range(100):
        total = resets(src)
        if total >= 120:
            break
    assert total == 120
    src.close()


def test_inode_reuse_is_not_mistaken_for_the_old_file(host: Host) -> None:
    """A file deleted and recreated may get the same inode: the fingerprint tells them apart."""
    append(host.log, lines(0, 40))
    src = host.source()
    assert resets(src) == 40
    src.close()
    with host.log.open("r+b") as f:  # the same inode, other content, longer than the offset
        f.truncate(0)
        f.write(lines(1000, 60))
    src = host.source()
    state = src.collect()
    assert state.counts[(A, RESET)] == 100  # read from its start: nothing of the new content skipped
    assert any("truncated while the exporter was stopped" in w for w in state.warnings)
    src.close()


def test_interrupted_cursor_writes_leave_no_temp_files_after_a_start(host: Host) -> None:
    state_dir = host.root / "state"
    stale = [state_dir / f".{CURSOR_FILE}.abc{i}.tmp" for i in range(3)]
    for path in stale:
        path.write_bytes(b"{half a cursor")  # what a kill -9 in the middle of write_atomic leaves
    other = state_dir / "unrelated.tmp"
    other.write_bytes(b"not ours")
    append(host.log, lines(0, 3))
    src = host.source()
    assert resets(src) == 3
    src.close()
    assert not any(p.exists() for p in stale)
    assert other.exists()
    assert [p.name for p in state_dir.iterdir() if p.name.endswith(".tmp")] == ["unrelated.tmp"]


def test_a_backlog_larger_than_one_read_is_read_in_bounded_slices(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logread, "MAX_BYTES_PER_COLLECT", 4096)
    append(host.log, lines(0, 500))
    src = host.source()
    first = src.collect()
    reader = src._reader
    assert isinstance(reader, logread.FileFollower) and reader.more
    assert first.counts[(A, RESET)] < 500
    for _ in range(200):
        if not reader.more:
            break
        src.collect()
    assert resets(src) == 500 and not reader.more
    src.close()


def test_a_file_that_is_not_there_yet_after_rotation_keeps_the_old_one(host: Host) -> None:
    append(host.log, lines(0, 5))
    src = host.source()
    assert resets(src) == 5
    old = host.log.with_name("kern.log.1")
    host.log.rename(old)
    append(old, lines(5, 5))  # the writer still holds the old file until it is told to reopen
    assert resets(src) == 10
    host.log.write_bytes(lines(10, 5))
    assert resets(src) == 15
    os.unlink(old)
    src.close()
