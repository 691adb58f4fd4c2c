"""What the HTTP server counts about its clients, for the exporter's own metrics and for tests.

Plain counters, no prometheus_client: the server's loop thread is the only writer, a scrape (another thread) reads a
``StatsView``, a consistent copy taken under one lock. The metrics layer renders it
(``exporter.metrics.health.http_server_families``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

import msgspec

# Why the server closed or refused a connection before its client was done with it. Each is exported from zero,
# so increase() works at once; the log line of the same kind says more (exporter.server.core).
DROP_REASONS = (
    "header_timeout",  # the TLS handshake and request head took longer than the head deadline (a slowloris)
    "tls_handshake_failed",  # not TLS, no common version or cipher, a client certificate refused
    "bad_request",  # a malformed request line or header (400, 505) or a head over the size limit (431)
    "idle_timeout",  # a keep-alive connection idle past its timeout
    "write_timeout",  # the client did not take the response in time
    "connection_reset",  # the client vanished mid-request: reset, half a head, a TLS error after the handshake
    "evicted_idle",  # displaced when the server was full: idle between requests
    "evicted_head",  # displaced when the server was full: still sending its request head
    "evicted_write",  # displaced when the server was full: not taking its response
    "refused_address_share",  # its client address already held its share of the connections
    "refused_full",  # the server was full, nothing could be displaced for it, and its address was slow lately
)
# The statuses every series starts with (others appear when first answered).
INITIAL_CODES = (200, 401, 429, 503)


class StatsView(msgspec.Struct, frozen=True):
    connections: int  # open now, in every state
    dropped: Mapping[str, int]  # DROP_REASONS -> connections
    requests: Mapping[int, int]  # status code -> requests answered
    auth_failures: int  # requests refused by basic auth (401)
    bcrypt_checks: int = 0  # credentials checked by bcrypt (the verified-pair cache and 429s need none)
    events: Mapping[str, int] = msgspec.field(default_factory=dict)  # every client fault logged, by kind


class ServerStats:
    """The counters; ``HttpServer`` writes them, ``view`` copies them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dropped: Counter[str] = Counter(dict.fromkeys(DROP_REASONS, 0))
        self._requests: Counter[int] = Counter(dict.fromkeys(INITIAL_CODES, 0))
        self._events: Counter[str] = Counter()
        self._auth_failures = 0
        self._bcrypt_checks = 0
        self._open = 0

    def dropped(self, reason: str) -> None:
        with self._lock:
            self._dropped[reason] += 1

    def answered(self, status: int) -> None:
        with self._lock:
            self._requests[status] += 1

    def auth_failed(self) -> None:
        with self._lock:
            self._auth_failures += 1

    def bcrypt_checked(self) -> None:
        with self._lock:
            self._bcrypt_checks += 1

    def event(self, kind: str) -> int:
        """Count a client fault of ``kind``; returns how many of that kind so far."""
        with self._lock:
            self._events[kind] += 1
            return self._events[kind]

    def events_of(self, kind: str) -> int:
        with self._lock:
            return self._events[kind]

    def connections(self, open_now: int) -> None:
        with self._lock:
            self._open = open_now

    def view(self) -> StatsView:
        with self._lock:
            return StatsView(
                connections=self._open,
                dropped=dict(self._dropped),
                requests=dict(self._requests),
                auth_failures=self._auth_failures,
                bcrypt_checks=self._bcrypt_checks,
                events=dict(self._events),
            )
