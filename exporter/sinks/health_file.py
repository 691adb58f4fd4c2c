"""The node's GPU health verdict as a file in ``--state.dir`` (``gpu-health``), for node-problem-detector's plugin
(``deploy/node-problem-detector/rocm-gpu-health.sh``) and anything else on the node that cannot scrape: NPD runs
its plugins in its own container, without Python and without the GPUs, so the plugin reads what this daemon
decided instead of judging the node itself (docs/gpu-health.md).

Two halves, like the Alertmanager push:

- ``render`` is pure: (verdict, when, how old the file may get) -> the file's text. Plain ``key value`` lines a
  ``/bin/sh`` ``read`` loop takes apart; ``message`` is one line of at most 80 characters (NPD's default
  ``max_output_length``). The file says when it was written and how old it may be (``max_age_seconds``): a reader
  finding it older knows the daemon stopped, and says ``unknown``, never the last verdict.
- ``HealthFileWriter`` is the I/O: one thread, woken by every recorded source run, writes the file atomically
  (temp file, fsync, rename: a reader sees the old file or the new one, never half of one) when the verdict
  changed, and at least every ``REFRESH_SECONDS`` so its age stays a heartbeat. A failed write is logged once per
  distinct error and retried at the next wake (``rocm_watchdog_state_file_unsaved{file="gpu-health"}`` says so
  meanwhile); it never stops the daemon or delays a scrape or a source.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from exporter.clock import wall_time
from exporter.config import Config
from exporter.logging import get_logger
from exporter.metrics.verdict import VERDICT_SOURCES, health_verdict
from exporter.model.devices import StateFileStatus
from exporter.statefile import remove_stale_temps, write_atomic
from exporter.store import SnapshotStore
from exporter.watchdog.health import PROCESS_SOURCE, HealthVerdict

log = get_logger("health-file")

VERDICT_FILE = "gpu-health"
FORMAT = 1
REFRESH_SECONDS = 30.0  # the heartbeat: the file is rewritten at least this often
MAX_AGE_SECONDS = 3 * REFRESH_SECONDS  # a reader treats an older file as no verdict (two heartbeats lost)
MESSAGE_MAX = 80  # NPD's default max_output_length
_WAKES = frozenset({*VERDICT_SOURCES, PROCESS_SOURCE})


def _ellipsis(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def message(verdict: HealthVerdict) -> str:
    """One line for a node condition: the count, then the first GPUs and their reasons as room allows."""
    total = len(verdict.gpus)
    bad = [g for g in verdict.gpus if g.state == "unhealthy"]
    unknown = [g for g in verdict.gpus if g.state == "unknown"]
    if bad:
        head = f"{len(bad)}/{total} GPUs unhealthy:"
        parts = [f"{g.pci_bus} {','.join(g.reasons)}" for g in bad]
    elif unknown:
        head = f"{len(unknown)}/{total} GPUs unknown:"
        parts = [f"{g.pci_bus} {','.join(g.reasons) or g.why}" for g in unknown]
    else:
        return f"all {total} GPUs healthy" if total else "no GPU on this node"
    return _ellipsis(" ".join([head, "; ".join(parts)]))


def render(verdict: HealthVerdict, written: float, max_age_seconds: float = MAX_AGE_SECONDS) -> str:
    lines = [
        "# rocm-watchdog GPU health verdict (docs/gpu-health.md); read by deploy/node-problem-detector/",
        f"format {FORMAT}",
        f"written {int(written)}",
        f"max_age_seconds {int(max_age_seconds)}",
        f"node {verdict.node_state}",
        f"gpus {len(verdict.gpus)}",
        *(f"{state} {verdict.count(state)}" for state in ("healthy", "unhealthy", "unknown")),
        f"message {message(verdict)}",
    ]
    for g in verdict.gpus:
        lines.append(" ".join(x for x in ("gpu", g.pci_bus, g.state, ",".join(g.reasons)) if x))
    return "\n".join(lines) + "\n"


class HealthFileWriter:
    def __init__(
        self,
        store: SnapshotStore,
        config: Callable[[], Config],
        clock: Callable[[], float] = wall_time,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self._store = store
        self._config = config  # the current one: a reload may move the state dir or change the window
        self._clock = clock
        self._refresh = refresh_seconds
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-file", daemon=True)
        self._last: tuple[Path, HealthVerdict] | None = None
        self._written_at: float | None = None  # time.monotonic() of the last write
        self._error: str | None = None
        store.subscribe(self._on_record)

    def _on_record(self, name: str) -> None:
        if name in _WAKES:  # the verdict reads no other source
            self._wake.set()

    def status(self) -> StateFileStatus:
        """How the last write went, for ``rocm_watchdog_state_file_unsaved{file="gpu-health"}``."""
        return StateFileStatus(VERDICT_FILE, unsaved=self._error)

    def start(self) -> None:
        path = self.path
        for temp in remove_stale_temps(path):
            log.info("stale_temp_file_removed", path=str(temp))
        self._thread.start()

    @property
    def path(self) -> Path:
        return self._config().state_dir / VERDICT_FILE

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            self.tick()
            self._wake.wait(self._refresh)

    def tick(self) -> bool:
        """Write the file when the verdict changed or the heartbeat is due; True when it was written."""
        config = self._config()
        # the verdict on the exporter's monotonic wall time (what the store records); the file's stamp on the real
        # clock, which the plugin compares with its own `date +%s`
        verdict = health_verdict(self._store.view(self._clock()), config.health_event_window_seconds)
        now = time.time()
        path = config.state_dir / VERDICT_FILE
        due = self._written_at is None or time.monotonic() - self._written_at >= self._refresh * 0.9
        if not due and self._last == (path, verdict):
            return False
        try:
            write_atomic(path, render(verdict, now, 3 * self._refresh).encode())
        except OSError as exc:
            error = f"{exc.strerror or exc}"
            if error != self._error:
                log.error("state_write_failed", file=VERDICT_FILE, path=str(path), error=error)
            self._error = error
            return False
        if self._error is not None:
            log.info("state_write_recovered", file=VERDICT_FILE, path=str(path))
        self._error = None
        self._last, self._written_at = (path, verdict), time.monotonic()
        return True

    def stop(self) -> None:
        """The file stays: it ages out (max_age_seconds) and its reader says unknown, as after a crash."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
