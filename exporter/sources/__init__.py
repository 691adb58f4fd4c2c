"""Sources: the I/O side. Each one reads the host (a tool, sysfs, /dev, the kernel log) and returns records.

A source is scheduled by ``exporter.scheduler``; the scheduler wrapper times it, records its health and
stores what it returns. A source signals failure by raising ``SourceError`` (a clear message, no
traceback in the log); anything else it raises is treated the same way but logged with the traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

T_co = TypeVar("T_co", covariant=True)


class SourceError(Exception):
    """The source ran but could not produce data (tool missing, timed out, garbage output...).

    ``by_source``: a source that reports under several names (the auto-selected smi tool) gives each name's own
    error; the scheduler records a failure under every one of them instead of one under the source's name.
    """

    def __init__(self, message: str, by_source: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.by_source: Mapping[str, str] = dict(by_source or {})


class SourceAbsent(SourceError):
    """What the source reads is not on this host at all (``--smi.backend=auto`` with neither amd-smi nor rocm-smi
    installed): a state, not a failure. The scheduler records no ``up`` series for the source's names and exports
    ``rocm_watchdog_source_absent{source=label}`` 1 instead, until a run succeeds or fails."""

    def __init__(self, message: str, label: str) -> None:
        super().__init__(message)
        self.label = label


class Source(Protocol[T_co]):
    @property
    def name(self) -> str:
        """The ``source`` label of the health metrics."""
        ...

    def collect(self) -> T_co:
        """Read the host once and return a frozen snapshot. Raise SourceError on failure."""
        ...

    def close(self) -> None:
        """Release what the source holds open (file descriptors). Called once at shutdown."""
        ...
