"""The C heap of a long-running daemon (glibc): fewer malloc arenas, and freed memory given back.

Both are no-ops where the C library lacks the call (musl, macOS): ``ctypes`` finds no symbol and nothing changes.
``ctypes`` is imported only when one of them is called (several milliseconds of a start that calls neither).
"""

from __future__ import annotations

import contextlib
from typing import Any

M_ARENA_MAX = -8  # glibc malloc.h: mallopt's parameter for the number of arenas


def _libc() -> Any:
    import ctypes

    try:
        return ctypes.CDLL(None)  # the symbols the process already has: libc's among them, no library search
    except OSError:
        return None


def limit_arenas(count: int = 2) -> None:
    """At most ``count`` malloc arenas. glibc gives a thread that allocates while another holds the main arena an
    arena of its own, up to eight per CPU: the threads a daemon starts for each collection and each scrape spread
    their garbage over several arenas, each keeping freed pages (the 8-GPU idle run's RSS: 38-42 MiB, 37.5 with
    two). The same as ``MALLOC_ARENA_MAX=2`` in the environment, which the process cannot count on having."""
    libc = _libc()
    with contextlib.suppress(AttributeError):  # no libc handle, or no mallopt
        libc.mallopt(M_ARENA_MAX, count)


def trim_heap() -> None:
    """Give the memory a large backlog's records took back to the system (glibc keeps freed heap otherwise: a
    1M-line backlog left the process 38 MiB larger)."""
    libc = _libc()
    with contextlib.suppress(AttributeError):
        libc.malloc_trim(0)
