"""The exporter-toolkit web configuration file (``--web.config.file``): TLS and basic auth.

Same YAML as every Prometheus exporter::

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
      client_ca_file: ca.crt
      min_version: TLS12                             # and max_version: TLS10..TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # Go's names; TLS 1.2 and below, as in Go
      prefer_server_cipher_suites: true
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      alice: $2y$10$...        # bcrypt hash, as htpasswd -B makes

The certificate and key are read again when their files change (checked at most every few seconds, on a new
connection), as exporter-toolkit does, so a rotated certificate needs no restart. ``curve_preferences`` and
``client_allowed_sans`` are refused with a message rather than ignored: Python's ssl cannot honour the first,
and the second is not implemented yet.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.logging import get_logger
from exporter.yamlfile import YamlError, safe_load

log = get_logger("webconfig")

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# Go's crypto/tls names (what exporter-toolkit accepts) -> IANA code points; OpenSSL's names are looked up by
# code point, so no second table of OpenSSL spellings is kept.
_CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": 0x002F,
    "TLS_RSA_WITH_AES_256_CBC_SHA": 0x0035,
    "TLS_RSA_WITH_AES_128_CBC_SHA256": 0x003C,
    "TLS_RSA_WITH_AES_128_GCM_SHA256": 0x009C,
    "TLS_RSA_WITH_AES_256_GCM_SHA384": 0x009D,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": 0xC009,
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": 0xC00A,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": 0xC013,
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": 0xC014,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": 0xC023,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": 0xC027,
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": 0xC02F,
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": 0xC02B,
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": 0xC030,
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": 0xC02C,
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA8,
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA9,
}
_CIPHER_SUITES["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"] = _CIPHER_SUITES["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"]
_CIPHER_SUITES["TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"] = _CIPHER_SUITES[
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
]
_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
    "client_allowed_sans",
}
# exporter-toolkit allows only these response headers in http_server_config.headers
_HEADERS = (
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
)


class WebConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    cert_file: Path | None = None  # what ssl_context was loaded from, to re-read when it changes
    key_file: Path | None = None
    headers: tuple[tuple[str, str], ...] = ()  # http_server_config.headers, on every response


def load_web_config(path: Path) -> WebConfig:
    """Read and check the file; every problem is reported together in one WebConfigError."""
    try:
        raw: Any = safe_load(path.read_text(), str(path))
    except (OSError, YamlError) as exc:
        raise WebConfigError(f"{path}: {exc}") from None
    if raw is None:
        return WebConfig()
    if not isinstance(raw, dict):
        raise WebConfigError(f"{path}: expected a mapping at the top level")
    problems: list[str] = []
    unknown = set(raw) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        problems.append(f"unknown keys: {', '.join(sorted(unknown))}")
    context = None
    cert_file = key_file = None
    tls = raw.get("tls_server_config")
    if tls is not None:
        context = _tls_context(tls, path.parent, problems)
        if context is not None:
            cert_file, key_file = path.parent / tls["cert_file"], path.parent / tls["key_file"]
    headers = _headers(raw.get("http_server_config"), problems)
    users: dict[str, bytes] = {}
    for user, hashed in (raw.get("basic_auth_users") or {}).items():
        if not isinstance(hashed, str) or not hashed.startswith("$2"):
            problems.append(f"basic_auth_users.{user}: expected a bcrypt hash")
            continue
        users[str(user)] = hashed.encode()
    if problems:
        raise WebConfigError(f"{path}: " + "; ".join(problems))
    return WebConfig(context, users, cert_file, key_file, headers)


def _headers(server: Any, problems: list[str]) -> tuple[tuple[str, str], ...]:
    if server is None:
        return ()
    if not isinstance(server, dict):
        problems.append("http_server_config: expected a mapping")
        return ()
    for key in sorted(set(server) - {"headers", "http2"}):
        problems.append(f"http_server_config: unknown key {key}")
    allowed = {name.lower(): name for name in _HEADERS}
    headers: list[tuple[str, str]] = []
    for name, value in (server.get("headers") or {}).items():
        canonical = allowed.get(str(name).lower())
        if canonical is None or not isinstance(value, str) or "\n" in value or "\r" in value:
            problems.append(f"http_server_config.headers: {name!r} is not allowed (one of {', '.join(_HEADERS)})")
            continue
        headers.append((canonical, value))
    return tuple(headers)


def _tls_context(tls: Any, base: Path, problems: list[str]) -> ssl.SSLContext | None:
    if not isinstance(tls, dict):
        problems.append("tls_server_config: expected a mapping")
        return None
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if not cert or not key:
        problems.append("tls_server_config: cert_file and key_file are required")
        return None
    for name in sorted(set(tls) - _TLS_KEYS):
        problems.append(f"tls_server_config: unknown key {name}")
    for name in ("curve_preferences", "client_allowed_sans"):
        if tls.get(name):
            problems.append(f"tls_server_config.{name}: not supported by this exporter")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for option, default, attr in (
        ("min_version", "TLS12", "minimum_version"),
        ("max_version", "TLS13", "maximum_version"),
    ):
        version = str(tls.get(option, default))
        if version not in _TLS_VERSIONS:
            problems.append(f"tls_server_config.{option}: expected one of {', '.join(_TLS_VERSIONS)}, got {version!r}")
            continue
        setattr(context, attr, _TLS_VERSIONS[version])
    if tls.get("cipher_suites"):
        _set_cipher_suites(context, tls["cipher_suites"], problems)
    if tls.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        context.load_cert_chain(base / cert, base / key)
    except (OSError, ssl.SSLError) as exc:
        problems.append(f"tls_server_config: cannot load cert/key: {exc}")
        return None
    auth = str(tls.get("client_auth_type", "NoClientCert"))
    if auth not in _CLIENT_AUTH:
        problems.append(f"tls_server_config.client_auth_type: unknown value {auth!r}")
        return None
    context.verify_mode = _CLIENT_AUTH[auth]
    if tls.get("client_ca_file"):
        try:
            context.load_verify_locations(base / tls["client_ca_file"])
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"tls_server_config.client_ca_file: {exc}")
    return context


def _set_cipher_suites(context: ssl.SSLContext, suites: Any, problems: list[str]) -> None:
    if not isinstance(suites, list):
        problems.append("tls_server_config.cipher_suites: expected a list")
        return
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    openssl_names = {c["id"] & 0xFFFF: c["name"] for c in probe.get_ciphers()}
    names = []
    for suite in suites:
        code = _CIPHER_SUITES.get(str(suite))
        if code is None or code not in openssl_names:
            problems.append(f"tls_server_config.cipher_suites: unknown or unavailable suite {suite!r}")
            continue
        names.append(openssl_names[code])
    if names:
        try:
            context.set_ciphers(":".join(names))
        except ssl.SSLError as exc:
            problems.append(f"tls_server_config.cipher_suites: {exc}")


CERT_CHECK_SECONDS = 5.0


class CertificateReloader:
    """Re-reads the certificate and key into the live context when either file changes (a rotation), at most
    every ``interval_seconds``; a pair that does not load is logged and the old one kept."""

    def __init__(self, web: WebConfig, interval_seconds: float | None = None) -> None:
        self._web = web
        self._interval = CERT_CHECK_SECONDS if interval_seconds is None else interval_seconds
        self._checked = time.monotonic()
        self._seen = self._stamp()

    def _stamp(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in (self._web.cert_file, self._web.key_file):
            try:
                st = path.stat() if path is not None else None
            except OSError:
                st = None
            stamps.append((st.st_mtime_ns, st.st_size) if st is not None else (0, 0))
        return tuple(stamps)

    def __call__(self) -> None:
        web = self._web
        if web.ssl_context is None or web.cert_file is None or web.key_file is None:
            return
        now = time.monotonic()
        if now - self._checked < self._interval:
            return
        self._checked = now
        stamp = self._stamp()
        if stamp == self._seen:
            return
        self._seen = stamp
        try:
            web.ssl_context.load_cert_chain(web.cert_file, web.key_file)
        except (OSError, ssl.SSLError) as exc:
            log.warning("tls_certificate_reload_failed", cert_file=str(web.cert_file), error=str(exc))
            return
        log.info("tls_certificate_reloaded", cert_file=str(web.cert_file))
