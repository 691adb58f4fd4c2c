"""Basic auth against the web config's bcrypt hashes, without paying bcrypt on every scrape.

A (user, password) pair that bcrypt verified once is remembered as an HMAC-SHA256 of the pair under a key
drawn at start-up, never as plaintext, and later requests compare against it in constant time. Everything
else pays one bcrypt: an unknown user is checked against a dummy hash of the highest configured cost, so it takes
as long as a known user with a wrong password, and a password bcrypt cannot take (over 72 bytes) is a plain
failure (401), never an exception. The split between ``quick`` (no bcrypt, may run on the event loop) and
``verify`` (bcrypt, runs on a worker thread) lets the server keep bcrypt off its accept loop.

What an unauthenticated client can make the server pay is capped: the dummy hash's cost is at most
``MAX_DUMMY_COST`` (12: about 0.25 s on a 2-CPU VM, 64 times less than the cost-18 hash of exporter-toolkit's own
test file), and it is made without running bcrypt at that cost (a cost-4 hash with its cost field rewritten: the
salt and checksum are just as random, and no password matches it), so loading a users file runs no bcrypt above
cost 4 and the server accepts at once. Every configured hash is still accepted (exporter-toolkit accepts any
cost); a hash above the cap gets one warning, saying what each uncached check of it costs and that its user can
be told from an unknown one by timing.

Every bcrypt of the package runs through ``bcrypt_hash`` (a check is a hash and a constant-time compare), and
``BasicAuth.bcrypt_runs`` counts them by cost: the one place to count, time or wrap bcrypt work.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import Counter
from enum import Enum

import bcrypt
import msgspec

from exporter.logging import get_logger

log = get_logger("http")

_COST = re.compile(rb"^\$2[abxy]?\$(\d\d)\$")
_MAX_PASSWORD_BYTES = 72  # bcrypt's limit; Go's x/crypto/bcrypt refuses longer ones too
# The most an unknown user's check costs, whatever the users file says: 2**12 rounds, 0.25 s on a 2-CPU VM (cost 10,
# htpasswd -B's default, is 0.065 s). Above it, a known user's wrong password costs more than an unknown user.
MAX_DUMMY_COST = 12
_ESTIMATE_COST = 8  # timed when a hash is above MAX_DUMMY_COST, to say what one check of it costs (16 ms a run)
_ESTIMATE_RUNS = 3
_MAKING_COST = 4  # bcrypt's lowest: what making the dummy runs
DEFAULT_COST = 10  # the dummy's cost when no hash says one (bcrypt would refuse them all anyway)


def bcrypt_hash(password: bytes, setting: bytes) -> bytes:
    """bcrypt of ``password`` with the salt and cost of ``setting`` (a salt or a whole hash): the only call of bcrypt
    in the package. Slow and GIL-free; ValueError for a setting bcrypt cannot read."""
    return bcrypt.hashpw(password, setting)


def cost_of(hashed: bytes) -> int | None:
    """The cost field of a bcrypt hash or salt (``$2b$12$...`` -> 12)."""
    m = _COST.match(hashed)
    return int(m.group(1)) if m else None


def dummy_hash(cost: int) -> bytes:
    """A hash of ``cost`` that no password matches, made with one bcrypt at cost 4 (1 ms): checking a password
    against it still costs 2**cost rounds, since bcrypt reads the cost from the hash."""
    made = bcrypt_hash(secrets.token_bytes(16), bcrypt.gensalt(_MAKING_COST))
    return made[:4] + b"%02d" % cost + made[6:]


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
        self.bcrypt_runs: Counter[int] = Counter()  # cost -> bcrypt runs (the dummy's making included)
        costs = {user: cost for user, h in users.items() if (cost := cost_of(h)) is not None}
        # The highest configured cost, so an unknown user costs what a known one does; capped, so what anyone can
        # make the server pay without a password is bounded.
        self.dummy_cost = min(max(costs.values(), default=DEFAULT_COST), MAX_DUMMY_COST)
        self._dummy = b""
        if users:
            self._dummy = dummy_hash(self.dummy_cost)
            self.bcrypt_runs[_MAKING_COST] += 1
        self._warn_expensive({user: cost for user, cost in costs.items() if cost > MAX_DUMMY_COST})

    def _warn_expensive(self, expensive: dict[str, int]) -> None:
        """One warning per hash above MAX_DUMMY_COST, with what one uncached check of it costs here (from one
        bcrypt at a low cost, doubled per cost step: a check at the hash's cost is not run to find out)."""
        if not expensive:
            return
        runs = []
        for _ in range(_ESTIMATE_RUNS):  # the fastest: the least disturbed by whatever else runs
            start = time.perf_counter()
            bcrypt_hash(b"estimate", bcrypt.gensalt(_ESTIMATE_COST))
            runs.append(time.perf_counter() - start)
            self.bcrypt_runs[_ESTIMATE_COST] += 1
        per_round = min(runs) / 2**_ESTIMATE_COST
        for user, cost in sorted(expensive.items()):
            log.warning(
                "http_auth_hash_expensive",
                user=user,
                cost=cost,
                seconds_per_uncached_check=round(per_round * 2**cost, 2),
                unknown_user_cost=self.dummy_cost,
                detail=f"each check of a new password for this user (the first scrape, every wrong guess) costs "
                f"2^{cost} bcrypt rounds, 2^{cost - self.dummy_cost} times an unknown user's check (capped at cost "
                f"{MAX_DUMMY_COST}): the user can be told from unknown ones by timing. A hash of cost 10 to 12 "
                "(htpasswd -nBC 10) avoids both",
            )

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
        against = hashed if hashed is not None else self._dummy
        try:
            computed = bcrypt_hash(password, against)
        except ValueError:  # a hash bcrypt cannot read: load_web_config only checks the prefix
            computed = b""
        else:
            with self._lock:
                self.bcrypt_runs[cost_of(against) or 0] += 1
        ok = hmac.compare_digest(computed, against)
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
