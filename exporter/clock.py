"""The daemon's one clock: unix time counted on the monotonic clock.

Every interval, deadline, age and staleness limit is a difference of two ``time.monotonic()`` readings, which no
step of the system clock moves (an NTP step, a VM restored from a snapshot, ``date -s``, libfaketime). The wall-clock
times the exporter exports or persists (a source's last success, a condition's start, a kmsg record's time) are
``wall_time()`` readings: the monotonic clock plus one offset taken when the process started, so they count on
through a step instead of jumping with it, and an age computed from two of them is a monotonic age. The offset is
the system clock's at start: a clock set right after the exporter started (NTP's first step on a fresh VM) is
followed at the next restart, not before; what it does meanwhile is told by ``wall_skew_seconds``.

``time.time()`` stays right for what is not a measure of time passing: a file's name, an HTTP Date header.
"""

from __future__ import annotations

import time

_OFFSET = time.time() - time.monotonic()  # at import: serve's start, within milliseconds


def wall_time() -> float:
    """Unix seconds now, as the monotonic clock counts them from the process's start."""
    return time.monotonic() + _OFFSET


def wall_of(monotonic_seconds: float) -> float:
    """The unix time of a ``time.monotonic()`` reading."""
    return monotonic_seconds + _OFFSET


def wall_skew_seconds() -> float:
    """How far the system clock has moved from ``wall_time()`` since the start (positive: it is ahead)."""
    return time.time() - wall_time()
