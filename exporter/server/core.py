"""An HTTP/1.1 server for a metrics endpoint that no single client can starve.

One asyncio loop in its own thread accepts, reads request heads, checks auth and writes responses; handlers
(rendering, readiness) run on a small pool of worker threads, bcrypt on another, so neither a slow client nor
a slow handler ever holds the accept loop. The rules, all enforced by the loop:

- **Accept while there is room, queue when there is not.** The kernel's listen queue (``backlog``,
  ``--web.listen-backlog``, capped at net.core.somaxconn) is drained as fast as connections come while the server
  has room, so a burst of scrapers never waits for a SYN retransmit; an address over its share is answered 503
  right after accept (plain HTTP). When the server is full and nothing can be displaced, newcomers wait in a lobby
  of accepted connections (``max_connections / 4``), the address holding the fewest seated first when room comes;
  while the lobby is full the loop stops accepting and the next wait in the listen queue: none is closed
  unanswered. The loop turns every
  ``ACCEPTS_PER_TURN`` accepted connections, so requests already in their sockets are answered before the next
  thousand are accepted.
- **Whole-head deadline.** A connection has ``header_timeout`` from accept for its TLS handshake and its
  whole first request head, and the same from the first byte of each later request: not per read, so one
  byte a second buys nothing. Between requests a keep-alive connection may idle for ``idle_timeout``; it
  costs a socket and no thread.
- **Fair share of connections.** At most ``max_connections`` open; no client address (an IPv6 /64 counts as
  one) holds more than half of them (503 beyond). When the server is full, a newcomer displaces a connection of
  the address holding the most, unless the newcomer's own address would then hold as many: idle ones first,
  then slow ones (a head still incomplete after ``SLOW_AFTER_SECONDS``, then a response not taken for as long),
  oldest first, then, of an address that held a slow one within ``SLOW_MEMORY_SECONDS`` (a slowloris reconnecting),
  heads just begun. When there is none, the server is full of clients that just connected or are being answered
  (a burst of scrapers): newcomers wait (the lobby, the listen queue) until one closes, goes idle or turns slow; a
  newcomer of such a slow address is refused instead (503), not waited for. Any other head just begun, and a
  connection whose request is being handled, are never displaced.
- **Fair share of work.** Requests to ``limited_paths`` (``/metrics``) in flight, waiting for a worker or
  running, are capped by ``max_requests`` (node_exporter's ``--web.max-requests``: 503 past it after a grace
  of 1 s for a slot, 0 for no limit), and one address gets at most half of them; a freed slot goes to the
  waiting addresses in turn, so a scraper waits for one request of each other address at most. Writing the
  cached bytes out is not work: it is bounded by ``write_timeout`` and by one chunk of buffer per connection. A
  handler that keeps answering within ``INLINE_BELOW_SECONDS`` (bytes from the exposition cache) runs on the
  loop instead, one request at a time, so a burst of scrapers never queues for workers; one slow run sends it
  back to them.
- **Auth right after the head**, before any handler; a pair bcrypt verified once is answered from memory,
  whatever its address did (an attacker sharing the scraper's address, a NAT, cannot lock the scraper out), the
  rest wait for the bcrypt pool, at most ``AUTH_PENDING_PER_ADDRESS`` per address (429 beyond). The failure limit
  gates bcrypt work only: an address whose credentials failed ``AUTH_FAILURES_PER_ADDRESS`` times within
  ``AUTH_FAILURE_WINDOW_SECONDS`` gets 429 without a bcrypt for credentials not verified before (a leaky bucket:
  then one attempt every few seconds); other addresses are not.
- **Client faults are counted, not thrown.** Each kind (the head deadline, malformed requests, TLS failures,
  resets, refusals, displacements, auth failures) is counted in ``stats()`` (the exporter's
  ``rocm_watchdog_http_*`` metrics) and logged as one line: the first at once, then at most one a minute per
  kind with the count of those not logged, never with a traceback (the loop's exception handler and asyncio's
  own logger included).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import math
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from enum import Enum
from http import HTTPStatus
from typing import Any, TypeVar

import msgspec

from exporter.logging import get_logger
from exporter.server.auth import BasicAuth, Verdict
from exporter.server.stats import ServerStats, StatsView

log = get_logger("http")

T = TypeVar("T")
_TIMEOUT = getattr(asyncio, "timeout", None)  # Python 3.11+

# A response is written this much at a time, each handed to the kernel before the next: the most a connection
# buffers in this process (256 KiB x max_connections at worst, with every client reading slowly). 64 KiB halved
# the throughput of 1.4 MB bodies at 100 connections (more loop turns per byte); 1 MiB gained nothing more.
CHUNK_BYTES = 256 * 1024
AUTH_PENDING_PER_ADDRESS = 2
# Brute force: each failed check of an address's credentials fills its bucket by one, which leaks this many per
# window; a full bucket is answered 429 without a bcrypt. A burst of 10 guesses, then one every 6 s: a scraper
# with a wrong password (one try per scrape interval) keeps getting its 401s, a guesser gets 10 a minute.
AUTH_FAILURES_PER_ADDRESS = 10
AUTH_FAILURE_WINDOW_SECONDS = 60.0
AUTH_TRACKED_ADDRESSES = 4096  # buckets kept at most; empty ones are dropped first
# A head still incomplete this long after it began is slow (a scraper's arrives in one segment, within a round
# trip); so is a response the client has not taken for as long. Slow ones are displaced before fresh ones.
SLOW_AFTER_SECONDS = 1.0
# When full of connections that just began and none is idle or slow, newcomers wait in a lobby of accepted
# sockets (max_connections / 4 of them: within systemd's 1024 open files with max_connections, the listeners and the
# exporter's own files) until one closes, goes idle or turns slow, the lightest address first; while the lobby is
# full the accept loop stops and the next wait in the kernel's listen queue. Never more often than this.
ROOM_RECHECK_SECONDS = 0.01
LOBBY_MISSES_PER_PASS = 8  # newcomers of the lobby tried in vain per pass, before waiting for the next change
# An address that held a slow connection (displaced as slow, or past the head deadline) counts as slow this long:
# its heads just begun may be displaced too, after every slow one, and its newcomers are refused rather than
# waited for when nothing can be displaced. A burst of scrapers never holds a slow one.
SLOW_MEMORY_SECONDS = 10.0
SLOW_TRACKED_ADDRESSES = 4096
ACCEPTS_PER_TURN = 16  # connections accepted before the loop turns to those it accepted
# A handler that answered this fast this many times in a row on a worker runs on the loop from then on, until
# one run is slower (see HttpServer._run_inline). The cached exposition takes 0.05 ms for its bytes, plus the
# sections built per scrape (the exporter's own process and HTTP series: 0.6 ms in text, 1.2 ms with gzip, on 8
# GPUs), and twice that on a loaded 2-CPU machine: at 1 ms a burst of 1000 scrapes went to the workers and 75 % of
# it was refused at --web.max-requests, where on the loop every one is answered within a second.
INLINE_BELOW_SECONDS = 0.005
INLINE_AFTER_FAST_RUNS = 8
# Past max_requests a request waits this long for a slot before its 503: a burst of scrapers arriving together
# (1000 at once, from 100 addresses: a slot goes to each waiting address in turn) is served, a sustained
# overload is still refused. At 0.1 s a scraper arriving behind such a burst got a 503 now and then.
MAX_REQUESTS_GRACE_SECONDS = 1.0
LOG_EVERY_SECONDS = 60.0
HOUSEKEEPING_SECONDS = 10.0  # suppressed log counts flushed, emptied auth buckets dropped
# Client faults that mean the server is at a limit or under attack: logged as warnings, the rest as info.
_WARN_KINDS = frozenset(
    {"refused_full", "refused_address_share", "evicted_idle", "evicted_head", "evicted_write", "accept_failed"}
    | {"auth_locked", "max_requests"}
)


async def _within(awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable`` under a deadline (``asyncio.TimeoutError`` past it): on Python 3.11+ in the connection's
    own task, where ``asyncio.wait_for`` wraps it in a task of its own (three per request on a kept-alive
    connection, about a quarter of the loop's work per request)."""
    if _TIMEOUT is None:
        return await asyncio.wait_for(awaitable, seconds)
    async with _TIMEOUT(seconds):
        return await awaitable


class Limits(msgspec.Struct, frozen=True):
    backlog: int = 1024  # the kernel caps it at net.core.somaxconn
    # Under systemd's default 1024 open files. Half of it for one address still holds 100 scrapers that reconnect
    # for every scrape (a closed connection is counted until its task has finished, a little after the client
    # saw the response); 256 in all made 1 of 10 of those scrapes a 503.
    max_connections: int = 512
    header_timeout_seconds: float = 10.0  # TLS handshake + the whole request head
    idle_timeout_seconds: float = 120.0  # keep-alive, between requests
    write_timeout_seconds: float = 60.0  # the whole response
    max_head_bytes: int = 16 * 1024  # request line + headers; 431 beyond
    workers: int = 4  # threads running handlers of limited_paths (one more runs the others)
    auth_workers: int = 2  # threads running bcrypt
    max_requests: int = 40  # in flight on limited_paths; 0 = no limit
    limited_paths: frozenset[str] = frozenset({"/metrics"})

    @property
    def connections_per_address(self) -> int:
        return max(1, self.max_connections // 2)

    @property
    def requests_per_address(self) -> int:
        return max(1, self.max_requests // 2)


class Request(msgspec.Struct, frozen=True):
    method: str
    path: str
    query: str
    version: str  # HTTP/1.0 or HTTP/1.1
    headers: Mapping[str, str]  # lower-case names; repeated headers joined with ", "
    client: str  # the address key fair shares are counted by
    has_body: bool = False


class Response(msgspec.Struct, frozen=True):
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Response]


class _State(Enum):
    HANDSHAKE = "handshake"
    HEAD = "head"
    IDLE = "idle"
    BUSY = "busy"  # the request is being checked or handled
    WRITE = "write"  # the response is being written


class _Conn:
    __slots__ = ("client", "evicted", "since", "sock", "started", "state", "task")

    def __init__(self, client: str, now: float, sock: socket.socket) -> None:
        self.client = client
        self.state = _State.HEAD
        self.since = now
        self.sock = sock
        self.started = False  # its task has run: the task closes the socket from then on
        self.evicted = False
        self.task: asyncio.Task[None] | None = None


class _Waiting:
    """A connection accepted while the server was full, waiting in the lobby for room (not read from yet)."""

    __slots__ = ("client", "since", "sock")

    def __init__(self, sock: socket.socket, client: str, since: float) -> None:
        self.sock = sock
        self.client = client
        self.since = since


class _BadRequest(Exception):
    def __init__(self, status: int, kind: str) -> None:
        super().__init__(kind)
        self.status = status
        self.kind = kind


def client_key(family: int, peer: Any) -> str:
    """What a fair share is counted by: the IPv4 address, an IPv6 /64 (one host's usual allotment), else local."""
    if family == socket.AF_INET:
        return str(peer[0])
    if family == socket.AF_INET6:
        ip = ipaddress.IPv6Address(str(peer[0]).split("%", 1)[0])
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return f"{ipaddress.IPv6Network((ip, 64), strict=False).network_address}/64"
    return "local"


def parse_head(head: bytes, client: str) -> Request:
    """Request line and headers (RFC 9112), strictly: anything ambiguous is a 400, never a guess."""
    lines = head.decode("latin-1").split("\r\n")
    while lines and not lines[0]:  # stray CRLFs before a request are allowed
        lines.pop(0)
    parts = lines[0].split(" ") if lines else []
    if len(parts) != 3 or not parts[0].isascii() or not parts[0].isalpha():
        raise _BadRequest(400, "bad_request_line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _BadRequest(505 if version.startswith("HTTP/") else 400, "bad_version")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name[0] in " \t" or name != name.rstrip() or " " in name:
            raise _BadRequest(400, "bad_header")
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise _BadRequest(400, "bad_header")
    has_body = int(length) > 0 or "transfer-encoding" in headers
    if target.startswith(("http://", "https://")):  # absolute form: keep the path
        target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
    if not target.startswith("/"):
        raise _BadRequest(400, "bad_target")
    path, _, query = target.partition("?")
    return Request(method, path, query, version, headers, client, has_body)


def _wants_keep_alive(request: Request) -> bool:
    tokens = {t.strip().lower() for t in request.headers.get("connection", "").split(",")}
    if request.version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


class _OneLine(logging.Handler):
    """asyncio's own logger, as one structured line without the traceback it may carry: in this process it only
    speaks about connections (a write after a connection was lost, a failed handshake in debug mode)."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            log.warning("asyncio_message", message=record.getMessage()[:300], level_name=record.levelname)


def _asyncio_log_in_one_line() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(handler, _OneLine) for handler in logger.handlers):
        logger.addHandler(_OneLine())
        logger.propagate = False


class HttpServer:
    """Serve ``handler`` on already-listening sockets; ``start()`` runs the loop in a daemon thread."""

    def __init__(
        self,
        listeners: list[socket.socket],
        handler: Handler,
        *,
        auth: BasicAuth | None = None,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
        on_accept: Callable[[], None] | None = None,
        extra_headers: tuple[tuple[str, str], ...] = (),
        stats: ServerStats | None = None,
    ) -> None:
        if not listeners:
            raise ValueError("no listening socket")
        self.listeners = listeners
        self._handler = handler
        self._auth = auth if auth is not None and auth.required else None
        self._ssl = ssl_context
        self.limits = limits or Limits()
        self._on_accept = on_accept  # e.g. re-reading a rotated certificate, at most every few seconds
        self._extra_headers = extra_headers  # on every response, the server's own (401, 503) too
        self._conns: dict[str, set[_Conn]] = {}
        self._open = 0
        self._in_flight = 0
        self._in_flight_by: Counter[str] = Counter()
        self._auth_pending: Counter[str] = Counter()
        self._auth_buckets: dict[str, tuple[float, float]] = {}  # address -> (failures not leaked yet, when)
        self.counters = stats or ServerStats()  # what the exporter's rocm_watchdog_http_* metrics show
        self._fast_runs = {True: 0, False: 0}  # limited paths or not -> handler runs under 1 ms in a row
        # address -> its requests waiting for a slot (up to MAX_REQUESTS_GRACE_SECONDS), addresses in turn order
        self._slot_waiters: dict[str, deque[asyncio.Future[bool]]] = {}
        self._logged: dict[str, tuple[float, int]] = {}  # kind -> (last logged at, how many of it then)
        self._date = (0, "")
        self._workers = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="http-worker")
        # Everything but limited_paths (/healthz, /, 404s): cheap, and never queued behind slow scrapes.
        self._light = ThreadPoolExecutor(1, thread_name_prefix="http-light")
        self._auth_pool = ThreadPoolExecutor(self.limits.auth_workers, thread_name_prefix="http-auth")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._freed = asyncio.Event()  # a connection closed or went idle, or a newcomer joined the lobby (its pump)
        self._untidy = asyncio.Event()  # a client fault was counted or an address failed auth: housekeeping due
        self._slow_until: dict[str, float] = {}  # address -> loop time until which it counts as slow
        self._lobby: list[_Waiting] = []  # accepted while full, waiting for room, in arrival order
        self._lobby_by: Counter[str] = Counter()
        self._lobby_size = max(1, self.limits.max_connections // 4)
        self._lobby_room = asyncio.Event()  # the lobby has a free seat (for an accept loop waiting for one)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)

    # --- life cycle, from any thread ---------------------------------------------------------------------

    @property
    def server_address(self) -> Any:
        return self.listeners[0].getsockname()

    @property
    def server_port(self) -> int:
        address = self.server_address
        return int(address[1]) if isinstance(address, tuple) else 0

    def start(self) -> HttpServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the HTTP loop did not start")
        return self

    def shutdown(self, timeout_seconds: float = 5.0) -> None:
        """Stop accepting, drop every connection, stop the loop; returns within about ``timeout_seconds``."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout_seconds)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._light.shutdown(wait=False, cancel_futures=True)
        self._auth_pool.shutdown(wait=False, cancel_futures=True)
        for sock in self.listeners:
            sock.close()

    def reconfigure(
        self,
        *,
        auth: BasicAuth | None,
        ssl_context: ssl.SSLContext | None,
        on_accept: Callable[[], None] | None,
        extra_headers: tuple[tuple[str, str], ...],
    ) -> None:
        """A reloaded web config (SIGHUP): new connections get the new TLS context, every request after this the
        new users and headers. Each is one attribute, swapped whole; a request in progress finishes with what it
        started with."""
        self._auth = auth if auth is not None and auth.required else None
        self._ssl = ssl_context
        self._on_accept = on_accept
        self._extra_headers = extra_headers

    def stats(self) -> StatsView:
        """Open connections, connections dropped by reason, requests by status, auth failures, client faults by
        kind: a consistent copy, from any thread."""
        return self.counters.view()

    # --- the loop ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        _asyncio_log_in_one_line()
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._loop_exception)
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        accepters = [asyncio.create_task(self._accept(sock)) for sock in self.listeners]
        housekeeping = asyncio.create_task(self._housekeeping())
        pump = asyncio.create_task(self._pump_lobby())
        self._ready.set()
        await self._stop.wait()
        for task in (*accepters, housekeeping, pump):
            task.cancel()
        tasks = [c.task for conns in self._conns.values() for c in conns if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*accepters, housekeeping, pump, *tasks, return_exceptions=True)
        for waiting in self._lobby:
            waiting.sock.close()
        self._lobby.clear()
        self._flush_log(force=True)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Instead of asyncio's default handler (which logs a traceback): a client's connection that went wrong
        is one more client fault; anything else is one line, still without a traceback."""
        exc = context.get("exception")
        if isinstance(exc, (OSError, asyncio.CancelledError)):
            self._note("transport_error", error=type(exc).__name__)
            return
        log.error("http_loop_error", message=context.get("message"), error=repr(exc))

    # --- client faults: counted, logged once a minute per kind --------------------------------------------

    def _drop(self, reason: str, client: str, **detail: object) -> None:
        """The server closed or refused a connection before its client was done: one of stats.DROP_REASONS."""
        self.counters.dropped(reason)
        self._note(reason, client=client, **detail)

    def _note(self, kind: str, **detail: object) -> None:
        """Count a client fault; log the first of its kind at once, then at most one line a minute per kind,
        saying how many were not logged since the last line (``_flush_log`` says it when no new one comes)."""
        count = self.counters.event(kind)
        self._untidy.set()
        last = self._logged.get(kind)
        now = time.monotonic()
        if last is None or now - last[0] >= LOG_EVERY_SECONDS:
            self._logged[kind] = (now, count)
            self._log(kind, count, count - 1 - (last[1] if last is not None else 0), detail)

    def _flush_log(self, force: bool = False) -> bool:
        """Say the faults not logged yet of each kind whose minute is over (every kind: ``force``); whether some
        are left to say."""
        now = time.monotonic()
        left = False
        for kind, (at, logged) in list(self._logged.items()):
            count = self.counters.events_of(kind)
            if count > logged and (force or now - at >= LOG_EVERY_SECONDS):
                self._logged[kind] = (now, count)
                self._log(kind, count, count - logged, {})
            elif count > logged:
                left = True
        return left

    @staticmethod
    def _log(kind: str, total: int, not_logged: int, detail: Mapping[str, object]) -> None:
        emit = log.warning if kind in _WARN_KINDS else log.info
        # suppressed: faults of this kind since the previous line that had no line of their own (0 on the first)
        emit("http_client_error", kind=kind, total=total, suppressed=not_logged, **detail)

    async def _housekeeping(self) -> None:
        """Every HOUSEKEEPING_SECONDS while there is something to tidy; asleep, without a timer, while there is
        not (a wake-up of an idle daemon costs CPU)."""
        while True:
            await self._untidy.wait()
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            unlogged = self._flush_log()
            now = asyncio.get_running_loop().time()
            for client in [c for c in self._auth_buckets if self._auth_level(c, now) <= 0]:
                del self._auth_buckets[client]
            if not unlogged and not self._auth_buckets:
                self._untidy.clear()

    # --- accepting, fair shares ---------------------------------------------------------------------------

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        accepted = 0
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:
                # Out of fds or memory: say so and back off a little instead of spinning on the listener.
                self._note("accept_failed", error=errno.errorcode.get(exc.errno or 0, str(exc.errno)))
                await asyncio.sleep(0.1)
                continue
            on_accept = self._on_accept
            if on_accept is not None:
                on_accept()
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                # asyncio sets this only for sockets whose proto says TCP, which an accepted socket of a
                # listener made without one (or passed by systemd) does not: Nagle would then hold the tail
                # of a response for the client's delayed ACK, 40 ms.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await self._admit(sock, client_key(sock.family, peer))
            # sock_accept returns without a turn of the loop while the kernel's queue holds connections: a burst
            # of 1000 would all be accepted, and the cap reached, before the first request (already in its
            # socket) is read. A turn every few accepts answers them as they come (a turn after each one halved
            # the rate of 100 clients that connect for every request).
            accepted += 1
            if accepted % ACCEPTS_PER_TURN == 0:
                await asyncio.sleep(0)

    async def _admit(self, sock: socket.socket, client: str) -> None:
        """Serve the newcomer, displacing an idle or slow connection when full; refuse it (503) past its address's
        share, or when full and its address is a slow one; else seat it in the lobby until there is room, and
        while the lobby is full accept no other (the next wait in the kernel's listen queue)."""
        limits = self.limits
        held = len(self._conns.get(client, ())) + self._lobby_by[client]
        if held >= limits.connections_per_address:
            self._refuse(sock, "refused_address_share", client)
            return
        # Behind those waiting already; a slow address's newcomer is refused at once rather than seated to wait.
        if (not self._lobby or self._is_slow(client, asyncio.get_running_loop().time())) and self._seat(sock, client):
            return
        self._lobby.append(_Waiting(sock, client, asyncio.get_running_loop().time()))
        self._lobby_by[client] += 1
        self._freed.set()  # the lobby's pump: one more to seat
        while len(self._lobby) >= self._lobby_size:
            self._lobby_room.clear()
            await self._lobby_room.wait()

    def _seat(self, sock: socket.socket, client: str) -> bool:
        """Start serving ``sock`` if there is room or room can be made for it now; False: not now."""
        if self._open >= self.limits.max_connections:
            held = len(self._conns.get(client, ()))
            if not (self._evict_for(client, held) or self._evict_own(client)):
                if not self._is_slow(client, asyncio.get_running_loop().time()):
                    return False
                # Nothing to displace for it, and its address is a slow one (a slowloris): more of the same,
                # refused rather than holding a seat in the lobby.
                self._refuse(sock, "refused_full", client)
                return True
        loop = asyncio.get_running_loop()
        conn = _Conn(client, loop.time(), sock)
        self._conns.setdefault(client, set()).add(conn)
        self._open += 1
        self.counters.connections(self._open)
        conn.task = loop.create_task(self._serve(conn, sock))
        return True

    async def _pump_lobby(self) -> None:
        """Seat the lobby's newcomers as room comes (a connection closes or goes idle, or one turns slow and can be
        displaced): the address holding the fewest connections first, then the earliest, so a scraper waits
        behind no attacker holding many."""
        loop = asyncio.get_running_loop()
        while True:
            if self._lobby:
                self._seat_waiting(loop.time())
            if self._lobby:
                await self._room(self._until_displaceable(loop.time()))
            else:
                self._freed.clear()
                await self._freed.wait()

    def _seat_waiting(self, now: float) -> None:
        order = sorted(self._lobby, key=lambda w: (len(self._conns.get(w.client, ())), w.since))
        seated: set[_Waiting] = set()
        displaceable: bool | None = None  # not looked yet
        misses = 0
        for waiting in order:
            full = self._open >= self.limits.max_connections
            if full:
                if displaceable is None:
                    displaceable = self._any_displaceable(now)
                # Lightest first: when one cannot displace anything, the heavier ones can only displace their own.
                if not displaceable or misses >= LOBBY_MISSES_PER_PASS:
                    break
            if self._seat(waiting.sock, waiting.client):
                seated.add(waiting)
                displaceable = None
            else:
                misses += 1
        if seated:
            self._lobby = [w for w in self._lobby if w not in seated]
            for waiting in seated:
                self._lobby_by[waiting.client] -= 1
                if self._lobby_by[waiting.client] <= 0:
                    del self._lobby_by[waiting.client]
            self._lobby_room.set()

    def _any_displaceable(self, now: float) -> bool:
        return any(
            self._rank(c, now, slow) is not None
            for client, conns in self._conns.items()
            for slow in (self._is_slow(client, now),)
            for c in conns
        )

    def _refuse(self, sock: socket.socket, reason: str, client: str) -> None:
        self._drop(reason, client)
        if self._ssl is None:  # plain HTTP: say why, best effort, without waiting
            with contextlib.suppress(OSError):
                # What the client sent already is read first: closing a socket with unread bytes resets the
                # connection, and the client would see the reset instead of the 503.
                sock.recv(65536, socket.MSG_DONTWAIT)
            with contextlib.suppress(OSError):
                sock.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        sock.close()

    def _until_displaceable(self, now: float) -> float:
        """Seconds until the next connection open now turns slow (a head or a response of SLOW_AFTER_SECONDS; those
        slow already could not be displaced): at most that, at least a few milliseconds (not a spin)."""
        waiting = [
            left
            for conns in self._conns.values()
            for c in conns
            if not c.evicted
            and c.state in (_State.HANDSHAKE, _State.HEAD, _State.WRITE)
            and (left := c.since + SLOW_AFTER_SECONDS - now) > 0
        ]
        return max(ROOM_RECHECK_SECONDS, min(waiting, default=SLOW_AFTER_SECONDS))

    def _is_slow(self, client: str, now: float) -> bool:
        """Whether ``client`` held a slow connection within SLOW_MEMORY_SECONDS: its heads just begun are likely
        more of the same, and are displaced after every slow one."""
        until = self._slow_until.get(client)
        if until is None:
            return False
        if until <= now:
            del self._slow_until[client]
            return False
        return True

    def _mark_slow(self, client: str, now: float) -> None:
        if client not in self._slow_until and len(self._slow_until) >= SLOW_TRACKED_ADDRESSES:
            for address in [a for a, until in self._slow_until.items() if until <= now]:
                del self._slow_until[address]
            if len(self._slow_until) >= SLOW_TRACKED_ADDRESSES:
                del self._slow_until[min(self._slow_until, key=self._slow_until.__getitem__)]
        self._slow_until[client] = now + SLOW_MEMORY_SECONDS

    async def _room(self, timeout: float) -> None:
        """Until a connection closes or goes idle (or ``timeout``)."""
        self._freed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await _within(self._freed.wait(), timeout)

    @staticmethod
    def _rank(conn: _Conn, now: float, slow_address: bool) -> int | None:
        """Which connections go first when the server is full (lowest first); None: never displaced."""
        if conn.evicted:
            return None
        slow = now - conn.since >= SLOW_AFTER_SECONDS
        if conn.state is _State.IDLE:
            return 0
        if conn.state in (_State.HEAD, _State.HANDSHAKE):
            # A head just begun is not displaced, its client sending a request to answer, unless its address has
            # been slow lately (a slowloris reconnecting).
            return 1 if slow else 3 if slow_address else None
        if conn.state is _State.WRITE and slow:
            return 2
        return None

    def _displace(self, victim: _Conn, rank: int, newcomer: str, now: float) -> None:
        victim.evicted = True
        self._forget(victim)
        if victim.task is not None:
            victim.task.cancel()
        if not victim.started:  # cancelled before it ran: its finally will never close the socket
            victim.sock.close()
        if rank in (1, 2):
            self._mark_slow(victim.client, now)
        state = "head" if victim.state is _State.HANDSHAKE else victim.state.value
        self._drop(f"evicted_{state}", victim.client, newcomer=newcomer)

    def _evict_own(self, client: str) -> bool:
        """Displace one of ``client``'s own idle or slow connections for its newcomer (nothing else to displace):
        an address replaces its own, its count unchanged."""
        now = asyncio.get_running_loop().time()
        slow_address = self._is_slow(client, now)
        ranked = [
            (r, c.since, c) for c in self._conns.get(client, ()) if (r := self._rank(c, now, slow_address)) is not None
        ]
        if not ranked:
            return False
        rank, _, victim = min(ranked, key=lambda item: (item[0], item[1]))
        self._displace(victim, rank, client, now)
        return True

    def _evict_for(self, client: str, held: int) -> bool | None:
        """Make room for ``client`` (holding ``held``) by displacing a connection of the address holding the
        most that has one to give (see ``_rank``): True. False when the heaviest address holds no more than
        ``client`` would; None when the addresses heavier than ``client`` hold nothing to displace now."""
        now = asyncio.get_running_loop().time()
        passed = False  # an address heavier than client's had nothing to displace
        for other, conns in sorted(self._conns.items(), key=lambda item: -len(item[1])):
            if other != client and len(conns) <= held + 1:
                return None if passed else False
            slow_address = self._is_slow(other, now)
            ranked = [(r, c.since, c) for c in conns if (r := self._rank(c, now, slow_address)) is not None]
            if not ranked:
                passed = passed or other != client
                continue
            rank, _, victim = min(ranked, key=lambda item: (item[0], item[1]))
            self._displace(victim, rank, client, now)
            return True
        return None

    def _forget(self, conn: _Conn) -> None:
        conns = self._conns.get(conn.client)
        if conns is not None and conn in conns:
            conns.discard(conn)
            self._open -= 1
            self.counters.connections(self._open)
            self._freed.set()
            if not conns:
                del self._conns[conn.client]

    def _set(self, conn: _Conn, state: _State) -> None:
        conn.state = state
        conn.since = asyncio.get_running_loop().time()
        if state is _State.IDLE:
            self._freed.set()  # displaceable now: an accept loop waiting for room may take its place

    # --- one connection ---------------------------------------------------------------------------------

    async def _serve(self, conn: _Conn, sock: socket.socket) -> None:
        conn.started = True
        loop = asyncio.get_running_loop()
        limits = self.limits
        deadline = loop.time() + limits.header_timeout_seconds
        writer: asyncio.StreamWriter | None = None
        clean = False
        try:
            reader = asyncio.StreamReader(limit=limits.max_head_bytes)
            protocol = asyncio.StreamReaderProtocol(reader)
            context = self._ssl
            if context is not None:
                self._set(conn, _State.HANDSHAKE)
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=context, ssl_handshake_timeout=max(0.1, deadline - loop.time())
                )
            else:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            # drain() waits until the kernel took every byte. Not so over TLS: asyncio's TLS transport pauses its
            # writer while its buffer holds at least ``high`` bytes, so at 0 it stays paused with an empty buffer
            # and drain() waits for the client's next bytes (for a response with "Connection: close", until the
            # write timeout, the connection open). At 1 it pauses while any byte waits for the TCP transport,
            # which buffers up to 64 KiB.
            transport.set_write_buffer_limits(high=0 if context is None else 1)
            first = b""
            while True:
                self._set(conn, _State.HEAD)
                head = first + await _within(reader.readuntil(b"\r\n\r\n"), max(0.0, deadline - loop.time()))
                self._set(conn, _State.BUSY)
                try:
                    request = parse_head(head, conn.client)
                except _BadRequest as bad:
                    self._drop("bad_request", conn.client, detail=bad.kind, status=bad.status)
                    response = Response(bad.status, HTTPStatus(bad.status).phrase.encode() + b"\n")
                    self._set(conn, _State.WRITE)
                    await _within(self._write(writer, None, response, False), limits.write_timeout_seconds)
                    clean = True
                    return
                response = await self._respond(request)
                keep = _wants_keep_alive(request) and not request.has_body and response.status < 500
                keep = keep and self._stop is not None and not self._stop.is_set()
                self._set(conn, _State.WRITE)
                await _within(self._write(writer, request, response, keep), limits.write_timeout_seconds)
                if not keep:
                    clean = True
                    return
                self._set(conn, _State.IDLE)
                first = await _within(reader.readexactly(1), limits.idle_timeout_seconds)
                deadline = loop.time() + limits.header_timeout_seconds
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._drop("connection_reset", conn.client, detail="closed_mid_head")
            else:
                clean = True  # closed between requests, or a TCP probe that sends nothing
        except asyncio.TimeoutError:
            if conn.state in (_State.HANDSHAKE, _State.HEAD):
                self._mark_slow(conn.client, loop.time())
                self._drop("header_timeout", conn.client, phase=conn.state.value)
            elif conn.state is _State.IDLE:
                self._drop("idle_timeout", conn.client)
            else:
                self._drop("write_timeout", conn.client)
        except asyncio.LimitOverrunError:
            self._drop("bad_request", conn.client, detail="request_head_too_large", status=431)
            if writer is not None:
                with contextlib.suppress(Exception):
                    self._set(conn, _State.WRITE)
                    response = Response(431, b"Request Header Fields Too Large\n")
                    await _within(self._write(writer, None, response, False), 1.0)
        except asyncio.CancelledError:
            pass  # displaced by a newcomer (counted there) or the server stopping
        except OSError as exc:  # ssl.SSLError too; a handshake past its deadline is a ConnectionAbortedError
            if conn.state is _State.HANDSHAKE and loop.time() >= deadline - 0.01:
                self._drop("header_timeout", conn.client, phase=conn.state.value)
            elif conn.state is _State.HANDSHAKE:
                reason = getattr(exc, "reason", None) or type(exc).__name__
                self._drop("tls_handshake_failed", conn.client, error=str(reason))
            else:
                self._drop("connection_reset", conn.client, error=type(exc).__name__)
        finally:
            self._forget(conn)
            if writer is None:
                sock.close()
            elif clean:
                writer.close()
            else:
                writer.transport.abort()

    async def _respond(self, request: Request) -> Response:
        loop = asyncio.get_running_loop()
        client = request.client
        auth = self._auth  # swapped whole by reconfigure(): this request keeps the one it started with
        if auth is not None:
            denied = await self._authorize(auth, request)
            if denied is not None:
                return denied
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"Method Not Allowed\n", headers=(("Allow", "GET, HEAD"),))
        heavy = request.path in self.limits.limited_paths
        limited = heavy and self.limits.max_requests > 0
        if self._fast_runs[heavy] >= INLINE_AFTER_FAST_RUNS:
            return self._run_inline(heavy, request)
        if limited:
            slot = await self._acquire(client)
            if slot is None:
                self._note("max_requests", client=client)
                text = f"Limit of concurrent requests reached ({self.limits.max_requests}), try again later.\n"
                return Response(503, text.encode())
            if not slot:  # the handler became fast while this one waited: on the loop, with no slot
                return self._run_inline(heavy, request)
        pool = self._workers if heavy else self._light
        try:
            response, seconds = await loop.run_in_executor(pool, self._timed, request)
            self._fast_runs[heavy] = self._fast_runs[heavy] + 1 if seconds < INLINE_BELOW_SECONDS else 0
            if heavy and self._fast_runs[heavy] >= INLINE_AFTER_FAST_RUNS:
                self._wake_waiters_inline()
            return response
        except Exception as exc:  # the handler's fault, not the client's: say so once in the log
            self._fast_runs[heavy] = 0
            log.error("http_handler_failed", path=request.path, error=repr(exc))
            return Response(500, b"Internal Server Error\n")
        finally:
            if limited:
                self._release(client)

    # --- slots on the limited paths: max_requests in all, half per address, handed round robin ------------

    async def _acquire(self, client: str) -> bool | None:
        """A slot for ``client``: True (taken, ``_release`` it), False (none needed: run on the loop), None (none
        within MAX_REQUESTS_GRACE_SECONDS: answer 503). A request waits behind its own address's earlier ones;
        a freed slot goes to the addresses waiting in turn, so a scraper waits for one request of each other
        address, not for every request queued before it. The share per address binds only while another address
        waits: alone (a load tester, a single Prometheus with many targets behind one address) an address may use
        every slot, and the slots it frees go to the others first once they come."""
        limits = self.limits
        others_waiting = any(address != client for address in self._slot_waiters)
        if (
            client not in self._slot_waiters
            and self._in_flight < limits.max_requests
            and (self._in_flight_by[client] < limits.requests_per_address or not others_waiting)
        ):
            self._take(client)
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._slot_waiters.setdefault(client, deque()).append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=MAX_REQUESTS_GRACE_SECONDS)
        except asyncio.CancelledError:  # the server stops: give back a slot handed over meanwhile
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self._release(client)
            self._unqueue(client, waiter)
            raise
        if not waiter.done():
            self._unqueue(client, waiter)
            return None
        return waiter.result()

    def _take(self, client: str) -> None:
        self._in_flight += 1
        self._in_flight_by[client] += 1

    def _release(self, client: str) -> None:
        self._in_flight -= 1
        self._in_flight_by[client] -= 1
        if self._in_flight_by[client] <= 0:
            del self._in_flight_by[client]
        waiting = list(self._slot_waiters)  # in turn: an address served goes to the back
        under_share = [a for a in waiting if self._in_flight_by[a] < self.limits.requests_per_address]
        for address in under_share or waiting[:1]:  # nobody under its share: the slot is not left idle
            queue = self._slot_waiters.pop(address)
            waiter = queue.popleft()
            if queue:
                self._slot_waiters[address] = queue
            self._take(address)
            waiter.set_result(True)
            return

    def _unqueue(self, client: str, waiter: asyncio.Future[bool]) -> None:
        waiter.cancel()
        queue = self._slot_waiters.get(client)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._slot_waiters[client]

    def _wake_waiters_inline(self) -> None:
        waiting, self._slot_waiters = self._slot_waiters, {}
        for queue in waiting.values():
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(False)

    async def _authorize(self, auth: BasicAuth, request: Request) -> Response | None:
        """None when the request may go on; else the 401 or 429 to answer. bcrypt runs on the auth pool, never
        for an address past its failure limit; a pair verified before needs none, and passes whatever the limit."""
        loop = asyncio.get_running_loop()
        client = request.client
        # The cache of verified pairs first: the failure limit gates bcrypt work, never a pair verified before.
        verdict, credentials = auth.quick(request.headers.get("authorization"))
        if verdict is Verdict.NEEDS_BCRYPT and credentials is not None:
            wait = self._auth_wait(client, loop.time())
            if wait > 0:
                self._note("auth_locked", client=client)
                return Response(429, b"Too Many Requests\n", headers=(("Retry-After", str(math.ceil(wait))),))
            if self._auth_pending[client] >= AUTH_PENDING_PER_ADDRESS:
                self._note("auth_throttled", client=client)
                return Response(429, b"Too Many Requests\n", headers=(("Retry-After", "1"),))
            self._auth_pending[client] += 1
            self.counters.bcrypt_checked()
            try:
                ok = await loop.run_in_executor(self._auth_pool, auth.verify, credentials)
            except Exception as exc:  # bcrypt refusing what it was given: a failed check, never a 500
                log.error("http_auth_check_failed", error=repr(exc))
                ok = False
            finally:
                self._auth_pending[client] -= 1
                if not self._auth_pending[client]:
                    del self._auth_pending[client]
            if not ok:
                self._auth_failed(client, loop.time())
            verdict = Verdict.ALLOWED if ok else Verdict.DENIED
        if verdict is Verdict.ALLOWED:
            return None
        self.counters.auth_failed()
        self._note("auth_failed", client=client, credentials=credentials is not None)
        return Response(401, b"Unauthorized\n", headers=(("WWW-Authenticate", 'Basic realm="rocm-watchdog"'),))

    def _auth_level(self, client: str, now: float) -> float:
        """The address's failures not leaked away yet."""
        level, at = self._auth_buckets.get(client, (0.0, now))
        return max(0.0, level - (now - at) * AUTH_FAILURES_PER_ADDRESS / AUTH_FAILURE_WINDOW_SECONDS)

    def _auth_wait(self, client: str, now: float) -> float:
        """Seconds until ``client`` may have its credentials checked again (until one more failure fits in its
        bucket); 0: now."""
        excess = self._auth_level(client, now) - (AUTH_FAILURES_PER_ADDRESS - 1)
        return max(0.0, excess) * AUTH_FAILURE_WINDOW_SECONDS / AUTH_FAILURES_PER_ADDRESS

    def _auth_failed(self, client: str, now: float) -> None:
        if client not in self._auth_buckets and len(self._auth_buckets) >= AUTH_TRACKED_ADDRESSES:
            emptiest = min(self._auth_buckets, key=lambda c: self._auth_level(c, now))
            del self._auth_buckets[emptiest]
        self._auth_buckets[client] = (self._auth_level(client, now) + 1, now)
        self._untidy.set()

    def _timed(self, request: Request) -> tuple[Response, float]:
        start = time.perf_counter()
        response = self._handler(request)
        return response, time.perf_counter() - start

    def _run_inline(self, heavy: bool, request: Request) -> Response:
        """The handler on the loop itself: for a handler that has been answering in microseconds (the cached
        exposition), a thread hand-off costs more than the work and, under a burst, queues requests that then
        count against ``max_requests``. One slow or failing run sends it back to the workers."""
        start = time.perf_counter()
        try:
            response = self._handler(request)
        except Exception as exc:
            self._fast_runs[heavy] = 0
            log.error("http_handler_failed", path=request.path, error=repr(exc))
            return Response(500, b"Internal Server Error\n")
        if time.perf_counter() - start >= INLINE_BELOW_SECONDS:
            self._fast_runs[heavy] = 0
        return response

    def _http_date(self) -> str:
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        return self._date[1]

    async def _write(
        self, writer: asyncio.StreamWriter, request: Request | None, response: Response, keep: bool
    ) -> None:
        self.counters.answered(response.status)
        body = response.body
        lines = [
            f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}",
            f"Date: {self._http_date()}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(body)}",
        ]
        lines.extend(f"{name}: {value}" for name, value in response.headers + self._extra_headers)
        if not keep:
            lines.append("Connection: close")
        elif request is not None and request.version == "HTTP/1.0":
            lines.append("Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if request is not None and request.method == "HEAD":
            body = b""
        if len(body) <= CHUNK_BYTES:
            writer.write(head + body)
        else:
            writer.write(head)
            view = memoryview(body)
            for start in range(0, len(view), CHUNK_BYTES):
                writer.write(view[start : start + CHUNK_BYTES])
                await writer.drain()
        await writer.drain()
