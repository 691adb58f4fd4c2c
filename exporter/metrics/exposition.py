"""Render on change, serve bytes: the exposition cached in sections, in every format a scrape may ask for.

The collector's sections (``RocmCollector.sections``) are each built from a few sources' entries. A section is
rendered again only when one of those entries changed (a new snapshot that is not equal to the last one) or
crossed its staleness limit, so a scrape between two collections serves bytes: plain text, OpenMetrics, and a
gzip of each, compressed once per change. Refreshing runs in the collecting thread (the store's listener), so
the scrape usually finds everything rendered; staleness is checked at every scrape too, so values are
withdrawn on time without a new collection.

The bytes are exactly what ``prometheus_client.generate_latest`` (and its OpenMetrics twin) makes of the whole
collector: each format renders family by family, so rendering sections and joining them is the same text
(tests/test_exposition.py compares them for every store the tests build).

Volatile sections (serve's own process and scrape metrics, the Alertmanager push) are built on every scrape and
served last. So that they do not cost a gzip of the whole body per scrape, the gzip stream is kept compressed up
to the first volatile section (a zlib compressor paused there) and each scrape copies it and compresses only the
volatile tail: one gzip member, the same bytes once decompressed.
"""

from __future__ import annotations

import gzip as gzip_module
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import generate_latest as text_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from exporter.metrics.collector import RocmCollector, Section
from exporter.store import StoreView

_EOF = b"# EOF\n"
GZIP_LEVEL = 6  # what prometheus_client and Go's default use


class _Families:
    """What the exposition functions need of a registry: ``collect()``."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _same(a: object, b: object) -> bool:
    return a is b or a == b


@dataclass(slots=True)
class _Rendered:
    key: tuple[object, ...]
    text: bytes
    openmetrics: bytes  # without the closing "# EOF"
    serial: int  # which rendering this is: a body is keyed by the serials it joins


@dataclass(slots=True)
class _Body:
    parts: tuple[int, ...]  # serials of the section renderings it joins
    text: bytes
    openmetrics: bytes
    gzip: dict[bool, bytes]
    stable: int = -1  # how many of ``parts`` come before the first volatile section (-1: all)
    text_split: int = 0  # where the volatile tail starts in ``text`` / ``openmetrics``
    openmetrics_split: int = 0


class Exposition:
    """Cached exposition bytes of one collector; ``get`` is all a scrape calls."""

    def __init__(self, collector: RocmCollector) -> None:
        self._collector = collector
        self._lock = threading.Lock()
        self._rendered: dict[str, _Rendered] = {}
        self._body: _Body | None = None
        self._serial = 0
        # openmetrics? -> (serials of the stable prefix, its gzip bytes so far, the compressor paused after it)
        self._gzip_prefix: dict[bool, tuple[tuple[int, ...], bytes, zlib._Compress]] = {}

    def invalidate(self) -> None:
        """Render everything again at the next scrape: the configuration the sections are built with changed."""
        with self._lock:
            self._rendered.clear()
            self._body = None
            self._gzip_prefix.clear()

    def refresh(self, _source: str | None = None) -> None:
        """Render what changed; a store listener (it runs in the collecting thread, after a source recorded)."""
        with self._lock:
            self._current()

    def get(self, openmetrics: bool = False, gzip: bool = False) -> bytes:
        with self._lock:
            body = self._current()
            if gzip:
                packed = body.gzip.get(openmetrics)
                if packed is None:
                    packed = body.gzip[openmetrics] = self._gzip(body, openmetrics)
                return packed
            return body.openmetrics if openmetrics else body.text

    def _gzip(self, body: _Body, openmetrics: bool) -> bytes:
        raw = body.openmetrics if openmetrics else body.text
        if body.stable < 0:  # nothing volatile: the body is compressed once and served until it changes
            return gzip_module.compress(raw, GZIP_LEVEL, mtime=0)
        split = body.openmetrics_split if openmetrics else body.text_split
        prefix = body.parts[: body.stable]
        cached = self._gzip_prefix.get(openmetrics)
        if cached is None or cached[0] != prefix:
            compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header, mtime 0
            cached = self._gzip_prefix[openmetrics] = (prefix, compressor.compress(raw[:split]), compressor)
        _, head, paused = cached
        compressor = paused.copy()
        return head + compressor.compress(raw[split:]) + compressor.flush()

    def _current(self) -> _Body:
        view = self._collector.view()
        rendered: list[_Rendered] = []
        stable = -1
        for section in self._collector.sections():
            if section.volatile and stable < 0:
                stable = len(rendered)
            rendered.append(self._section(section, view))
        parts = tuple(r.serial for r in rendered)
        if self._body is None or self._body.parts != parts:
            text = b"".join(r.text for r in rendered)
            om = b"".join(r.openmetrics for r in rendered) + _EOF
            body = self._body = _Body(parts, text, om, {}, stable)
            if stable >= 0:
                body.text_split = sum(len(r.text) for r in rendered[:stable])
                body.openmetrics_split = sum(len(r.openmetrics) for r in rendered[:stable])
        return self._body

    def _section(self, section: Section, view: StoreView) -> _Rendered:
        key = _key(section, view)
        old = self._rendered.get(section.name)
        unchanged = (
            not section.volatile
            and old is not None
            and len(old.key) == len(key)
            and all(_same(a, b) for a, b in zip(old.key, key, strict=True))
        )
        if unchanged and old is not None:
            old.key = key  # equal but new objects: compare by identity next time
            return old
        families = list(section.build(view))
        om = openmetrics_latest(_Families(families))  # type: ignore[no-untyped-call]
        self._serial += 1
        text = text_latest(_Families(families))
        new = _Rendered(key, text, om.removesuffix(_EOF), self._serial)
        self._rendered[section.name] = new
        return new


def _key(section: Section, view: StoreView) -> tuple[object, ...]:
    """What the section's families are made of: each input's data (or health) and whether it is fresh."""
    names = sorted(view.entries) if section.inputs is None else section.inputs
    key: list[object] = []
    for name in names:
        entry = view.entries.get(name)
        if entry is None:
            key += (name, None, None)
            continue
        key += (name, entry.health if section.health else entry.data, entry.health.fresh(view.now))
    return tuple(key)
