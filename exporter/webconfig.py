"""The exporter-toolkit web configuration file (``--web.config.file``): TLS and basic auth.

Same YAML as every Prometheus exporter::

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
      client_ca_file: ca.crt
      min_version: TLS12
    basic_auth_users:
      alice: $2y$10$...        # bcrypt hash, as htpasswd -B makes
"""

from __future__ import annotations

import base64
import binascii
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

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


class WebConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash


def load_web_config(path: Path) -> WebConfig:
    """Read and check the file; every problem is reported together in one WebConfigError."""
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
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
    tls = raw.get("tls_server_config")
    if tls is not None:
        context = _tls_context(tls, path.parent, problems)
    users: dict[str, bytes] = {}
    for user, hashed in (raw.get("basic_auth_users") or {}).items():
        if not isinstance(hashed, str) or not hashed.startswith("$2"):
            problems.append(f"basic_auth_users.{user}: expected a bcrypt hash")
            continue
        users[str(user)] = hashed.encode()
    if problems:
        raise WebConfigError(f"{path}: " + "; ".join(problems))
    return WebConfig(context, users)


def _tls_context(tls: Any, base: Path, problems: list[str]) -> ssl.SSLContext | None:
    if not isinstance(tls, dict):
        problems.append("tls_server_config: expected a mapping")
        return None
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if not cert or not key:
        problems.append("tls_server_config: cert_file and key_file are required")
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _TLS_VERSIONS.get(str(tls.get("min_version", "TLS12")), ssl.TLSVersion.TLSv1_2)
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


def check_basic_auth(users: dict[str, bytes], header: str | None) -> bool:
    """True when no users are configured or the Authorization header names one with the right password."""
    if not users:
        return True
    if not header or not header.startswith("Basic "):
        return False
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    hashed = users.get(user)
    return hashed is not None and bcrypt.checkpw(password.encode(), hashed)
