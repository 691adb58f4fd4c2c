"""Basic auth against the web config's bcrypt hashes, without paying bcrypt on every scrape.

A (user, password) pair that bcrypt verified once is remembered as an HMAC-SHA256 of the pair under a key
drawn at start-up, never as plaintext, and later requests compare against it in constant time. Everything
else pays one bcrypt: an unknown user is checked against a dummy hash of the configured cost, so it takes as
long as a known user with a wrong password, and a password bcrypt cannot take (over 72 bytes) is a plain
failure (401), never an exception. The split between ``quick`` (no bcrypt, may run on the event loop) and
``verify`` (bcrypt, runs on a worker thread) lets the server keep bcrypt off its accept loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import threading
from enum import Enum

import bcrypt
import msgspec

_COST = re.compile(rb"^\$2[abxy]?\$(\d\d)\$")
_MAX_PASSWORD_BYTES = 72  # bcrypt's limit; Go's x/crypto/bcrypt refuses longer ones too


class Verdict(Enum):
    ALLOWED = "allowed"
    DENIED = "denied"
    NEEDS_BCRYPT = "needs_bcrypt"


class Credentials(msgspec.Struct, frozen=True):
    user: str
    password: bytes


def parse_basic(header: str | None) -> Credentials | None:
    """``Basic <base64(user:password)>``; the scheme is case-insensitive (RFC 7617). None when malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return Credentials(user.decode("utf-8"), password)
    except UnicodeDecodeError:
        return None


class BasicAuth:
    """The users of one web config. Thread-safe; ``required`` is False when no users are configured."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self._users = dict(users)
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}  # user -> HMAC of the last pair bcrypt accepted
        self._lock = threading.Lock()
        costs = [int(m.group(1)) for h in users.values() if (m := _COST.match(h))]
        # Made once, at the highest configured cost, so an unknown user costs what a known one does.
        self._dummy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(max(costs, default=10))) if users else b""

    @property
    def required(self) -> bool:
        return bool(self._users)

    def _mac(self, credentials: Credentials) -> bytes:
        return hmac.new(self._key, credentials.user.encode() + b"\0" + credentials.password, hashlib.sha256).digest()

    def quick(self, header: str | None) -> tuple[Verdict, Credentials | None]:
        """What can be decided without bcrypt: no users, a malformed header, or a pair verified before."""
        if not self._users:
            return Verdict.ALLOWED, None
        credentials = parse_basic(header)
        if credentials is None:
            return Verdict.DENIED, None
        with self._lock:
            known = self._verified.get(credentials.user)
        # The same work whether or not the user has a verified pair (or exists): the cache says nothing by timing.
        mac = self._mac(credentials)
        if hmac.compare_digest(known if known is not None else self._key, mac) and known is not None:
            return Verdict.ALLOWED, credentials
        return Verdict.NEEDS_BCRYPT, credentials

    def verify(self, credentials: Credentials) -> bool:
        """One bcrypt (slow, releases the GIL): against the user's hash, or the dummy for an unknown user."""
        hashed = self._users.get(credentials.user)
        password = credentials.password
        if len(password) > _MAX_PASSWORD_BYTES:
            hashed, password = None, b"too long"  # never valid; still costs one bcrypt
        try:
            ok = bcrypt.checkpw(password, hashed if hashed is not None else self._dummy)
        except ValueError:  # a hash bcrypt cannot read: load_web_config only checks the prefix
            ok = False
        ok = ok and hashed is not None
        if ok:
            with self._lock:
                self._verified[credentials.user] = self._mac(credentials)
        return ok

    def check(self, header: str | None) -> bool:
        """Both steps in the calling thread (for callers without an event loop)."""
        verdict, credentials = self.quick(header)
        if verdict is Verdict.NEEDS_BCRYPT and credentials is not None:
            return self.verify(credentials)
        return verdict is Verdict.ALLOWED
