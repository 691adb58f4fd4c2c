"""SIGHUP: read the configuration again (the ``--config.file``, the web config, the kernel-log rules) and apply
what can change in a running exporter; keep everything as it was when any of it is invalid.

What a reload applies without a restart, and how:

- the web config (TLS, basic-auth users, headers): the server takes new connections with it (``reconfigure``);
- the sources' settings (paths, tools, backend, timeouts, intervals, collectors on or off, state dir, the
  kernel-log rules when their file or its content changed): the scheduler is stopped and started again with
  the new sources; the store keeps every source's last data and counters, so no series gaps or resets;
- ``--alertmanager.*`` and ``--host.name``: the push is stopped (resolving what it held firing) and started
  with the new settings;
- ``--processes.top-n``, ``--web.disable-exporter-metrics``, ``--log.*``, ``--health.event-window``: from the next
  scrape or line (the verdict file's next write, for the last).

What needs a restart (logged as ``config_reload_needs_restart``, the running value kept): the listening
sockets and their limits: ``--web.listen-address``, ``--web.systemd-socket``, ``--web.max-requests``,
``--web.telemetry-path``.

Flags given on the command line still win over the file, as at start: the reload re-reads the file and applies
the same flags over it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import fields, replace

from exporter.config import Config
from exporter.logging import configure, get_logger

if TYPE_CHECKING:
    from exporter.metrics.collector import RocmCollector
    from exporter.metrics.exposition import Exposition
    from exporter.metrics.selfmetrics import ExporterMetrics
    from exporter.scheduler import Scheduler
    from exporter.server.core import HttpServer
    from exporter.sinks.alertmanager import AlertmanagerPusher
    from exporter.sinks.status import PushStatus
    from exporter.webconfig import WebConfig

log = get_logger("reload")

# Config field -> the flag an operator knows it by (for the log).
FLAG_OF = {
    "listen_address": "web.listen-address",
    "web_config_file": "web.config.file",
    "web_max_requests": "web.max-requests",
    "web_systemd_socket": "web.systemd-socket",
    "web_telemetry_path": "web.telemetry-path",
    "web_disable_exporter_metrics": "web.disable-exporter-metrics",
    "rootfs": "path.rootfs",
    "sysfs": "path.sysfs",
    "devfs": "path.devfs",
    "procfs": "path.procfs",
    "kernel_log_path": "kernel-log.path",
    "kernel_log_rules": "kernel-log.rules",
    "rocm_smi_path": "rocm-smi.path",
    "amd_smi_path": "amd-smi.path",
    "smi_backend": "smi.backend",
    "smi_timeout_seconds": "smi.timeout",
    "state_dir": "state.dir",
    "collectors": "collector.<name>",
    "intervals_seconds": "collector.<name>.interval",
    "top_processes": "processes.top-n",
    "kubernetes_socket": "kubernetes.pod-resources-socket",
    "kubernetes_timeout_seconds": "kubernetes.timeout",
    "baseline_auto_accept_boots": "baseline.auto-accept-boots",
    "log_level": "log.level",
    "log_format": "log.format",
    "nodename": "host.name",
    "alertmanager_urls": "alertmanager.url",
    "alertmanager_labels": "alertmanager.label",
    "alertmanager_resend_seconds": "alertmanager.resend-interval",
    "alertmanager_timeout_seconds": "alertmanager.timeout",
    "health_event_window_seconds": "health.event-window",
    "once_output": "output",
    "check_json": "json",
    "check_probe": "probe",
    "devices_probe": "devices.probe",
}
RESTART_ONLY = frozenset({"listen_address", "web_systemd_socket", "web_max_requests", "web_telemetry_path"})
SOURCE_FIELDS = frozenset(
    {
        "rootfs",
        "sysfs",
        "devfs",
        "procfs",
        "kernel_log_path",
        "kernel_log_rules",
        "rocm_smi_path",
        "amd_smi_path",
        "smi_backend",
        "smi_timeout_seconds",
        "state_dir",
        "collectors",
        "intervals_seconds",
        "kubernetes_socket",
        "kubernetes_timeout_seconds",
        "baseline_auto_accept_boots",
        "devices_probe",  # the devices source opens the nodes, the processes source leaves its own pid out
    }
)
PUSH_FIELDS = frozenset(
    {
        "alertmanager_urls",
        "alertmanager_labels",
        "alertmanager_resend_seconds",
        "alertmanager_timeout_seconds",
        "nodename",  # a label of every pushed alert
    }
)


def changed_fields(old: Config, new: Config) -> list[str]:
    return [f.name for f in fields(Config) if getattr(old, f.name) != getattr(new, f.name)]


def rules_digest(config: Config) -> str | None:
    """What the kernel-log rules are now (None: the shipped ones); a changed file restarts the kernel-log source."""
    if config.kernel_log_rules is None or not config.enabled("kernel-log"):
        return None
    try:
        return hashlib.sha256(Path(config.kernel_log_rules).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


class Running(msgspec.Struct):
    """What serve runs; the reload swaps parts of it."""

    config: Config
    web: WebConfig
    scheduler: Scheduler
    collector: RocmCollector
    exposition: Exposition
    server: HttpServer
    exporter_metrics: ExporterMetrics
    push_status: PushStatus | None = None
    pusher: AlertmanagerPusher | None = None
    rules_digest: str | None = None

    def start_push(self) -> None:
        """The Alertmanager push for the current config (none without --alertmanager.url)."""
        if not self.config.alertmanager_urls:
            self.push_status, self.pusher = None, None
            return
        from exporter.sinks.alertmanager import AlertmanagerPusher, generator_url
        from exporter.sinks.status import PushStatus

        self.push_status = PushStatus(self.config.alertmanager_urls)
        tls = self.web.ssl_context is not None
        origin = generator_url(self.config.listen_address, self.server.server_port, self.config.nodename, tls)
        self.pusher = AlertmanagerPusher(self.scheduler.store, self.config, self.push_status, origin)
        self.pusher.start()

    def exporter_families(self) -> ExporterMetrics | None:
        return None if self.config.web_disable_exporter_metrics else self.exporter_metrics


class Reloader:
    """``reload()`` on SIGHUP, in the main thread (the signal handler only asks for it)."""

    def __init__(self, running: Running, load: Callable[[], Config]) -> None:
        self.running = running
        self._load = load  # the command line again over the file again; raises ConfigError
        self._previous = running.config

    def reload(self) -> bool:
        from exporter.cli import ConfigError

        running = self.running
        old = running.config
        problems: list[str] = []
        try:
            new = self._load()
        except ConfigError as exc:
            problems.extend(exc.problems)
            new = old
        # The web config to apply (the load checked it, with the rules and --path.rootfs); after a failed load the
        # running one stays, whatever its file says now.
        web = self._web(new, problems) if not problems else running.web
        if problems:
            log.error("config_reload_failed", problems=problems, kept="the running configuration")
            return False

        restart = [f for f in changed_fields(old, new) if f in RESTART_ONLY]
        if restart:
            log.warning(
                "config_reload_needs_restart",
                settings=[FLAG_OF.get(f, f) for f in restart],
                kept="the running value until a restart",
            )
            new = replace(new, **{f: getattr(old, f) for f in restart})
        changed = changed_fields(old, new)
        digest = rules_digest(new)
        restart_sources = bool(SOURCE_FIELDS.intersection(changed)) or digest != running.rules_digest
        restart_push = bool(PUSH_FIELDS.intersection(changed))

        if "log_level" in changed or "log_format" in changed:
            configure(new.log_level, new.log_format)
        from exporter.http import apply_web_config

        apply_web_config(running.server, web)
        running.web = web
        if restart_push and running.pusher is not None:
            running.pusher.stop()
            running.pusher = None
        running.config = new
        if restart_sources:
            self._previous = old
            self._restart_sources(new)
            running.rules_digest = digest
        if restart_push:
            running.start_push()
        running.collector.reconfigure(new, running.push_status, running.exporter_families())
        running.exposition.invalidate()
        log.info(
            "config_reloaded",
            changed=sorted({FLAG_OF.get(f, f) for f in changed}),
            sources_restarted=restart_sources,
            alertmanager_push_restarted=restart_push,
            web_config=str(new.web_config_file) if new.web_config_file else None,
        )
        return True

    def _web(self, config: Config, problems: list[str]) -> WebConfig:
        from exporter.webconfig import WebConfig, WebConfigError, load_web_config

        if config.web_config_file is None:
            return WebConfig()
        try:
            return load_web_config(config.web_config_file)
        except WebConfigError as exc:
            problems.append(f"--web.config.file: {exc}")
            return self.running.web

    def _restart_sources(self, config: Config) -> None:
        from exporter.scheduler import Scheduler
        from exporter.sources.registry import build_jobs

        running = self.running
        store = running.scheduler.store
        old_names = set(running.scheduler.names)
        # Stopped first: closing saves the kernel-log cursor the new source then starts from (exactly once).
        running.scheduler.shutdown()
        try:
            scheduler = Scheduler(store, build_jobs(config, store))
        except Exception:  # checked before, so a bug: keep collecting with what ran before
            log.exception("config_reload_sources_failed")
            scheduler = Scheduler(store, build_jobs(self._previous, store))
        store.unregister(old_names - set(scheduler.names))
        running.scheduler = scheduler
        scheduler.start()
