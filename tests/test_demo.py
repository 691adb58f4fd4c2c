"""``rocm-watchdog demo`` (issue 24) as a real process: installed from a wheel into a fresh virtualenv and run with
no checkout on its path, as root (every step, device nodes included) and as a user (uid 1000: everything but the
device nodes, and it says so); with Prometheus and Alertmanager; and ``serve`` on a host without GPUs serving that
host, never the demo's.

Each step is waited for by polling ``/metrics`` (the timeouts only guard against a hang). The order is read from
the exposition itself: every step's condition or event carries the time the watchdog saw it, and the demo makes a
step only once the watchdog has seen the one before, holding it at least ``--demo.step``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from fakeroot import build_root
from paths import PROJECT
from prometheus_client.parser import text_string_to_metric_families
from tools import serving_port

from exporter.demo import NODENAME, RESET_GPU, SWAPPED

SYSTEM_PYTHON = Path("/usr/bin/python3")  # Debian's: a virtualenv made from it is usable by any uid
USER = 1000
STEP = "2s"
GUARD_SECONDS = 180.0  # a failure guard only: each wait ends as soon as the step is on /metrics
SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "exporter", "alerts")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``; None when there is none."""
    want = set(labels.items())
    values = [v for (n, ls), v in found.items() if n == name and want <= ls]
    assert len(values) <= 1, (name, labels, values)
    return values[0] if values else None


def since(found: Samples, condition: str, subject: str) -> float | None:
    return value(found, "rocm_device_condition_since_timestamp_seconds", condition=condition, subject=subject)


def problems(found: Samples) -> list[frozenset[tuple[str, str]]]:
    """The active conditions that are problems (critical or warning)."""
    return [ls for (n, ls), _ in found.items() if n == "rocm_device_condition" and ("severity", "info") not in ls]


@pytest.fixture(scope="module")
def venv() -> Iterator[Path]:
    """The project built as a wheel (``pip wheel --no-deps``, from a copy of its sources) and installed into a
    fresh virtualenv with its dependencies from the local pip configuration, in a directory any uid may read."""
    if not (SYSTEM_PYTHON.exists() and os.geteuid() == 0):
        pytest.fail(f"{SYSTEM_PYTHON} (Debian python3-venv, which scripts/test installs) and root are needed")
    top = Path(tempfile.mkdtemp(prefix="rocm-watchdog-demo-test-"))
    try:
        top.chmod(0o755)
        src = top / "src"
        src.mkdir()
        for name in SOURCES:
            if (PROJECT / name).is_dir():
                shutil.copytree(PROJECT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(PROJECT / name, src / name)
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        for argv in (
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--wheel-dir",
                str(top / "wheels"),
                str(src),
            ],
            [str(SYSTEM_PYTHON), "-m", "venv", str(top / "venv")],
        ):
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        (wheel,) = (top / "wheels").glob("rocm_watchdog-*.whl")
        install = [str(top / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)]
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        shutil.rmtree(src)  # nothing of the checkout is left to import from
        yield top / "venv"
    finally:
        shutil.rmtree(top)


def clean_env() -> dict[str, str]:
    """No PYTHONPATH, no user site, a PATH with the system's binaries (prometheus, setpriv) only."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/", "PYTHONNOUSERSITE": "1", "NO_PROXY": "127.0.0.1"}


def as_user(argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", *argv]


class Demo:
    """A running ``rocm-watchdog demo``: its stdout lines (read by a thread), its JSON log in a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.lines: list[str] = []
        with log.open("w") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd="/")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.wait_line(lambda text: text.startswith("  metrics:"))
        self.url = line.split()[1].removesuffix("/metrics")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self) -> str:
        return "\n".join(self.lines) + "\n--- log (tail) ---\n" + "".join(self.log.read_text().splitlines(True)[-20:])

    def wait_line(self, match: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + GUARD_SECONDS
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match(line):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                pytest.fail(f"the demo exited {self.proc.returncode}:\n{self.said()}")
            time.sleep(0.1)
        pytest.fail(f"the demo never said it:\n{self.said()}")

    def scrape(self, path: str = "/metrics") -> str:
        response = requests.get(self.url + path, timeout=10)
        response.raise_for_status()
        return response.text

    def wait(self, what: str, done: Callable[[Samples], bool]) -> Samples:
        """Scrape until ``done`` holds (the guard fails the test when it never does)."""
        deadline = time.monotonic() + GUARD_SECONDS
        while time.monotonic() < deadline:
            found = samples(self.scrape())
            if done(found):
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"{what}: never on /metrics\n{self.said()}")

    def events(self) -> list[dict[str, object]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if str(record.get("event", "")).startswith("demo_"):
                    out.append(record)
        return out

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Demo]]:
    started: list[Demo] = []

    def run(argv: list[str], env: dict[str, str]) -> Demo:
        demo = Demo(argv, env, tmp_path / f"demo-{len(started)}.log")
        started.append(demo)
        return demo

    yield run
    for demo in started:
        if demo.proc.poll() is None:
            demo.stop()


def demo_argv(venv: Path, *extra: str) -> list[str]:
    return [str(venv / "bin" / "rocm-watchdog"), "demo", f"--demo.step={STEP}", "--web.listen-address=127.0.0.1:0",
            "--log.format=json", *extra]  # fmt: skip


def gid_drift(found: Samples) -> bool:
    return (
        value(found, "rocm_group_gid_drift", group="render") == 1
        and since(found, "group_gid_drift", "render") is not None
    )


def reset(found: Samples) -> bool:
    return all(
        (value(found, "rocm_kernel_events_total", pci_bus=RESET_GPU, **{"class": c}) or 0) >= 1
        for c in ("gpu_reset_begin", "vram_lost")
    )


def renumbered(found: Samples) -> bool:
    return all(value(found, "rocm_render_node_renumbered", pci_bus=bdf) == 1 for bdf in SWAPPED)


def repaired(found: Samples) -> bool:
    return (
        not problems(found)
        and not value(found, "rocm_group_gid_drift", group="render")  # absent or 0
        and not any(value(found, "rocm_render_node_renumbered", pci_bus=bdf) for bdf in SWAPPED)
    )


def reset_time(found: Samples) -> float:
    t = value(found, "rocm_kernel_event_last_timestamp_seconds", pci_bus=RESET_GPU, **{"class": "vram_lost"})
    assert t is not None
    return t


def test_the_wheel_has_no_checkout_on_its_path(venv: Path) -> None:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import exporter.fakehost.builder as b, sys; print(b.__file__); "
         "print(b.capture_dir('mi300x-cpx-8gpu')); print(sys.path)"],
        env=clean_env(), cwd="/", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    module, capture, path = proc.stdout.splitlines()
    assert module.startswith(str(venv)) and capture.startswith(str(venv)), proc.stdout
    assert str(PROJECT) not in path


def test_demo_as_root_plays_every_step_in_order(venv: Path, start: Callable[..., Demo]) -> None:
    demo = start(demo_argv(venv), clean_env())
    # the server answers before the sources' first runs are done: wait for the simulated GPUs
    found = demo.wait("the simulated GPUs", lambda f: (value(f, "rocm_gpus") or 0) > 0)
    assert value(found, "rocm_watchdog_host_info", nodename=NODENAME) == 1
    assert "the host is simulated" in demo.scrape("/")
    check = demo.wait_line(lambda line: line.strip().startswith("check it:"))
    assert "rocm-watchdog check --path.rootfs=" in check and "--state.dir=" in check

    demo.wait("the render gid change", gid_drift)
    at_reset = demo.wait("the GPU reset and VRAM lost", reset)
    assert gid_drift(at_reset)

    def kfd_world_writable(found: Samples) -> bool:
        return (
            value(found, "rocm_device_node_policy_violation", path="/dev/kfd", rule="world_writable") == 1
            and value(found, "rocm_device_node_info", path="/dev/kfd", mode="0666") == 1
        )

    demo.wait("/dev/kfd made 0666", kfd_world_writable)
    at_renumber = demo.wait("the renumbering reboot", renumbered)
    # every step's mark is still there, and they happened in the timeline's order
    assert gid_drift(at_renumber) and kfd_world_writable(at_renumber)
    kfd = since(at_renumber, "world_writable", "/dev/kfd")
    gid, renumber = since(at_renumber, "group_gid_drift", "render"), since(at_renumber, "render_renumbered", SWAPPED[0])
    assert gid is not None and kfd is not None and renumber is not None
    assert gid < reset_time(at_renumber) < kfd < renumber
    after = demo.wait("the conditions cleared by the repair", repaired)
    assert value(after, "rocm_device_node_info", path="/dev/kfd", mode="0660") == 1
    assert reset(after)  # the kernel-log counters stay: the reset happened
    demo.wait_line(lambda line: "the timeline is over" in line)

    said = [e["step"] for e in demo.events() if e["event"] == "demo_step"]
    assert said == ["render gid change", "GPU reset, VRAM lost", "/dev/kfd world-writable", "renumbering reboot",
                    "repair"]  # fmt: skip
    assert not [e for e in demo.events() if e["event"] in ("demo_step_skipped", "demo_step_unseen")]
    root = check.split("--path.rootfs=", 1)[1].split()[0]
    assert demo.stop() == 0
    assert not Path(root).exists()  # the temporary host goes with the demo


def test_demo_as_a_user_plays_all_but_the_device_nodes_and_says_so(venv: Path, start: Callable[..., Demo]) -> None:
    demo = start(as_user(demo_argv(venv)), clean_env())
    demo.wait_line(lambda line: "not root" in line and "sudo rocm-watchdog demo" in line)
    demo.wait("the render gid change", gid_drift)
    demo.wait("the GPU reset and VRAM lost", reset)
    at_renumber = demo.wait("the renumbering reboot", renumbered)
    gid, renumber = since(at_renumber, "group_gid_drift", "render"), since(at_renumber, "render_renumbered", SWAPPED[0])
    assert gid is not None and renumber is not None
    assert gid < reset_time(at_renumber) < renumber
    final = demo.wait("the conditions cleared by the repair", repaired)
    assert not [key for key in final if key[0] == "rocm_device_node_info"]  # no device node at all
    assert value(final, "rocm_watchdog_host_info", nodename=NODENAME) == 1
    skipped = demo.wait_line(lambda line: "skipped" in line)
    assert "/dev/kfd" in skipped and "sudo rocm-watchdog demo" in skipped
    events = demo.events()
    assert [e["step"] for e in events if e["event"] == "demo_step_skipped"] == ["/dev/kfd world-writable"]
    assert [e["step"] for e in events if e["event"] == "demo_step"] == [
        "render gid change", "GPU reset, VRAM lost", "renumbering reboot", "repair"
    ]  # fmt: skip
    assert demo.stop() == 0


def test_demo_with_prometheus_fires_and_resolves_the_shipped_alerts(venv: Path, start: Callable[..., Demo]) -> None:
    if shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None:
        pytest.fail("Debian prometheus and prometheus-alertmanager are needed (scripts/test installs them)")
    demo = start(demo_argv(venv, "--with-prometheus"), clean_env())
    line = demo.wait_line(lambda text: text.strip().startswith("alerts:"))
    prometheus, alertmanager = line.split()[1].removesuffix("/alerts"), line.split()[3].removesuffix("/#/alerts")
    assert any("for: and keep_firing_for: shortened" in text for text in demo.lines)

    def alerts() -> dict[str, str]:
        try:
            data = requests.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        except requests.RequestException:
            return {}  # Prometheus is still starting
        return {a["labels"]["alertname"]: a["state"] for a in data}

    def wait_alerts(what: str, done: Callable[[dict[str, str]], bool]) -> dict[str, str]:
        deadline = time.monotonic() + GUARD_SECONDS
        while time.monotonic() < deadline:
            now = alerts()
            if done(now):
                return now
            time.sleep(0.2)
        pytest.fail(f"{what}: last alerts {alerts()}\n{demo.said()}")

    wait_alerts("the gid alert firing", lambda a: a.get("RocmRenderGroupGidChanged") == "firing")
    wait_alerts("the VRAM-lost alert firing", lambda a: a.get("RocmVramLost") == "firing")
    in_am = requests.get(f"{alertmanager}/api/v2/alerts", timeout=10).json()
    assert "RocmRenderGroupGidChanged" in {a["labels"]["alertname"] for a in in_am}
    demo.wait_line(lambda text: "the timeline is over" in text)
    wait_alerts("the drift alerts resolved after the repair", lambda a: "RocmRenderGroupGidChanged" not in a)
    assert demo.stop() == 0


def test_serve_on_a_host_without_gpus_serves_that_host(tmp_path: Path) -> None:
    root = build_root(tmp_path, [])
    argv = [sys.executable, "-m", "exporter", "serve", "--web.listen-address=127.0.0.1:0",
            f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}", "--no-collector.rocm-smi",
            "--no-collector.amd-smi", "--log.format=json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "NODE_NAME": "gpu-less"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        port = serving_port(proc)
        deadline = time.monotonic() + GUARD_SECONDS
        found: Samples = {}
        while time.monotonic() < deadline:
            found = samples(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
            if value(found, "rocm_gpus") is not None:
                break
            time.sleep(0.1)
        assert value(found, "rocm_gpus") == 0
        assert value(found, "rocm_watchdog_host_info", nodename="gpu-less") == 1
        assert "simulated" not in requests.get(f"http://127.0.0.1:{port}/", timeout=10).text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_bad_step_is_refused_with_exit_2_before_anything_is_built() -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    before = set(Path(tempfile.gettempdir()).glob("rocm-watchdog-demo-*"))
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "demo", "--demo.step=fast"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--demo.step: not a duration: 'fast'" in proc.stderr and "Traceback" not in proc.stderr
    assert set(Path(tempfile.gettempdir()).glob("rocm-watchdog-demo-*")) == before
