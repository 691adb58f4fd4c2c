"""HTTP: ``/metrics`` from the private registry, ``/`` landing page, ``/healthz``. Serves from memory only."""

from __future__ import annotations

import html
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from exporter import __version__
from exporter.webconfig import WebConfig, check_basic_auth

log = structlog.get_logger("http")

StartResponse = Callable[..., Any]
Environ = dict[str, Any]

LANDING = """<!doctype html>
<html><head><title>rocm-watchdog</title></head>
<body>
<h1>rocm-watchdog {version}</h1>
<p>Prometheus exporter and stability watchdog for AMD ROCm GPU nodes.</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li></ul>
</body></html>
"""


def make_app(
    registry: CollectorRegistry, web: WebConfig, healthy: Callable[[], tuple[bool, str]]
) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if not check_basic_auth(web.basic_auth_users, environ.get("HTTP_AUTHORIZATION")):
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="rocm-watchdog"'), ("Content-Type", "text/plain")],
            )
            return [b"Unauthorized\n"]
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok, detail = healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [detail.encode() + b"\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [LANDING.format(version=html.escape(__version__)).encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not Found\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    # A client that connects and sends nothing (or stalls a TLS handshake) holds one thread, not the server.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http_request", request=format % args)


def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9862`` -> ("", 9862) (every address); ``127.0.0.1:9862``; ``[::1]:9862``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--web.listen-address: expected [host]:port, got {address!r}")
    return host.strip("[]"), int(port)


def serve(address: str, app: Callable[[Environ, StartResponse], Iterable[bytes]], web: WebConfig) -> WSGIServer:
    """Bind and serve in a daemon thread; returns the server (``server_port`` tells the bound port)."""
    host, port = parse_listen_address(address)

    class Server(_Server):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = make_server(host, port, app, server_class=Server, handler_class=_QuietHandler)
    if web.ssl_context is not None:
        # The handshake happens on the first read, in the request's own thread: a client stalling it cannot
        # block the accept loop for everyone else.
        server.socket = web.ssl_context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return server
