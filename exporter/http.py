"""HTTP: ``/metrics`` (bytes from an exposition provider), ``/`` landing page, ``/healthz``, ``/readyz``. Serves
from memory.

``/healthz`` is liveness: 200 while the process serves (503 once it is shutting down). ``/readyz`` is readiness:
503 until every enabled source has finished its first run (succeeded or failed: a tool slow to start, as amd-smi
is on some hosts during DRM enumeration, holds it), then as ``/healthz``.

The application is a plain function of a request (``App``); the server it runs on (``exporter.server``) owns
connections, deadlines, fair shares, TLS and basic auth. ``/metrics`` negotiates as prometheus_client does:
OpenMetrics when ``Accept`` asks for ``application/openmetrics-text``, gzip when ``Accept-Encoding`` lists
``gzip``; the provider returns the bytes for that choice (a cache, or ``registry_exposition`` rendering).
"""

from __future__ import annotations

import gzip as gzip_module
import html
import time
from collections.abc import Callable

import msgspec
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry

from exporter import __version__
from exporter.logging import get_logger
from exporter.server.auth import BasicAuth
from exporter.server.core import HttpServer, Limits, Request, Response
from exporter.server.listen import bind_listener, effective_backlog, parse_listen_address, systemd_listeners
from exporter.server.stats import ServerStats
from exporter.webconfig import CertificateReloader, WebConfig

log = get_logger("http")

__all__ = [
    "App",
    "ExpositionProvider",
    "Limits",
    "apply_web_config",
    "make_app",
    "parse_listen_address",
    "registry_exposition",
    "serve",
]

# (openmetrics, gzip) -> the body of /metrics
ExpositionProvider = Callable[[bool, bool], bytes]

CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

LANDING = """<!doctype html>
<html><head><title>rocm-watchdog</title></head>
<body>
<h1>rocm-watchdog {version}</h1>
<p>Prometheus exporter and stability watchdog for AMD ROCm GPU nodes.</p>
{note}<ul><li><a href="{telemetry_href}">{telemetry_path}</a></li><li><a href="healthz">/healthz</a></li>
<li><a href="readyz">/readyz</a></li></ul>
</body></html>
"""


def wants_openmetrics(accept: str | None) -> bool:
    """prometheus_client's rule: the first ``application/openmetrics-text`` without a version, or with one at
    least 1.0.0; anything else gets the text format."""
    for item in (accept or "").split(","):
        media, *params = item.split(";")
        if media.strip() != "application/openmetrics-text":
            continue
        version = next((p.split("=", 1)[1].strip() for p in params if p.strip().startswith("version=")), "")
        if not version:
            return True
        try:
            if tuple(int(x) for x in version.split(".")) >= (1, 0, 0):
                return True
        except ValueError:
            continue
    return False


def wants_gzip(accept_encoding: str | None) -> bool:
    return any(item.split(";")[0].strip().lower() == "gzip" for item in (accept_encoding or "").split(","))


def registry_exposition(registry: CollectorRegistry) -> ExpositionProvider:
    """Render on every call (what a scrape cost before the exposition cache)."""

    def exposition(openmetrics: bool, gzip: bool) -> bytes:
        body = generate_openmetrics(registry) if openmetrics else generate_latest(registry)  # type: ignore[no-untyped-call]
        return gzip_module.compress(body, compresslevel=6, mtime=0) if gzip else body

    return exposition


class App(msgspec.Struct, frozen=True):
    exposition: ExpositionProvider
    healthy: Callable[[], tuple[bool, str]]
    landing: bytes = b""
    telemetry_path: str = "/metrics"  # --web.telemetry-path
    observe: Callable[[float], None] | None = None  # told how long each answer of the telemetry path took
    ready: Callable[[], tuple[bool, str]] | None = None  # /readyz; None: as /healthz

    def __call__(self, request: Request) -> Response:
        if request.path == self.telemetry_path:
            started = time.perf_counter()
            openmetrics = wants_openmetrics(request.headers.get("accept"))
            gzip = wants_gzip(request.headers.get("accept-encoding"))
            body = self.exposition(openmetrics, gzip)
            if self.observe is not None:
                self.observe(time.perf_counter() - started)
            content_type = CONTENT_TYPE_OPENMETRICS if openmetrics else CONTENT_TYPE_TEXT
            headers = (("Content-Encoding", "gzip"),) if gzip else ()
            return Response(200, body, content_type, (*headers, ("Vary", "Accept, Accept-Encoding")))
        if request.path == "/healthz":
            ok, detail = self.healthy()
            return Response(200 if ok else 503, detail.encode() + b"\n")
        if request.path == "/readyz":
            ok, detail = (self.ready or self.healthy)()
            return Response(200 if ok else 503, detail.encode() + b"\n")
        if request.path == "/":
            return Response(200, self.landing, "text/html; charset=utf-8")
        return Response(404, b"Not Found\n")


def make_app(
    source: CollectorRegistry | ExpositionProvider,
    web: WebConfig,
    healthy: Callable[[], tuple[bool, str]],
    telemetry_path: str = "/metrics",
    observe: Callable[[float], None] | None = None,
    note: str = "",
    ready: Callable[[], tuple[bool, str]] | None = None,
) -> App:
    """The app over a provider, or over a registry rendered per scrape. ``web`` is kept for the call's
    compatibility: auth and TLS are the server's (``serve``). ``note``: a paragraph of text for the landing page
    (``rocm-watchdog demo`` says there that the host is simulated)."""
    del web
    exposition = registry_exposition(source) if isinstance(source, CollectorRegistry) else source
    landing = LANDING.format(
        version=html.escape(__version__),
        telemetry_path=html.escape(telemetry_path),
        telemetry_href=html.escape(telemetry_path.lstrip("/") or "."),
        note=f"<p><strong>{html.escape(note)}</strong></p>\n" if note else "",
    )
    return App(exposition, healthy, landing.encode(), telemetry_path, observe, ready)


def serve(
    address: str,
    app: App,
    web: WebConfig,
    *,
    limits: Limits | None = None,
    systemd_socket: bool = False,
    stats: ServerStats | None = None,
) -> HttpServer:
    """Listen (on ``address``, or on the sockets systemd passed) and serve in a daemon thread; returns the
    running server (``server_port``, ``shutdown()``). OSError / ValueError / SystemdSocketError when it cannot
    listen. ``stats``: where the server counts its clients, for the ``rocm_watchdog_http_*`` metrics (made by the
    server when None)."""
    limits = limits or Limits()
    if systemd_socket:
        listeners = systemd_listeners()  # listening already, with the socket unit's Backlog=
    else:
        backlog = effective_backlog(limits.backlog)
        if backlog < limits.backlog:  # listen() would truncate it silently
            log.info("listen_backlog_capped", requested=limits.backlog, somaxconn=backlog)
        listeners = [bind_listener(address, backlog)]
    server = HttpServer(
        listeners,
        app,
        auth=BasicAuth(web.basic_auth_users),
        ssl_context=web.ssl_context,
        limits=limits,
        on_accept=CertificateReloader(web) if web.ssl_context is not None else None,
        extra_headers=web.headers,
        stats=stats,
    )
    return server.start()


def apply_web_config(server: HttpServer, web: WebConfig) -> None:
    """Serve with a reloaded web config from now on (SIGHUP): TLS, users and headers; the sockets stay."""
    server.reconfigure(
        auth=BasicAuth(web.basic_auth_users),
        ssl_context=web.ssl_context,
        on_accept=CertificateReloader(web) if web.ssl_context is not None else None,
        extra_headers=web.headers,
    )
