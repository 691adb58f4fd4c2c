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

import re
import ssl
import time
import warnings
from pathlib import Path
from typing import Any

import msgspec

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
# Go's crypto/tls names of tls.CipherSuites(), what exporter-toolkit accepts (the "insecure" suites and the
# pre-1.16 CHACHA20 aliases are refused, as `promtool check web-config` refuses them) -> IANA code points.
# OpenSSL's names are looked up by code point, so no second table of OpenSSL spellings is kept.
_CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": 0x002F,
    "TLS_RSA_WITH_AES_256_CBC_SHA": 0x0035,
    "TLS_RSA_WITH_AES_128_GCM_SHA256": 0x009C,
    "TLS_RSA_WITH_AES_256_GCM_SHA384": 0x009D,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": 0xC009,
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": 0xC00A,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": 0xC013,
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": 0xC014,
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": 0xC02F,
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": 0xC02B,
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": 0xC030,
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": 0xC02C,
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA8,
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA9,
}
# TLS 1.3 suites: Go accepts the names and ignores them (TLS 1.3 suites are not configurable); so does this.
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
_CURVES = frozenset({"CurveP256", "CurveP384", "CurveP521", "X25519"})  # Go's names exporter-toolkit accepts
_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS = (
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
)
_HTTP_KEYS = ("headers", "http2")
# exporter-toolkit allows only these response headers in http_server_config.headers (names exactly so), two of
# them only with these values
_HEADERS = (
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
)
_HEADER_VALUES = {"X-Content-Type-Options": ("nosniff",), "X-Frame-Options": ("deny", "sameorigin")}
_BCRYPT = re.compile(r"\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}")


class WebConfigError(ValueError):
    pass


class WebConfig(msgspec.Struct, frozen=True):
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: dict[str, bytes] = msgspec.field(default_factory=dict)  # user -> bcrypt hash
    cert_file: Path | None = None  # what ssl_context was loaded from, to re-read when it changes
    key_file: Path | None = None
    headers: tuple[tuple[str, str], ...] = ()  # http_server_config.headers, on every response


def load_web_config(path: Path) -> WebConfig:
    """Read and check the file as exporter-toolkit does (``promtool check web-config`` rejects what this rejects,
    tests/test_cli_strict.py runs both); every problem is reported together in one WebConfigError."""
    try:
        raw: Any = safe_load(path.read_text(), str(path), unique_keys=True)
    except (OSError, UnicodeDecodeError, YamlError) as exc:
        raise WebConfigError(f"{path}: {exc}") from None
    if raw is None:
        return WebConfig()
    if not isinstance(raw, dict):
        raise WebConfigError(f"{path}: expected a mapping at the top level")
    problems: list[str] = []
    _unknown_keys(raw, _TOP_KEYS, "", problems)
    context = None
    cert_file = key_file = None
    tls = raw.get("tls_server_config")
    if tls is not None:
        context = _tls_context(tls, path.parent, problems)
        if context is not None:
            cert_file, key_file = path.parent / tls["cert_file"], path.parent / tls["key_file"]
    headers = _headers(raw.get("http_server_config"), problems)
    users = _users(raw.get("basic_auth_users"), problems)
    if problems:
        raise WebConfigError(f"{path}: " + "; ".join(problems))
    return WebConfig(context, users, cert_file, key_file, headers)


def _unknown_keys(section: dict[Any, Any], known: tuple[str, ...], where: str, problems: list[str]) -> None:
    for key in sorted(set(map(str, section)) - set(known)):
        import difflib

        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(known)})"
        problems.append(f"{where}unknown key {key}{hint}")


def _users(users: Any, problems: list[str]) -> dict[str, bytes]:
    if users is None:
        return {}
    if not isinstance(users, dict):
        problems.append("basic_auth_users: expected a mapping of user names to bcrypt hashes")
        return {}
    out: dict[str, bytes] = {}
    for user, hashed in users.items():
        problem = _bcrypt_problem(hashed)
        if problem:
            problems.append(f"basic_auth_users.{user}: {problem}")
            continue
        out[str(user)] = str(hashed).encode()
    return out


def _bcrypt_problem(hashed: Any) -> str | None:
    """What Go's bcrypt.Cost says of the hash (exporter-toolkit's check), then whether bcrypt here can use it."""
    if not isinstance(hashed, str) or len(hashed) < 59:
        return "not a bcrypt hash: too short (make one with htpasswd -nBC 10 '' | tr -d ':\\n')"
    if hashed[0] != "$" or not hashed[1].isdigit() or hashed[1] > "2":
        return f"not a bcrypt hash: algorithm version {hashed[1]!r} is not 2"
    cost = hashed.split("$")[2] if hashed.count("$") >= 3 else ""
    if not cost.isdigit() or not 4 <= int(cost) <= 31:
        return f"not a bcrypt hash: cost {cost!r} is outside 4..31"
    if not _BCRYPT.fullmatch(hashed):
        return "not a bcrypt hash: bad characters or length after the cost"
    return None


def _string(value: Any) -> str | None:
    """A YAML scalar as Go's yaml.v2 reads it into a string field: numbers are their text; None when not a scalar
    string or number."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _headers(server: Any, problems: list[str]) -> tuple[tuple[str, str], ...]:
    if server is None:
        return ()
    if not isinstance(server, dict):
        problems.append("http_server_config: expected a mapping")
        return ()
    _unknown_keys(server, _HTTP_KEYS, "http_server_config: ", problems)
    if "http2" in server and not isinstance(server["http2"], bool):
        problems.append(f"http_server_config.http2: expected true or false, got {server['http2']!r}")
    raw = server.get("headers")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.append("http_server_config.headers: expected a mapping of header names to values")
        return ()
    headers: list[tuple[str, str]] = []
    for name, value in raw.items():
        text = _string(value)
        if name not in _HEADERS:
            problems.append(
                f"http_server_config.headers: {name!r} can not be configured (one of {', '.join(_HEADERS)})"
            )
        elif text is None or "\n" in text or "\r" in text:
            problems.append(f"http_server_config.headers.{name}: expected a one-line string, got {value!r}")
        elif name in _HEADER_VALUES and text not in _HEADER_VALUES[name]:
            allowed = " or ".join(_HEADER_VALUES[name])
            problems.append(f"http_server_config.headers.{name}: expected {allowed}, got {text!r}")
        else:
            headers.append((name, text))
    return tuple(headers)


def _tls_context(tls: Any, base: Path, problems: list[str]) -> ssl.SSLContext | None:
    """The server's context, or None when the section configures no TLS (all of it empty, as exporter-toolkit
    treats it) or has problems (added to ``problems``)."""
    if not isinstance(tls, dict):
        problems.append("tls_server_config: expected a mapping")
        return None
    before = len(problems)
    _unknown_keys(tls, _TLS_KEYS, "tls_server_config: ", problems)
    strings: dict[str, str] = {}
    for key in ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"):
        if tls.get(key) is None:
            continue
        text = _string(tls[key])
        if text is None:
            problems.append(f"tls_server_config.{key}: expected a string, got {tls[key]!r}")
        else:
            strings[key] = text
    lists: dict[str, list[str]] = {}
    for key in ("cipher_suites", "curve_preferences", "client_allowed_sans"):
        value = tls.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or any(_string(v) is None for v in value):
            problems.append(f"tls_server_config.{key}: expected a list of names, got {value!r}")
        else:
            lists[key] = [str(v) for v in value]
    prefer = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        problems.append(f"tls_server_config.prefer_server_cipher_suites: expected true or false, got {prefer!r}")
    versions = {}
    for key in ("min_version", "max_version"):
        if key in strings:
            if strings[key] not in _TLS_VERSIONS:
                problems.append(
                    f"tls_server_config.{key}: unknown TLS version {strings[key]!r} (one of {', '.join(_TLS_VERSIONS)})"
                )
            else:
                versions[key] = _TLS_VERSIONS[strings[key]]
    if versions.get("min_version", ssl.TLSVersion.TLSv1_2) > versions.get("max_version", ssl.TLSVersion.TLSv1_3):
        problems.append("tls_server_config: min_version is above max_version: no connection could be made")
    for suite in lists.get("cipher_suites", []):
        if suite not in _CIPHER_SUITES and suite not in _TLS13_SUITES:
            problems.append(f"tls_server_config.cipher_suites: unknown cipher {suite!r} (Go's names, e.g. "
                            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")  # fmt: skip
    for curve in lists.get("curve_preferences", []):
        if curve not in _CURVES:
            problems.append(f"tls_server_config.curve_preferences: unknown curve {curve!r}")
    if lists.get("curve_preferences"):
        problems.append("tls_server_config.curve_preferences: not supported by this exporter (Python's ssl module)")
    if lists.get("client_allowed_sans"):
        problems.append("tls_server_config.client_allowed_sans: not supported by this exporter")
    auth = strings.get("client_auth_type", "")
    if auth and auth not in _CLIENT_AUTH:
        problems.append(
            f"tls_server_config.client_auth_type: unknown value {auth!r} (one of {', '.join(_CLIENT_AUTH)})"
        )
    if not any(strings.get(k) for k in ("cert_file", "key_file", "client_ca_file", "client_auth_type")):
        return None  # no TLS: exporter-toolkit's "no TLS config" (the other keys were still checked)
    for key in ("cert_file", "key_file"):
        if not strings.get(key):
            problems.append(f"tls_server_config: {key} is missing")
    if strings.get("client_ca_file") and auth in ("", "NoClientCert"):
        problems.append(
            "tls_server_config: client_ca_file is set without a client_auth_type that asks for a certificate"
        )
    if len(problems) > before:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():  # TLS10 and TLS11 are deprecated in Python, allowed by exporter-toolkit
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = versions.get("min_version", ssl.TLSVersion.TLSv1_2)
        context.maximum_version = versions.get("max_version", ssl.TLSVersion.TLSv1_3)
    if lists.get("cipher_suites"):
        _set_cipher_suites(context, lists["cipher_suites"], problems)
    if prefer:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        context.load_cert_chain(base / strings["cert_file"], base / strings["key_file"])
    except (OSError, ssl.SSLError) as exc:
        problems.append(f"tls_server_config: cannot load cert_file/key_file: {exc}")
        return None
    context.verify_mode = _CLIENT_AUTH[auth or "NoClientCert"]
    if strings.get("client_ca_file"):
        try:
            context.load_verify_locations(base / strings["client_ca_file"])
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"tls_server_config.client_ca_file: {exc}")
    return context if len(problems) == before else None


def _set_cipher_suites(context: ssl.SSLContext, suites: list[str], problems: list[str]) -> None:
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    openssl_names = {c["id"] & 0xFFFF: c["name"] for c in probe.get_ciphers()}
    names = []
    for suite in suites:
        if suite in _TLS13_SUITES:
            continue
        code = _CIPHER_SUITES[suite]
        if code not in openssl_names:
            problems.append(f"tls_server_config.cipher_suites: {suite!r} is not available in this OpenSSL")
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
