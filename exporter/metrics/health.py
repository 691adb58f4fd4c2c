"""The exporter's own health: per-source up, duration, last success, failures, staleness; build info; the
Alertmanager push; the HTTP server's clients."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import Metric

from exporter.build import build_info
from exporter.metrics import names
from exporter.metrics.families import new_family
from exporter.model.devices import StateFileStatus
from exporter.server.stats import StatsView
from exporter.sinks.status import PushView
from exporter.store import StoreView


def health_families(view: StoreView, nodename: str = "") -> Iterator[Metric]:
    up = new_family(names.SOURCE_UP)
    duration = new_family(names.SOURCE_DURATION)
    last_success = new_family(names.SOURCE_LAST_SUCCESS)
    failures = new_family(names.SOURCE_FAILURES)
    stale = new_family(names.SOURCE_STALE)
    pending = new_family(names.SOURCE_PENDING)
    for name in sorted(view.entries):
        health = view.entries[name].health
        failures.add_metric([name], health.failures_total)  # from zero, so increase() works at once
        if health.pending:  # registered, its first run not finished: up 0, told from a failure by pending 1
            up.add_metric([name], 0)
            pending.add_metric([name], 1)  # only while pending, as stale only while stale
            continue
        if health.up is None:
            continue  # the smi tool auto-selection did not pick it
        up.add_metric([name], 1 if health.up else 0)
        if health.duration_seconds is not None:
            duration.add_metric([name], health.duration_seconds)
        if health.last_success is not None:
            last_success.add_metric([name], health.last_success)
        if not health.fresh(view.now):
            stale.add_metric([name], 1)  # only while stale: up and last_success say the rest
    yield from (up, duration, last_success, failures, stale, pending)
    if view.absent:
        absent = new_family(names.SOURCE_ABSENT)
        for label in sorted(view.absent):
            absent.add_metric([label], 1)
        yield absent
    info = build_info()
    build = new_family(names.BUILD_INFO)
    build.add_metric([info.version, info.revision, info.branch, info.python_version], 1)
    yield build
    host = new_family(names.HOST_INFO)
    host.add_metric([nodename], 1)
    yield host


def state_file_families(files: Sequence[StateFileStatus]) -> Iterator[Metric]:
    """The three ways a state file fails (exporter.statefile), one family each, a series per file in --state.dir
    that the sources report on (baseline, condition start times, auto-accept candidate, kernel-log cursor), served
    only while the file fails that way: the source's health tells "fine" from "not looked at"."""
    by_name = sorted(files, key=lambda f: f.file)
    for spec, attribute in (
        (names.STATE_FILE_UNREADABLE, "unreadable"),
        (names.STATE_FILE_CORRUPT, "corrupt"),
        (names.STATE_FILE_UNSAVED, "unsaved"),
    ):
        family = new_family(spec)
        for f in by_name:
            if getattr(f, attribute) is not None:
                family.add_metric([f.file], 1)
        yield family


def push_families(view: PushView) -> Iterator[Metric]:
    """The Alertmanager push (--alertmanager.url): POSTs by result from zero, last success, alerts held firing."""
    pushes = new_family(names.ALERTMANAGER_PUSHES)
    last_success = new_family(names.ALERTMANAGER_LAST_SUCCESS)
    for target in view.targets:
        pushes.add_metric([target.alertmanager, "success"], target.successes)
        pushes.add_metric([target.alertmanager, "failure"], target.failures)
        if target.last_success is not None:
            last_success.add_metric([target.alertmanager], target.last_success)
    firing = new_family(names.ALERTMANAGER_FIRING)
    firing.add_metric([], view.firing)
    yield from (pushes, last_success, firing)


def http_server_families(view: StatsView) -> Iterator[Metric]:
    """What the HTTP server counts (exporter.server.stats): open connections, connections it dropped by reason and
    requests by status (each from zero for the reasons and statuses it knows), auth failures, bcrypt checks."""
    connections = new_family(names.HTTP_CONNECTIONS)
    connections.add_metric([], view.connections)
    dropped = new_family(names.HTTP_CONNECTIONS_DROPPED)
    for reason, count in view.dropped.items():
        dropped.add_metric([reason], count)
    requests = new_family(names.HTTP_REQUESTS)
    for code in sorted(view.requests):
        requests.add_metric([str(code)], view.requests[code])
    failures = new_family(names.HTTP_AUTH_FAILURES)
    failures.add_metric([], view.auth_failures)
    bcrypt_checks = new_family(names.HTTP_AUTH_BCRYPT_CHECKS)
    bcrypt_checks.add_metric([], view.bcrypt_checks)
    yield from (connections, dropped, requests, failures, bcrypt_checks)
