"""serve's own cost, as node_exporter exports its own: ``process_*`` (CPU, memory, fds, start time) and
``python_*`` (runtime, garbage collector) from prometheus_client's collectors, and how long answering the
telemetry path took. On by default; ``--web.disable-exporter-metrics`` drops all of it, as node_exporter's flag
drops its ``process_*``, ``go_*`` and ``promhttp_*`` series.

Never in ``once``: its output goes into node_exporter's textfile collector, next to node_exporter's own
``process_*`` series, where a second set would clash. The families change on every scrape, so the section that
serves them is volatile (``Section.volatile``): built per scrape, after every cached section.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric, SummaryMetricFamily
from prometheus_client.registry import CollectorRegistry

from exporter.metrics import names


class ScrapeStats:
    """Count and total time of the telemetry path's answers; ``observe`` is called by the HTTP app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._count += 1
            self._sum += seconds

    def snapshot(self) -> tuple[int, float]:
        with self._lock:
            return self._count, self._sum


class ExporterMetrics:
    """The families of this process: prometheus_client's process, platform and GC collectors (on a registry of
    their own: the default one is never used) and the scrape-duration summary."""

    def __init__(self, scrapes: ScrapeStats | None = None) -> None:
        self.scrapes = scrapes or ScrapeStats()
        self._runtime = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._runtime)
        PlatformCollector(registry=self._runtime)
        GCCollector(registry=self._runtime)

    def families(self) -> Iterator[Metric]:
        yield from self._runtime.collect()
        count, total = self.scrapes.snapshot()
        spec = names.SCRAPE_DURATION
        yield SummaryMetricFamily(spec.name, spec.help, count_value=count, sum_value=total)
