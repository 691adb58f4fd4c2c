"""Direct push of the device watchdog's conditions to Alertmanager (``--alertmanager.url``, ``serve`` only): for hosts
whose metrics no Prometheus evaluates rules on, and for paging within seconds instead of a scrape, an evaluation and
a ``for:`` later.

Two halves, like the rest of the exporter:

- ``plan`` is pure: (devices state, what was sent, now, config) -> (alerts to post, what is sent after that). An
  alert is an active ROOT condition (a consequence is folded under its cause and never alerts) of a kind that has
  an alert name (info kinds never alert), with severity critical or warning. It is posted when it starts or
  changes, and again every resend interval with ``endsAt = now + 3 x resend``, so Alertmanager never lets it run
  out while it holds even if two pushes in a row are lost. When it clears it is posted once more with
  ``endsAt = now``: resolved. Without fresh devices data (the source failing for three intervals) nothing is
  posted and nothing resolved: the alerts run out at their endsAt, as a rule over a stale series would resolve.
- ``AlertmanagerPusher`` is the I/O: one thread plans (woken by every devices collection and by the next resend
  due), one thread per URL posts (so a dead or hanging Alertmanager never delays another), retrying with
  exponential backoff capped at the resend interval. Failures are logged once per distinct error of an outage,
  with one line when the Alertmanager answers again; counts live in ``PushStatus`` for the collector. ``stop()``
  (SIGTERM) posts every alert it holds as resolved, bounded by the request timeout. Neither thread is ever waited
  on by a scrape or a source: the store only sets an event.

Labels are those the shipped rules (alerts/generate.py) put on the same alert: alertname (``KINDS[kind].alert``),
severity, watchdog="drift", cause (the condition's own kind: only root causes are pushed), condition, subject,
pci_bus (when the condition has a GPU), path (the subject, for the alerts about device nodes only), nodename, and
``instance`` = nodename: Prometheus would set the scrape address, which the exporter does not know. Then every
``--alertmanager.label`` (which may replace any label but alertname).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import msgspec
import requests
from msgspec.structs import replace

from exporter.clock import wall_time
from exporter.config import Config
from exporter.logging import get_logger
from exporter.model.devices import Condition, DeviceWatchState
from exporter.sinks.status import PushStatus, endpoint_label
from exporter.store import SnapshotStore
from exporter.watchdog.conditions import alert_name, fix_text, node_alerts

log = get_logger("alertmanager")

API_PATH = "/api/v2/alerts"
SOURCE = "devices"  # the source whose state is pushed
RUNBOOKS = "https://github.com/rocm-watchdog/rocm-watchdog/blob/main/docs/runbooks.md"
DASHBOARD = "/d/rocm-watchdog-devices"
ENDS_AT_RESENDS = 3  # endsAt this many resend intervals ahead
BACKOFF_FIRST_SECONDS = 1.0  # then 2, 4, 8... never more than the resend interval

Labels = tuple[tuple[str, str], ...]  # sorted by name: an alert's identity, what Alertmanager fingerprints


_PATH_ALERTS = node_alerts()


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Alert(msgspec.Struct, frozen=True):
    labels: Labels
    annotations: tuple[tuple[str, str], ...]
    starts_at: float  # unix time
    ends_at: float
    generator_url: str = ""

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")

    def same_as(self, other: Alert) -> bool:
        """Equal but for endsAt: nothing new to tell Alertmanager until the resend is due."""
        return replace(self, ends_at=0.0) == replace(other, ends_at=0.0)

    def to_json(self) -> dict[str, Any]:
        """One element of the v2 API's ``postableAlerts``."""
        out: dict[str, Any] = {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": _rfc3339(self.starts_at),
            "endsAt": _rfc3339(self.ends_at),
        }
        if self.generator_url:
            out["generatorURL"] = self.generator_url
        return out


class SentAlert(msgspec.Struct, frozen=True):
    alert: Alert
    at: float  # when it was last handed to the push threads


def alerting(c: Condition) -> bool:
    """Only active root causes of a kind with an alert page or ticket; consequences and info kinds never do."""
    return c.active and c.cause is None and c.severity in ("critical", "warning") and bool(alert_name(c.kind))


def alert_for(c: Condition, ends_at: float, config: Config, generator_url: str = "") -> Alert:
    name = alert_name(c.kind)
    labels = {
        "alertname": name,
        "severity": c.severity,
        "watchdog": "drift",
        "cause": c.kind,
        "condition": c.kind,
        "subject": c.subject,
        "pci_bus": c.pci_bus or "",
        "path": c.subject if name in _PATH_ALERTS else "",
        "nodename": config.nodename,
        "instance": config.nodename,
    }
    labels.update((k, v) for k, v in config.alertmanager_labels if k != "alertname")
    annotations = {
        "summary": c.message or f"{c.kind} on {c.subject}",
        "description": (
            f"rocm-watchdog on {config.nodename} reports {c.kind} for {c.subject} (pushed by the exporter, "
            "--alertmanager.url). `rocm-watchdog check` on the node explains it and prints the fix."
        ),
        "fix": fix_text(c.kind, c.subject, dict(c.details)),
        "runbook_url": f"{RUNBOOKS}#{name.lower()}",
        "dashboard_url": DASHBOARD,
    }
    return Alert(
        # Prometheus drops empty labels; an alert pushed here must fingerprint like one it would send.
        labels=tuple(sorted((k, v) for k, v in labels.items() if v)),
        annotations=tuple(sorted((k, v) for k, v in annotations.items() if v)),
        starts_at=c.since,
        ends_at=ends_at,
        generator_url=generator_url,
    )


def plan(
    state: DeviceWatchState | None,
    sent: Mapping[Labels, SentAlert],
    now: float,
    config: Config,
    generator_url: str = "",
) -> tuple[tuple[Alert, ...], dict[Labels, SentAlert]]:
    """The alerts to post now, and what is sent once they are: new or changed alerts, the ones whose resend is due,
    and the ones that cleared (resolved, ``endsAt = now``). ``state`` None: no fresh devices data, nothing to say."""
    if state is None:
        return (), dict(sent)
    resend = config.alertmanager_resend_seconds
    # A resend due within the next tenth of an interval (at most a second) goes now: the planner's wake-up may come
    # a little early, and it must not spin on an alert that is a few milliseconds short of due.
    slack = min(1.0, resend / 10)
    current: dict[Labels, Alert] = {}
    for c in state.conditions:
        if alerting(c):
            alert = alert_for(c, now + ENDS_AT_RESENDS * resend, config, generator_url)
            current[alert.labels] = alert
    post: list[Alert] = []
    after: dict[Labels, SentAlert] = {}
    for key, alert in current.items():
        prev = sent.get(key)
        if prev is not None and prev.alert.same_as(alert) and now < prev.at + resend - slack:
            after[key] = prev
            continue
        post.append(alert)
        after[key] = SentAlert(alert, now)
    post.extend(resolve_all({k: v for k, v in sent.items() if k not in current}, now))
    return tuple(post), after


def resolve_all(sent: Mapping[Labels, SentAlert], now: float) -> tuple[Alert, ...]:
    """Every alert sent, resolved now (a cleared condition; the exporter stopping)."""
    return tuple(replace(s.alert, ends_at=now) for s in sent.values())


def next_due(sent: Mapping[Labels, SentAlert], resend_seconds: float) -> float | None:
    """When the first resend is due; None when nothing is held."""
    if not sent:
        return None
    return min(s.at for s in sent.values()) + resend_seconds


def generator_url(listen_address: str, port: int, nodename: str, tls: bool) -> str:
    """Where the alert comes from: this exporter's /metrics, named by the listen host or else the node's name."""
    host = listen_address.rpartition(":")[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = nodename
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}/metrics"


_OBJECT_ADDRESS = re.compile(r"<[^<>]* object at 0x[0-9a-f]+>:? ?")
_USERINFO = re.compile(r"//[^/@\s]*@")


def _os_error(exc: BaseException) -> OSError | None:
    """The socket error under requests' and urllib3's wrappers (connection refused, name not known...)."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None and e.strerror:
            return e
        for inner in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args):
            if isinstance(inner, BaseException):
                stack.append(inner)
    return None


def describe_error(exc: BaseException, timeout: float) -> str:
    """A short error, the same text for the same failure (so it is logged once), never the URL's credentials."""
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        body = " ".join(exc.response.text.split())[:200]
        return f"HTTP {exc.response.status_code}" + (f": {body}" if body else "")
    if isinstance(exc, requests.Timeout):
        return f"no answer within {timeout:.3g}s"
    os_error = _os_error(exc)
    if os_error is not None:
        return f"connection failed: {os_error.strerror}"
    text = _USERINFO.sub("//", _OBJECT_ADDRESS.sub("", str(exc)))
    return f"{type(exc).__name__}: {text}"[:300]


class _Target:
    """One Alertmanager: its own thread, its own pending alerts (the latest of each label set), its own backoff."""

    def __init__(self, url: str, timeout: float, resend: float, status: PushStatus) -> None:
        self.url = url.rstrip("/") + API_PATH
        self.label = endpoint_label(url)
        self._timeout = timeout
        self._resend = resend
        self._status = status
        self._lock = threading.Lock()
        self._pending: dict[Labels, Alert] = {}
        self._wake = threading.Event()
        self._final = threading.Event()
        self._deadline = 0.0  # monotonic: the final push (stop) gives up here
        self._logged: set[str] = set()  # errors logged during the current outage; empty while pushes succeed
        self._session = requests.Session()
        self._thread = threading.Thread(target=self._run, name=f"alertmanager-push {self.label}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, alerts: Iterable[Alert]) -> None:
        """Queue alerts (never blocks on I/O); a newer version of a label set replaces one not yet posted."""
        with self._lock:
            for alert in alerts:
                self._pending[alert.labels] = alert
        self._wake.set()

    def finish(self, alerts: Iterable[Alert], deadline: float) -> None:
        """Post what is pending plus ``alerts`` once more, by ``deadline`` (monotonic), then end the thread."""
        self._deadline = deadline
        self._final.set()
        self.submit(alerts)  # wakes the thread after _final is set: it cannot miss it

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        failures = 0
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._final.is_set():
                remaining = self._deadline - time.monotonic()
                if remaining > 0.05:
                    self._push(min(self._timeout, remaining), final=True)
                self._session.close()
                return
            if self._push(self._timeout):
                failures = 0
                continue
            failures += 1
            delay = min(self._resend, BACKOFF_FIRST_SECONDS * 2 ** min(failures - 1, 20))
            self._final.wait(delay)  # a stop cuts the backoff short
            self._wake.set()  # retry what is pending, with whatever was queued meanwhile

    def _push(self, timeout: float, final: bool = False) -> bool:
        with self._lock:
            batch = dict(self._pending)
        if not batch:
            return True
        try:
            response = self._session.post(self.url, json=[a.to_json() for a in batch.values()], timeout=timeout)
            response.raise_for_status()
        except Exception as exc:  # requests' errors, and anything else: the thread must live on
            error = describe_error(exc, timeout)
            self._status.record_failure(self.label, error)
            if final:  # the alerts it still holds stay firing there until their endsAt
                log.warning("alertmanager_stop_push_failed", alertmanager=self.label, error=error, alerts=len(batch))
            elif error not in self._logged:
                self._logged.add(error)
                log.warning("alertmanager_push_failed", alertmanager=self.label, error=error, alerts=len(batch))
            else:
                log.debug("alertmanager_push_still_failing", alertmanager=self.label, error=error)
            return False
        self._status.record_success(self.label, wall_time())
        with self._lock:
            for key, alert in batch.items():
                if self._pending.get(key) is alert:  # not replaced by a newer version while it was posted
                    del self._pending[key]
        if self._logged:
            log.info("alertmanager_push_recovered", alertmanager=self.label, alerts=len(batch))
            self._logged.clear()
        else:
            log.debug("alertmanager_pushed", alertmanager=self.label, alerts=len(batch))
        return True


class AlertmanagerPusher:
    """Keeps the devices source's alerting conditions in every configured Alertmanager; see the module docstring."""

    def __init__(
        self,
        store: SnapshotStore,
        config: Config,
        status: PushStatus,
        generator: str = "",
        clock: Callable[[], float] = wall_time,
    ) -> None:
        self._store = store
        self._config = config
        self._status = status
        self._generator = generator
        self._clock = clock
        self._resend = config.alertmanager_resend_seconds
        self._timeout = min(config.alertmanager_timeout_seconds, self._resend)
        self._sent: dict[Labels, SentAlert] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._targets = [_Target(url, self._timeout, self._resend, status) for url in config.alertmanager_urls]
        self._thread = threading.Thread(target=self._run, name="alertmanager-plan", daemon=True)
        store.subscribe(self._on_record)

    def _on_record(self, name: str) -> None:
        if name == SOURCE:
            self._wake.set()

    def start(self) -> None:
        for target in self._targets:
            target.start()
        self._thread.start()
        log.info(
            "alertmanager_push_started",
            alertmanagers=[t.label for t in self._targets],
            resend_interval_seconds=self._resend,
            timeout_seconds=self._timeout,
        )

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()  # before planning: a collection recorded meanwhile wakes the next wait at once
            try:
                self._tick()
            except Exception:  # a bug must not end the push silently; the next wake-up tries again
                log.exception("alertmanager_plan_failed")
            self._wake.wait(self._wait_seconds())

    def _tick(self) -> None:
        now = self._clock()
        data = self._store.view(now).fresh_data(SOURCE)
        state = data if isinstance(data, DeviceWatchState) else None
        alerts, self._sent = plan(state, self._sent, now, self._config, self._generator)
        self._status.set_firing(len(self._sent))
        if alerts:
            log.debug("alertmanager_alerts_queued", alerts=len(alerts), firing=len(self._sent))
            for target in self._targets:
                target.submit(alerts)

    def _wait_seconds(self) -> float:
        due = next_due(self._sent, self._resend)
        now = self._clock()
        # A due time already past after planning means the devices data is stale: wait for it, not spin.
        return due - now if due is not None and due > now else self._resend

    def stop(self) -> None:
        """Resolve every alert held in every Alertmanager, then end the threads; within the request timeout."""
        deadline = time.monotonic() + self._timeout
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout=5)  # planning does no I/O: it ends at once
        resolved = resolve_all(self._sent, self._clock())
        self._sent = {}
        self._status.set_firing(0)
        for target in self._targets:
            target.finish(resolved, deadline)
        unfinished = [t.label for t in self._targets if not t.join(max(0.0, deadline - time.monotonic()) + 0.5)]
        log.info("alertmanager_push_stopped", resolved=len(resolved), unfinished=unfinished)
