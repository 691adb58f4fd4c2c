"""Frozen records shared by every layer. Parsers build them, sources return them, the collector reads them.

Each area keeps its records in its own module: ``smi`` (rocm-smi / amd-smi), ``gpu`` (sysfs identity),
and the watchdog and kernel-log modules.
"""

from __future__ import annotations


class ParseError(ValueError):
    """The one error a parser raises: the input is not an output it understands.

    ``line`` is 1-based in the input when the parser can tell where it gave up.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)
