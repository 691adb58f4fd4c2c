"""--web.config.file: TLS and basic auth, served for real on loopback."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
from prometheus_client.registry import CollectorRegistry

from exporter import webconfig
from exporter.http import Limits, make_app, parse_listen_address, serve
from exporter.webconfig import WebConfigError, load_web_config


def healthy() -> tuple[bool, str]:
    return True, "ok"


def test_basic_auth(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  alice: '{hashed}'\n")
    web = load_web_config(cfg)
    server = serve("127.0.0.1:0", make_app(CollectorRegistry(), web, healthy), web)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        assert requests.get(url, timeout=5).status_code == 401
        assert requests.get(url, auth=("alice", "wrong"), timeout=5).status_code == 401
        assert requests.get(url, auth=("alice", "s3cret"), timeout=5).status_code == 200
    finally:
        server.shutdown()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_tls(tmp_path: Path) -> None:
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "k.pem"),
            "-out",
            str(tmp_path / "c.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
    web = load_web_config(cfg)
    server = serve("127.0.0.1:0", make_app(CollectorRegistry(), web, healthy), web)
    try:
        # A client that connects and never starts the handshake must not hold up the others.
        with socket.create_connection(("127.0.0.1", server.server_port)):
            r = requests.get(
                f"https://127.0.0.1:{server.server_port}/healthz", verify=str(tmp_path / "c.pem"), timeout=5
            )
        assert r.status_code == 200 and r.text == "ok\n"
    finally:
        server.shutdown()


def test_invalid_web_config_lists_every_problem(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: missing.pem\nbasic_auth_users:\n  bob: plaintext\nfoo: 1\n")
    with pytest.raises(WebConfigError) as err:
        load_web_config(cfg)
    for needle in ("foo", "key_file", "bob"):
        assert needle in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"), [(":9862", ("", 9862)), ("127.0.0.1:80", ("127.0.0.1", 80)), ("[::1]:9", ("::1", 9))]
)
def test_listen_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["9862", "host:", "h:99999"])
def test_bad_listen_address(text: str) -> None:
    with pytest.raises(ValueError):
        parse_listen_address(text)


def make_cert(directory: Path, name: str, cn: str) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={cn}",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(directory / f"{name}.key"),
         "-out", str(directory / f"{name}.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def peer_cn(port: int, ca: Path) -> tuple[str, str | None]:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cert: dict[str, Any] = dict(tls.getpeercert() or {})
        names = [str(pair[1]) for rdn in cert.get("subject", ()) for pair in rdn if pair[0] == "commonName"]
        return names[0] if names else "", tls.version()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_tls_versions_headers_and_certificate_rotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_cert(tmp_path, "a", "first")
    make_cert(tmp_path, "b", "second")
    shutil.copy(tmp_path / "a.crt", tmp_path / "server.crt")
    shutil.copy(tmp_path / "a.key", tmp_path / "server.key")
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  max_version: TLS12\n"
        "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
        "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n"
    )
    web = load_web_config(cfg)
    monkeypatch.setattr(webconfig, "CERT_CHECK_SECONDS", 0.0)
    server = serve("127.0.0.1:0", make_app(CollectorRegistry(), web, healthy), web)
    try:
        port = server.server_port
        assert peer_cn(port, tmp_path / "a.crt") == ("first", "TLSv1.2")
        r = requests.get(f"https://127.0.0.1:{port}/metrics", verify=str(tmp_path / "a.crt"), timeout=5)
        assert r.status_code == 200 and r.headers["Strict-Transport-Security"] == "max-age=31536000"
        # rotation: new files in place, the next connection gets the new certificate without a restart
        shutil.copy(tmp_path / "b.key", tmp_path / "server.key")
        shutil.copy(tmp_path / "b.crt", tmp_path / "server.crt")
        assert peer_cn(port, tmp_path / "b.crt")[0] == "second"
    finally:
        server.shutdown()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_tls_client_that_never_handshakes_is_dropped_at_the_header_deadline(tmp_path: Path) -> None:
    make_cert(tmp_path, "a", "first")
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n")
    web = load_web_config(cfg)
    server = serve(
        "127.0.0.1:0", make_app(CollectorRegistry(), web, healthy), web, limits=Limits(header_timeout_seconds=1)
    )
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as idle:
            start = time.monotonic()
            assert idle.recv(1) == b""
            assert time.monotonic() - start < 3
    finally:
        server.shutdown()


def test_tls_and_header_options_are_checked(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: TLS99\n"
        "  cipher_suites: [TLS_NOT_A_SUITE]\n  curve_preferences: [X25519]\n  bogus: 1\n"
        "http_server_config:\n  headers:\n    Set-Cookie: x\n"
    )
    with pytest.raises(WebConfigError) as err:
        load_web_config(cfg)
    for needle in ("min_version", "TLS_NOT_A_SUITE", "curve_preferences", "bogus", "Set-Cookie"):
        assert needle in str(err.value)
