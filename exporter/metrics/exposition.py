"""Render on change, serve bytes: the exposition cached in sections, in every format a scrape may ask for.

The collector's sections (``RocmCollector.sections``) are each built from a few sources' entries. A section is
rendered again only when one of those entries changed (a new snapshot that is not equal to the last one) or
crossed its staleness limit, so a scrape between two collections serves bytes: plain text or OpenMetrics (each
rendered once a scrape has asked for it), and a gzip of each, compressed once per change. Refreshing runs in
the collecting thread (the store's listener), so the scrape usually finds everything rendered; staleness is
checked at every scrape too, so values are withdrawn on time without a new collection.

The bytes are exactly what ``prometheus_client.generate_latest`` (and its OpenMetrics twin) makes of the whole
collector: each format renders family by family, so rendering sections and joining them is the same text
(tests/test_exposition.py compares them for every store the tests build).

Volatile sections (serve's own process and scrape metrics, the Alertmanager push) are built on every scrape and
served last, and never by a refresh. So that they do not cost a gzip of the whole body per scrape, the gzip
stream is kept compressed up to the first volatile section (a zlib compressor paused there) and each scrape
copies it and compresses only the volatile tail: one gzip member, the same bytes once decompressed.
"""

from __future__ import annotations

import gzip as gzip_module
import threading
import time
import zlib
from collections.abc import Iterator, Sequence

import msgspec
from prometheus_client import generate_latest as text_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from exporter.metrics.collector import RocmCollector, Section, inputs_key
from exporter.store import StoreView

_EOF = b"# EOF\n"
GZIP_LEVEL = 6  # what prometheus_client and Go's default use
VOLATILE_SECONDS = 1.0  # serve's volatile sections (health, HTTP, process) are rendered at most once a second


class _Families:
    """What the exposition functions need of a registry: ``collect()``."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _same(a: object, b: object) -> bool:
    return a is b or a == b


class _Rendered(msgspec.Struct):
    key: tuple[object, ...]
    serial: int  # which rendering this is: a body is keyed by the serials it joins
    text: bytes | None = None  # each format rendered once asked for (None: not yet)
    openmetrics: bytes | None = None  # without the closing "# EOF"
    rendered_at: float = 0.0  # time.monotonic() of the rendering (volatile sections are reused briefly)

    def get(self, openmetrics: bool) -> bytes | None:
        return self.openmetrics if openmetrics else self.text


class _Body(msgspec.Struct):
    parts: tuple[int, ...]  # serials of the section renderings it joins
    raw: bytes
    gzip: bytes | None = None
    stable: int = -1  # how many of ``parts`` come before the first volatile section (-1: all)
    split: int = 0  # where the volatile tail starts in ``raw``


class Exposition:
    """Cached exposition bytes of one collector; ``get`` is all a scrape calls.

    A format is rendered once a scrape has asked for it (plain text until then): Prometheus asks for one format,
    so the other is never rendered. Volatile sections are rendered by the scrape only, never by ``refresh``, and
    at most once per ``volatile_seconds``: scrapes closer together than that (several Prometheus servers, a
    load test, a client in a loop) share one rendering, so the work per second is bounded whatever the scrape
    rate, and their values are at most that old (``serve`` uses VOLATILE_SECONDS).
    """

    def __init__(self, collector: RocmCollector, volatile_seconds: float = 0.0) -> None:
        self._collector = collector
        self._volatile_seconds = volatile_seconds
        self._lock = threading.Lock()
        self._rendered: dict[str, _Rendered] = {}
        self._bodies: dict[bool, _Body] = {}  # openmetrics? -> the body last served
        self._formats: set[bool] = {False}  # openmetrics? of every format a scrape asked for
        self._serial = 0
        # openmetrics? -> (serials of the stable prefix, its gzip bytes so far, the compressor paused after it)
        self._gzip_prefix: dict[bool, tuple[tuple[int, ...], bytes, zlib._Compress]] = {}

    def invalidate(self) -> None:
        """Render everything again at the next scrape: the configuration the sections are built with changed."""
        with self._lock:
            self._rendered.clear()
            self._bodies.clear()
            self._gzip_prefix.clear()

    def refresh(self, _source: str | None = None) -> None:
        """Render what changed; a store listener (it runs in the collecting thread, after a source recorded)."""
        with self._lock:
            view = self._collector.view()
            for section in self._collector.sections():
                if not section.volatile and not section.lazy:
                    for openmetrics in self._formats:
                        self._section(section, view, openmetrics)

    def get(self, openmetrics: bool = False, gzip: bool = False) -> bytes:
        with self._lock:
            self._formats.add(openmetrics)
            body = self._current(openmetrics)
            if not gzip:
                return body.raw
            if body.gzip is None:
                body.gzip = self._gzip(body, openmetrics)
            return body.gzip

    def _gzip(self, body: _Body, openmetrics: bool) -> bytes:
        if body.stable < 0:  # nothing volatile: the body is compressed once and served until it changes
            return gzip_module.compress(body.raw, GZIP_LEVEL, mtime=0)
        prefix = body.parts[: body.stable]
        cached = self._gzip_prefix.get(openmetrics)
        if cached is None or cached[0] != prefix:
            compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header, mtime 0
            cached = self._gzip_prefix[openmetrics] = (prefix, compressor.compress(body.raw[: body.split]), compressor)
        _, head, paused = cached
        compressor = paused.copy()
        return head + compressor.compress(body.raw[body.split :]) + compressor.flush()

    def _current(self, openmetrics: bool) -> _Body:
        view = self._collector.view()
        pieces: list[bytes] = []
        parts: list[int] = []
        stable, split = -1, 0
        for section in self._collector.sections():
            if section.volatile and stable < 0:
                stable, split = len(parts), sum(len(p) for p in pieces)
            rendered = self._section(section, view, openmetrics)
            piece = rendered.get(openmetrics)
            assert piece is not None
            pieces.append(piece)
            parts.append(rendered.serial)
        key = tuple(parts)
        body = self._bodies.get(openmetrics)
        if body is None or body.parts != key:
            raw = b"".join(pieces) + (_EOF if openmetrics else b"")
            body = self._bodies[openmetrics] = _Body(key, raw, None, stable, split)
        return body

    def _section(self, section: Section, view: StoreView, openmetrics: bool) -> _Rendered:
        """The section's rendering in the format asked for: the last one while its inputs are unchanged."""
        key = _key(section, view)
        old = self._rendered.get(section.name)
        if (
            section.volatile
            and old is not None
            and old.get(openmetrics) is not None
            and time.monotonic() - old.rendered_at < self._volatile_seconds
        ):
            return old  # rendered for a scrape a moment ago
        unchanged = (
            not section.volatile
            and old is not None
            and len(old.key) == len(key)
            and all(_same(a, b) for a, b in zip(old.key, key, strict=True))
        )
        if unchanged and old is not None:
            old.key = key  # equal but new objects: compare by identity next time
            if old.get(openmetrics) is None:  # the first scrape in this format since the section changed
                self._render(old, section, view, openmetrics)
            return old
        new = _Rendered(key, self._serial + 1, rendered_at=time.monotonic())
        self._render(new, section, view, openmetrics)
        if old is not None and section.volatile and old.get(openmetrics) == new.get(openmetrics):
            old.key, old.rendered_at = key, new.rendered_at  # the same bytes: the body (and its gzip) stays
            return old
        self._serial += 1
        self._rendered[section.name] = new
        return new

    @staticmethod
    def _render(rendered: _Rendered, section: Section, view: StoreView, openmetrics: bool) -> None:
        families = _Families(list(section.build(view)))
        if openmetrics:
            rendered.openmetrics = openmetrics_latest(families).removesuffix(_EOF)  # type: ignore[no-untyped-call]
        else:
            rendered.text = text_latest(families)


def _key(section: Section, view: StoreView) -> tuple[object, ...]:
    """What the section's families are made of: its own key, else each input's data (or health) and freshness."""
    if section.key is not None:
        return section.key(view)
    names = sorted(view.entries) if section.inputs is None else section.inputs
    return inputs_key(view, names, section.health)
