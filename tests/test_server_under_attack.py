"""``rocm-watchdog serve`` under attack, as a real process on loopback (issue 11): a slowloris of 1000 connections,
bursts of 1000 GETs, TLS and HTTP garbage, 16 clients guessing passwords. Every scrape of a normal scraper on
127.0.0.1 must be answered 200 meanwhile; the server says what it did in its metrics and in one log line per kind
of client fault, never a traceback.

The exporter runs with the open-file limit a systemd service gets (1024) on an 8-GPU fake host; the attackers
come from other loopback addresses (127.0.0.2 and up: any 127/8 address is loopback on Linux), so the fair share
per address is exercised too. This process holds the attackers' sockets (its own limit raised to the hard one).

The latencies are printed, not asserted (a shared 2-CPU machine): ``pytest -s`` shows them, and when
``ROCM_WATCHDOG_RELIABILITY_OUT`` names a file each test appends its figures there as one JSON line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from fakeroot import FakeOther, build_root, capture_gpus

from exporter.metrics.exposition import VOLATILE_SECONDS

PROJECT = Path(__file__).resolve().parents[1]
NOFILE = 1024  # systemd's default soft limit for a service
CLIENT_NOFILE = 8192  # this process's: the attackers' 1000 sockets and more, bounded
SCRAPER = "127.0.0.1"
HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "  # what a slowloris dribbles, then a header that never ends


# --- the exporter -------------------------------------------------------------------------------------------


@dataclass
class Exporter:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    tls: ssl.SSLContext | None = None  # the client side, when serving TLS

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def metrics(self, headers: dict[str, str] | None = None) -> str:
        status, body = asyncio.run(fetch(self.port, "/metrics", headers=headers, tls=self.tls))
        assert status == 200
        return body.decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _limit_files() -> None:  # in the child, before exec
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(NOFILE, hard), hard))


def start_exporter(base: Path, *extra: str) -> Exporter:
    root = build_root(base, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc()], cpu_nodes=2)
    (root.root / "kern.log").write_text("")
    log = base / "serve.log"
    argv = [
        sys.executable, "-m", "exporter", "serve", "--web.listen-address=127.0.0.1:0",
        f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}", f"--kernel-log.path={root.root / 'kern.log'}",
        "--no-collector.rocm-smi", "--no-collector.amd-smi", "--log.format=json", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env=env, cwd=PROJECT, preexec_fn=_limit_files)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for line in log.read_text(errors="replace").splitlines():
            if '"serving"' in line and line.endswith("}"):  # a whole line, not one being written
                return Exporter(proc, int(json.loads(line)["port"]), log)
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=10)
    pytest.fail(f"serve did not start (exit {proc.poll()}):\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module", autouse=True)
def _many_files() -> Iterator[None]:
    """This process holds a thousand attacking sockets (the exporter keeps systemd's 1024: 512 connections, a lobby
    of 128 and its own files fit in it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 4096, f"the hard open-file limit ({hard}) is too low to hold the attackers"
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, CLIENT_NOFILE), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    running = start_exporter(tmp_path_factory.mktemp("attack"))
    try:
        yield running
    finally:
        running.stop()


# --- clients ------------------------------------------------------------------------------------------------


async def fetch(
    port: int,
    path: str = "/metrics",
    source: str = SCRAPER,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """One GET on a new connection (``Connection: close``): status and body."""
    sock = socket.socket()
    sock.setblocking(False)
    sock.bind((source, 0))
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)), timeout)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(sock=sock, ssl=tls, server_hostname="127.0.0.1" if tls else None), timeout
        )
    except BaseException:
        sock.close()
        raise
    try:
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n".encode())
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 "):
        raise ConnectionError(f"no HTTP answer: {data[:40]!r}")
    return int(head[9:12]), body


@dataclass
class Scrapes:
    """What a scraper saw: the latency of each answered scrape and every failure (a status not 200 included)."""

    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    reconnects: int = 0  # keep-alive connections found closed before a scrape was sent (a client retries those)

    def figures(self) -> dict[str, Any]:
        ms = sorted(self.latencies_ms)

        def at(q: float) -> float:
            return round(ms[min(len(ms) - 1, int(q * len(ms)))], 1) if ms else float("nan")

        return {"scrapes": len(ms) + len(self.failures), "failed": len(self.failures), "p50_ms": at(0.5),
                "p99_ms": at(0.99), "max_ms": round(ms[-1], 1) if ms else None}  # fmt: skip


async def scrape_closing(port: int, stop: asyncio.Event, out: Scrapes, every: float = 0.25) -> None:
    """A scraper that opens a connection per scrape."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        try:
            status, _ = await fetch(port)
            if status == 200:
                out.latencies_ms.append((loop.time() - start) * 1e3)
            else:
                out.failures.append(f"status {status}")
        except (OSError, asyncio.TimeoutError) as exc:
            out.failures.append(repr(exc))
        await asyncio.sleep(max(0.0, every - (loop.time() - start)))


async def _keep_alive_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> int:
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    await asyncio.wait_for(reader.readexactly(length), timeout)
    return int(head[9:12])


async def scrape_keeping_alive(port: int, stop: asyncio.Event, out: Scrapes, every: float = 0.5) -> None:
    """A scraper like Prometheus: one keep-alive connection, gzip. As Go's HTTP client does for a GET, a connection
    that turns out closed before any byte of the answer came is replaced and the scrape sent again, once."""
    loop = asyncio.get_running_loop()
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while not stop.is_set():
        start = loop.time()
        for attempt in (1, 2):
            reused = conn is not None
            try:
                if conn is None:
                    conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
                status = await _keep_alive_get(*conn, timeout=5)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                if conn is not None:
                    conn[1].close()
                conn = None
                if attempt == 1 and reused and not isinstance(exc, asyncio.TimeoutError):
                    out.reconnects += 1
                    continue
                out.failures.append(repr(exc))
                break
            if status == 200:
                out.latencies_ms.append((loop.time() - start) * 1e3)
            else:
                out.failures.append(f"status {status}")
            break
        await asyncio.sleep(max(0.0, every - (loop.time() - start)))
    if conn is not None:
        conn[1].close()


async def slowloris(port: int, plan: list[tuple[str, int]], seconds: float) -> dict[str, Any]:
    """Hold ``count`` connections from each source address, each sending one byte of a request head a second;
    a connection the server closes (or answers) is opened again at once, so the attack keeps its size."""
    loop = asyncio.get_running_loop()
    held: dict[socket.socket, tuple[str, int]] = {}  # socket -> (source, bytes sent)
    stats = Counter[str]()

    async def connect(source: str) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.bind((source, 0))
            await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 3)
        except (OSError, asyncio.TimeoutError):
            stats["connect_failed"] += 1
            sock.close()
            return
        stats["connections"] += 1
        held[sock] = (source, 0)

    await asyncio.gather(*(connect(source) for source, count in plan for _ in range(count)))
    stop_at = loop.time() + seconds
    most = len(held)
    while loop.time() < stop_at:
        tick = loop.time()
        lost: list[str] = []
        for sock, (source, sent) in list(held.items()):
            try:
                sock.recv(4096, socket.MSG_DONTWAIT | socket.MSG_PEEK)  # bytes (a 503) or EOF: the server is done
            except BlockingIOError:  # nothing to read: still open, one more byte of the head
                with contextlib.suppress(OSError):
                    sock.send(HEAD[sent : sent + 1] or b"a")
                    held[sock] = (source, sent + 1)
                    continue
            except OSError:  # reset
                pass
            del held[sock]
            sock.close()
            stats["closed_by_server"] += 1
            lost.append(source)
        await asyncio.gather(*(connect(source) for source in lost))
        most = max(most, len(held))
        await asyncio.sleep(max(0.0, 1.0 - (loop.time() - tick)))
    for sock in held:
        sock.close()
    return {**stats, "most_held_by_attacker": most}


async def burst(port: int, sources: list[str], timeout: float = 30.0) -> dict[str, Any]:
    """One GET per source entry, all at once (each connects and sends at once); how each ended, how long it took."""
    loop = asyncio.get_running_loop()

    async def get(source: str) -> str:
        sock = socket.socket()
        sock.setblocking(False)
        first = b""
        try:
            sock.bind((source, 0))
            await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), timeout)
            await loop.sock_sendall(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            first = await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout)
            while await asyncio.wait_for(loop.sock_recv(sock, 262144), timeout):
                pass
            return first[9:12].decode() or "closed"
        except asyncio.TimeoutError:
            return "timeout"
        except OSError as exc:
            # A 503 refusal (a whole answer: no body) may be followed by a reset, when the server closed before
            # the request reached it; the answer came all the same.
            return first[9:12].decode() if first.startswith(b"HTTP/1.1 503 ") else type(exc).__name__
        finally:
            sock.close()

    start = loop.time()
    results = await asyncio.gather(*(get(source) for source in sources))
    return {"gets": len(sources), "outcomes": dict(Counter(results)), "seconds": round(loop.time() - start, 2)}


async def under_attack(port: int, attack: Any, warm_up: float = 1.0) -> tuple[Any, Scrapes, Scrapes]:
    """Run ``attack`` (a coroutine) while a closing and a keep-alive scraper scrape."""
    stop = asyncio.Event()
    closing, keeping = Scrapes(), Scrapes()
    scrapers = [
        asyncio.create_task(scrape_closing(port, stop, closing)),
        asyncio.create_task(scrape_keeping_alive(port, stop, keeping)),
    ]
    await asyncio.sleep(warm_up)
    try:
        result = await attack
    finally:
        stop.set()
        await asyncio.gather(*scrapers)
    return result, closing, keeping


def report(name: str, figures: dict[str, Any]) -> None:
    line = json.dumps({"test": name, **figures}, sort_keys=True)
    print(f"\n{line}")
    out = os.environ.get("ROCM_WATCHDOG_RELIABILITY_OUT")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def samples(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one family in exposition text (labels as written, "" for none)."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            found[key[len(name) :]] = float(value)
    return found


def client_error_lines(lines: list[str]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for line in lines:
        event = json.loads(line)
        if event.get("event") == "http_client_error":
            kinds[event["kind"]] += 1
    return kinds


def assert_one_line_each(lines: list[str]) -> None:
    """Every line of the log is one JSON object and none carries a traceback."""
    for line in lines:
        assert "Traceback" not in line and "Exception in" not in line, line
        assert line.startswith("{"), f"not a JSON log line: {line!r}"
        json.loads(line)


# --- the attacks --------------------------------------------------------------------------------------------


def test_every_scrape_is_answered_through_a_slowloris_of_1000_connections(exporter: Exporter) -> None:
    """1000 connections dribbling a head a byte a second from 127.0.0.2-9 (400 of them from 127.0.0.2, more than
    its share of 256), opened again as soon as the server drops them, for 20 s: past the 10 s head deadline once.
    The first scrape after the attack began waits up to 1 s (SLOW_AFTER_SECONDS): until then the server is full of
    heads just begun, which it does not displace."""
    plan = [("127.0.0.2", 400)] + [(f"127.0.0.{n}", 86 if n < 8 else 85) for n in range(3, 10)]
    assert sum(count for _, count in plan) == 1000
    start = time.monotonic()
    attack, closing, keeping = asyncio.run(under_attack(exporter.port, slowloris(exporter.port, plan, 20.0)))
    seconds = time.monotonic() - start
    report(
        "slowloris_1000",
        {"attack": attack, "scraper_closing": closing.figures(), "scraper_keep_alive": keeping.figures(),
         "keep_alive_reconnects": keeping.reconnects},
    )  # fmt: skip
    assert not closing.failures and not keeping.failures, (closing.failures, keeping.failures)
    assert len(closing.latencies_ms) >= 40 and len(keeping.latencies_ms) >= 20
    assert attack["most_held_by_attacker"] >= 990  # the attack really held its 1000 (bar those just dropped)
    dropped = samples(exporter.metrics(), "rocm_watchdog_http_connections_dropped_total")
    # Displaced as slow heads (an address once slow has its heads just begun displaced too, after the slow ones) or
    # dropped at the head deadline, which the rotation of displacements mostly beats; refused past the share.
    for reason in ("refused_address_share", "evicted_head"):
        assert dropped[f'{{reason="{reason}"}}'] > 0, dropped
    assert dropped['{reason="evicted_head"}'] + dropped['{reason="header_timeout"}'] >= 5000, dropped
    lines = exporter.log_lines()
    assert_one_line_each(lines)
    # thousands of drops, a line for the first of each kind (and one a minute after)
    for kind, count in client_error_lines(lines).items():
        assert count <= 2 + seconds / 60, (kind, count)


def test_every_scrape_is_answered_through_bursts_of_1000_gets(exporter: Exporter) -> None:
    """1000 GETs at once from one address (past its share of 256 connections), then 1000 from 100 addresses."""

    async def bursts() -> dict[str, Any]:
        one = await burst(exporter.port, ["127.0.0.10"] * 1000)
        many = await burst(exporter.port, [f"127.0.1.{1 + n % 100}" for n in range(1000)])
        return {"one_address": one, "hundred_addresses": many}

    result, closing, keeping = asyncio.run(under_attack(exporter.port, bursts()))
    scrapers = {"scraper_closing": closing.figures(), "scraper_keep_alive": keeping.figures()}
    report("bursts_of_1000_gets", {**result, **scrapers})
    assert not closing.failures and not keeping.failures, (closing.failures, keeping.failures)
    for outcome in result.values():
        # every GET is answered: 200, or 503 past the address's fair share; a full server leaves the rest in its
        # listen queue until it has room, never closing one unanswered (before: 588 of 1000 closed in 0.1 s)
        assert set(outcome["outcomes"]) <= {"200", "503"}, outcome
    # from 100 addresses none is over its share: every one is served
    many = result["hundred_addresses"]
    assert many["outcomes"] == {"200": many["gets"]}, many
    one = result["one_address"]  # at most its share (256) open at a time, the rest refused at once
    assert one["outcomes"].get("200", 0) >= 256, one
    assert_one_line_each(exporter.log_lines())


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) not installed")
def test_the_listen_backlog_holds_a_burst(exporter: Exporter) -> None:
    """The old server listened with a backlog of 5: bursts of scrapers waited for 1 s SYN retransmits. ``ss`` shows
    a listening socket's backlog as its Send-Q: 1024, or the kernel's cap (net.core.somaxconn) when lower."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{exporter.port}"], capture_output=True, text=True, timeout=10, check=True
    ).stdout.split()
    cap = int(Path("/proc/sys/net/core/somaxconn").read_text())
    assert out[0] == "LISTEN" and int(out[2]) == min(1024, cap), out


def make_cert(directory: Path) -> tuple[Path, Path]:
    key, cert = directory / "server.key", directory / "server.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return key, cert


CLIENT_FAULTS = (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError)
LINGER_RESET = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends a reset


async def tls_faults(port: int, client: ssl.SSLContext) -> dict[str, int]:
    """What scanners, broken clients and attackers do to a TLS port, 40 of each, from 127.0.0.3; then 10 each of
    two kinds that only the head deadline ends (TCP that never speaks, a ClientHello cut short). Returns how many
    of each were made; raises if one of the last two was not closed by the server within 15 s."""
    loop = asyncio.get_running_loop()
    half_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a TLS record header, half a ClientHello

    async def connect() -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind(("127.0.0.3", 0))
        await loop.sock_connect(sock, ("127.0.0.1", port))
        return sock

    async def raw(payload: bytes, reset: bool = False) -> None:
        sock = await connect()
        try:
            if payload:
                await loop.sock_sendall(sock, payload)
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
                return
            with contextlib.suppress(*CLIENT_FAULTS):
                await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
        finally:
            sock.close()

    async def until_closed(payload: bytes) -> None:
        sock = await connect()
        try:
            await loop.sock_sendall(sock, payload)
            with contextlib.suppress(ConnectionError):
                while await asyncio.wait_for(loop.sock_recv(sock, 4096), 15):
                    pass
        finally:
            sock.close()

    async def tls_then(payload: bytes, reset: bool) -> None:
        sock = await connect()
        reader, writer = await asyncio.open_connection(sock=sock, ssl=client, server_hostname="127.0.0.1")
        writer.write(payload)
        await writer.drain()
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            writer.transport.abort()
            return
        with contextlib.suppress(*CLIENT_FAULTS):
            await asyncio.wait_for(reader.read(), 5)
        writer.close()

    made = {
        "plain_http": 40, "garbage": 40, "reset_before_handshake": 40, "bad_request_over_tls": 40,
        "reset_mid_head": 40, "silent_tcp": 10, "half_client_hello": 10,
    }  # fmt: skip
    await asyncio.gather(*(raw(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") for _ in range(40)))
    await asyncio.gather(*(raw(os.urandom(64)) for _ in range(40)))
    await asyncio.gather(*(raw(b"", reset=True) for _ in range(40)))
    await asyncio.gather(*(tls_then(b"GARBAGE\r\n\r\n", reset=False) for _ in range(40)))
    await asyncio.gather(*(tls_then(b"GET /metrics HTTP/1.1\r\nHo", reset=True) for _ in range(40)))
    await asyncio.gather(*(until_closed(b"") for _ in range(10)), *(until_closed(half_hello) for _ in range(10)))
    return made


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_tls_and_http_garbage_are_one_log_line_per_kind_and_never_a_traceback(tmp_path: Path) -> None:
    """The issue: each failed TLS handshake or idle timeout wrote about 20 lines of traceback. Now 250 faults of
    seven kinds, with valid HTTPS scrapes between them: each scrape 200, each kind one line, every line JSON."""
    key, cert = make_cert(tmp_path)
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    running = start_exporter(tmp_path, f"--web.config.file={tmp_path / 'web.yml'}")
    client = ssl.create_default_context(cafile=str(cert))
    running.tls = client
    try:

        async def scraped_through_faults() -> tuple[dict[str, int], Scrapes]:
            stop, scrapes = asyncio.Event(), Scrapes()
            loop = asyncio.get_running_loop()

            async def scrape() -> None:
                while not stop.is_set():
                    start = loop.time()
                    try:
                        status, _ = await fetch(running.port, tls=client)
                        if status == 200:
                            scrapes.latencies_ms.append((loop.time() - start) * 1e3)
                        else:
                            scrapes.failures.append(f"status {status}")
                    except (OSError, asyncio.TimeoutError) as exc:
                        scrapes.failures.append(repr(exc))
                    await asyncio.sleep(max(0.0, 0.25 - (loop.time() - start)))

            task = asyncio.create_task(scrape())
            try:
                faults = await tls_faults(running.port, client)
            finally:
                stop.set()
                await task
            return faults, scrapes

        faults, scrapes = asyncio.run(scraped_through_faults())
        time.sleep(VOLATILE_SECONDS + 0.1)  # the HTTP counters are rendered at most once per VOLATILE_SECONDS
        text = running.metrics()
    finally:
        running.stop()
    report("tls_faults", {"faults": faults, "scraper_https": scrapes.figures()})
    assert not scrapes.failures, scrapes.failures
    dropped = samples(text, "rocm_watchdog_http_connections_dropped_total")
    assert dropped['{reason="tls_handshake_failed"}'] >= 120  # plain HTTP, garbage, resets before the handshake
    assert dropped['{reason="bad_request"}'] >= 40
    assert dropped['{reason="connection_reset"}'] >= 40
    assert dropped['{reason="header_timeout"}'] >= 20  # silent TCP and half a ClientHello, at the 10 s deadline
    lines = running.log_lines()
    assert_one_line_each(lines)
    kinds = client_error_lines(lines)
    assert {"tls_handshake_failed", "bad_request", "connection_reset", "header_timeout"} <= set(kinds), kinds
    assert all(count <= 2 for count in kinds.values()), kinds  # the first, and the rest counted at shutdown


AUTH_FAILURES_PER_ADDRESS = 10  # exporter.server.core's limiter: a burst of 10 failed checks per address ...
AUTH_LEAK_SECONDS = 6.0  # ... then one more every 6 s (10 per 60 s window)
GUESSERS_DEADLINE_SECONDS = 120.0  # a failure guard only: each guesser stops at its 20th 429


@dataclass
class Guesser:
    source: str
    answers: list[int] = field(default_factory=list)  # status of each guess, in order
    seconds: float = 0.0  # from before its first guess to after its last answer
    errors: list[str] = field(default_factory=list)

    def check_limiter(self) -> None:
        """What the limiter decided for this address, whatever the timing: the first 10 guesses were checked (401),
        and after them at most one more per 6 s it guessed for (the bucket leaks; its bcrypt count is bounded by
        its own span, measured around the server's), every other guess a 429."""
        assert not self.errors, (self.source, self.errors)
        assert set(self.answers) <= {401, 429}, (self.source, self.answers)
        first_429 = self.answers.index(429)
        assert first_429 >= AUTH_FAILURES_PER_ADDRESS, (self.source, self.answers)
        checked = self.answers.count(401)
        assert checked <= AUTH_FAILURES_PER_ADDRESS + int(self.seconds / AUTH_LEAK_SECONDS), (self.source, checked)


def test_sixteen_password_guessers_do_not_starve_an_authorised_scraper(tmp_path: Path) -> None:
    """The issue: every authorised scrape paid 65 ms of bcrypt and 16 wrong-password clients slowed real scrapes
    12-20x. Now the scraper's verified pair is answered from memory and each guesser gets 10 bcrypts, then one
    every 6 s (429 meanwhile, no bcrypt). A 17th guesser shares the scraper's own address (the same node, a NAT):
    the scraper's verified pair is still answered, never 429.

    Asserted on the limiter's decisions, not on what fits in a wall-clock window (the test that did so flaked on a
    loaded 2-CPU machine, where 16 guessers sharing two bcrypt workers reached their tenth failure only near the
    end of its 10 s): each guesser guesses until its 20th 429; the server counts its bcrypt checks, which must be
    the scraper's one and the guessers' 401s, so no 429 cost a bcrypt. The scraper's latency is measured alone,
    then while the guessers guess (printed, not asserted)."""
    hashed = bcrypt.hashpw(b"scrape-secret", bcrypt.gensalt(rounds=10)).decode()  # htpasswd -B's default cost
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    running = start_exporter(tmp_path, f"--web.config.file={tmp_path / 'web.yml'}")
    authorised = {"Authorization": "Basic " + base64.b64encode(b"prometheus:scrape-secret").decode()}

    async def scrape(stop: asyncio.Event, out: Scrapes, every: float = 0.2) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            start = loop.time()
            try:
                status, _ = await fetch(running.port, headers=authorised)
                if status == 200:
                    out.latencies_ms.append((loop.time() - start) * 1e3)
                else:
                    out.failures.append(f"status {status}")
            except (OSError, asyncio.TimeoutError) as exc:
                out.failures.append(repr(exc))
            await asyncio.sleep(max(0.0, every - (loop.time() - start)))

    async def guess(guesser: Guesser) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        n = 0
        while guesser.answers.count(429) < 20 and loop.time() - start < GUESSERS_DEADLINE_SECONDS:
            n += 1
            wrong = {"Authorization": "Basic " + base64.b64encode(b"prometheus:guess%d" % n).decode()}
            try:
                status, _ = await fetch(running.port, source=guesser.source, headers=wrong, timeout=30)
                guesser.answers.append(status)
            except (OSError, asyncio.TimeoutError) as exc:
                guesser.errors.append(repr(exc))
                break
        guesser.seconds = loop.time() - start

    async def measure() -> tuple[Scrapes, Scrapes, list[Guesser], float]:
        first = asyncio.get_running_loop().time()
        status, _ = await fetch(running.port, headers=authorised)  # the one bcrypt of the scraper's pair
        first_ms = (asyncio.get_running_loop().time() - first) * 1e3
        assert status == 200
        alone, attacked = Scrapes(), Scrapes()
        stop = asyncio.Event()
        task = asyncio.create_task(scrape(stop, alone))
        await asyncio.sleep(2)
        stop.set()
        await task
        stop = asyncio.Event()
        guessers = [Guesser(f"127.0.0.{20 + n}") for n in range(16)] + [Guesser(SCRAPER)]
        task = asyncio.create_task(scrape(stop, attacked))
        await asyncio.gather(*(guess(g) for g in guessers))
        stop.set()
        await task
        return alone, attacked, guessers, first_ms

    try:
        alone, attacked, guessers, first_ms = asyncio.run(measure())
        time.sleep(VOLATILE_SECONDS + 0.1)  # the HTTP counters are rendered at most once per VOLATILE_SECONDS
        text = running.metrics(authorised)
    finally:
        running.stop()
    outcomes = Counter(str(status) for g in guessers for status in g.answers)
    slowdown = attacked.figures()["p50_ms"] / alone.figures()["p50_ms"]
    report(
        "sixteen_password_guessers",
        {"first_scrape_ms_with_bcrypt": round(first_ms, 1), "scraper_alone": alone.figures(),
         "scraper_with_guessers": attacked.figures(), "p50_slowdown": round(slowdown, 2),
         "guesser_answers": dict(outcomes), "guessing_seconds": round(max(g.seconds for g in guessers), 1)},
    )  # fmt: skip
    for guesser in guessers:
        guesser.check_limiter()
    # the scraper, the one sharing its address with a guesser included: every scrape answered from its verified pair
    assert not alone.failures and not attacked.failures, (alone.failures, attacked.failures)
    assert attacked.latencies_ms, "no scrape while the guessers guessed"
    # the server's own counts: one bcrypt per 401 and the scraper's one, none for a 429
    bcrypts = samples(text, "rocm_watchdog_http_auth_bcrypt_checks_total")[""]
    assert bcrypts == 1 + outcomes["401"], (bcrypts, outcomes)
    assert samples(text, "rocm_watchdog_http_auth_failures_total")[""] == outcomes["401"]
    assert samples(text, "rocm_watchdog_http_requests_total")['{code="429"}'] == outcomes["429"]
    assert_one_line_each(running.log_lines())
