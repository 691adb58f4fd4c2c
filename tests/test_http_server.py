"""The HTTP server on real sockets on loopback: methods, negotiation, limits, deadlines, fair shares, auth.

Fair shares are per client address, so the "other clients" here connect from 127.0.0.2 and 127.0.0.3 (any
127/8 address is loopback on Linux)."""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.registry import CollectorRegistry

from exporter.config import SOURCE_NAMES
from exporter.http import (
    CONTENT_TYPE_OPENMETRICS,
    CONTENT_TYPE_TEXT,
    App,
    Limits,
    make_app,
    serve,
    wants_gzip,
    wants_openmetrics,
)
from exporter.server.auth import BasicAuth, parse_basic
from exporter.server.core import HttpServer
from exporter.webconfig import WebConfig

PROJECT = Path(__file__).resolve().parents[1]
BODY = b"# HELP x y\n# TYPE x gauge\n" + b"x 1\n" * 100_000  # 400 KB: more than one write chunk


def provider(openmetrics: bool, gz: bool) -> bytes:
    body = BODY + (b"# EOF\n" if openmetrics else b"")
    return gzip.compress(body, mtime=0) if gz else body


def healthy() -> tuple[bool, str]:
    return True, "ok"


@contextmanager
def running(
    limits: Limits | None = None,
    exposition: Callable[[bool, bool], bytes] = provider,
    web: WebConfig | None = None,
) -> Iterator[HttpServer]:
    server = serve("127.0.0.1:0", make_app(exposition, web or WebConfig(), healthy), web or WebConfig(), limits=limits)
    try:
        yield server
    finally:
        server.shutdown()


def get(
    server: HttpServer,
    path: str = "/metrics",
    method: str = "GET",
    headers: dict[str, str] | None = None,
    source: str = "127.0.0.1",
    timeout: float = 5,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def raw(server: HttpServer, data: bytes, source: str = "127.0.0.1", timeout: float = 5) -> bytes:
    """Send ``data`` and read until the server closes (every request here asks it to)."""
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_get_head_and_negotiation() -> None:
    with running() as server:
        status, headers, body = get(server)
        assert status == 200 and body == BODY and headers["content-type"] == CONTENT_TYPE_TEXT
        assert int(headers["content-length"]) == len(BODY)

        status, headers, body = get(server, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert headers["content-type"] == CONTENT_TYPE_OPENMETRICS and body.endswith(b"# EOF\n")

        status, headers, body = get(server, headers={"Accept-Encoding": "br, GZIP;q=0.5"})
        assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == BODY

        # HEAD: what GET would say, and not one byte of body (read raw: a client library would hide extra bytes).
        answer = raw(server, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and f"Content-Length: {len(BODY)}".encode() in head
        assert rest == b""

        assert get(server, "/healthz")[2] == b"ok\n"
        status, headers, body = get(server, "/")
        assert status == 200 and b"rocm-watchdog" in body and headers["content-type"].startswith("text/html")
        assert get(server, "/nope")[0] == 404


def test_negotiation_follows_prometheus_client() -> None:
    prometheus3 = (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
        "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
    )
    assert wants_openmetrics(prometheus3)
    assert wants_openmetrics("application/openmetrics-text")
    assert not wants_openmetrics("application/openmetrics-text; version=0.0.1")
    assert not wants_openmetrics("text/plain;version=0.0.4") and not wants_openmetrics(None)
    assert wants_gzip("deflate, gzip") and not wants_gzip("identity") and not wants_gzip(None)


def test_other_methods_are_405_and_bad_requests_400() -> None:
    with running() as server:
        status, headers, _ = get(server, method="POST")
        assert status == 405 and headers["allow"] == "GET, HEAD"
        assert raw(server, b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert raw(server, b"GET /metrics HTTP/2.0\r\n\r\n").startswith(b"HTTP/1.1 505 ")
        huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n"
        assert raw(server, huge).startswith(b"HTTP/1.1 431 ")
        assert get(server)[0] == 200  # and the server is fine


def test_registry_still_renders() -> None:
    """The registry path (before the exposition cache) keeps serving what prometheus_client renders."""
    web = WebConfig()
    server = serve("127.0.0.1:0", make_app(CollectorRegistry(), web, healthy), web)
    try:
        status, headers, body = get(server, headers={"Accept": "application/openmetrics-text"})
        assert status == 200 and body == b"# EOF\n" and headers["content-type"] == CONTENT_TYPE_OPENMETRICS
    finally:
        server.shutdown()


def test_max_requests_answers_503_past_the_limit_with_a_fair_share_per_address() -> None:
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow(openmetrics: bool, gz: bool) -> bytes:
        entered.release()
        release.wait(10)
        return b"ok\n"

    results: list[int] = []

    def scrape(source: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.append(get(server, source=source, timeout=10)[0]))
        thread.start()
        return thread

    with running(Limits(max_requests=4, workers=4), slow) as server:
        threads = [scrape("127.0.0.1"), scrape("127.0.0.1")]
        assert all(entered.acquire(timeout=5) for _ in threads)
        # 127.0.0.1 holds its half of the four: its next scrape is refused, another address still gets in
        status, _, body = get(server, source="127.0.0.1")
        assert status == 503 and b"Limit of concurrent requests reached (4)" in body
        threads += [scrape("127.0.0.2"), scrape("127.0.0.3")]
        assert all(entered.acquire(timeout=5) for _ in range(2))
        assert get(server, source="127.0.0.4")[0] == 503  # all four taken
        assert get(server, "/healthz", source="127.0.0.4")[0] == 200  # only /metrics is limited
        release.set()
        for thread in threads:
            thread.join(10)
        assert results == [200] * 4
        assert get(server)[0] == 200

    with running(Limits(max_requests=0, workers=2), slow) as server:  # 0: no limit
        release.clear()
        threads = [scrape("127.0.0.1") for _ in range(6)]
        time.sleep(0.3)
        release.set()
        for thread in threads:
            thread.join(10)
        assert results[4:] == [200] * 6


def test_header_deadline_drops_a_slowloris_while_scrapes_go_on() -> None:
    """One byte every 0.2 s keeps every read busy: only a deadline for the whole head ends it."""
    with running(Limits(header_timeout_seconds=1.0)) as server:
        drip = socket.create_connection(("127.0.0.1", server.server_port), source_address=("127.0.0.2", 0))
        try:
            start = time.monotonic()
            closed_after = None
            for byte in (b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100)[:40]:
                try:
                    drip.sendall(bytes([byte]))
                except OSError:
                    closed_after = time.monotonic() - start
                    break
                assert get(server, source="127.0.0.1", timeout=2)[0] == 200  # scrapes are answered meanwhile
                drip.settimeout(0.2)
                try:
                    if drip.recv(1) == b"":
                        closed_after = time.monotonic() - start
                        break
                except TimeoutError:
                    pass
            assert closed_after is not None, "the dribbling connection was never closed"
            assert 0.9 <= closed_after <= 2.5
            assert server.stats()["client_errors"].get("header_timeout") == 1
        finally:
            drip.close()


def test_idle_keep_alive_connections_hold_no_worker_and_time_out() -> None:
    with running(Limits(workers=1, idle_timeout_seconds=1.0)) as server:
        idle = []
        for _ in range(20):  # each made one request and now idles
            conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b"ok\n"
            idle.append(conn)
        start = time.monotonic()
        assert get(server)[0] == 200
        assert time.monotonic() - start < 1.0
        time.sleep(1.6)
        assert server.stats()["connections"] == 0  # the idle ones were closed at the idle timeout
        for conn in idle:
            conn.close()


def test_connection_cap_keeps_a_share_for_other_addresses() -> None:
    with running(Limits(max_connections=8, header_timeout_seconds=30)) as server:
        port = server.server_port

        def hold(source: str, count: int) -> list[socket.socket]:
            held = [socket.create_connection(("127.0.0.1", port), source_address=(source, 0)) for _ in range(count)]
            time.sleep(0.2)
            return held

        flood = hold("127.0.0.2", 4)  # half of the eight: the most one address may hold
        try:
            assert raw(server, b"", source="127.0.0.2", timeout=2).startswith(b"HTTP/1.1 503 ")  # the fifth
            assert get(server, source="127.0.0.1")[0] == 200
            time.sleep(0.2)  # that keep-alive connection's close reached the server
            flood += hold("127.0.0.3", 4)  # now full
            assert server.stats()["connections"] == 8
            # a newcomer displaces a connection of the heaviest address that is still sending its head
            assert get(server, source="127.0.0.1")[0] == 200
            errors = server.stats()["client_errors"]
            assert errors.get("evicted_head") == 1 and "refused_full" not in errors
        finally:
            for s in flood:
                s.close()


def test_basic_auth_over_http_with_cache_and_no_500(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))
    web = WebConfig(basic_auth_users={"alice": hashed})
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed_password: bytes) -> bool:
        calls.append(hashed_password)
        return real(password, hashed_password)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    auth = {"Authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()}
    with running(web=web) as server:
        assert get(server)[0] == 401
        assert get(server, headers=auth)[0] == 200
        assert get(server, headers=auth)[0] == 200
        assert len(calls) == 1  # the second scrape was answered from the cache
        lower = {"Authorization": "basic " + auth["Authorization"][6:]}
        assert get(server, headers=lower)[0] == 200
        long = {"Authorization": "Basic " + base64.b64encode(b"alice:" + b"p" * 100).decode()}
        status, headers, _ = get(server, headers=long)
        assert status == 401 and headers["www-authenticate"].startswith("Basic")
        assert get(server, "/healthz")[0] == 401  # every path, checked right after the head


def test_auth_unknown_user_costs_a_bcrypt_like_a_known_one(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuth({"alice": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=5))})
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed_password: bytes) -> bool:
        calls.append(hashed_password)
        return real(password, hashed_password)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    b64 = base64.b64encode
    assert not auth.check("Basic " + b64(b"mallory:pw").decode())
    assert not auth.check("Basic " + b64(b"alice:wrong").decode())
    assert not auth.check("Basic " + b64(b"alice:" + b"x" * 73).decode())
    assert len(calls) == 3 and calls[0].startswith(b"$2b$05$")  # the dummy has the configured cost
    assert auth.check("Basic " + b64(b"alice:pw").decode()) and auth.check("Basic " + b64(b"alice:pw").decode())
    assert len(calls) == 4
    assert not auth.check("Basic " + b64(b"alice:pw2").decode())  # a cached pair is no skeleton key
    assert parse_basic("Bearer abc") is None and parse_basic("Basic !!!") is None


def test_app_is_plain_function_of_a_request() -> None:
    app = App(provider, healthy, b"landing")
    from exporter.server.core import Request

    response = app(Request("GET", "/metrics", "", "HTTP/1.1", {"accept-encoding": "gzip"}, "127.0.0.1"))
    assert response.status == 200 and gzip.decompress(response.body) == BODY


def _serve_argv(tmp_path: Path, *extra: str) -> list[str]:
    no_sources = [f"--no-collector.{name}" for name in SOURCE_NAMES]
    return [
        sys.executable, "-m", "exporter", "serve", "--state.dir", str(tmp_path / "state"), "--log.format", "json",
        *no_sources, *extra,
    ]  # fmt: skip


def test_systemd_socket_activation(tmp_path: Path) -> None:
    """A real listening socket handed over as fd 3 with LISTEN_FDS/LISTEN_PID, as systemd does."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    fd = listener.fileno()
    # As systemd does: the socket as fd 3 (and no other fd), LISTEN_PID naming the process that exec()s the exporter.
    launcher = (
        "import os, sys\n"
        "fd = int(sys.argv[1])\n"
        "if fd != 3:\n"
        "    os.dup2(fd, 3)\n"
        "    os.close(fd)\n"
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1')\n"
        "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
    )
    argv = [sys.executable, "-c", launcher, str(fd),
            *_serve_argv(tmp_path, "--web.systemd-socket", "--web.listen-address", "127.0.0.1:1")[1:]]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    proc = subprocess.Popen(argv, env=env, pass_fds=(fd,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    listener.close()  # only the exporter holds it now
    try:
        assert proc.stderr is not None
        serving, lines = None, []
        for _ in range(100):
            lines.append(proc.stderr.readline())
            if not lines[-1] or '"serving"' in lines[-1]:
                break
        if '"serving"' in lines[-1]:
            serving = json.loads(lines[-1])
        assert serving is not None, f"exit {proc.poll()}: {''.join(lines)}"
        assert serving["port"] == port and serving["systemd_socket"] is True
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200 and b"rocm_watchdog" in response.read()
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        assert proc.stderr is not None
        proc.stderr.close()


def test_systemd_socket_without_sockets_is_a_config_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "LISTEN_PID": "1", "LISTEN_FDS": "1"}
    proc = subprocess.run(
        _serve_argv(tmp_path, "--web.systemd-socket"), env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "--web.systemd-socket: no socket activation" in proc.stderr


def test_max_requests_flag(tmp_path: Path) -> None:
    from exporter.cli import ConfigError, build_config, build_parser

    config = build_config(build_parser().parse_args(["serve", "--web.max-requests", "0"]))
    assert config.web_max_requests == 0 and not config.web_systemd_socket
    assert build_config(build_parser().parse_args(["serve"])).web_max_requests == 40
    with pytest.raises(ConfigError, match=r"web\.max-requests"):
        build_config(build_parser().parse_args(["serve", "--web.max-requests", "-1"]))


def test_a_fast_provider_serves_a_burst_without_503_and_a_slow_one_goes_back_to_workers() -> None:
    calls = {"n": 0}
    block = threading.Event()

    def flaky(openmetrics: bool, gz: bool) -> bytes:
        calls["n"] += 1
        if calls["n"] == 60:
            time.sleep(0.2)  # one slow run (on the loop): what sends /metrics back to the workers
        if calls["n"] == 62:
            block.wait(10)  # on a worker by now: the loop must keep answering meanwhile
        return b"x 1\n"

    results: list[int] = []
    with running(Limits(max_requests=2), flaky) as server:  # one address may hold only one in flight
        threads = [threading.Thread(target=lambda: results.append(get(server, timeout=10)[0])) for _ in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)
        assert results == [200] * 50  # a burst of fast scrapes waits for a slot, or runs on the loop
        while calls["n"] < 61:
            assert get(server)[0] == 200
        blocked = threading.Thread(target=lambda: results.append(get(server, timeout=10)[0]))
        blocked.start()
        time.sleep(0.3)
        start = time.monotonic()
        assert get(server, "/healthz", timeout=2)[0] == 200
        assert time.monotonic() - start < 1
        block.set()
        blocked.join(10)
        assert results[-1] == 200
