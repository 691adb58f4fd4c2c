"""The HTTP server on real sockets on loopback: methods, negotiation, limits, deadlines, fair shares, auth.

Fair shares are per client address, so the "other clients" here connect from 127.0.0.2 and 127.0.0.3 (any
127/8 address is loopback on Linux)."""

from __future__ import annotations

import asyncio
import base64
import collections
import gzip
import http.client
import json
import logging
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import bcrypt
import pytest
from prometheus_client.registry import CollectorRegistry
from structlog.testing import capture_logs

from exporter.config import SOURCE_NAMES
from exporter.http import (
    CONTENT_TYPE_OPENMETRICS,
    CONTENT_TYPE_TEXT,
    App,
    Limits,
    apply_web_config,
    make_app,
    serve,
    wants_gzip,
    wants_openmetrics,
)
from exporter.metrics.health import http_server_families
from exporter.server import auth as auth_module
from exporter.server import core
from exporter.server.auth import MAX_DUMMY_COST, BasicAuth, cost_of, parse_basic
from exporter.server.core import AUTH_FAILURES_PER_ADDRESS, HttpServer
from exporter.server.stats import DROP_REASONS, ServerStats
from exporter.webconfig import WebConfig, load_web_config

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
        # alone, one address may use more than its half of the four: no slot is left idle
        threads = [scrape("127.0.0.1") for _ in range(3)]
        assert all(entered.acquire(timeout=5) for _ in threads)
        threads.append(scrape("127.0.0.2"))  # the last slot
        assert entered.acquire(timeout=5)
        status, _, body = get(server, source="127.0.0.4")  # all four taken: 503 after the wait for a slot
        assert status == 503 and b"Limit of concurrent requests reached (4)" in body
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


def test_a_freed_slot_goes_to_an_address_under_its_share_first() -> None:
    """One address may hold every slot while nobody else wants one; once another waits, slots freed go to it
    before the busy address's own queued requests."""
    gates: list[threading.Event] = []
    entered = threading.Semaphore(0)

    def slow(openmetrics: bool, gz: bool) -> bytes:
        gate = threading.Event()
        gates.append(gate)
        entered.release()
        gate.wait(10)
        return b"ok\n"

    finished: list[str] = []

    def scrape(source: str) -> threading.Thread:
        def run() -> None:
            assert get(server, source=source, timeout=10)[0] == 200
            finished.append(source)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    with running(Limits(max_requests=4, workers=8), slow) as server:
        threads = [scrape("127.0.0.1") for _ in range(4)]  # alone: all four slots
        assert all(entered.acquire(timeout=5) for _ in threads)
        threads.append(scrape("127.0.0.1"))  # its fifth waits
        time.sleep(0.1)
        threads.append(scrape("127.0.0.2"))  # then another address
        time.sleep(0.1)
        gates[0].set()  # one slot frees
        assert entered.acquire(timeout=5)
        gates[4].set()  # whoever got it finishes next
        for _ in range(50):
            if len(finished) >= 2:
                break
            time.sleep(0.05)
        # the request whose slot was freed and the one given that slot: 127.0.0.2, under its share, not the busy
        # address's fifth (the two clients may read their answers in either order: threads of this process)
        assert sorted(finished[:2]) == ["127.0.0.1", "127.0.0.2"]
        for gate in gates:
            gate.set()
        while entered.acquire(timeout=2):
            for gate in gates:
                gate.set()
        for thread in threads:
            thread.join(10)
        assert sorted(finished) == ["127.0.0.1"] * 5 + ["127.0.0.2"]


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
            assert server.stats().dropped["header_timeout"] == 1
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
        assert server.stats().connections == 0  # the idle ones were closed at the idle timeout
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
            assert server.stats().connections == 8
            # a newcomer displaces a connection of the heaviest address that is still sending its head
            assert get(server, source="127.0.0.1")[0] == 200
            dropped = server.stats().dropped
            assert dropped["evicted_head"] == 1 and dropped["refused_full"] == 0
        finally:
            for s in flood:
                s.close()


def test_basic_auth_over_http_with_cache_and_no_500(bcrypt_calls: list[bytes]) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))
    web = WebConfig(basic_auth_users={"alice": hashed})
    calls = bcrypt_calls
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


def test_auth_unknown_user_costs_a_bcrypt_like_a_known_one(bcrypt_calls: list[bytes]) -> None:
    auth = BasicAuth({"alice": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=5))})
    calls = bcrypt_calls
    assert not calls  # the dummy is made without checking a password
    b64 = base64.b64encode
    assert not auth.check("Basic " + b64(b"mallory:pw").decode())
    assert not auth.check("Basic " + b64(b"alice:wrong").decode())
    assert not auth.check("Basic " + b64(b"alice:" + b"x" * 73).decode())
    assert len(calls) == 3 and calls[0].startswith(b"$2b$05$")  # the dummy has the configured cost
    assert auth.check("Basic " + b64(b"alice:pw").decode()) and auth.check("Basic " + b64(b"alice:pw").decode())
    assert len(calls) == 4
    assert not auth.check("Basic " + b64(b"alice:pw2").decode())  # a cached pair is no skeleton key
    assert parse_basic("Bearer abc") is None and parse_basic("Basic !!!") is None


def basic(user: bytes, password: bytes, scheme: str = "Basic") -> dict[str, str]:
    return {"Authorization": f"{scheme} " + base64.b64encode(user + b":" + password).decode()}


class BcryptRuns(NamedTuple):
    every: list[bytes]  # the salt or hash (and so the cost) of every bcrypt run, in order
    checks: list[bytes]  # those that checked a password against a whole hash (not the dummy's making)


@pytest.fixture
def bcrypt_runs(monkeypatch: pytest.MonkeyPatch) -> BcryptRuns:
    """The server's one bcrypt call (``exporter.server.auth.bcrypt_hash``) wrapped: each run recorded, the real
    bcrypt still run."""
    runs = BcryptRuns([], [])
    real = auth_module.bcrypt_hash

    def counting(password: bytes, setting: bytes) -> bytes:
        runs.every.append(setting)
        if len(setting) >= 59:  # a whole hash (a salt alone is 29 bytes)
            runs.checks.append(setting)
        return real(password, setting)

    monkeypatch.setattr(auth_module, "bcrypt_hash", counting)
    return runs


@pytest.fixture
def bcrypt_calls(bcrypt_runs: BcryptRuns) -> list[bytes]:
    """The hashes bcrypt checked a password against, in order."""
    return bcrypt_runs.checks


def test_unknown_and_known_users_take_the_same_bcrypt_path(bcrypt_calls: list[bytes]) -> None:
    """Over real sockets, at htpasswd's default cost: a wrong password for a known user and any password for an
    unknown one each cost one bcrypt at that cost (the issue measured 65 ms against 4 ms: user names leaked)."""
    web = WebConfig(basic_auth_users={"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))})
    times: dict[str, list[float]] = {"unknown user": [], "known user, wrong password": []}
    with running(web=web) as server:
        for n in range(5):
            for k, (label, header) in enumerate(
                (("unknown user", basic(b"mallory", b"guess")), ("known user, wrong password", basic(b"alice", b"x")))
            ):
                source = f"127.0.3.{1 + 2 * n + k}"  # an address each: the brute-force limit stays out of it
                start = time.perf_counter()
                status, headers, _ = get(server, headers=header, source=source)
                times[label].append(time.perf_counter() - start)
                assert status == 401 and headers["www-authenticate"] == 'Basic realm="rocm-watchdog"'
    assert len(bcrypt_calls) == 10 and all(h.startswith(b"$2b$10$") for h in bcrypt_calls)
    medians = {label: round(statistics.median(t) * 1e3, 1) for label, t in times.items()}
    print(f"\nmedian 401 at bcrypt cost 10, ms: {medians}")
    ratio = medians["unknown user"] / medians["known user, wrong password"]
    assert 1 / 3 < ratio < 3, medians  # the same work; loose, for a shared machine


def rewrite_cost(hashed: bytes, cost: int) -> bytes:
    """A well-formed hash of ``cost`` that no known password matches: a cheap hash with its cost field rewritten
    (making a real cost-18 hash takes about 16 s here; checking one would take as long, and no test does)."""
    return hashed[:4] + b"%02d" % cost + hashed[6:]


def test_a_cost_18_users_file_runs_nothing_above_cost_12_before_the_first_accept_nor_for_unknown_users(
    tmp_path: Path, bcrypt_runs: BcryptRuns
) -> None:
    """The issue: with a cost-18 hash in basic_auth_users (exporter-toolkit's own test users file has one) the server
    answered nothing for about 20 s at start, and every request naming an unknown user burnt as long again: the
    dummy hash was made, and checked, at the highest cost configured. Now every bcrypt run is counted with its
    cost (the real bcrypt, through the server's one call of it): loading runs none above cost 8, the unknown user
    costs cost 12, the known user of cost 10 its cost 10, and the cost-18 hash gets one warning."""
    expensive = rewrite_cost(bcrypt.hashpw(b"unknowable", bcrypt.gensalt(rounds=4)), 18)
    scraper = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))
    (tmp_path / "web.yml").write_text(
        f"basic_auth_users:\n  admin: {expensive.decode()}\n  prometheus: {scraper.decode()}\n"
    )
    with capture_logs() as logs:
        web = load_web_config(tmp_path / "web.yml")  # the users file is accepted, whatever its costs
        with running(web=web) as server:
            before_accept = [cost_of(h) for h in bcrypt_runs.every]
            assert server.stats().connections == 0 and server.stats().requests[401] == 0
            unknown = get(server, headers=basic(b"mallory", b"guess"), source="127.0.5.1")
            known = get(server, headers=basic(b"prometheus", b"wrong"), source="127.0.5.2")
            right = get(server, headers=basic(b"prometheus", b"right"), source="127.0.5.3")
            assert (unknown[0], known[0], right[0]) == (401, 401, 200)
            assert server.stats().bcrypt_checks == 3
    costs = [cost_of(h) for h in bcrypt_runs.every]
    # before the first accept: the dummy's making (cost 4) and those timing the warning's estimate (cost 8)
    assert before_accept == [4, 8, 8, 8], before_accept
    # then the unknown user, the wrong password and the right one
    assert costs[len(before_accept) :] == [MAX_DUMMY_COST, 10, 10], costs
    assert max(c for c in costs if c is not None) <= MAX_DUMMY_COST
    warnings = [e for e in logs if e["event"] == "http_auth_hash_expensive"]
    assert len(warnings) == 1 and warnings[0]["user"] == "admin" and warnings[0]["cost"] == 18, warnings
    assert warnings[0]["log_level"] == "warning" and "timing" in warnings[0]["detail"]
    assert warnings[0]["unknown_user_cost"] == MAX_DUMMY_COST and warnings[0]["seconds_per_uncached_check"] > 1


@pytest.mark.parametrize(("costs", "dummy"), [((5,), 5), ((10, 11), 11), ((12,), 12), ((10, 13), 12), ((31,), 12)])
def test_the_unknown_users_hash_has_the_highest_configured_cost_capped_at_12(
    costs: tuple[int, ...], dummy: int, bcrypt_runs: BcryptRuns
) -> None:
    cheap = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))
    auth = BasicAuth({f"user{n}": rewrite_cost(cheap, cost) for n, cost in enumerate(costs)})
    assert auth.dummy_cost == dummy
    assert max(c for h in bcrypt_runs.every if (c := cost_of(h)) is not None) <= 8  # nothing at the hash's cost
    if dummy <= 10:  # check it (above, a check costs seconds): the dummy's cost is the one bcrypt runs
        assert not auth.check("Basic " + base64.b64encode(b"nobody:pw").decode())
        assert [cost_of(h) for h in bcrypt_runs.checks] == [dummy]


def test_authorised_scrapes_pay_bcrypt_once_and_a_reloaded_password_invalidates_them(
    tmp_path: Path, bcrypt_calls: list[bytes]
) -> None:
    cfg = tmp_path / "web.yml"

    def set_password(password: bytes) -> None:
        hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)).decode()
        cfg.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")

    set_password(b"first")
    web = load_web_config(cfg)
    with running(web=web) as server:
        for _ in range(20):
            assert get(server, headers=basic(b"prometheus", b"first"))[0] == 200
        assert len(bcrypt_calls) == 1  # the first scrape; the other 19 from the verified-credential cache
        set_password(b"second")
        apply_web_config(server, load_web_config(cfg))  # what SIGHUP does (exporter.reload)
        assert get(server, headers=basic(b"prometheus", b"first"))[0] == 401  # the old pair no longer passes
        assert get(server, headers=basic(b"prometheus", b"second"))[0] == 200
        assert get(server, headers=basic(b"prometheus", b"second"))[0] == 200
        assert len(bcrypt_calls) == 3


def test_the_basic_scheme_is_case_insensitive() -> None:
    web = WebConfig(basic_auth_users={"alice": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))})
    with running(web=web) as server:
        for scheme in ("Basic", "basic", "BASIC", "bAsIc"):
            assert get(server, headers=basic(b"alice", b"pw", scheme))[0] == 200, scheme


def test_every_auth_failure_is_401_never_500() -> None:
    web = WebConfig(basic_auth_users={"alice": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))})
    b64 = base64.b64encode
    bad: dict[str, dict[str, str]] = {
        "no header": {},
        "no credentials": {"Authorization": "Basic"},
        "not base64": {"Authorization": "Basic !!!"},
        "no colon": {"Authorization": "Basic " + b64(b"alice").decode()},
        "user not UTF-8": {"Authorization": "Basic " + b64(b"\xff\xfe:pw").decode()},
        "another scheme": {"Authorization": "Bearer abc"},
        "8 KiB of token": {"Authorization": "Basic " + "QUFB" * 2048},
        "empty user": basic(b"", b"pw"),
        "NUL in the password": basic(b"alice", b"p\x00w"),
        "73-byte password": basic(b"alice", b"p" * 73),  # bcrypt raises past 72 bytes
        "1000-byte password": basic(b"alice", b"p" * 1000),
        "right password, other user": basic(b"bob", b"pw"),
    }
    with running(web=web) as server:
        for n, (label, headers) in enumerate(bad.items()):
            status, answer, _ = get(server, headers=headers, source=f"127.0.4.{n + 1}")
            assert status == 401 and "www-authenticate" in answer, label
        stats = server.stats()
        assert stats.auth_failures == len(bad) and stats.requests[401] == len(bad) and 500 not in stats.requests


def test_brute_force_is_limited_per_address_without_bcrypt(bcrypt_calls: list[bytes]) -> None:
    users = {name: bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)) for name in ("alice", "bob")}
    with running(web=WebConfig(basic_auth_users=users)) as server:
        assert get(server, headers=basic(b"alice", b"pw"), source="127.0.0.1")[0] == 200  # verified, cached
        for n in range(AUTH_FAILURES_PER_ADDRESS):
            assert get(server, headers=basic(b"alice", b"guess%d" % n), source="127.0.0.5")[0] == 401
        assert len(bcrypt_calls) == 1 + AUTH_FAILURES_PER_ADDRESS
        for n in range(5):  # the address is over its limit: 429 at once, no bcrypt
            status, headers, _ = get(server, headers=basic(b"alice", b"more%d" % n), source="127.0.0.5")
            assert status == 429 and 1 <= int(headers["retry-after"]) <= 6
        # the right password not verified yet needs a bcrypt: 429 too; a pair verified before needs none: served
        assert get(server, headers=basic(b"bob", b"pw"), source="127.0.0.5")[0] == 429
        assert get(server, headers=basic(b"alice", b"pw"), source="127.0.0.5")[0] == 200
        assert len(bcrypt_calls) == 1 + AUTH_FAILURES_PER_ADDRESS
        # every other address is unaffected: the cached pair, and a first check of the right password
        assert get(server, headers=basic(b"alice", b"pw"), source="127.0.0.1")[0] == 200
        assert get(server, headers=basic(b"bob", b"pw"), source="127.0.0.6")[0] == 200
        stats = server.stats()
        assert stats.auth_failures == AUTH_FAILURES_PER_ADDRESS and stats.requests[429] == 6
        assert stats.events["auth_locked"] == 6
        assert stats.bcrypt_checks == len(bcrypt_calls) == 2 + AUTH_FAILURES_PER_ADDRESS


def test_an_attacker_sharing_the_scrapers_address_cannot_lock_its_scrapes_out(bcrypt_calls: list[bytes]) -> None:
    """The issue: ten wrong passwords a minute from the scraper's own address (the same node, a NAT, a shared SNAT)
    kept every scrape with the right, already verified credentials at 429. The limiter gates bcrypt work only."""
    web = WebConfig(basic_auth_users={"prometheus": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4))})
    scraper = basic(b"prometheus", b"right")
    with running(web=web) as server:
        assert get(server, headers=scraper)[0] == 200  # the scraper's pair, verified by its one bcrypt
        answers = []
        start = time.monotonic()
        for n in range(AUTH_FAILURES_PER_ADDRESS + 20):  # the attacker, from 127.0.0.1 too, between scrapes
            answers.append(get(server, headers=basic(b"prometheus", b"guess%d" % n))[0])
            assert get(server, headers=scraper)[0] == 200
        leaked = int((time.monotonic() - start) * AUTH_FAILURES_PER_ADDRESS / core.AUTH_FAILURE_WINDOW_SECONDS)
        # 10 bcrypts for the attacker, then 429 without one (but for one more per failure leaked meanwhile)
        assert answers[:AUTH_FAILURES_PER_ADDRESS] == [401] * AUTH_FAILURES_PER_ADDRESS
        assert AUTH_FAILURES_PER_ADDRESS <= answers.count(401) <= AUTH_FAILURES_PER_ADDRESS + leaked, answers
        assert set(answers) == {401, 429}
        assert len(bcrypt_calls) == 1 + answers.count(401) == server.stats().bcrypt_checks
        assert server.stats().requests[200] == 1 + len(answers)


def test_brute_force_bucket_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the burst, one more attempt every window / limit seconds (here 10 per 4 s: one every 0.4 s)."""
    monkeypatch.setattr(core, "AUTH_FAILURE_WINDOW_SECONDS", 4.0)
    web = WebConfig(basic_auth_users={"alice": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))})
    with running(web=web) as server:
        for n in range(AUTH_FAILURES_PER_ADDRESS):
            assert get(server, headers=basic(b"alice", b"x%d" % n), source="127.0.0.7")[0] == 401
        assert get(server, headers=basic(b"alice", b"pw"), source="127.0.0.7")[0] == 429
        time.sleep(1.0)
        assert get(server, headers=basic(b"alice", b"pw"), source="127.0.0.7")[0] == 200


def test_a_tls_response_with_connection_close_is_closed_at_once(tmp_path: Path) -> None:
    """asyncio's TLS transport with a write buffer limit of 0 never resumed its writer: a response with
    "Connection: close" was sent, but its connection stayed open (and counted) until the client spoke again or
    the 60 s write timeout, so TLS clients that close no connection could fill the server."""
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    web = load_web_config(tmp_path / "web.yml")
    client = ssl.create_default_context(cafile=str(cert))
    with running(web=web) as server:
        for _ in range(3):
            with client.wrap_socket(
                socket.create_connection(("127.0.0.1", server.server_port), timeout=5), server_hostname="127.0.0.1"
            ) as tls:
                tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                start, data = time.monotonic(), b""
                while chunk := tls.recv(65536):  # until the server's close_notify
                    data += chunk
                assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(BODY)
                assert time.monotonic() - start < 2
        time.sleep(0.2)
        assert server.stats().connections == 0


def test_client_faults_are_logged_once_a_minute_per_kind_with_the_count_not_logged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(core, "LOG_EVERY_SECONDS", 2.0)
    with capture_logs() as logs, running() as server:
        for _ in range(30):
            raw(server, b"GARBAGE\r\n\r\n")
        time.sleep(2.1)
        raw(server, b"GARBAGE\r\n\r\n")  # past the minute (here 2 s): a line with the 29 not logged
        for _ in range(5):
            raw(server, b"GARBAGE\r\n\r\n")
    lines = [entry for entry in logs if entry["event"] == "http_client_error"]
    assert [(e["kind"], e["total"], e["suppressed"]) for e in lines] == [
        ("bad_request", 1, 0),
        ("bad_request", 31, 29),
        ("bad_request", 36, 5),  # said when the server stops, as nothing more came
    ]
    assert lines[0]["client"] == "127.0.0.1" and lines[0]["detail"] == "bad_request_line"


def test_a_quiet_server_says_what_it_did_not_log_then_sleeps_without_a_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core, "LOG_EVERY_SECONDS", 1.0)  # far more than three requests take
    monkeypatch.setattr(core, "HOUSEKEEPING_SECONDS", 0.1)
    with capture_logs() as logs, running() as server:
        assert not server._untidy.is_set()  # nothing to tidy: no housekeeping timer
        for _ in range(3):
            raw(server, b"GARBAGE\r\n\r\n")
        limit = time.monotonic() + 5
        while len([e for e in logs if e["event"] == "http_client_error"]) < 2 and time.monotonic() < limit:
            time.sleep(0.05)
        lines = [(e["total"], e["suppressed"]) for e in logs if e["event"] == "http_client_error"]
        assert lines == [(1, 0), (3, 2)]  # the two not logged, said by housekeeping while the server runs
        limit = time.monotonic() + 5
        while server._untidy.is_set() and time.monotonic() < limit:
            time.sleep(0.05)
        assert not server._untidy.is_set()  # all said: asleep again until the next fault


def test_asyncio_and_loop_errors_are_one_line_without_a_traceback() -> None:
    """What asyncio says through its own logger, and what reaches the loop's exception handler: a client's
    connection counted, anything else one structured line; neither as asyncio's default traceback."""
    with capture_logs() as logs, running() as server:
        logging.getLogger("asyncio").warning("socket.send() raised exception.")
        loop = server._loop
        assert loop is not None
        for context in (
            {"message": "reset", "exception": ConnectionResetError()},
            {"message": "boom", "exception": ValueError("x")},
        ):
            loop.call_soon_threadsafe(loop.call_exception_handler, context)
        time.sleep(0.3)
        assert server.stats().events["transport_error"] == 1
    assert {"event": "asyncio_message", "message": "socket.send() raised exception.", "level_name": "WARNING",
            "log_level": "warning"} in logs  # fmt: skip
    errors = [e for e in logs if e["event"] == "http_loop_error"]
    assert errors == [{"event": "http_loop_error", "message": "boom", "error": "ValueError('x')", "log_level": "error"}]


def test_server_counters_become_metrics() -> None:
    stats = ServerStats()
    stats.connections(3)
    stats.dropped("header_timeout")
    stats.answered(200)
    stats.answered(200)
    stats.answered(404)
    stats.auth_failed()
    families = {f.name: f for f in http_server_families(stats.view())}
    assert [s.value for s in families["rocm_watchdog_http_connections"].samples] == [3]
    dropped = {s.labels["reason"]: s.value for s in families["rocm_watchdog_http_connections_dropped"].samples}
    assert set(dropped) == set(DROP_REASONS) and dropped["header_timeout"] == 1 and dropped["refused_full"] == 0
    codes = {s.labels["code"]: s.value for s in families["rocm_watchdog_http_requests"].samples}
    assert codes == {"200": 2, "401": 0, "404": 1, "429": 0, "503": 0}
    assert [s.value for s in families["rocm_watchdog_http_auth_failures"].samples] == [1]


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


def test_a_full_server_queues_newcomers_and_answers_every_one() -> None:
    """The issue: a full server closed what it could not take (412 of 1000 answered, 588 closed unanswered). Now,
    with nothing idle or slow to displace, newcomers wait (a lobby of accepted connections, then the kernel's
    listen queue) until a connection frees: 240 GETs at once on 8 connections, each answer 20 ms of a worker, all
    answered 200, nothing displaced or refused."""

    def slow(openmetrics: bool, gz: bool) -> bytes:
        time.sleep(0.02)
        return b"x 1\n"

    limits = Limits(max_connections=8, max_requests=0)
    with running(limits, exposition=slow) as server:
        port = server.server_port

        async def burst() -> list[str]:
            loop = asyncio.get_running_loop()

            async def one(source: str) -> str:
                sock = socket.socket()
                sock.setblocking(False)
                sock.bind((source, 0))
                try:
                    await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), 30)
                    await loop.sock_sendall(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    answer = b""
                    while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 30):
                        answer += chunk
                    return answer[9:12].decode() or "closed"
                except OSError as exc:
                    return type(exc).__name__
                finally:
                    sock.close()

            # 60 addresses, 4 each: none past its share (half of 8)
            return await asyncio.gather(*(one(f"127.0.6.{1 + n % 60}") for n in range(240)))

        outcomes = asyncio.run(burst())
        stats = server.stats()
    assert outcomes == ["200"] * 240, collections.Counter(outcomes)
    assert stats.requests[200] == 240 and not any(stats.dropped.values()), stats.dropped
    assert not any(kind.startswith(("evicted", "refused")) for kind in stats.events), stats.events


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) not installed")
def test_listen_backlog_flag() -> None:
    from exporter.cli import ConfigError, build_config, build_parser

    assert build_config(build_parser().parse_args(["serve"])).web_listen_backlog == 1024
    assert build_config(build_parser().parse_args(["serve", "--web.listen-backlog", "37"])).web_listen_backlog == 37
    for bad in ("0", "-1", "x"):
        with pytest.raises(ConfigError, match=r"web\.listen-backlog: expected a whole number >= 1"):
            build_config(build_parser().parse_args(["serve", "--web.listen-backlog", bad]))
    cap = int(Path("/proc/sys/net/core/somaxconn").read_text())
    for requested, expected in ((37, 37), (cap + 1000, cap)):
        with capture_logs() as logs, running(Limits(backlog=requested)) as server:
            out = subprocess.run(
                ["ss", "-ltnH", f"sport = :{server.server_port}"], capture_output=True, text=True, timeout=10
            ).stdout.split()
        assert out[0] == "LISTEN" and int(out[2]) == expected, out  # a listener's Send-Q is its backlog
        capped = [e for e in logs if e["event"] == "listen_backlog_capped"]
        assert capped == ([] if requested == expected else [{**capped[0], "requested": requested, "somaxconn": cap}])


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
