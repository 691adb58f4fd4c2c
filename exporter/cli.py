"""Command line: Prometheus-style dotted flags, an optional YAML file (flags win), five commands, and two small
ones for a non-root Kubernetes pod (``kmsg-relay``, ``prepare-state``) that take only their own flags.

Bad flags or config give one message listing every problem and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from exporter import __version__
from exporter.config import DEFAULT_INTERVALS_SECONDS, SOURCE_NAMES, Config, parse_duration
from exporter.logging import configure, default_format, get_logger
from exporter.yamlfile import safe_load

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from exporter.scheduler import Scheduler
    from exporter.sinks.status import PushStatus

EXIT_BAD_CONFIG = 2

log = get_logger("cli")


class ConfigError(Exception):
    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


# flag name (without --) -> (Config field, converter). Every one of these may also come from the YAML file.
def _path(value: Any) -> Path:
    return Path(str(value))


def _count(value: Any) -> int:
    """A whole number, as a flag string or a YAML integer; 1.9 or "2x" is an error, not a silent 1."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())):
        raise ValueError(f"expected a whole number >= 0, got {value!r}")
    return int(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _urls(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    urls = tuple(u.strip().rstrip("/") for item in items for u in str(item).split(",") if u.strip())
    for url in urls:
        if not re.match(r"https?://[^/\s]+", url):
            raise ValueError(f"not an http(s) URL: {url!r}")
        try:
            _ = urlsplit(url).port  # raises on a port that is not a number in range
        except ValueError:
            raise ValueError(f"not a valid port in {url!r}") from None
    return urls


def _labels(value: Any) -> tuple[tuple[str, str], ...]:
    """``key=value`` strings (a list from repeated flags, or a mapping in the config file) -> label pairs."""
    if isinstance(value, dict):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    else:
        pairs = []
        for item in value if isinstance(value, list) else [value]:
            key, sep, val = str(item).partition("=")
            if not sep:
                raise ValueError(f"expected key=value, got {item!r}")
            pairs.append((key.strip(), val.strip()))
    for key, _ in pairs:
        if not _LABEL_NAME.fullmatch(key) or key.startswith("__"):
            raise ValueError(f"not a valid label name: {key!r}")
    return tuple(pairs)


_REPEATED_FLAGS = frozenset({"alertmanager.url", "alertmanager.label"})
_SWITCHES = frozenset({"web.systemd-socket"})  # flags without a value, as in node_exporter
_SCALAR_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "web.listen-address": ("listen_address", str),
    "web.config.file": ("web_config_file", _path),
    "web.max-requests": ("web_max_requests", _count),
    "web.systemd-socket": ("web_systemd_socket", _flag),
    "path.rootfs": ("rootfs", _path),
    "path.sysfs": ("sysfs", _path),
    "path.devfs": ("devfs", _path),
    "path.procfs": ("procfs", _path),
    "kernel-log.path": ("kernel_log_path", _path),
    "kernel-log.rules": ("kernel_log_rules", _path),
    "rocm-smi.path": ("rocm_smi_path", str),
    "amd-smi.path": ("amd_smi_path", str),
    "smi.backend": ("smi_backend", str),
    "smi.timeout": ("smi_timeout_seconds", parse_duration),
    "state.dir": ("state_dir", _path),
    "processes.top-n": ("top_processes", _count),
    "kubernetes.pod-resources-socket": ("kubernetes_socket", _path),
    "kubernetes.timeout": ("kubernetes_timeout_seconds", parse_duration),
    "baseline.auto-accept-boots": ("baseline_auto_accept_boots", _count),
    "host.name": ("nodename", str),
    "alertmanager.url": ("alertmanager_urls", _urls),
    "alertmanager.label": ("alertmanager_labels", _labels),
    "alertmanager.resend-interval": ("alertmanager_resend_seconds", parse_duration),
    "alertmanager.timeout": ("alertmanager_timeout_seconds", parse_duration),
    # command options, which a config file may set too
    "output": ("once_output", _path),
    "json": ("check_json", _flag),
    "log.level": ("log_level", str),
    "log.format": ("log_format", str),
}
_HELP = {
    "web.listen-address": "address to serve /metrics on [:9862] (serve only)",
    "web.config.file": "TLS / basic-auth settings, exporter-toolkit web-config YAML",
    "web.max-requests": "scrapes served at once; 503 beyond, 0 = no limit [40]",
    "web.systemd-socket": "use the sockets systemd passed (socket activation) instead of --web.listen-address",
    "path.rootfs": "prefix for sysfs, devfs and procfs left at their defaults, and for etc/group [/]",
    "path.sysfs": "the host's sysfs [/sys]",
    "path.devfs": "the host's device nodes [/dev]",
    "path.procfs": "the host's procfs [/proc]",
    "kernel-log.path": "a kmsg device, or a dmesg/journal text file to follow [/dev/kmsg]",
    "kernel-log.rules": "YAML classification rules replacing the shipped ones",
    "rocm-smi.path": "rocm-smi to run [rocm-smi]",
    "amd-smi.path": "amd-smi to run [amd-smi]",
    "smi.backend": "auto (amd-smi if it works, else rocm-smi), amd-smi, rocm-smi or both [auto]",
    "smi.timeout": "kill a tool run after this long [20s]",
    "state.dir": "where the baseline and the kernel-log cursor persist [/var/lib/rocm-watchdog]",
    "processes.top-n": "export VRAM of the N largest KFD processes [20]",
    "kubernetes.pod-resources-socket": "the kubelet's pod-resources socket, read with --collector.kubernetes "
    "[/var/lib/kubelet/pod-resources/kubelet.sock]",
    "kubernetes.timeout": "deadline of one pod-resources List call [2s]",
    "baseline.auto-accept-boots": "accept the state as the baseline after N healthy boots, 0 = never [0]",
    "host.name": "the host's name on alerts and rocm_watchdog_host_info [$NODE_NAME, else the hostname]",
    "alertmanager.url": "push active alerts to this Alertmanager (v2 API; comma-separated or repeated) [off]",
    "alertmanager.label": "key=value label on every pushed alert (repeat the flag for several)",
    "alertmanager.resend-interval": "re-send active alerts this often [1m]",
    "alertmanager.timeout": "timeout of one push request [10s]",
    "log.level": "debug, info, warn, error [info]",
    "log.format": "json, logfmt or console [json unless stderr is a terminal]",
}
BACKENDS = ("auto", "amd-smi", "rocm-smi", "both")


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config.file", dest="config.file", metavar="FILE", help="YAML file with any of these flags")
    for flag, help_text in _HELP.items():
        action = "append" if flag in _REPEATED_FLAGS else "store_true" if flag in _SWITCHES else "store"
        p.add_argument(f"--{flag}", dest=flag, default=None, action=action, help=help_text)
    for source in SOURCE_NAMES:
        p.add_argument(
            f"--collector.{source}",
            dest=f"collector.{source}",
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"enable the {source} source [{'enabled' if Config().enabled(source) else 'disabled'}]",
        )
        p.add_argument(
            f"--collector.{source}.interval",
            dest=f"collector.{source}.interval",
            default=None,
            metavar="DURATION",
            help=f"how often {source} runs [{DEFAULT_INTERVALS_SECONDS[source]:g}s]",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocm-watchdog", description="Prometheus exporter and stability watchdog for AMD ROCm GPU nodes."
    )
    parser.add_argument("--version", action="version", version=f"rocm-watchdog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="scheduled collection and HTTP /metrics")
    _add_config_flags(serve)
    once = sub.add_parser("once", help="one collection; exposition to stdout or atomically to --output")
    _add_config_flags(once)
    once.add_argument("--output", type=Path, help="write here atomically (node_exporter textfile collector)")
    check = sub.add_parser("check", help="preflight: device nodes, groups, drift; exit 0 ok, 1 problems, 2 error")
    _add_config_flags(check)
    check.add_argument("--json", action="store_true", default=None, help="machine-readable report")
    check.add_argument(
        "--verbose", action="store_true", default=False, help="list every consequence under its cause, not a count"
    )
    parse = sub.add_parser("parse", help="normalised JSON of a captured tool output or kernel log")
    parse.add_argument("kind", choices=("rocm-smi", "amd-smi", "kernel-log", "gpu-metrics"))
    parse.add_argument("file", nargs="?", default="-", help="the capture, or - for stdin")
    parse.add_argument("--kernel-log.rules", dest="kernel-log.rules", default=None, help=_HELP["kernel-log.rules"])
    baseline = sub.add_parser("baseline", help="show the stored baseline, or accept the current state")
    baseline.add_argument("action", choices=("show", "accept"))
    _add_config_flags(baseline)
    relay = sub.add_parser(
        "kmsg-relay", help="copy kernel-log records into a FIFO a non-root exporter reads (root, CAP_SYSLOG only)"
    )
    relay.add_argument("--from", dest="from", default="/dev/kmsg", metavar="DEVICE", help="kmsg device [/dev/kmsg]")
    relay.add_argument(
        "--to", dest="to", default="/run/rocm-watchdog/kmsg", metavar="FIFO", help="FIFO to create and write"
    )
    _add_log_flags(relay)
    prepare = sub.add_parser(
        "prepare-state", help="give the state dir to the exporter's uid:gid, mode 0700 (uid 0, CAP_CHOWN only)"
    )
    prepare.add_argument("--state.dir", dest="state.dir", default=None, help=_HELP["state.dir"])
    prepare.add_argument("--owner", required=True, metavar="UID:GID", help="numeric owner, e.g. 10001:10001")
    _add_log_flags(prepare)
    return parser


def _add_log_flags(p: argparse.ArgumentParser) -> None:
    for flag in ("log.level", "log.format"):
        p.add_argument(f"--{flag}", dest=flag, default=None, help=_HELP[flag])


def _log_problems(level: str, fmt: str) -> list[str]:
    problems = []
    if fmt not in ("json", "logfmt", "console"):
        problems.append(f"--log.format: expected json, logfmt or console, got {fmt!r}")
    if level not in ("debug", "info", "warn", "warning", "error"):
        problems.append(f"--log.level: expected debug, info, warn or error, got {level!r}")
    return problems


def build_config(args: argparse.Namespace) -> Config:
    """Flags over the YAML file over defaults; every problem is collected into one ConfigError."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    from_file: set[str] = set()
    file_name = getattr(args, "config.file", None)
    if file_name:
        try:
            loaded = safe_load(Path(file_name).read_text(), file_name) or {}
            if not isinstance(loaded, dict):
                raise ValueError("expected a mapping of flag names to values")
            values.update({str(k).removeprefix("--"): v for k, v in loaded.items()})
            from_file = set(values)
        except (OSError, ValueError) as exc:
            problems.append(f"--config.file {file_name}: {exc}")
    for key, value in vars(args).items():
        if value is not None and key not in ("command", "config.file"):
            values[key] = value

    # The command line only carries what its parser knows; the file may say anything.
    known = (
        set(_SCALAR_FLAGS)
        | {f"collector.{s}" for s in SOURCE_NAMES}
        | {f"collector.{s}.interval" for s in SOURCE_NAMES}
    )
    for key in sorted(from_file - known):
        problems.append(f"--config.file {file_name}: unknown setting {key!r}")

    fields: dict[str, Any] = {}
    for flag, (field_name, convert) in _SCALAR_FLAGS.items():
        if flag in values:
            try:
                fields[field_name] = convert(values[flag])
            except (TypeError, ValueError) as exc:
                problems.append(f"--{flag}: {exc}")
    collectors = dict(Config().collectors)  # the opt-in sources are absent, so off
    intervals = dict(DEFAULT_INTERVALS_SECONDS)
    for source in SOURCE_NAMES:
        enabled = values.get(f"collector.{source}")
        if enabled is not None:
            if not isinstance(enabled, bool):
                problems.append(f"--collector.{source}: expected true or false, got {enabled!r}")
            else:
                collectors[source] = enabled
        interval = values.get(f"collector.{source}.interval")
        if interval is not None:
            try:
                intervals[source] = parse_duration(str(interval))
            except ValueError as exc:
                problems.append(f"--collector.{source}.interval: {exc}")
    fields["collectors"] = collectors
    fields["intervals_seconds"] = intervals
    if fields.get("smi_backend", "auto") not in BACKENDS:
        problems.append(f"--smi.backend: expected one of {', '.join(BACKENDS)}, got {fields['smi_backend']!r}")
    if fields.get("top_processes", 20) < 0:
        problems.append("--processes.top-n: must be >= 0")
    problems.extend(_log_problems(str(fields.get("log_level", "info")), str(fields.get("log_format", "json"))))
    if fields.get("alertmanager_urls") and not collectors["devices"]:
        problems.append("--alertmanager.url: pushes the devices collector's conditions; --no-collector.devices is set")
    if not fields.get("nodename"):
        fields["nodename"] = os.environ.get("NODE_NAME") or os.uname().nodename
    if "log_format" not in fields:
        fields["log_format"] = default_format()
    # --path.rootfs prefixes the three host paths left at their defaults.
    rootfs = fields.get("rootfs", Path("/"))
    for field_name, default in (("sysfs", "sys"), ("devfs", "dev"), ("procfs", "proc")):
        fields.setdefault(field_name, rootfs / default)
    if problems:
        raise ConfigError(problems)
    return replace(Config(), **fields)


def _fail_config(problems: Sequence[str]) -> int:
    print("rocm-watchdog: invalid configuration:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return EXIT_BAD_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "parse":
        return cmd_parse(args)
    if args.command == "kmsg-relay":
        return cmd_kmsg_relay(args)
    if args.command == "prepare-state":
        return cmd_prepare_state(args)
    try:
        config = build_config(args)
    except ConfigError as exc:
        return _fail_config(exc.problems)
    configure(config.log_level, config.log_format)
    if args.command == "serve":
        return cmd_serve(config)
    if args.command == "once":
        return cmd_once(config, config.once_output)
    if args.command == "check":
        from exporter.watchdog.check import run_check

        return run_check(config, as_json=config.check_json, environ=os.environ, verbose=bool(args.verbose))
    from exporter.watchdog.commands import baseline_accept, baseline_show

    return baseline_show(config) if args.action == "show" else baseline_accept(config)


def cmd_parse(args: argparse.Namespace) -> int:
    from exporter.model import ParseError

    if args.kind == "gpu-metrics":  # amdgpu's binary sysfs table: bytes, not text
        from exporter.parsers.gpu_metrics import parse_gpu_metrics

        try:
            data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        except OSError as exc:
            print(f"rocm-watchdog parse: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_CONFIG
        try:
            metrics = parse_gpu_metrics(data).to_json()
        except ParseError as exc:
            print(f"rocm-watchdog parse gpu-metrics: {exc}", file=sys.stderr)
            return 1
        json.dump(metrics, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(errors="replace")
    except OSError as exc:
        print(f"rocm-watchdog parse: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    try:
        result: dict[str, Any]
        if args.kind == "rocm-smi":
            from exporter.parsers.rocm_smi import parse_rocm_smi

            result = parse_rocm_smi(text).to_json()
        elif args.kind == "amd-smi":
            from exporter.parsers.amd_smi import parse_amd_smi

            result = parse_amd_smi(text).to_json()
        else:
            from exporter.watchdog.kernel_classify import kernel_log_report
            from exporter.watchdog.kernel_rules import KernelRulesError, load_rules

            rules_path = getattr(args, "kernel-log.rules")
            try:
                rules = load_rules(Path(rules_path) if rules_path else None)
            except KernelRulesError as exc:
                print(f"rocm-watchdog parse: {exc}", file=sys.stderr)
                return EXIT_BAD_CONFIG
            result = kernel_log_report(text, rules)
    except ParseError as exc:
        print(f"rocm-watchdog parse {args.kind}: {exc}", file=sys.stderr)
        return 1
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _small_command_logging(args: argparse.Namespace) -> list[str]:
    """Logging set up from --log.level / --log.format of a command without a config; the problems, if any."""
    level = getattr(args, "log.level") or "info"
    fmt = getattr(args, "log.format") or default_format()
    problems = _log_problems(level, fmt)
    if not problems:
        configure(level, fmt)
    return problems


def cmd_kmsg_relay(args: argparse.Namespace) -> int:
    """Relay until SIGTERM: exit 0; 1 when /dev/kmsg or the FIFO cannot be used (logged); 2 for bad flags."""
    problems = _small_command_logging(args)
    if problems:
        return _fail_config(problems)
    from exporter.sources.kmsg_relay import KmsgRelay, RelayError

    relay = KmsgRelay(Path(getattr(args, "from")), Path(args.to))

    def on_signal(_signum: int, _frame: object) -> None:
        relay.stop()  # only a flag: every wait of the relay looks at it within a quarter second

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("relay_starting", source=str(relay.source), fifo=str(relay.fifo))
    try:
        relay.run()
    except RelayError as exc:
        log.error("relay_failed", error=str(exc))
        return 1
    return 0


def cmd_prepare_state(args: argparse.Namespace) -> int:
    """Give the state dir to --owner: exit 0; 2 with one message when the flags are bad or it cannot."""
    from exporter.statedir import PrepareError, parse_owner, prepare_state_dir

    problems = _small_command_logging(args)
    try:
        uid, gid = parse_owner(args.owner)
    except ValueError as exc:
        problems.append(f"--owner: {exc}")
    if problems:
        return _fail_config(problems)
    state_dir = Path(getattr(args, "state.dir") or Config().state_dir)
    try:
        result = prepare_state_dir(state_dir, uid, gid)
    except PrepareError as exc:
        print(f"rocm-watchdog prepare-state: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    for entry in result.skipped:
        log.warning("state_entry_skipped", entry=entry)
    log.info("state_dir_prepared", path=str(state_dir), owner=f"{uid}:{gid}", changed=len(result.changed))
    return 0


def build_runtime(config: Config, push: PushStatus | None = None) -> tuple[Scheduler, CollectorRegistry]:
    """Scheduler and registry wired from the config; nothing runs yet. ConfigError for bad rule files. ``push``: the
    Alertmanager push's health, for the registry to export (serve with --alertmanager.url)."""
    from exporter.metrics.collector import make_registry
    from exporter.scheduler import Scheduler
    from exporter.sources.registry import build_jobs
    from exporter.store import SnapshotStore
    from exporter.watchdog.kernel_rules import KernelRulesError

    store = SnapshotStore()
    try:
        jobs = build_jobs(config, store)
    except KernelRulesError as exc:
        raise ConfigError([f"--kernel-log.rules: {exc}"]) from None
    return Scheduler(store, jobs), make_registry(store, config, push=push)


def cmd_once(config: Config, output: Path | None) -> int:
    from prometheus_client import generate_latest

    try:
        scheduler, registry = build_runtime(config)
    except ConfigError as exc:
        return _fail_config(exc.problems)
    try:
        scheduler.run_all_once()
    finally:
        scheduler.shutdown()
    text = generate_latest(registry)
    if output is None:
        sys.stdout.buffer.write(text)
        return 0
    from exporter.statefile import write_atomic

    try:
        write_atomic(output, text)
    except OSError as exc:
        return _fail_config([f"--output {output}: {exc.strerror or exc}"])
    return 0


def cmd_serve(config: Config) -> int:
    from exporter.http import Limits, make_app, serve
    from exporter.server.listen import SystemdSocketError
    from exporter.webconfig import WebConfig, WebConfigError, load_web_config

    try:
        web = load_web_config(config.web_config_file) if config.web_config_file else WebConfig()
    except WebConfigError as exc:
        return _fail_config([str(exc)])
    push_status = None
    if config.alertmanager_urls:  # serve only: once, check and parse never push
        from exporter.sinks.status import PushStatus

        push_status = PushStatus(config.alertmanager_urls)
    try:
        scheduler, _registry = build_runtime(config, push_status)
    except ConfigError as exc:
        return _fail_config(exc.problems)
    from exporter.metrics.collector import RocmCollector
    from exporter.metrics.exposition import Exposition

    # Render on change, serve bytes: sections are rendered in the collecting thread when a source records.
    exposition = Exposition(RocmCollector(scheduler.store, config, push=push_status))
    scheduler.store.subscribe(exposition.refresh)
    stop = threading.Event()

    def healthy() -> tuple[bool, str]:
        return (not stop.is_set(), "ok" if not stop.is_set() else "shutting down")

    try:
        server = serve(
            config.listen_address,
            make_app(exposition.get, web, healthy),
            web,
            limits=Limits(max_requests=config.web_max_requests),
            systemd_socket=config.web_systemd_socket,
        )
    except SystemdSocketError as exc:
        return _fail_config([f"--web.systemd-socket: {exc}"])
    except (OSError, ValueError) as exc:
        return _fail_config([f"--web.listen-address {config.listen_address}: {exc}"])
    pusher = None
    if push_status is not None:
        from exporter.sinks.alertmanager import AlertmanagerPusher, generator_url

        tls = web.ssl_context is not None
        origin = generator_url(config.listen_address, server.server_port, config.nodename, tls)
        pusher = AlertmanagerPusher(scheduler.store, config, push_status, origin)
        pusher.start()
    scheduler.start()
    log.info(
        "serving",
        address=str(server.server_address[0]) if config.web_systemd_socket else config.listen_address,
        port=server.server_port,
        tls=web.ssl_context is not None,
        systemd_socket=config.web_systemd_socket,
        max_requests=config.web_max_requests,
    )

    def on_signal(signum: int, _frame: object) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass
    from exporter.sources.runner import stop_all

    stop_all()
    scheduler.shutdown()
    if pusher is not None:
        pusher.stop()  # resolves what it holds firing, within --alertmanager.timeout
    server.shutdown()
    return 0
