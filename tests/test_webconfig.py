"""--web.config.file: TLS and basic auth, served for real on loopback."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import bcrypt
import pytest
import requests
from prometheus_client.registry import CollectorRegistry

from exporter.http import make_app, parse_listen_address, serve
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
