"""The ttar text archive that prometheus/procfs keeps its sysfs fixtures in (``shared/fixtures/sysfs/
PROVENANCE.md`` describes it), read and written here so that a ``rocm-watchdog capture`` is a test fixture as it is.

Blocks, each ended by the separator line ``# ttar - - - ...``:

- ``Directory: <path>`` / ``Mode: <octal>``;
- ``Path: <path>`` / ``Lines: <n>`` / the file's n lines / ``Mode: <octal>``: NUL bytes are written as
  ``NULLBYTE``; a file that does not end in a newline has ``EOF`` appended to its last line;
- ``Path: <path>`` / ``SymlinkTo: <target>``.

Pure: bytes in, entries out (and back). Works on bytes throughout, so binary files (``gpu_metrics``) survive; a
file's own ``NULLBYTE`` text, or a last line that ends in ``EOF`` without a newline, reads back as ttar's own
script reads it (the format's ambiguity, not this reader's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

SEPARATOR = b"# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"
_NUL = b"NULLBYTE"
_EOF = b"EOF"

Kind = Literal["dir", "file", "link"]


class TtarError(ValueError):
    """Not a ttar archive, or a broken one: the message names the line."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative, "/"-separated, never absolute, never with ".." components
    kind: Kind
    mode: int = 0o644
    data: bytes = b""  # a file's bytes
    target: str = ""  # a link's target, as readlink gives it


def looks_like_ttar(data: bytes) -> bool:
    """The archive's first block header (a capture starts with ``Directory:``, ``Path:`` or a separator)."""
    head = data[:64]
    return head.startswith((b"Directory: ", b"Path: ", SEPARATOR[:8]))


def _check_path(path: str, line: int) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise TtarError(f"line {line}: unsafe or empty path {path!r}")
    return path


def write_ttar(entries: Iterable[Entry]) -> bytes:
    out: list[bytes] = []
    for entry in entries:
        path = entry.path.encode()
        if entry.kind == "dir":
            out.append(b"Directory: " + path + b"\n" + b"Mode: %o\n" % entry.mode)
        elif entry.kind == "link":
            out.append(b"Path: " + path + b"\nSymlinkTo: " + entry.target.encode() + b"\n")
        else:
            data = entry.data
            lines = data.count(b"\n")
            body = data.replace(b"\x00", _NUL)
            if data and not data.endswith(b"\n"):
                lines += 1
                body += _EOF + b"\n"
            out.append(b"Path: " + path + b"\n" + b"Lines: %d\n" % lines + body + b"Mode: %o\n" % entry.mode)
        out.append(SEPARATOR + b"\n")
    return b"".join(out)


def _field(lines: Sequence[bytes], i: int, name: bytes) -> bytes:
    if i >= len(lines) or not lines[i].startswith(name + b": "):
        raise TtarError(f"line {i + 1}: expected {name.decode()}:")
    return lines[i][len(name) + 2 :]


def _mode(raw: bytes, line: int) -> int:
    try:
        return int(raw.strip(), 8)
    except ValueError:
        raise TtarError(f"line {line}: not an octal mode: {raw[:20]!r}") from None


def read_ttar(data: bytes) -> list[Entry]:
    """Every entry of a ttar archive, in order; TtarError for anything else."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    entries: list[Entry] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line == SEPARATOR or not line.strip():
            i += 1
            continue
        if line.startswith(b"Directory: "):
            path = _check_path(line[11:].decode("utf-8", "replace"), i + 1)
            mode = _mode(_field(lines, i + 1, b"Mode"), i + 2)
            entries.append(Entry(path, "dir", mode))
            i += 2
        elif line.startswith(b"Path: "):
            path = _check_path(line[6:].decode("utf-8", "replace"), i + 1)
            if i + 1 < len(lines) and lines[i + 1].startswith(b"SymlinkTo: "):
                entries.append(Entry(path, "link", target=lines[i + 1][11:].decode("utf-8", "replace")))
                i += 2
            else:
                raw_count = _field(lines, i + 1, b"Lines")
                try:
                    count = int(raw_count)
                except ValueError:
                    raise TtarError(f"line {i + 2}: not a line count: {raw_count[:20]!r}") from None
                start = i + 2
                if count < 0 or start + count > len(lines):
                    raise TtarError(f"line {i + 2}: {count} lines announced, the archive ends before")
                body = lines[start : start + count]
                content = b"\n".join(body) + (b"\n" if body else b"")
                if body and body[-1].endswith(_EOF):
                    content = content[: -len(_EOF) - 1]
                content = content.replace(_NUL, b"\x00")
                mode = _mode(_field(lines, start + count, b"Mode"), start + count + 1)
                entries.append(Entry(path, "file", mode, data=content))
                i = start + count + 1
        else:
            raise TtarError(f"line {i + 1}: not a ttar block: {line[:60]!r}")
        if i < len(lines) and lines[i] == SEPARATOR:
            i += 1
        elif i < len(lines):
            raise TtarError(f"line {i + 1}: expected the ttar separator")
    return entries
