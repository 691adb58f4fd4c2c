"""``rocm-watchdog demo``: see the watchdog work in one command, on a machine without a GPU.

The demo builds a simulated 8-GPU MI300X host in a temporary directory (``exporter.fakehost``: the real
``mi300x-cpx-8gpu`` KFD topology capture, gpu_metrics v1.8 tables at the kernel's offsets, sysfs files typed from
real hosts) and runs the real ``serve`` on it, pointed at the root with ``--path.rootfs``, ``--state.dir`` and
``--kernel-log.path``: the sources, the watchdog and the collector are the ones a real node runs, and nothing in
the exposition is made up but the host. A timeline then changes the host the way real nodes drift, one step every
``--demo.step``, each said on the terminal and in the log, and waits for the watchdog to have seen it before the
next one starts:

1. the host's ``render`` group gets a new gid (an OS reinstall) and udev relabels the nodes;
2. a GPU hangs and is reset, with VRAM lost, in the kernel log (the lines as amdgpu prints them);
3. ``/dev/kfd`` becomes 0666 (a broken udev rule);
4. a reboot in which two GPUs probed in each other's place: their card, render and KFD numbers trade;
5. the repair: the udev rule fixed, and ``baseline accept`` for the changes that were understood.

Without root there are no device nodes (``mknod`` needs CAP_MKNOD in the initial user namespace): the demo plays
the rest and says that step 3 needs ``sudo rocm-watchdog demo``. With ``--with-prometheus`` it also starts the
Debian ``prometheus`` and ``prometheus-alertmanager`` on loopback with the shipped rules (``for:`` shortened) and
the Alertmanager example. The demo says it is one: ``rocm_watchdog_host_info{nodename="rocm-watchdog-demo"}``
and the landing page. It never starts by itself: ``serve`` on a host without GPUs serves that host.
"""

from __future__ import annotations

# Only what the command line has loaded anyway: every rocm-watchdog command imports this module for its parser.
import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.clock import wall_time

if TYPE_CHECKING:
    from exporter.config import Config
    from exporter.fakehost.builder import FakeRoot
    from exporter.model.devices import DeviceWatchState
    from exporter.model.kernel import KernelLogState
    from exporter.sources.runner import Spawned
    from exporter.store import SnapshotStore

DEFAULT_LISTEN_ADDRESS = "127.0.0.1:9869"  # its own port: a demo next to a real exporter (9862) does not clash
DEFAULT_STEP = "8s"  # five steps inside the first minute, with room for the watchdog to see each one
NODENAME = "rocm-watchdog-demo"
NOTE = (
    "This is rocm-watchdog demo: the host is simulated (an 8-GPU MI300X node in a temporary directory); the "
    "sources, the watchdog and the metrics are the real ones."
)
KFD_CAPTURE = "mi300x-cpx-8gpu"
NEW_RENDER_GID = 992  # what a reinstall's systemd-sysusers gives the dynamic render group
RESET_GPU = "0000:47:00.0"  # the third GPU: hangs and is reset
SWAPPED = ("0000:05:00.0", "0000:27:00.0")  # the first two GPUs probe in each other's place after the reboot
UPTIME_SECONDS = 3 * 86400.0  # the kernel-log timestamps: the simulated host has been up three days
WAIT_FACTOR = 20  # a step not seen within this many devices intervals (or 30 s) is said, and the demo goes on
ROOT_HINT = "sudo rocm-watchdog demo"
LOG_FILE = "rocm-watchdog.log"  # the exporter's log when the demo runs on a terminal


def add_demo_parser(sub: Any) -> None:
    """``demo`` on the command line's subcommands (``exporter.cli.build_parser``). Its own flags only."""
    p = sub.add_parser(
        "demo",
        help="a simulated 8-GPU MI300X host that drifts, resets and is repaired, watched by the real exporter",
        description="Serve a simulated 8-GPU MI300X host, read by the real sources, while a timeline changes it: "
        "a render gid change, a GPU reset with VRAM lost, /dev/kfd made 0666, a renumbering reboot, the repair.",
    )
    p.add_argument(
        "--web.listen-address",
        dest="web.listen-address",
        default=DEFAULT_LISTEN_ADDRESS,
        help=f"address to serve /metrics on [{DEFAULT_LISTEN_ADDRESS}]",
    )
    p.add_argument(
        "--demo.step",
        dest="demo.step",
        default=DEFAULT_STEP,
        metavar="DURATION",
        help=f"time between two steps of the timeline, Prometheus duration syntax [{DEFAULT_STEP}]",
    )
    p.add_argument(
        "--with-prometheus",
        dest="with_prometheus",
        action="store_true",
        default=False,
        help="also start Prometheus and Alertmanager (Debian prometheus, prometheus-alertmanager) on loopback with "
        "the shipped rules, for: shortened",
    )
    for flag, text in (("log.level", "debug, info, warn, error [info]"), ("log.format", "json, logfmt or console")):
        p.add_argument(f"--{flag}", dest=flag, default=None, help=text)


def _duration_flag(seconds: float) -> str:
    """Seconds as a Prometheus duration: ``2s``, ``250ms``."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def can_make_nodes(directory: Path) -> bool:
    """Whether this process can make character devices (CAP_MKNOD in the initial user namespace): tried."""
    import stat

    probe = directory / ".mknod-probe"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except OSError:
        return False
    probe.unlink()
    return True


def probe_off_flag() -> str | None:
    """The flag of ``check`` that turns the open probe off, when this build has one: the demo's nodes have no
    driver behind them (and on a host with a GPU their numbers are the real GPU's)."""
    from exporter.cli import build_parser

    for action in build_parser()._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict) and "check" in choices:
            for option in choices["check"]._option_string_actions:
                if ("probe" in option or "open" in option) and option.startswith("--no-"):
                    return str(option)
    return None


def rules_files() -> tuple[Path, Path]:
    """The shipped alert rules and Alertmanager example: in the installed package (the build copies them to
    ``exporter/data/alerts``), else in the checkout this module runs from."""
    here = Path(__file__).resolve().parent
    for directory in (here / "data" / "alerts", here.parent / "alerts"):
        rules, example = directory / "rocm-watchdog.rules.yml", directory / "alertmanager.example.yml"
        if rules.is_file() and example.is_file():
            return rules, example
    raise FileNotFoundError("the shipped alert rules are not installed with this package")


Seen = Callable[["DeviceWatchState | None", "KernelLogState | None"], bool]


class Step:
    """One change of the host. ``prepare`` does the slow part (a rebuilt tree, built aside) and returns the
    change itself, which is quick and made just after a devices collection: each read of the host sees it whole
    or not at all, as on a real node, and never a half-made change."""

    def __init__(
        self, title: str, prepare: Callable[[], Callable[[], str]], seen: Seen, needs_root: bool = False
    ) -> None:
        self.title = title
        self.prepare = prepare  # returns the change, which returns what happened, to say
        self.seen = seen  # the watchdog has seen it
        self.needs_root = needs_root


class Demo:
    """The simulated host, its timeline, and (``--with-prometheus``) Prometheus and Alertmanager."""

    def __init__(self, base: Path, step_seconds: float, with_prometheus: bool, log: Any) -> None:
        from exporter.fakehost.builder import mi300x_node

        self.base = base
        self.step_seconds = step_seconds
        self.with_prometheus = with_prometheus
        self.log = log
        self.nodes = can_make_nodes(base)
        self.host: FakeRoot = mi300x_node(base, kfd_capture=KFD_CAPTURE, name="root", device_nodes=self.nodes)
        self.kernel_log = self.host.root / "var" / "log" / "kern.log"
        self.kernel_log.parent.mkdir(parents=True, exist_ok=True)
        self.kernel_log.write_text("")
        # a step is seen within an interval and made just after a collection: each takes step + 2 intervals at most
        self.devices_interval = min(5.0, max(0.25, step_seconds / 8))
        self.started_at = time.monotonic()
        self.stop = threading.Event()
        self.spawned: list[Spawned] = []
        self.prometheus_url: str | None = None  # set once Prometheus is started
        self.config: Config | None = None

    # -- the command line of the real serve ------------------------------------------------------------------
    def serve_argv(self, listen: str, log_level: str | None, log_format: str | None) -> list[str]:
        root = self.host.root
        argv = [
            "serve",
            f"--web.listen-address={listen}",
            f"--path.rootfs={root}",
            f"--state.dir={self.host.state_dir}",
            f"--kernel-log.path={self.kernel_log}",
            f"--host.name={NODENAME}",
            # the simulated host has no rocm-smi or amd-smi: their sources would only report "not found"
            "--no-collector.rocm-smi",
            "--no-collector.amd-smi",
            f"--collector.devices.interval={_duration_flag(self.devices_interval)}",
            f"--collector.sysfs.interval={_duration_flag(min(15.0, max(1.0, self.step_seconds)))}",
        ]
        argv += [f"--log.level={log_level}"] if log_level else []
        argv += [f"--log.format={log_format}"] if log_format else []
        return argv

    def check_command(self) -> str:
        flag = probe_off_flag()
        extra = f" {flag}" if flag else ""
        return f"rocm-watchdog check --path.rootfs={self.host.root} --state.dir={self.host.state_dir}{extra}"

    # -- saying ---------------------------------------------------------------------------------------------
    def say(self, event: str, message: str, **fields: object) -> None:
        elapsed = time.monotonic() - self.started_at
        print(f"[demo {elapsed:6.1f}s] {message}", flush=True)
        self.log.info(event, message=message, **fields)

    # -- the kernel log ---------------------------------------------------------------------------------------
    def _kernel_lines(self, lines: list[tuple[float, str]]) -> None:
        """Append ``(seconds after now, text)`` lines as dmesg prints them, timestamped from the simulated host's
        boot."""
        uptime = UPTIME_SECONDS + time.monotonic() - self.started_at
        with self.kernel_log.open("a") as f:
            f.writelines(f"[{uptime + offset:12.6f}] {text}\n" for offset, text in lines)

    # -- the steps -----------------------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        host = self.host
        old_gid = host.gids["render"]

        def gid_change() -> str:
            host.set_gid("render", NEW_RENDER_GID, relabel=False)
            host.relabel()  # udev, in place
            return (
                f"the host's render group is now gid {NEW_RENDER_GID} (was {old_gid}), as after an OS reinstall, and "
                f"udev relabelled the nodes: containers started with --group-add {old_gid} cannot open them"
            )

        def gpu_reset() -> str:
            g = f"amdgpu {RESET_GPU}: amdgpu:"
            self._kernel_lines(
                [
                    (0.0, f"{g} ring comp_1.0.0 timeout, signaled seq=27466, emitted seq=27468"),
                    (0.000031, f"{g}  Process information: process python3 pid 48121 thread python3 pid 48121"),
                    (0.000112, f"{g} GPU reset begin!"),
                    (0.412507, f"{g} MODE1 reset"),
                    (1.583311, f"{g} GPU reset succeeded, trying to resume"),
                    # the dev_info form of kernels after 6.12 (before: "[drm] VRAM is lost...", naming no device)
                    (1.594220, f"{g} VRAM is lost due to GPU reset!"),
                    (2.061843, f"{g} GPU reset(1) succeeded!"),
                ]
            )
            return f"GPU {RESET_GPU} hung, and amdgpu reset it: VRAM lost (the lines are in {self.kernel_log})"

        def kfd_world_writable() -> str:
            host.chmod("kfd", 0o666)
            return "/dev/kfd is now 0666 (a broken udev rule): any user on the host can use the GPUs"

        def renumber() -> Callable[[], str]:
            a, b = SWAPPED
            before = (host.gpu(a).render, host.gpu(b).render)
            boot = host.swap_probe_order(a, b, rebuild=False)
            swap_in = host.staged_rebuild()

            def reboot() -> str:
                host.set_boot_id(boot)
                swap_in()
                return (
                    f"a reboot (boot id {boot[:8]}...) in which {a} and {b} probed in each other's place: "
                    f"renderD{before[0]} is now {b}'s and renderD{before[1]} {a}'s; jobs that pinned the numbers "
                    "use the wrong GPU"
                )

            return reboot

        def repair() -> str:
            done = []
            if self.nodes:
                host.chmod("kfd", 0o660)
                done.append("/dev/kfd is 0660 again (udev rule fixed)")
            accepted = self.accept()
            done.append(
                f"containers were given gid {NEW_RENDER_GID} and the jobs restarted, so `rocm-watchdog baseline "
                f"accept` took the new state ({accepted} drift conditions accepted)"
            )
            return "the repair: " + "; ".join(done)

        def gid_seen(d: DeviceWatchState | None, _k: KernelLogState | None) -> bool:
            return _active(d, "group_gid_drift", "render")

        def reset_seen(_d: DeviceWatchState | None, k: KernelLogState | None) -> bool:
            return k is not None and all(k.counts.get((RESET_GPU, c), 0) > 0 for c in ("gpu_reset_begin", "vram_lost"))

        def kfd_seen(d: DeviceWatchState | None, _k: KernelLogState | None) -> bool:
            return _active(d, "world_writable", "/dev/kfd")

        def renumber_seen(d: DeviceWatchState | None, _k: KernelLogState | None) -> bool:
            return _active(d, "render_renumbered", SWAPPED[0]) and _active(d, "render_renumbered", SWAPPED[1])

        def repaired(d: DeviceWatchState | None, _k: KernelLogState | None) -> bool:
            return d is not None and d.baseline is not None and not any(c.severity != "info" for c in d.active())

        def now(change: Callable[[], str]) -> Callable[[], Callable[[], str]]:
            return lambda: change

        return [
            Step("render gid change", now(gid_change), gid_seen),
            Step("GPU reset, VRAM lost", now(gpu_reset), reset_seen),
            Step("/dev/kfd world-writable", now(kfd_world_writable), kfd_seen, needs_root=True),
            Step("renumbering reboot", renumber, renumber_seen),
            Step("repair", now(repair), repaired),
        ]

    def accept(self) -> int:
        """``rocm-watchdog baseline accept`` on the simulated host (the real command); the number of drift
        conditions it accepted."""
        import contextlib
        import io
        import json

        from exporter.watchdog.commands import baseline_accept

        assert self.config is not None
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = baseline_accept(self.config)
        if code != 0:
            raise RuntimeError(f"baseline accept exited {code}")
        return len(json.loads(out.getvalue()).get("drift_accepted", []))

    # -- the timeline ----------------------------------------------------------------------------------------
    def run_timeline(self, store: SnapshotStore) -> None:
        try:
            self._timeline(store)
        except Exception as exc:  # a bug in the demo: said, and the exporter keeps serving what it has
            if self.stop.is_set():
                return  # the demo is going and its host with it
            self.log.error("demo_timeline_failed", error=repr(exc), exc_info=exc)
            print(f"rocm-watchdog demo: the timeline stopped: {exc}", file=sys.stderr, flush=True)

    def _state(self, store: SnapshotStore) -> tuple[DeviceWatchState | None, KernelLogState | None]:
        from exporter.model.devices import DeviceWatchState
        from exporter.model.kernel import KernelLogState

        view = store.view(wall_time())
        d, k = view.fresh_data("devices"), view.fresh_data("kernel-log")
        return (
            d if isinstance(d, DeviceWatchState) else None,
            k if isinstance(k, KernelLogState) else None,
        )

    def _wait_seen(self, store: SnapshotStore, seen: Callable[..., bool], limit_seconds: float) -> bool:
        deadline = time.monotonic() + limit_seconds
        while not self.stop.is_set():
            if seen(*self._state(store)):
                return True
            if time.monotonic() >= deadline:
                return False
            self.stop.wait(0.1)
        return False

    def _timeline(self, store: SnapshotStore) -> None:
        collected = threading.Event()
        store.subscribe(lambda name: collected.set() if name == "devices" else None)
        limit = max(30.0, WAIT_FACTOR * self.devices_interval)

        # every source through its first run (the sysfs source's GPUs, the kernel log's counters) and a baseline:
        # a scrape after "ready" sees the whole host
        def first_runs_done(d: DeviceWatchState | None, k: KernelLogState | None) -> bool:
            return d is not None and d.baseline is not None and k is not None and _sysfs_read(store)

        ready = self._wait_seen(store, first_runs_done, limit)
        if not ready:
            if not self.stop.is_set():
                self.say("demo_not_ready", f"the watchdog wrote no baseline within {limit:.0f}s: no timeline")
            return
        if self.prometheus_url is not None and not self._wait_scraped(limit):
            self.say("demo_prometheus_slow", f"Prometheus has not scraped the demo within {limit:.0f}s; going on")
        self.say(
            "demo_ready",
            f"the watchdog has read the simulated host ({len(self.host.gpus)} MI300X in CPX mode, "
            f"{sum(1 + len(g.partitions) for g in self.host.gpus)} partitions) and written its baseline; the "
            f"timeline starts, one step every {self.step_seconds:g}s",
        )
        steps = self.steps()
        for number, step in enumerate(steps, start=1):
            if self.stop.wait(self.step_seconds):
                return
            where = f"step {number}/{len(steps)}"
            if step.needs_root and not self.nodes:
                self.say(
                    "demo_step_skipped",
                    f"{where}, {step.title}: skipped: the simulated host has no device nodes without root "
                    f"(mknod needs CAP_MKNOD); `{ROOT_HINT}` plays it",
                    step=step.title,
                )
                continue
            change = step.prepare()
            collected.clear()
            collected.wait(3 * self.devices_interval + 1.0)  # then the next read is an interval away
            what = change()
            self.say("demo_step", f"{where}, {step.title}: {what}", step=step.title)
            if self._wait_seen(store, step.seen, limit):
                self.say("demo_step_seen", f"{where}: the watchdog sees it on /metrics", step=step.title)
            elif not self.stop.is_set():
                self.say("demo_step_unseen", f"{where}: not seen within {limit:.0f}s", step=step.title)
        self.say(
            "demo_done",
            "the timeline is over: the host is healthy again (the kernel-log alerts stay for their window: a reset "
            "happened); the demo serves until Ctrl-C",
        )

    # -- Prometheus and Alertmanager -------------------------------------------------------------------------
    def _wait_scraped(self, limit_seconds: float) -> bool:
        """Wait until Prometheus has scraped the demo (so every counter is seen at zero before its first event:
        ``increase()`` needs the sample before)."""
        import requests

        query = f"{self.prometheus_url}/api/v1/query"
        deadline = time.monotonic() + limit_seconds
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                result = requests.get(query, params={"query": 'up{job="rocm-watchdog"}'}, timeout=5).json()
                if any(r["value"][1] == "1" for r in result["data"]["result"]):
                    return True
            except (requests.RequestException, ValueError, KeyError):
                pass  # still starting
            self.stop.wait(0.25)
        return False

    def start_prometheus(self, target: str) -> list[str]:
        """Start Alertmanager and Prometheus on free loopback ports; their URLs. Raises RuntimeError with the
        reason when they cannot be started."""
        import shutil

        import yaml

        from exporter.sources.runner import spawn

        binaries = {name: shutil.which(name) for name in ("prometheus", "prometheus-alertmanager")}
        if binaries["prometheus-alertmanager"] is None:
            binaries["prometheus-alertmanager"] = shutil.which("alertmanager")
        missing = [name for name, path in binaries.items() if path is None]
        if missing:
            raise RuntimeError(f"not installed: {', '.join(missing)} (Debian: apt-get install prometheus "
                               "prometheus-alertmanager)")  # fmt: skip
        rules_path, example_path = rules_files()
        work = self.base / "prometheus"
        work.mkdir()
        prom_port, am_port = _free_ports(2)
        rules = yaml.safe_load(rules_path.read_text())
        for_ = _duration_flag(max(1.0, self.step_seconds / 4))
        for group in rules["groups"]:
            group["interval"] = "1s"
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = for_
                if "keep_firing_for" in rule:
                    rule["keep_firing_for"] = for_
        (work / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
        (work / "alertmanager.yml").write_text(example_path.read_text())
        prom_config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(work / "rules.yml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [{"job_name": "rocm-watchdog", "static_configs": [{"targets": [target]}]}],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(prom_config, sort_keys=False))
        am, prom = binaries["prometheus-alertmanager"], binaries["prometheus"]
        assert am is not None and prom is not None
        self.spawned.append(
            spawn(
                [
                    am,
                    f"--config.file={work / 'alertmanager.yml'}",
                    f"--storage.path={work / 'alertmanager'}",
                    f"--web.listen-address=127.0.0.1:{am_port}",
                    "--cluster.listen-address=",
                ],
                work / "alertmanager.log",
            )
        )
        self.spawned.append(
            spawn(
                [
                    prom,
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                work / "prometheus.log",
            )
        )
        self.say(
            "demo_prometheus",
            f"Prometheus and Alertmanager started with the shipped rules, every for: and keep_firing_for: "
            f"shortened to {for_} for the demo; the Alertmanager example's receivers (127.0.0.1:5001) are not "
            f"there, its UI shows the alerts (logs in {work})",
            prometheus=f"http://127.0.0.1:{prom_port}",
            alertmanager=f"http://127.0.0.1:{am_port}",
        )
        self.prometheus_url = f"http://127.0.0.1:{prom_port}"
        return [f"http://127.0.0.1:{prom_port}/alerts", f"http://127.0.0.1:{am_port}/#/alerts"]

    def close(self) -> None:
        self.stop.set()
        for proc in self.spawned:
            proc.stop()


def _active(d: DeviceWatchState | None, kind: str, subject: str) -> bool:
    return d is not None and any(c.kind == kind and c.subject == subject for c in d.active())


def _free_ports(count: int) -> list[int]:
    import socket

    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _connect_host(listen: str, port: int) -> str:
    """Where the demo's exporter is reached on this machine: a wildcard or empty host is loopback."""
    host = listen.rsplit(":", 1)[0].strip("[]") if ":" in listen else listen
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cmd_demo(args: argparse.Namespace) -> int:
    """Serve the simulated host until SIGTERM or SIGINT (exit 0); 2 for bad flags or a listen address in use."""
    import tempfile

    from msgspec.structs import replace

    from exporter import cli
    from exporter.config import parse_duration
    from exporter.exitcodes import ExitCode
    from exporter.logging import get_logger

    problems = cli._small_command_logging(args)
    try:
        step_seconds = parse_duration(str(getattr(args, "demo.step")))
    except ValueError as exc:
        problems.append(f"--demo.step: {exc}")
        step_seconds = 0.0
    if problems:
        return cli._fail_config(problems, "demo")
    log = get_logger("demo")
    listen = str(getattr(args, "web.listen-address"))
    level, fmt = getattr(args, "log.level"), getattr(args, "log.format")
    # On a terminal the exporter's log (a line per device node at each step) would bury the timeline: it goes to
    # a file the demo names, unless --log.* asks for it here.
    to_file = sys.stderr.isatty() and level is None and fmt is None
    with tempfile.TemporaryDirectory(prefix="rocm-watchdog-demo-", ignore_cleanup_errors=True) as temp:
        base = Path(temp)
        demo = Demo(base, step_seconds, bool(args.with_prometheus), log)
        serve_args, serve_problems = cli.parse_command_line(
            demo.serve_argv(listen, level, "logfmt" if to_file else fmt)
        )
        assert serve_args is not None and not serve_problems, serve_problems
        try:
            config = cli.load_config(serve_args)[0]
        except cli.ConfigError as exc:
            return cli._fail_config(exc.problems, "demo")
        demo.config = replace(config, listen_address=listen)

        def started(store: SnapshotStore, port: int) -> None:
            target = _connect_host(listen, port)
            lines = [
                f"rocm-watchdog demo: a simulated 8-GPU MI300X host in {demo.host.root}",
                f"  metrics:  http://{target}/metrics   (landing page http://{target}/)",
                f"  check it: {demo.check_command()}",
            ]
            if to_file:
                lines.append(f"  its log:  tail -f {base / LOG_FILE}")
            if not demo.nodes:
                lines.append(
                    f"  not root: no device nodes (mknod needs CAP_MKNOD); the /dev/kfd step needs `{ROOT_HINT}`"
                )
            print("\n".join(lines), flush=True)
            demo.log.info("demo_started", root=str(demo.host.root), url=f"http://{target}/metrics", nodes=demo.nodes)
            if demo.with_prometheus:
                try:
                    urls = demo.start_prometheus(target)
                    print(f"  alerts:   {urls[0]}   Alertmanager: {urls[1]}", flush=True)
                except (RuntimeError, OSError) as exc:
                    demo.say("demo_prometheus_failed", f"--with-prometheus: {exc}")
            threading.Thread(target=demo.run_timeline, args=(store,), name="demo-timeline", daemon=True).start()

        saved = _stderr_to(base / LOG_FILE) if to_file else None
        code: int = ExitCode.INTERNAL
        try:
            code = cli.cmd_serve(demo.config, None, note=NOTE, started=started)
        finally:
            demo.close()
            if saved is not None:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                if code != 0:  # why it did not serve: the lines that went to the file
                    sys.stderr.write("".join((base / LOG_FILE).read_text().splitlines(True)[-10:]))
        return code


def _stderr_to(path: Path) -> int:
    """Send file descriptor 2 to ``path``; the descriptor that keeps the old stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    return saved


def _sysfs_read(store: SnapshotStore) -> bool:
    """Whether the sysfs source has a fresh snapshot (its first run is done)."""
    return store.view(wall_time()).fresh_data("sysfs") is not None
