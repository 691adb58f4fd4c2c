"""Command line: Prometheus-style dotted flags, an optional YAML file (flags win), five commands, and two small
ones for a non-root Kubernetes pod (``kmsg-relay``, ``prepare-state``) that take only their own flags.

As strict as node_exporter's kingpin: no abbreviated flags; a flag only on the commands it applies to (a shared
config file's settings for other commands are ignored, with a debug line); unknown flags and settings answered
with a "did you mean"; every problem of the command line, the config file and the web config in one message,
exit code 2. The exit codes are ``exporter.exitcodes.ExitCode`` (docs/exit-codes.md): a reader that goes away
(``| head -1``) ends the output quietly and the command exits with the code it would have had; a bug exits 70
with one line on stderr and the traceback in the log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from msgspec.structs import replace

from exporter.config import DEFAULT_INTERVALS_SECONDS, SOURCE_NAMES, Config, parse_duration
from exporter.exitcodes import ExitCode
from exporter.logging import configure, default_format, get_logger
from exporter.metrics import groups as metric_groups
from exporter.yamlfile import safe_load

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from exporter.scheduler import Scheduler
    from exporter.sinks.status import PushStatus

EXIT_BAD_CONFIG = ExitCode.USAGE

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


def _positive(value: Any) -> int:
    """A whole number of at least 1."""
    try:
        count = _count(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"expected a whole number >= 1, got {value!r}")
    return count


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


def _listen_address(value: Any) -> str:
    """``[host]:port``, checked with the rest of the configuration (binding it is ``serve``'s, at start)."""
    from exporter.server.listen import parse_listen_address

    address = str(value)
    parse_listen_address(address)  # ValueError: what is wrong, without the flag's name (the caller adds it)
    return address


def _telemetry_path(value: Any) -> str:
    path = str(value)
    if not path.startswith("/") or any(c in path for c in "?# \t\r\n") or path in ("/healthz", "/readyz"):
        raise ValueError(f"expected a path starting with / (not /healthz or /readyz, no query or blanks), got {path!r}")
    return path


_REPEATED_FLAGS = frozenset(
    {"alertmanager.url", "alertmanager.label", "metrics.disable", "metrics.enable", "metrics.enable-only"}
)
_METAVARS = {
    "metrics.disable": "GROUP[,GROUP...]",
    "metrics.enable": "GROUP[,GROUP...]",
    "metrics.enable-only": "GROUP[,GROUP...]",
}
# flags without a value, as in node_exporter
_SWITCHES = frozenset({"web.systemd-socket", "web.disable-exporter-metrics", "devices.probe"})
_NEGATABLE = frozenset({"probe"})  # --probe / --no-probe
_SCALAR_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "web.listen-address": ("listen_address", _listen_address),
    "web.config.file": ("web_config_file", _path),
    "web.max-requests": ("web_max_requests", _count),
    "web.listen-backlog": ("web_listen_backlog", _positive),
    "web.systemd-socket": ("web_systemd_socket", _flag),
    "web.telemetry-path": ("web_telemetry_path", _telemetry_path),
    "web.disable-exporter-metrics": ("web_disable_exporter_metrics", _flag),
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
    "health.event-window": ("health_event_window_seconds", parse_duration),
    # command options, which a config file may set too
    "output": ("once_output", _path),
    "json": ("check_json", _flag),
    "probe": ("check_probe", _flag),
    "devices.probe": ("devices_probe", _flag),
    "log.level": ("log_level", str),
    "log.format": ("log_format", str),
}
_HELP = {
    "web.listen-address": "address to serve /metrics on [:9862] (serve only)",
    "web.config.file": "TLS / basic-auth settings, exporter-toolkit web-config YAML",
    "web.max-requests": "scrapes served at once; 503 beyond, 0 = no limit [40]",
    "web.listen-backlog": "connections the kernel queues while the server is full, capped at net.core.somaxconn "
    "(not with --web.systemd-socket: the socket unit's Backlog=) [1024]",
    "web.systemd-socket": "use the sockets systemd passed (socket activation) instead of --web.listen-address",
    "web.telemetry-path": "path under which to expose metrics [/metrics]",
    "web.disable-exporter-metrics": "exclude the exporter's own process_*, python_* and scrape-duration metrics",
    "path.rootfs": "prefix for sysfs, devfs, procfs and the kernel log left at their defaults, and for etc/group; "
    "must be a directory [/]",
    "path.sysfs": "the host's sysfs [/sys]",
    "path.devfs": "the host's device nodes [/dev]",
    "path.procfs": "the host's procfs [/proc]",
    "kernel-log.path": "a kmsg device, or a dmesg/journal text file to follow [<path.rootfs>/dev/kmsg]",
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
    "probe": "open /dev/kfd and the render nodes KFD lists (read-write, closed at once) to ask the kernel what the "
    "device cgroup, the mount and the security modules allow; an open creates a KFD process while it lasts and "
    "wakes a runtime-suspended GPU [on]",
    "devices.probe": "open /dev/kfd and the render nodes KFD lists every devices interval to report what the kernel "
    "answers (rocm_device_node_open_ok); each open creates a KFD process while it lasts (this one's pid is left out "
    "of the process series) and wakes a runtime-suspended GPU [off]",
    "health.event-window": "a critical kernel event keeps its GPU unhealthy (rocm_gpu_health) this long after its "
    "timestamp [10m]",
    "log.level": "debug, info, warn, error [info]",
    "log.format": "json, logfmt or console [json unless stderr is a terminal]",
    "metrics.disable": "metric groups not to export (comma-separated or repeated; a prefix such as gpu names every "
    f"gpu.* group): {', '.join(metric_groups.SWITCHABLE)}; docs/metrics.md lists their families [none]",
    "metrics.enable": "metric groups off by default to export too ("
    + ", ".join(sorted(metric_groups.DEFAULT_OFF))
    + "; comma-separated or repeated) [none]",
    "metrics.enable-only": "export only these metric groups, core, and the groups the alert rules read ("
    + ", ".join(n for n, g in metric_groups.GROUPS.items() if g.alerting and g.switchable)
    + ") unless --metrics.disable names those [every group]",
}
BACKENDS = ("auto", "amd-smi", "rocm-smi", "both")

# The commands each flag (and each setting of a config file) applies to. "baseline show" and "baseline accept"
# share a parser; show reads only the state dir, and takes the path flags that `baseline --help` lists too. A flag
# on the command line of another command is an error; a setting in the config file for another command is ignored
# (a file may be shared by serve, once and check).
_SERVE = frozenset({"serve"})
_COLLECT = frozenset({"serve", "once"})
_READ_HOST = frozenset({"serve", "once", "check", "baseline accept"})
_STATE = _READ_HOST | {"baseline show"}
CONFIG_COMMANDS = _STATE  # the commands that take --config.file and --log.*
_APPLIES: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ("web.listen-address", "web.config.file", "web.max-requests", "web.systemd-socket", "web.telemetry-path"),
        _SERVE,
    ),
    "web.listen-backlog": _SERVE,
    "web.disable-exporter-metrics": _SERVE,
    **dict.fromkeys(("path.rootfs", "path.sysfs", "path.devfs", "path.procfs"), _STATE),
    **dict.fromkeys(
        (
            "kernel-log.path",
            "kernel-log.rules",
            "rocm-smi.path",
            "amd-smi.path",
            "smi.backend",
            "smi.timeout",
            "processes.top-n",
            "kubernetes.pod-resources-socket",
            "kubernetes.timeout",
            "baseline.auto-accept-boots",
            "host.name",
            "health.event-window",
        ),
        _COLLECT,
    ),
    "state.dir": _STATE,
    **dict.fromkeys(
        ("alertmanager.url", "alertmanager.label", "alertmanager.resend-interval", "alertmanager.timeout"), _SERVE
    ),
    "output": frozenset({"once"}),
    "json": frozenset({"check"}),
    "probe": frozenset({"check"}),
    "devices.probe": _COLLECT,
    "log.level": _STATE,
    "log.format": _STATE,
    "metrics.disable": _COLLECT,
    "metrics.enable": _COLLECT,
    "metrics.enable-only": _COLLECT,
    **{f"collector.{s}": _COLLECT for s in SOURCE_NAMES},
    **{f"collector.{s}.interval": _SERVE for s in SOURCE_NAMES},  # once runs each source once
}
SETTINGS = tuple(_APPLIES)  # every flag name a config file may hold


def _commands(applies: frozenset[str]) -> str:
    """The commands of ``applies`` for a message (``serve and once``); baseline show and accept as ``baseline``."""
    names = set(applies)
    if {"baseline show", "baseline accept"} <= names:
        names -= {"baseline show", "baseline accept"}
        names.add("baseline")
    ordered = sorted(names)
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " and " + ordered[-1]


def suggest(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate ``name`` most likely meant: the same words with other separators (``web-listen-address``
    for ``web.listen-address``), else a flag it abbreviates, else the closest spelling (difflib)."""

    def words(text: str) -> str:
        return re.sub(r"[-_.]+", ".", text.lower())

    for candidate in candidates:
        if words(candidate) == words(name):
            return candidate
    # an abbreviation: the shortest flag it begins, the first in order of those as long (--web.listen is
    # --web.listen-address rather than --web.listen-backlog)
    begun = sorted((c for c in candidates if words(c).startswith(words(name))), key=lambda c: (len(c), c))
    if begun:
        return begun[0]
    import difflib  # only when something is wrong: 5 ms of imports

    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return close[0] if close else None


class UsageError(Exception):
    """What argparse would have printed before exiting 2; collected with every other problem instead."""


class _Parser(argparse.ArgumentParser):
    """argparse without abbreviations, whose errors are collected (``main``) instead of ending the process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _Version(argparse.Action):
    """``--version``: node_exporter's lines (version, revision, branch, build date, runtime, platform)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        from exporter.build import build_info

        sys.stdout.write(build_info().version_text(parser.prog))
        parser.exit()


def _add_config_flags(p: argparse.ArgumentParser, commands: frozenset[str]) -> None:
    """The flags of ``commands`` (one command, or baseline's show and accept) and --config.file."""
    p.add_argument("--config.file", dest="config.file", metavar="FILE", help="YAML file with any of these flags")
    for flag, help_text in _HELP.items():
        if not _APPLIES[flag] & commands:
            continue
        action: Any = "append" if flag in _REPEATED_FLAGS else "store_true" if flag in _SWITCHES else "store"
        if flag in _NEGATABLE:
            action = argparse.BooleanOptionalAction
        extra: dict[str, Any] = {"metavar": _METAVARS[flag]} if flag in _METAVARS else {}
        p.add_argument(f"--{flag}", dest=flag, default=None, action=action, help=help_text, **extra)
    for source in SOURCE_NAMES:
        if _APPLIES[f"collector.{source}"] & commands:
            p.add_argument(
                f"--collector.{source}",
                dest=f"collector.{source}",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"enable the {source} source [{'enabled' if Config().enabled(source) else 'disabled'}]",
            )
        if _APPLIES[f"collector.{source}.interval"] & commands:
            p.add_argument(
                f"--collector.{source}.interval",
                dest=f"collector.{source}.interval",
                default=None,
                metavar="DURATION",
                help=f"how often {source} runs [{DEFAULT_INTERVALS_SECONDS[source]:g}s]",
            )


# What each command does, for its --help (the one-line help= is what the program's --help lists).
_DESCRIPTIONS = {
    "serve": "Collect from every enabled source on its own schedule and serve the metrics over HTTP (the telemetry "
    "path, /healthz, and a landing page on /) until SIGTERM or SIGINT; SIGHUP reloads the configuration. A scrape is "
    "answered from memory and never waits for a tool.",
    "once": "Run every enabled source once and write the exposition to standard output, or atomically to --output "
    "FILE (for node_exporter's textfile collector; the directory must exist). Exits 0 even when a source failed: "
    "its rocm_watchdog_source_up series says so.",
    "check": "Preflight a host or a container: are /dev/kfd and the render nodes there, can this process open them "
    "(computed from modes and groups, and asked of the kernel by opening them, unless --no-probe), what drifted "
    "since the baseline in --state.dir, which GPUs ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES select, and the "
    "host's configuration (udev rules, ROCm settings and versions, /dev/shm). Exits 0 when nothing is wrong, 1 when "
    "it found problems (each with its fix), 2 when it could not check (docs/check.md).",
    "capture": "Gather what a maintainer needs to reproduce a misparse or a wrong verdict on this node into one "
    "text archive (ttar) for a bug report: the amdgpu and KFD sysfs files the sources read, the device nodes' "
    "metadata, the udev rules that match them, each tool's output as the sources run it, the amdgpu kernel-log "
    "lines, check --json (the kernel probe off) and the exporter's flags. Serials, UUIDs, host and user names are "
    "redacted; it opens no GPU node and writes nothing but --output.",
    "parse": "Read a captured rocm-smi or amd-smi output, kernel log or gpu_metrics table (FILE, or - for standard "
    "input) and print what the exporter makes of it as normalised JSON, offline. Exits 1 when the input is not a "
    "capture of that kind.",
    "baseline": "show: print the device baseline stored in --state.dir (exit 1 when there is none yet). accept: make "
    "the host's current GPUs and device nodes the baseline, after an intended change (the drift alerts then clear).",
    "kmsg-relay": "Open the kernel log (/dev/kmsg) and copy its records unchanged into a FIFO that a non-root "
    "exporter follows with --kernel-log.path: the Kubernetes sidecar. Runs as root with CAP_SYSLOG; drops every "
    "capability once the device is open.",
    "prepare-state": "Give the state dir and what is in it to the exporter's uid:gid, mode 0700: the Kubernetes "
    "initContainer for the hostPath state dir, which Kubernetes creates root-owned. Runs as uid 0; CAP_CHOWN is what "
    "it uses (the DaemonSet grants CHOWN and FOWNER).",
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rocm-watchdog", description="Prometheus exporter and stability watchdog for AMD ROCm GPU nodes."
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the version, revision, branch, build date and runtime"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    serve = sub.add_parser("serve", help="scheduled collection and HTTP /metrics", description=_DESCRIPTIONS["serve"])
    _add_config_flags(serve, frozenset({"serve"}))
    once = sub.add_parser(
        "once", help="one collection; exposition to stdout or atomically to --output", description=_DESCRIPTIONS["once"]
    )
    _add_config_flags(once, frozenset({"once"}))
    once.add_argument("--output", type=Path, help="write here atomically (node_exporter textfile collector)")
    capture = sub.add_parser(
        "capture",
        help="what a bug report needs, redacted, in one text archive (--output FILE)",
        description=_DESCRIPTIONS["capture"],
    )
    _add_config_flags(capture, frozenset({"once"}))  # once's flags: it runs the sources as once does
    capture.add_argument("--output", type=Path, help="the archive to write (ttar text; atomically)")
    check = sub.add_parser(
        "check",
        help="preflight: device nodes, groups, the kernel's answer, drift; exit 0 ok, 1 problems, 2 error",
        description=_DESCRIPTIONS["check"],
    )
    _add_config_flags(check, frozenset({"check"}))
    check.add_argument("--json", action="store_true", default=None, help="machine-readable report")
    check.add_argument(
        "--verbose", action="store_true", default=False, help="list every consequence under its cause, not a count"
    )
    parse = sub.add_parser(
        "parse", help="normalised JSON of a captured tool output or kernel log", description=_DESCRIPTIONS["parse"]
    )
    parse.add_argument("kind", choices=PARSE_KINDS)
    parse.add_argument("file", nargs="?", default="-", help="the capture, or - for stdin (the default)")
    parse.add_argument("--kernel-log.rules", dest="kernel-log.rules", default=None, help=_HELP["kernel-log.rules"])
    baseline = sub.add_parser(
        "baseline", help="show the stored baseline, or accept the current state", description=_DESCRIPTIONS["baseline"]
    )
    baseline.add_argument("action", choices=("show", "accept"))
    _add_config_flags(baseline, frozenset({"baseline show", "baseline accept"}))
    relay = sub.add_parser(
        "kmsg-relay",
        help="copy kernel-log records into a FIFO a non-root exporter reads (root, CAP_SYSLOG only)",
        description=_DESCRIPTIONS["kmsg-relay"],
    )
    relay.add_argument("--from", dest="from", default="/dev/kmsg", metavar="DEVICE", help="kmsg device [/dev/kmsg]")
    relay.add_argument(
        "--to", dest="to", default="/run/rocm-watchdog/kmsg", metavar="FIFO", help="FIFO to create and write"
    )
    _add_log_flags(relay)
    prepare = sub.add_parser(
        "prepare-state",
        help="give the state dir to the exporter's uid:gid, mode 0700 (uid 0 with CAP_CHOWN)",
        description=_DESCRIPTIONS["prepare-state"],
    )
    prepare.add_argument("--state.dir", dest="state.dir", default=None, help=_HELP["state.dir"])
    prepare.add_argument("--owner", required=True, metavar="UID:GID", help="numeric owner, e.g. 10001:10001")
    _add_log_flags(prepare)
    from exporter.demo import add_demo_parser

    add_demo_parser(sub)
    return parser


PARSE_KINDS = ("rocm-smi", "amd-smi", "kernel-log", "gpu-metrics")
_CAPTURE_OF = {
    "rocm-smi": "rocm-smi output",
    "amd-smi": "amd-smi output",
    "kernel-log": "a kernel log",
    "gpu-metrics": "a gpu_metrics table",
}


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


def command_key(args: argparse.Namespace) -> str:
    """The command as the flag table names it: ``baseline show`` and ``baseline accept`` apart."""
    command = str(args.command)
    return f"{command} {args.action}" if command == "baseline" else command


def build_config(args: argparse.Namespace) -> Config:
    """Flags over the YAML file over defaults; every problem is collected into one ConfigError. Reads nothing but
    the config file, so a manifest's flags can be checked on any machine (``file_problems`` checks the rest)."""
    return load_config(args, check_files=False)[0]


def load_config(args: argparse.Namespace, check_files: bool = True) -> tuple[Config, list[str]]:
    """``build_config`` and, with ``check_files``, ``file_problems`` too (every problem in one ConfigError); and
    the settings of the config file that belong to other commands (ignored: logged at debug by the caller, once
    logging is set up)."""
    command = command_key(args)
    problems: list[str] = []
    values: dict[str, Any] = {}
    from_file: dict[str, str] = {}  # setting -> the file it came from, while no flag overrides it
    ignored: list[str] = []
    file_name = getattr(args, "config.file", None)
    if file_name:
        try:
            loaded = safe_load(Path(file_name).read_text(), file_name, unique_keys=True)
            if loaded is None:
                loaded = {}
            if not isinstance(loaded, dict):
                raise ValueError("expected a mapping of flag names to values")
            for raw_key, value in loaded.items():
                key = str(raw_key).removeprefix("--")
                applies = _APPLIES.get(key)
                if applies is None:
                    problems.append(f"--config.file {file_name}: {_unknown_setting(key)}")
                elif command not in applies:
                    ignored.append(key)
                else:
                    values[key], from_file[key] = value, file_name
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"--config.file {file_name}: {exc}")
    for key, value in vars(args).items():
        if value is None or key not in _APPLIES:
            continue  # the command, its positionals, --config.file, check --verbose
        if command not in _APPLIES[key]:  # baseline show: only what baseline accept reads
            problems.append(f"--{key}: applies to {_commands(_APPLIES[key])}, not {command}")
            continue
        values[key] = value
        from_file.pop(key, None)

    def where(flag: str) -> str:
        return f"--{flag} (in {from_file[flag]})" if flag in from_file else f"--{flag}"

    fields: dict[str, Any] = {}
    for flag, (field_name, convert) in _SCALAR_FLAGS.items():
        if flag in values:
            try:
                fields[field_name] = convert(values[flag])
            except (TypeError, ValueError) as exc:
                problems.append(f"{where(flag)}: {exc}")
    collectors = dict(Config().collectors)  # the opt-in sources are absent, so off
    intervals = dict(DEFAULT_INTERVALS_SECONDS)
    for source in SOURCE_NAMES:
        enabled = values.get(f"collector.{source}")
        if enabled is not None:
            if not isinstance(enabled, bool):
                problems.append(f"{where(f'collector.{source}')}: expected true or false, got {enabled!r}")
            else:
                collectors[source] = enabled
        interval = values.get(f"collector.{source}.interval")
        if interval is not None:
            try:
                intervals[source] = parse_duration(str(interval))
            except ValueError as exc:
                problems.append(f"{where(f'collector.{source}.interval')}: {exc}")
    fields["collectors"] = collectors
    fields["intervals_seconds"] = intervals
    fields["metric_groups_disabled"] = _metric_groups(values, where, problems)
    if fields.get("smi_backend", "auto") not in BACKENDS:
        problems.append(f"{where('smi.backend')}: expected one of {', '.join(BACKENDS)}, got {fields['smi_backend']!r}")
    if fields.get("top_processes", 20) < 0:
        problems.append("--processes.top-n: must be >= 0")
    problems.extend(_log_problems(str(fields.get("log_level", "info")), str(fields.get("log_format", "json"))))
    if fields.get("alertmanager_urls") and not collectors["devices"]:
        problems.append("--alertmanager.url: pushes the devices collector's conditions; --no-collector.devices is set")
    if not fields.get("nodename"):
        fields["nodename"] = os.environ.get("NODE_NAME") or os.uname().nodename
    if "log_format" not in fields:
        fields["log_format"] = default_format()
    # --path.rootfs prefixes the host paths left at their defaults: a test root never reads the host's files.
    rootfs = fields.get("rootfs", Path("/"))
    for field_name, default in (
        ("sysfs", "sys"),
        ("devfs", "dev"),
        ("procfs", "proc"),
        ("kernel_log_path", "dev/kmsg"),
    ):
        fields.setdefault(field_name, rootfs / default)
    config = replace(Config(), **fields)  # what was valid, and defaults for the rest
    if check_files:
        problems.extend(file_problems(config, command))
    if problems:
        raise ConfigError(problems)
    return config, ignored


def _group_names(value: Any) -> list[str]:
    """Group selectors from flags (each comma-separated) or a config file (a list, or one comma-separated string)."""
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"expected metric group names (a list, or comma-separated), got {item!r}")
        out += [name.strip() for name in item.split(",") if name.strip()]
    return out


def _metric_groups(values: dict[str, Any], where: Callable[[str], str], problems: list[str]) -> frozenset[str]:
    """The metric groups --metrics.disable, --metrics.enable and --metrics.enable-only leave out; their problems into
    ``problems``:
    unknown groups (with what was probably meant), core (never off), an enable-only group disabled too."""
    valid = metric_groups.selectors()
    chosen: dict[str, list[str] | None] = {"metrics.disable": None, "metrics.enable": None, "metrics.enable-only": None}
    for flag in chosen:
        if flag not in values:
            continue
        try:
            given = _group_names(values[flag])
        except ValueError as exc:
            problems.append(f"{where(flag)}: {exc}")
            given = []
        chosen[flag] = kept = []
        for name in given:
            if name == metric_groups.CORE:
                if flag == "metrics.disable":
                    problems.append(
                        f"{where(flag)}: {name!r} cannot be disabled: the exporter's health and the device-watchdog "
                        "conditions the alerts read are always exported"
                    )
            elif name not in valid:
                close = suggest(name, valid)
                hint = f"did you mean {close!r}?" if close else f"groups: {', '.join(metric_groups.SWITCHABLE)}"
                problems.append(f"{where(flag)}: unknown metric group {name!r} ({hint})")
            else:
                kept.append(name)
    disable, enable_only = chosen["metrics.disable"] or [], chosen["metrics.enable-only"]
    enable = chosen["metrics.enable"] or []
    off = {g for name in disable for g in metric_groups.expand(name)}
    for flag, names in (("metrics.enable-only", enable_only or ()), ("metrics.enable", enable)):
        for name in names:
            if set(metric_groups.expand(name, opt_in=flag == "metrics.enable")) <= off:
                problems.append(f"{where(flag)}: {name!r} is disabled by --metrics.disable too")
    return metric_groups.disabled_groups(disable, enable_only, enable)


def file_problems(config: Config, command: str) -> list[str]:
    """What is wrong with the files and directories the configuration names, on this machine: --path.rootfs
    must be a directory, the web config and the kernel-log rules must load. Apart from ``load_config``, which
    reads only the command line and the config file (so a manifest's flags can be checked anywhere)."""
    problems: list[str] = []
    if command in _STATE and not config.rootfs.is_dir():
        state = "not a directory" if config.rootfs.exists() else "no such directory"
        problems.append(f"--path.rootfs {config.rootfs}: {state}")
    if command == "serve" and config.web_config_file is not None:
        from exporter.webconfig import WebConfigError, load_web_config

        try:
            load_web_config(config.web_config_file)
        except WebConfigError as exc:
            problems.append(f"--web.config.file: {exc}")
    if command in _COLLECT and config.kernel_log_rules is not None and config.enabled("kernel-log"):
        from exporter.watchdog.kernel_rules import KernelRulesError, load_rules

        try:
            load_rules(config.kernel_log_rules)
        except KernelRulesError as exc:
            problems.append(f"--kernel-log.rules: {exc}")
    return problems


def _unknown_setting(key: str) -> str:
    if key.startswith("no-collector."):
        return f"unknown setting {key!r} (did you mean '{key.removeprefix('no-')}: false'?)"
    close = suggest(key, SETTINGS)
    return f"unknown setting {key!r}" + (f" (did you mean {close!r}?)" if close else "")


def _fail_config(problems: Sequence[str], command: str | None = None) -> int:
    """Every problem, one line each, and exit 2 (usage)."""
    print("rocm-watchdog: invalid configuration:", file=sys.stderr)
    for problem in problems:
        print(f"  - {' '.join(str(problem).split())}", file=sys.stderr)  # a YAML error's marks on one line
    what = f"{command.split()[0]} --help lists its flags" if command else "--help lists the commands"
    print(f"(rocm-watchdog {what})", file=sys.stderr)
    return ExitCode.USAGE


def _flag_problems(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[list[str], set[str]]:
    """Every flag of ``argv`` its command does not have, each with what was probably meant; and those tokens.

    argparse stops at the first unknown flag; this reads them all, so one run reports every problem."""
    subparsers = _subparsers(parser)
    problems: list[str] = []
    bad: set[str] = set()
    command = next((a for a in argv if a in subparsers), None)
    own = subparsers.get(command or "")
    known = _long_flags(own) if own is not None else set()
    seen_command = False
    for token in argv:
        if token == "--":
            break
        if token == command and not seen_command:
            seen_command = True
            continue
        if not token.startswith("--") or own is None:
            continue
        name = token.split("=", 1)[0]
        if not seen_command:
            if name not in _long_flags(parser):
                where = f"flags go after it: rocm-watchdog {command} {name}"
                problems.append(f"{name}: unknown flag before the command ({where})")
                bad.add(token)
            continue
        if name in known:
            continue
        bad.add(token)
        elsewhere = sorted(c for c, p in subparsers.items() if c != command and name in _long_flags(p))
        if elsewhere:
            where = ", ".join(elsewhere[:-1]) + " and " + elsewhere[-1] if len(elsewhere) > 1 else elsewhere[0]
            problems.append(f"{name}: not a flag of {command}; it applies to {where}")
            continue
        close = suggest(name, sorted(known))
        problems.append(f"{name}: unknown flag" + (f" (did you mean {close}?)" if close else ""))
    return problems, bad


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _long_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {option for option in parser._option_string_actions if option.startswith("--")}


def parse_command_line(argv: Sequence[str]) -> tuple[argparse.Namespace | None, list[str]]:
    """The parsed command line, and every problem with it (all of them, not argparse's first)."""
    parser = build_parser()
    problems, bad = _flag_problems(parser, argv)
    try:
        args, extras = parser.parse_known_args(argv)
    except UsageError as exc:
        return None, [*problems, _usage_problem(str(exc), parser)]
    after_bad = False
    for token in extras:
        if token in bad:
            after_bad = "=" not in token
            continue
        if after_bad and not token.startswith("-"):  # most likely the value of the unknown flag before it
            after_bad = False
            continue
        after_bad = False
        if token.startswith("-"):
            problems.append(f"{token.split('=', 1)[0]}: unknown flag")
        else:
            problems.append(f"unexpected argument {token!r}")
    return args, problems


def _usage_problem(message: str, parser: argparse.ArgumentParser) -> str:
    """argparse's message, with an unknown command answered by what was probably meant."""
    if message == "the following arguments are required: kind":
        return f"parse needs the kind of capture first: {', '.join(PARSE_KINDS)} (then FILE, or - for stdin)"
    m = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
    if m is None:
        return message
    commands = list(_subparsers(parser))
    close = suggest(m.group(1), commands)
    return f"unknown command {m.group(1)!r} " + (
        f"(did you mean {close}?)" if close else f"(commands: {', '.join(commands)})"
    )


def _command_in(argv: Sequence[str]) -> str | None:
    """The command named on a command line argparse refused (for the hint of which --help to read)."""
    commands = _subparsers(build_parser())
    return next((token for token in argv if token in commands), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (``ExitCode``). Never a traceback on the terminal: a reader that goes away
    ends the output quietly, Ctrl-C exits 130, a bug exits 70 with one line (the traceback is in the log)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with _Streams():
        command = None
        try:
            configure("info", default_format())  # until the configuration says otherwise (records only)
            args, problems = parse_command_line(argv)
            command = command_key(args) if args is not None else _command_in(argv)
            return int(_run(args, problems, command))
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED
        except Exception as exc:
            return _internal_error(exc, command)


def _run(args: argparse.Namespace | None, problems: list[str], named: str | None = None) -> int:
    if args is None or args.command not in ("serve", "once", "check", "baseline"):
        if problems or args is None:
            return _fail_config(problems, command_key(args) if args is not None else named)
        if args.command == "demo":
            from exporter.demo import cmd_demo

            return cmd_demo(args)
        if args.command == "parse":
            return cmd_parse(args)
        if args.command == "kmsg-relay":
            return cmd_kmsg_relay(args)
        if args.command == "capture":
            from exporter.capture import cmd_capture_args

            return cmd_capture_args(args)
        return cmd_prepare_state(args)
    command = command_key(args)
    try:
        config, ignored = load_config(args)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        return _fail_config(problems, command)
    configure(config.log_level, config.log_format)
    for key in ignored:
        log.debug("config_setting_ignored", setting=key, applies_to=_commands(_APPLIES[key]), command=command)
    if args.command == "serve":
        return cmd_serve(config, lambda: load_config(args)[0])
    if args.command == "once":
        return cmd_once(config, config.once_output)
    if args.command == "check":
        from exporter.watchdog.check import run_check

        return run_check(config, as_json=config.check_json, environ=os.environ, verbose=bool(args.verbose))
    from exporter.watchdog.commands import baseline_accept, baseline_show

    return baseline_show(config) if args.action == "show" else baseline_accept(config)


def _internal_error(exc: BaseException, command: str | None) -> int:
    """A bug: the traceback to the log (event ``internal_error``), one line on stderr, exit 70."""
    where = f"rocm-watchdog {command}" if command else "rocm-watchdog"
    with contextlib.suppress(Exception):  # the log itself is broken: the traceback has nowhere else to go
        log.error("internal_error", command=command, error=repr(exc), exc_info=exc)
    print(
        f"{where}: internal error ({type(exc).__name__}: {exc}); this is a bug, please report it with the "
        "internal_error record of the log (stderr) that holds the traceback",
        file=sys.stderr,
    )
    return ExitCode.INTERNAL


class _Output:
    """``sys.stdout`` or ``sys.stderr`` for one command. When its reader goes away (``| head -1``, a closed
    terminal) or it was closed before the start (``>&-``), what is left to write goes nowhere and the command
    ends as it would have, with its exit code: no BrokenPipeError traceback, no "Exception ignored" at exit
    (the file descriptor then points at /dev/null, so the interpreter's last flush succeeds)."""

    def __init__(self, stream: Any, fd: int) -> None:
        self._stream = stream
        self._fd = fd
        self.lost = stream is None

    def _lose(self) -> None:
        self.lost = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._fd)
            os.close(devnull)
        except OSError:
            pass

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._lose()

    def isatty(self) -> bool:
        return not self.lost and bool(self._stream.isatty())

    def fileno(self) -> int:
        return self._fd

    @property
    def buffer(self) -> _OutputBuffer:
        return _OutputBuffer(self)

    def __getattr__(self, name: str) -> Any:  # encoding, errors, writable...
        return getattr(self._stream if self._stream is not None else sys.__stdout__, name)


class _OutputBuffer:
    """``sys.stdout.buffer`` of an ``_Output``: bytes written straight, with the same end."""

    def __init__(self, output: _Output) -> None:
        self._output = output

    def write(self, data: bytes) -> int:
        out = self._output
        if not out.lost:
            try:
                out._stream.flush()  # text written before goes first
                return int(out._stream.buffer.write(data))
            except BrokenPipeError:
                out._lose()
        return len(data)

    def flush(self) -> None:
        self._output.flush()


class _Streams:
    """Installs ``_Output`` for stdout and stderr while a command runs, and flushes them before it returns."""

    def __enter__(self) -> _Streams:
        # A standard descriptor closed at start (``<&-``, ``>&-``) is held by /dev/null, so that no file or socket
        # opened later takes its number and gets what was meant for it. sys.stdin stays None: parse says so.
        for fd in (0, 1, 2):
            try:
                os.fstat(fd)
            except OSError:
                try:
                    devnull = os.open(os.devnull, os.O_RDWR)
                    if devnull != fd:
                        os.dup2(devnull, fd)
                        os.close(devnull)
                except OSError:
                    pass
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _Output(sys.stdout, 1)
        sys.stderr = _Output(sys.stderr, 2)
        return self

    def __exit__(self, *_exc: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = self._saved


def cmd_parse(args: argparse.Namespace) -> int:
    """Exit 0 with the JSON; 1 when the input is not a capture of that kind (an empty input included); 2 when
    the input or the rules cannot be read."""
    from exporter.model import ParseError

    kind = str(args.kind)
    rules = None
    if kind == "kernel-log":  # a bad rules file is the command line's fault: said before reading anything
        from exporter.watchdog.kernel_rules import KernelRulesError, load_rules

        rules_path = getattr(args, "kernel-log.rules")
        try:
            rules = load_rules(Path(rules_path) if rules_path else None)
        except KernelRulesError as exc:
            print(f"rocm-watchdog parse: {' '.join(str(exc).split())}", file=sys.stderr)
            return ExitCode.USAGE
    data = _read_capture(str(args.file), kind)
    if isinstance(data, ExitCode):
        return data
    name = "standard input" if args.file == "-" else str(args.file)
    if not (data if kind == "gpu-metrics" else data.strip()):
        print(f"rocm-watchdog parse {kind}: {name} is empty: not a capture of {_CAPTURE_OF[kind]}", file=sys.stderr)
        return ExitCode.PROBLEMS
    try:
        from exporter.fakehost.from_capture import capture_input  # a `rocm-watchdog capture` archive: its part

        data = capture_input(kind, data) or data
        result: dict[str, Any]
        if kind == "gpu-metrics":  # amdgpu's binary sysfs table: bytes, not text
            from exporter.parsers.gpu_metrics import parse_gpu_metrics_capture

            result = parse_gpu_metrics_capture(data).to_json()
        elif kind == "rocm-smi":
            from exporter.parsers.rocm_smi import parse_rocm_smi

            result = parse_rocm_smi(data.decode(errors="replace")).to_json()
        elif kind == "amd-smi":
            from exporter.parsers.amd_smi import parse_amd_smi

            result = parse_amd_smi(data.decode(errors="replace")).to_json()
        else:
            from exporter.watchdog.kernel_classify import kernel_log_report

            assert rules is not None
            result = kernel_log_report(data.decode(errors="replace"), rules)
    except ParseError as exc:
        print(f"rocm-watchdog parse {kind}: {exc}", file=sys.stderr)
        return ExitCode.PROBLEMS
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return ExitCode.OK


def _read_capture(file: str, kind: str) -> bytes | ExitCode:
    """The bytes of FILE or of standard input (``-``); the exit code when they cannot be read (said on stderr)."""
    if file != "-":
        try:
            return Path(file).read_bytes()
        except OSError as exc:
            print(f"rocm-watchdog parse: cannot read {file}: {exc.strerror or exc}", file=sys.stderr)
            return ExitCode.USAGE
    if sys.stdin is None:
        print(f"rocm-watchdog parse {kind}: standard input is closed: give the capture as FILE", file=sys.stderr)
        return ExitCode.USAGE
    if sys.stdin.isatty():  # a person at a terminal, not a pipe: say what the silence is
        print(
            f"rocm-watchdog parse {kind}: reading the capture from standard input (end it with Ctrl-D, or give a FILE)",
            file=sys.stderr,
        )
    try:
        return sys.stdin.buffer.read()
    except OSError as exc:
        print(f"rocm-watchdog parse: cannot read standard input: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.USAGE


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

    if output is not None:  # before collecting: nothing is made (no directory), and the reason is said as it is
        from exporter.failures import output_problem, report

        problem = output_problem(output)
        if problem is not None:
            return report("once", problem)
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
        write_atomic(output, text, make_parents=False)
    except OSError as exc:
        from exporter.failures import output_failure, report

        return report("once", output_failure(output, exc))
    return 0


# How long serve may take to stop after SIGTERM/SIGINT before it leaves with os._exit (under the 5 s a service
# manager is commonly given; a Kubernetes pod gets 30 s).
SHUTDOWN_DEADLINE_SECONDS = 4.0
MAIN_LOOP_WAKE_SECONDS = 60.0  # a signal wakes serve's main loop at once; this is only a safety net


def _exit_by_deadline(seconds: float, listeners: Sequence[Any] = ()) -> None:
    """The last resort of a shutdown: when the process is still here ``seconds`` from now (something it waits for
    at exit is stuck), kill the tools' process groups, close ``listeners``, log which threads remain and leave with
    ``os._exit(0)``.

    Normally it never fires: collect runs and abandoned reads are daemon threads, the scheduler's timer only
    dispatches (in its own thread), and nothing else waits. A read in uninterruptible sleep (D state) cannot
    be ended at all: its daemon thread stays in the kernel, and the kernel reaps the process only when that read
    returns, but everything else (tools, listening sockets, other threads) is gone by then.
    """

    def hard_exit() -> None:
        from exporter.sources.runner import stop_all

        stop_all()
        for sock in listeners:  # closed here, not by the kernel at exit: a thread stuck in D state delays that
            sock.close()
        me = threading.current_thread()
        waiting = sorted(t.name for t in threading.enumerate() if t is not me and not t.daemon)
        log.error("shutdown_deadline_exceeded", deadline_seconds=seconds, threads=waiting)
        sys.stderr.flush()
        os._exit(0)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()


def cmd_serve(
    config: Config,
    load: Callable[[], Config] | None = None,
    *,
    note: str = "",
    started: Callable[[Any, int], None] | None = None,
) -> int:
    """Serve until SIGTERM or SIGINT (exit 0); 2 when the web config, the rules or the listening socket are bad.
    ``load`` reads the configuration again for SIGHUP (the same command line over the file as it is then).
    ``note`` goes on the landing page; ``started(store, port)`` is called once the sources run (``demo``)."""
    from exporter.heap import limit_arenas
    from exporter.http import Limits, make_app, serve
    from exporter.metrics.collector import RocmCollector
    from exporter.metrics.exposition import VOLATILE_SECONDS, Exposition
    from exporter.metrics.selfmetrics import ExporterMetrics
    from exporter.reload import Reloader, Running, rules_digest
    from exporter.server.listen import SystemdSocketError, effective_backlog
    from exporter.server.stats import ServerStats
    from exporter.sources.wakeup import Interrupt, wait_readable
    from exporter.webconfig import WebConfig, WebConfigError, load_web_config

    limit_arenas()  # before the first thread: the collections' and scrapes' threads share two malloc arenas
    from exporter.sources.orphans import become_subreaper

    become_subreaper()  # a tool's helper that left its group (setsid) is re-parented here, and killed

    try:
        web = load_web_config(config.web_config_file) if config.web_config_file else WebConfig()
    except WebConfigError as exc:
        return _fail_config([f"--web.config.file: {exc}"], "serve")
    try:
        scheduler, _registry = build_runtime(config)
    except ConfigError as exc:
        return _fail_config(exc.problems, "serve")
    exporter_metrics = ExporterMetrics()
    http_stats = ServerStats()  # the HTTP server counts its clients there, the rocm_watchdog_http_* series read it
    collector = RocmCollector(
        scheduler.store,
        config,
        exporter_metrics=None if config.web_disable_exporter_metrics else exporter_metrics,
        http=http_stats.view,
    )
    # Render on change, serve bytes: sections are rendered in the collecting thread when a source records.
    exposition = Exposition(collector, VOLATILE_SECONDS)
    scheduler.store.subscribe(exposition.refresh)
    stop = threading.Event()
    # The main loop sleeps on this pipe until a signal: Python runs a signal's handler in the main thread, but the
    # kernel may deliver the signal to any thread, and only the wake-up fd written by the C-level handler wakes
    # the main thread then (a periodic wake-up instead, once a second, cost 0.4 CPU-seconds an hour).
    wake = Interrupt()

    def healthy() -> tuple[bool, str]:
        return (not stop.is_set(), "ok" if not stop.is_set() else "shutting down")

    def ready() -> tuple[bool, str]:
        alive, detail = healthy()
        pending = scheduler.store.view(0.0).pending()  # the store outlives a reload's scheduler
        if alive and pending:
            return False, "waiting for the first run of: " + ", ".join(pending)
        return alive, detail

    limits = Limits(
        backlog=config.web_listen_backlog,
        max_requests=config.web_max_requests,
        limited_paths=frozenset({config.web_telemetry_path}),
    )
    app = make_app(
        exposition.get,
        web,
        healthy,
        config.web_telemetry_path,
        exporter_metrics.scrapes.observe,
        ready=ready,
        note=note,
    )
    try:
        server = serve(
            config.listen_address, app, web, limits=limits, systemd_socket=config.web_systemd_socket, stats=http_stats
        )
    except SystemdSocketError as exc:
        return _fail_config([f"--web.systemd-socket: {exc}"], "serve")
    except ValueError as exc:
        return _fail_config([f"--web.listen-address {config.listen_address}: {exc}"], "serve")
    except OSError as exc:  # valid, but this machine refuses it (a port in use, a privileged port): not a config error
        from exporter.failures import listen_failure, report
        from exporter.server.listen import parse_listen_address

        return report(
            "serve", listen_failure(config.listen_address, parse_listen_address(config.listen_address)[1], exc)
        )
    running = Running(
        config, web, scheduler, collector, exposition, server, exporter_metrics, rules_digest=rules_digest(config)
    )
    running.start_push()  # serve only: once, check and parse never push
    from exporter.sinks.health_file import HealthFileWriter

    verdict_file = HealthFileWriter(scheduler.store, lambda: running.config)  # for node-problem-detector's plugin
    verdict_file.start()
    collector.verdict_file_status = verdict_file.status
    collector.reconfigure(config, running.push_status, running.exporter_families())
    exposition.invalidate()
    reloader = Reloader(running, load) if load is not None else None

    received: list[int] = []  # signals the main loop has not acted on yet

    def on_signal(signum: int, _frame: object) -> None:
        # Python runs a handler between two bytecodes of the main thread, which may be inside a log call holding
        # the log's lock: a handler that logged deadlocked there. It only notes the signal and wakes the loop.
        received.append(signum)
        wake.set()

    # Before the first tool starts: a signal's default action would end the process and orphan a running tool.
    # SIGHUP reloads the configuration (exporter.reload logs config_reloaded or config_reload_failed).
    for handled in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(handled, on_signal)
    scheduler.start()
    log.info(
        "serving",
        address=str(server.server_address[0]) if config.web_systemd_socket else config.listen_address,
        port=server.server_port,
        tls=web.ssl_context is not None,
        systemd_socket=config.web_systemd_socket,
        max_requests=config.web_max_requests,
        listen_backlog=None if config.web_systemd_socket else effective_backlog(config.web_listen_backlog),
        telemetry_path=config.web_telemetry_path,
        exporter_metrics=not config.web_disable_exporter_metrics,
    )
    previous_wakeup = signal.set_wakeup_fd(wake.write_fileno(), warn_on_full_buffer=False)
    if started is not None:
        started(scheduler.store, server.server_port)
    while not stop.is_set():
        wait_readable([wake.fileno()], MAIN_LOOP_WAKE_SECONDS)
        wake.clear()
        while received and not stop.is_set():
            signum = received.pop(0)
            if signum != signal.SIGHUP:
                log.info("stopping", signal=signal.Signals(signum).name)
                stop.set()
                continue
            log.info("reload_requested")
            if reloader is None:
                log.warning("config_reload_unavailable")
            else:
                reloader.reload()
    from exporter.sources.runner import stop_all

    # The pusher resolves what it holds firing on the way out, within --alertmanager.timeout.
    pusher = running.pusher
    _exit_by_deadline(
        SHUTDOWN_DEADLINE_SECONDS + (running.config.alertmanager_timeout_seconds if pusher else 0.0), server.listeners
    )
    stop_all()
    running.scheduler.shutdown()
    verdict_file.stop()
    if pusher is not None:
        pusher.stop()  # resolves what it holds firing, within --alertmanager.timeout
    server.shutdown()
    signal.set_wakeup_fd(previous_wakeup)
    wake.close()
    return ExitCode.OK
