"""An HTTP/1.1 server for a metrics endpoint that no single client can starve.

One asyncio loop in its own thread accepts, reads request heads, checks auth and writes responses; handlers
(rendering, readiness) run on a small pool of worker threads, bcrypt on another, so neither a slow client nor
a slow handler ever holds the accept loop. The rules, all enforced by the loop:

- **Accept always.** The kernel's listen queue (``backlog``, up to somaxconn) is drained as fast as
  connections come, so a burst of scrapers never waits for a SYN retransmit; what is over a limit is closed
  right after accept, not left in the queue.
- **Whole-head deadline.** A connection has ``header_timeout`` from accept for its TLS handshake and its
  whole first request head, and the same from the first byte of each later request: not per read, so one
  byte a second buys nothing. Between requests a keep-alive connection may idle for ``idle_timeout``; it
  costs a socket and no thread.
- **Fair share of connections.** At most ``max_connections`` open; no client address (an IPv6 /64 counts as
  one) holds more than half of them. When the server is full, a newcomer displaces an idle or still-sending-
  its-head connection of the address holding the most (idle before slow, oldest first), unless the newcomer's
  own address would then hold as many; connections being answered are never displaced.
- **Fair share of work.** Requests to ``limited_paths`` (``/metrics``) in flight, waiting for a worker or
  running, are capped by ``max_requests`` (node_exporter's ``--web.max-requests``: 503 past it after a grace
  of 0.1 s for a slot, 0 for no limit), and one address gets at most half of them. Writing the cached bytes
  out is not work: it is bounded by ``write_timeout`` and by one chunk of buffer per connection. A handler
  that keeps answering in under a millisecond (bytes from the exposition cache) runs on the loop instead, one
  request at a time, so a burst of scrapers never queues for workers; one slow run sends it back to them.
- **Auth right after the head**, before any handler; a pair bcrypt verified once is answered from memory, the
  rest wait for the bcrypt pool, at most ``AUTH_PENDING_PER_ADDRESS`` per address (429 beyond).
- **Client faults are counted, not thrown.** Each kind (timeouts, malformed requests, TLS failures,
  refusals) is counted in ``stats()`` and logged at most once a minute per kind, never with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from enum import Enum
from http import HTTPStatus
from typing import Any

from exporter.logging import get_logger
from exporter.server.auth import BasicAuth, Verdict

log = get_logger("http")

# A response is written this much at a time, each handed to the kernel before the next: the most a connection
# buffers in this process (256 KiB x max_connections at worst, with every client reading slowly). 64 KiB halved
# the throughput of 1.4 MB bodies at 100 connections (more loop turns per byte); 1 MiB gained nothing more.
CHUNK_BYTES = 256 * 1024
AUTH_PENDING_PER_ADDRESS = 2
# A handler that answered this fast this many times in a row on a worker runs on the loop from then on, until
# one run is slower (see HttpServer._run_inline).
INLINE_BELOW_SECONDS = 0.001
INLINE_AFTER_FAST_RUNS = 8
# Past max_requests a request waits this long for a slot before its 503: a burst of scrapers arriving together
# (100 at once, before the first is answered) is served, a sustained overload is still refused.
MAX_REQUESTS_GRACE_SECONDS = 0.1
LOG_EVERY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
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


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    version: str  # HTTP/1.0 or HTTP/1.1
    headers: Mapping[str, str]  # lower-case names; repeated headers joined with ", "
    client: str  # the address key fair shares are counted by
    has_body: bool = False


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Response]


class _State(Enum):
    HANDSHAKE = "handshake"
    HEAD = "head"
    IDLE = "idle"
    BUSY = "busy"


class _Conn:
    __slots__ = ("client", "evicted", "since", "state", "task")

    def __init__(self, client: str, now: float) -> None:
        self.client = client
        self.state = _State.HEAD
        self.since = now
        self.evicted = False
        self.task: asyncio.Task[None] | None = None


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
        self._errors: Counter[str] = Counter()
        self._fast_runs = {True: 0, False: 0}  # limited paths or not -> handler runs under 1 ms in a row
        self._slot_waiters: list[asyncio.Future[None]] = []  # requests waiting out MAX_REQUESTS_GRACE_SECONDS
        self._logged: dict[str, tuple[float, int]] = {}  # kind -> (last logged at, count then)
        self._date = (0, "")
        self._workers = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="http-worker")
        # Everything but limited_paths (/healthz, /, 404s): cheap, and never queued behind slow scrapes.
        self._light = ThreadPoolExecutor(1, thread_name_prefix="http-light")
        self._auth_pool = ThreadPoolExecutor(self.limits.auth_workers, thread_name_prefix="http-auth")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
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

    def stats(self) -> dict[str, Any]:
        """Open connections by state, requests in flight, client errors by kind (for health metrics)."""
        states = Counter(c.state.value for conns in list(self._conns.values()) for c in list(conns))
        return {
            "connections": self._open,
            "connections_by_state": dict(states),
            "addresses": len(self._conns),
            "requests_in_flight": self._in_flight,
            "client_errors": dict(self._errors),
        }

    # --- the loop ---------------------------------------------------------------------------------------

    def _run(self) -> None:
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
        self._ready.set()
        await self._stop.wait()
        for task in accepters:
            task.cancel()
        tasks = [c.task for conns in self._conns.values() for c in conns if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*accepters, *tasks, return_exceptions=True)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, (OSError, asyncio.CancelledError)):  # a client's connection went wrong
            self._note("transport_error")
            return
        log.error("http_loop_error", message=context.get("message"), error=repr(exc))

    def _note(self, kind: str) -> None:
        """Count a client fault; log it once, then at most once a minute per kind with the count since."""
        self._errors[kind] += 1
        now = time.monotonic()
        last_at, last_count = self._logged.get(kind, (-LOG_EVERY_SECONDS, 0))
        if now - last_at >= LOG_EVERY_SECONDS:
            self._logged[kind] = (now, self._errors[kind])
            log.info("http_client_error", kind=kind, count=self._errors[kind] - last_count)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:
                # Out of fds or memory: count it and back off a little instead of spinning on the listener.
                self._note(f"accept_failed_{exc.errno}")
                await asyncio.sleep(0.1)
                continue
            if self._on_accept is not None:
                self._on_accept()
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                # asyncio sets this only for sockets whose proto says TCP, which an accepted socket of a
                # listener made without one (or passed by systemd) does not: Nagle would then hold the tail
                # of a response for the client's delayed ACK, 40 ms.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._admit(sock, client_key(sock.family, peer))

    def _admit(self, sock: socket.socket, client: str) -> None:
        limits = self.limits
        held = len(self._conns.get(client, ()))
        if held >= limits.connections_per_address:
            self._refuse(sock, "refused_address_share")
            return
        if self._open >= limits.max_connections and not self._evict_for(client, held):
            self._refuse(sock, "refused_full")
            return
        loop = asyncio.get_running_loop()
        conn = _Conn(client, loop.time())
        self._conns.setdefault(client, set()).add(conn)
        self._open += 1
        conn.task = loop.create_task(self._serve(conn, sock))

    def _refuse(self, sock: socket.socket, kind: str) -> None:
        self._note(kind)
        if self._ssl is None:  # plain HTTP: say why, best effort, without waiting
            with contextlib.suppress(OSError):
                sock.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        sock.close()

    def _evict_for(self, client: str, held: int) -> bool:
        """Make room for ``client`` (holding ``held``) by dropping an idle, then a slow, connection of the
        address holding the most; False when that would only move the excess to ``client``."""
        for other, conns in sorted(self._conns.items(), key=lambda item: len(item[1]), reverse=True):
            if other != client and len(conns) <= held + 1:
                return False
            evictable = [c for c in conns if c.state is not _State.BUSY and not c.evicted]
            if not evictable:
                continue
            victim = min(evictable, key=lambda c: (c.state is not _State.IDLE, c.since))
            victim.evicted = True
            self._forget(victim)
            if victim.task is not None:
                victim.task.cancel()
            self._note("evicted_" + victim.state.value)
            return True
        return False

    def _forget(self, conn: _Conn) -> None:
        conns = self._conns.get(conn.client)
        if conns is not None and conn in conns:
            conns.discard(conn)
            self._open -= 1
            if not conns:
                del self._conns[conn.client]

    def _set(self, conn: _Conn, state: _State) -> None:
        conn.state = state
        conn.since = asyncio.get_running_loop().time()

    # --- one connection ---------------------------------------------------------------------------------

    async def _serve(self, conn: _Conn, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        limits = self.limits
        deadline = loop.time() + limits.header_timeout_seconds
        writer: asyncio.StreamWriter | None = None
        clean = False
        try:
            reader = asyncio.StreamReader(limit=limits.max_head_bytes)
            protocol = asyncio.StreamReaderProtocol(reader)
            if self._ssl is not None:
                self._set(conn, _State.HANDSHAKE)
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=self._ssl, ssl_handshake_timeout=max(0.1, deadline - loop.time())
                )
            else:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            transport.set_write_buffer_limits(high=0)  # drain() waits until the kernel took every byte
            first = b""
            while True:
                self._set(conn, _State.HEAD)
                head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), max(0.0, deadline - loop.time()))
                self._set(conn, _State.BUSY)
                try:
                    request = parse_head(head, conn.client)
                except _BadRequest as bad:
                    self._note(bad.kind)
                    response = Response(bad.status, HTTPStatus(bad.status).phrase.encode() + b"\n")
                    await asyncio.wait_for(self._write(writer, None, response, False), limits.write_timeout_seconds)
                    clean = True
                    return
                response = await self._respond(request)
                keep = _wants_keep_alive(request) and not request.has_body and response.status < 500
                keep = keep and self._stop is not None and not self._stop.is_set()
                await asyncio.wait_for(self._write(writer, request, response, keep), limits.write_timeout_seconds)
                if not keep:
                    clean = True
                    return
                self._set(conn, _State.IDLE)
                first = await asyncio.wait_for(reader.readexactly(1), limits.idle_timeout_seconds)
                deadline = loop.time() + limits.header_timeout_seconds
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self._note("incomplete_request")
            else:
                clean = True  # closed between requests, or a TCP probe that sends nothing
        except asyncio.TimeoutError:
            kinds = {_State.HANDSHAKE: "tls_handshake_timeout", _State.HEAD: "header_timeout"}
            self._note(kinds.get(conn.state, "idle_timeout" if conn.state is _State.IDLE else "write_timeout"))
        except asyncio.LimitOverrunError:
            self._note("request_head_too_large")
            if writer is not None:
                with contextlib.suppress(Exception):
                    response = Response(431, b"Request Header Fields Too Large\n")
                    await asyncio.wait_for(self._write(writer, None, response, False), 1.0)
        except asyncio.CancelledError:
            pass  # displaced by a newcomer (counted there) or the server stopping
        except OSError as exc:  # ssl.SSLError too; a handshake past its deadline is a ConnectionAbortedError
            if conn.state is _State.HANDSHAKE:
                self._note("tls_handshake_failed")
            else:
                self._note("tls_error" if isinstance(exc, ssl.SSLError) else "connection_error")
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
        if self._auth is not None:
            verdict, credentials = self._auth.quick(request.headers.get("authorization"))
            if verdict is Verdict.NEEDS_BCRYPT and credentials is not None:
                if self._auth_pending[client] >= AUTH_PENDING_PER_ADDRESS:
                    self._note("auth_throttled")
                    return Response(429, b"Too Many Requests\n", headers=(("Retry-After", "1"),))
                self._auth_pending[client] += 1
                try:
                    ok = await loop.run_in_executor(self._auth_pool, self._auth.verify, credentials)
                finally:
                    self._auth_pending[client] -= 1
                    if not self._auth_pending[client]:
                        del self._auth_pending[client]
                verdict = Verdict.ALLOWED if ok else Verdict.DENIED
            if verdict is not Verdict.ALLOWED:
                self._note("auth_failed")
                return Response(401, b"Unauthorized\n", headers=(("WWW-Authenticate", 'Basic realm="rocm-watchdog"'),))
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"Method Not Allowed\n", headers=(("Allow", "GET, HEAD"),))
        heavy = request.path in self.limits.limited_paths
        limited = heavy and self.limits.max_requests > 0
        give_up = loop.time() + MAX_REQUESTS_GRACE_SECONDS
        while True:
            if self._fast_runs[heavy] >= INLINE_AFTER_FAST_RUNS:
                return self._run_inline(heavy, request)
            if not limited or (
                self._in_flight < self.limits.max_requests
                and self._in_flight_by[client] < self.limits.requests_per_address
            ):
                break
            if loop.time() >= give_up:
                self._note("max_requests")
                text = f"Limit of concurrent requests reached ({self.limits.max_requests}), try again later.\n"
                return Response(503, text.encode())
            waiter = loop.create_future()
            self._slot_waiters.append(waiter)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiter, max(0.0, give_up - loop.time()))
        if limited:
            self._in_flight += 1
            self._in_flight_by[client] += 1
        pool = self._workers if heavy else self._light
        try:
            response, seconds = await loop.run_in_executor(pool, self._timed, request)
            self._fast_runs[heavy] = self._fast_runs[heavy] + 1 if seconds < INLINE_BELOW_SECONDS else 0
            return response
        except Exception as exc:  # the handler's fault, not the client's: say so once in the log
            self._fast_runs[heavy] = 0
            log.error("http_handler_failed", path=request.path, error=repr(exc))
            return Response(500, b"Internal Server Error\n")
        finally:
            if limited:
                self._in_flight -= 1
                self._in_flight_by[client] -= 1
                if not self._in_flight_by[client]:
                    del self._in_flight_by[client]
                waiters, self._slot_waiters = self._slot_waiters, []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

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
