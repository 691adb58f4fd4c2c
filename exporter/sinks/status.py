"""The push sink's health: the only state the push threads and the scrape share.

Each push thread records every POST here (one lock, no I/O); a scrape reads a consistent ``PushView`` and never
waits for a push. An Alertmanager is named by ``scheme://host:port`` only (``endpoint_label``): never the
credentials or the path of its URL, which may carry secrets.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

import msgspec
from msgspec.structs import replace


def endpoint_label(url: str) -> str:
    """``https://user:secret@am.example:9093/prefix`` -> ``https://am.example:9093`` (default port filled in)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{host}:{port}"


class TargetStatus(msgspec.Struct, frozen=True):
    alertmanager: str  # endpoint_label of its URL
    successes: int = 0
    failures: int = 0
    last_success: float | None = None  # unix time
    last_error: str | None = None  # None while the last POST succeeded


class PushView(msgspec.Struct, frozen=True):
    targets: tuple[TargetStatus, ...]
    firing: int  # alerts the watchdog holds firing now


class PushStatus:
    def __init__(self, urls: Sequence[str]) -> None:
        self._lock = threading.Lock()
        # Two URLs on one endpoint (two path prefixes) share a series; their counts add up.
        self._targets = {label: TargetStatus(label) for label in map(endpoint_label, urls)}
        self._firing = 0

    def record_success(self, alertmanager: str, now: float) -> None:
        with self._lock:
            t = self._targets.get(alertmanager, TargetStatus(alertmanager))
            self._targets[alertmanager] = replace(t, successes=t.successes + 1, last_success=now, last_error=None)

    def record_failure(self, alertmanager: str, error: str) -> None:
        with self._lock:
            t = self._targets.get(alertmanager, TargetStatus(alertmanager))
            self._targets[alertmanager] = replace(t, failures=t.failures + 1, last_error=error)

    def set_firing(self, count: int) -> None:
        with self._lock:
            self._firing = count

    def view(self) -> PushView:
        with self._lock:
            return PushView(tuple(self._targets[k] for k in sorted(self._targets)), self._firing)
