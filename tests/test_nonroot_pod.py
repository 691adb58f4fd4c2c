"""The non-root Kubernetes pod, as the kernel sees it: the real commands under ``setpriv`` with exactly the uid,
groups, capability sets and no_new_privs the pod spec yields, in the device cgroup a container runtime gives an
unprivileged container, reading this machine's real ``/dev/kmsg`` (kernel.dmesg_restrict=1).

- exporter (runAsUser 10001, drop ALL, allowPrivilegeEscalation false): ``setpriv --reuid=10001 --regid=10001
  --groups=<render,video> --inh-caps=-all --ambient-caps=-all --bounding-set=-all --no-new-privs``, in the
  runtime's default device cgroup
- kmsg-relay: the least it needs is uid 0 with CAP_SYSLOG (``setpriv --reuid=0 --regid=0 --clear-groups
  --inh-caps=-all --bounding-set=-all,+syslog --no-new-privs``) and /dev/kmsg allowed by the device cgroup, which
  in Kubernetes only ``privileged: true`` gives (all capabilities, no no_new_privs): run that way it drops every
  capability and sets no_new_privs itself right after opening /dev/kmsg
- prepare-state (runAsUser 0, drop ALL, add CHOWN and FOWNER): ``--bounding-set=-all,+chown,+fowner``

What fails without the design (the exporter reading /dev/kmsg itself, even with SYSLOG "added"; the relay without
CAP_SYSLOG or in an unprivileged container; a root-owned state dir) and what works with it (records through the
relay, exactly once across an exporter restart, proven with records the kernel itself writes; the state dir after
prepare-state).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import itertools
import json
import os
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from containers import CONTAINER_DEVICES, DEVICES_CGROUP, DeviceCgroup, checkout_open_to_others, interpreter
from fakeroot import FakeGpu, FakeRoot, build_root
from prometheus_client.parser import text_string_to_metric_families

from exporter.sources.kernel_log import CURSOR_FILE
from exporter.sources.kmsg_relay import KmsgRelay
from exporter.statedir import PrepareError, prepare_state_dir

PROJECT = Path(__file__).resolve().parents[1]
KMSG = Path("/dev/kmsg")
POD_UID = 10001
GPU = "0000:03:00.0"
CAP_SYSLOG = 34
NO_CAPS = "0" * 16


def _dmesg_restricted() -> bool:
    try:
        return Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    except OSError:
        return False


def _kmsg_readable() -> bool:
    try:
        os.close(os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="setpriv to other uids and capability sets needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed"),
    pytest.mark.skipif(not _kmsg_readable(), reason="no readable /dev/kmsg here"),
]
restricted = pytest.mark.skipif(
    not _dmesg_restricted(), reason="kernel.dmesg_restrict is 0 here: anyone may read /dev/kmsg"
)
device_cgroup = pytest.mark.skipif(
    not (DEVICES_CGROUP / "devices.allow").exists(), reason="no cgroup v1 devices controller to model a container"
)


# -- the pod's processes ---------------------------------------------------------------------------------------
def pod_groups() -> str:
    """The supplementary groups the DaemonSet gives the exporter: the host's render and video gids."""
    gids = []
    for name in ("render", "video"):
        with contextlib.suppress(KeyError):
            gids.append(grp.getgrnam(name).gr_gid)
    return ",".join(map(str, gids)) or str(POD_UID)


def exporter_priv(bounding: str = "-all") -> list[str]:
    """``bounding="-all,+syslog"`` is what ``capabilities: add: [SYSLOG]`` gives a non-root container."""
    return [
        "setpriv", f"--reuid={POD_UID}", f"--regid={POD_UID}", f"--groups={pod_groups()}",
        "--inh-caps=-all", "--ambient-caps=-all", f"--bounding-set={bounding}", "--no-new-privs",
    ]  # fmt: skip


def root_priv(bounding: str | None) -> list[str]:
    """uid 0 with only ``bounding`` and no_new_privs; ``None``: a privileged container (every capability, no
    no_new_privs: Kubernetes refuses allowPrivilegeEscalation: false beside privileged: true)."""
    if bounding is None:
        return ["setpriv", "--reuid=0", "--regid=0", "--clear-groups"]
    return [
        "setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--inh-caps=-all", f"--bounding-set={bounding}",
        "--no-new-privs",
    ]  # fmt: skip


RELAY_LEAST_CAPS = "-all,+syslog"
PREPARE_CAPS = "-all,+chown,+fowner"


@pytest.fixture(scope="module")
def rocm_watchdog() -> Iterator[tuple[list[str], dict[str, str]]]:
    """``rocm-watchdog`` as a pod runs it: checked once to work as uid 10001 at all (tests/containers.py)."""
    argv, env = interpreter(POD_UID)
    with checkout_open_to_others():
        probe = subprocess.run(
            [*exporter_priv(), *argv, "--version"], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if probe.returncode != 0:
            pytest.fail(f"uid {POD_UID} cannot run the exporter from this checkout: {probe.stderr.strip()[-300:]}")
        yield argv, env


class Proc:
    """A real child process with its stderr in a file; stopped with SIGTERM, a bounded wait, then SIGKILL."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, cgroup: Path | None) -> None:
        self.log = log
        join = None
        if cgroup is not None:
            procs_file = str(cgroup / "cgroup.procs")

            def join() -> None:  # in the child, before setpriv runs: the container's device cgroup
                with open(procs_file, "w") as f:
                    f.write(str(os.getpid()))

        with log.open("wb") as err:
            self.popen = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err, preexec_fn=join
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, timeout: float = 15) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=timeout)
        return self.popen.returncode

    def events(self) -> list[dict[str, object]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    out.append(event)
        return out

    def status(self) -> dict[str, str]:
        """/proc/<pid>/status of the process setpriv exec'd: its real uid, capabilities and no_new_privs."""
        text = Path(f"/proc/{self.pid}/status").read_text()
        return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


class Pod:
    """The processes one test starts and the device cgroup of its unprivileged containers (cgroup v1 devices
    controller: deny all, then the runtime's default allow-list). Whatever still runs at the end is stopped and
    the cgroup removed."""

    def __init__(self, tmp: Path, rocm_watchdog: tuple[list[str], dict[str, str]]) -> None:
        self.tmp = tmp
        self.argv, self.env = rocm_watchdog
        self.procs: list[Proc] = []
        self.devices: DeviceCgroup | None = None
        self.cgroup: Path | None = None
        if (DEVICES_CGROUP / "devices.allow").exists():
            self.devices = DeviceCgroup(CONTAINER_DEVICES)
            self.cgroup = self.devices.path

    def start(self, name: str, priv: list[str], args: list[str], privileged: bool = False) -> Proc:
        proc = Proc([*priv, *self.argv, *args], self.env, self.tmp / f"{name}.log", None if privileged else self.cgroup)
        self.procs.append(proc)
        return proc

    def run(self, priv: list[str], args: list[str]) -> subprocess.CompletedProcess[str]:
        """A short-lived container (an initContainer) to its end; bounded."""
        proc = self.start(f"run-{len(self.procs)}", priv, args)
        try:
            proc.popen.wait(timeout=60)
        finally:
            proc.stop()
        text = proc.log.read_text(errors="replace")
        return subprocess.CompletedProcess(proc.popen.args, proc.popen.returncode, "", text)

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        if self.devices is not None:
            self.devices.close()


@pytest.fixture
def pod(open_tmp: Path, rocm_watchdog: tuple[list[str], dict[str, str]]) -> Iterator[Pod]:
    p = Pod(open_tmp, rocm_watchdog)
    try:
        yield p
    finally:
        p.close()


def wait_until(what: str, check: Callable[[], object], limit_seconds: float = 60) -> object:
    """Poll ``check`` until it returns something truthy: bounded in time and in count."""
    deadline = time.monotonic() + limit_seconds
    last: object = None
    for _ in range(int(limit_seconds / 0.1) + 1):
        with contextlib.suppress(OSError, ValueError, KeyError, requests.RequestException):
            last = check()
            if last:
                return last
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {limit_seconds} s (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exporter:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc, self.port = proc, port

    def scrape(self) -> str:
        response = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)
        response.raise_for_status()
        return response.text

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name{labels...}`` (labels: a subset) of a fresh scrape; None when absent."""
        for family in text_string_to_metric_families(self.scrape()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return None

    def wait_value(self, name: str, expected: float, **labels: str) -> None:
        wait_until(f"{name}{labels} == {expected}", lambda: self.value(name, **labels) == expected)


def start_exporter(
    pod: Pod, root: FakeRoot, kernel_log: Path, name: str, *extra: str, bounding: str = "-all", confined: bool = True
) -> Exporter:
    """``rocm-watchdog serve`` as the DaemonSet's exporter container runs it (``confined=False``: with /dev/kmsg
    allowed by the device cgroup, which no unprivileged container has)."""
    port = free_port()
    flags = [
        f"--kernel-log.path={kernel_log}",
        f"--path.rootfs={root.root}",
        f"--state.dir={root.state_dir}",
        "--no-collector.rocm-smi",
        "--no-collector.amd-smi",
        "--collector.devices.interval=1s",
        "--collector.sysfs.interval=1s",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.format=json",
    ]
    proc = pod.start(name, exporter_priv(bounding), ["serve", *flags, *extra], privileged=not confined)
    exporter = Exporter(proc, port)
    wait_until(f"{name} serves /metrics", exporter.scrape)
    status = proc.status()
    # exactly what the pod gives it: uid 10001, no capability at all, no_new_privs
    assert status["Uid"].split()[:2] == [str(POD_UID)] * 2 and status["Gid"].split()[0] == str(POD_UID)
    assert status["CapEff"] == status["CapPrm"] == status["CapAmb"] == status["CapInh"] == NO_CAPS
    assert status["NoNewPrivs"] == "1"
    return exporter


def start_relay(pod: Pod, fifo: Path, bounding: str | None = None, confined: bool = False) -> Proc:
    """``rocm-watchdog kmsg-relay``; by default as the DaemonSet runs it: a privileged container."""
    args = ["kmsg-relay", f"--from={KMSG}", f"--to={fifo}", "--log.format=json"]
    return pod.start("relay", root_priv(bounding), args, privileged=not confined)


def prepare_state(pod: Pod, state_dir: Path, bounding: str = PREPARE_CAPS) -> subprocess.CompletedProcess[str]:
    """``rocm-watchdog prepare-state`` as the DaemonSet's initContainer runs it."""
    args = ["prepare-state", f"--state.dir={state_dir}", f"--owner={POD_UID}:{POD_UID}", "--log.format=json"]
    return pod.run(root_priv(bounding), args)


@pytest.fixture
def host(open_tmp: Path) -> FakeRoot:
    """A fake GPU host in a directory uid 10001 can read (tmp_path's parents are root's 0700), its state dir the
    way Kubernetes creates a hostPath directory: root-owned 0755."""
    root = build_root(open_tmp, [FakeGpu(GPU, card=1, render=128, kfd_node=1)])
    for dirpath, dirnames, filenames in os.walk(open_tmp):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o055)
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p) and stat.S_ISREG(os.lstat(p).st_mode):
                os.chmod(p, os.stat(p).st_mode | 0o044)
    os.chmod(root.state_dir, 0o755)
    (root.root / "kern.log").write_text(f"[    5.000000] amdgpu {GPU}: amdgpu: GPU reset begin!\n")
    os.chmod(root.root / "kern.log", 0o644)
    run = open_tmp / "run"  # the pod's emptyDir shared by the relay and the exporter (Kubernetes makes it 0777)
    run.mkdir()
    os.chmod(run, 0o777)
    return root


# -- /dev/kmsg as root, to write markers and find the records the kernel gave them -------------------------------
def _find_record(fd: int, needle: bytes, limit_seconds: float = 10) -> int:
    """The sequence number of the next record containing ``needle`` on a /dev/kmsg fd (bounded)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + limit_seconds
    for _ in range(100_000):
        try:
            record = os.read(fd, 16384)
        except BlockingIOError:
            if time.monotonic() > deadline:
                break
            poller.poll(100)
            continue
        except BrokenPipeError:
            continue
        if needle in record:
            return int(record.split(b",", 2)[1])
    raise AssertionError(f"no kernel record with {needle!r}")


def user_marker(text: str) -> int:
    """Write a user-facility line to /dev/kmsg (never counted) and return its sequence number."""
    fd = os.open(KMSG, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, f"<12>rocm-watchdog-test: {text}\n".encode())
        return _find_record(fd, text.encode())
    finally:
        os.close(fd)


CRASH = """\
import ctypes, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: the name the kernel logs
ctypes.string_at(0)
"""


def kernel_record(comm: str, cwd: Path) -> int:
    """Make the kernel itself write a record (facility 0): a process named ``comm`` dies of an unhandled
    SIGSEGV, which the kernel logs as "<comm>[<pid>]: segfault at 0 ...". Returns its sequence number."""
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.lseek(fd, 0, os.SEEK_END)
        crash = subprocess.run(
            [sys.executable, "-c", CRASH, comm], cwd=cwd, env={"PATH": "/usr/bin:/bin"}, timeout=60, check=False
        )
        assert crash.returncode == -signal.SIGSEGV
        return _find_record(fd, f"{comm}[".encode())
    finally:
        os.close(fd)


def cursor(root: FakeRoot) -> dict[str, object]:
    doc = json.loads((root.state_dir / CURSOR_FILE).read_text())
    assert isinstance(doc, dict)
    return doc


def last_seq(root: FakeRoot) -> int:
    seq = cursor(root)["last_seq"]
    return seq if isinstance(seq, int) else -1


# -- (a) without the design: the exporter cannot read /dev/kmsg --------------------------------------------------
@restricted
@pytest.mark.parametrize(
    ("bounding", "confined"),
    [("-all", True), ("-all,+syslog", False)],
    ids=["as-deployed", "syslog-added-and-device-allowed"],
)
def test_a_non_root_exporter_cannot_read_dev_kmsg(pod: Pod, host: FakeRoot, bounding: str, confined: bool) -> None:
    """uid 10001 with no_new_privs: permission denied. As deployed (no capability, the container's device cgroup);
    and even with the device allowed and SYSLOG in the bounding set, which is all ``capabilities: add: [SYSLOG]``
    gives a non-root container: without ambient capabilities it is never effective."""
    exporter = start_exporter(pod, host, KMSG, "exporter", bounding=bounding, confined=confined)
    # up is 0 from the first scrape while the first run is pending: wait for the run to have failed
    wait_until(
        "the kernel-log source failed",
        lambda: (exporter.value("rocm_watchdog_source_failures_total", source="kernel-log") or 0) >= 1,
    )
    assert exporter.value("rocm_watchdog_source_up", source="kernel-log") == 0.0
    assert exporter.value("rocm_watchdog_source_pending", source="kernel-log") is None
    assert exporter.proc.stop() == 0
    failed = [e for e in exporter.proc.events() if (e.get("event"), e.get("source")) == ("source_failed", "kernel-log")]
    assert failed, exporter.proc.log.read_text()
    error = str(failed[0]["error"])
    assert "cannot open /dev/kmsg: permission denied" in error and "kmsg-relay" in error


# -- (c) what the relay needs: CAP_SYSLOG, and the device (a privileged container) --------------------------------
@pytest.mark.parametrize(
    ("bounding", "confined", "why"),
    [
        pytest.param("-all", False, "needs CAP_SYSLOG", marks=restricted, id="device-allowed-no-cap-syslog"),
        pytest.param(RELAY_LEAST_CAPS, True, "must be privileged", marks=device_cgroup, id="unprivileged-container"),
    ],
)
def test_the_relay_fails_without_cap_syslog_or_the_device(
    pod: Pod, host: FakeRoot, bounding: str, confined: bool, why: str
) -> None:
    fifo = pod.tmp / "run" / "kmsg"
    relay = start_relay(pod, fifo, bounding=bounding, confined=confined)
    wait_until("the relay exits", lambda: relay.popen.poll() is not None, 30)
    assert relay.popen.returncode == 1
    (failed,) = [e for e in relay.events() if e.get("event") == "relay_failed"]
    assert "cannot open /dev/kmsg: permission denied" in str(failed["error"]) and why in str(failed["error"])
    assert not fifo.exists()


def test_the_relay_needs_nothing_but_cap_syslog_and_keeps_nothing(pod: Pod, host: FakeRoot) -> None:
    """The least the relay needs: uid 0, CAP_SYSLOG only, no_new_privs, the device allowed. And once /dev/kmsg is
    open it holds no capability at all (what it drops as a privileged container is the next test)."""
    fifo = pod.tmp / "run" / "kmsg"
    relay = start_relay(pod, fifo, bounding=RELAY_LEAST_CAPS)
    wait_until("the relay makes its FIFO", fifo.exists)
    status = relay.status()
    assert status["CapEff"] == status["CapPrm"] == NO_CAPS and status["NoNewPrivs"] == "1"
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        (record,) = read_records(reader, 1)
    finally:
        os.close(reader)
    assert int(record.split(b",", 2)[1]) >= 0
    assert relay.stop() == 0


# -- (b) with the design: records through the relay, exactly once across a restart ------------------------------
def test_the_relay_feeds_the_non_root_exporter_exactly_once(pod: Pod, host: FakeRoot) -> None:
    tmp = pod.tmp
    prepared = prepare_state(pod, host.state_dir)
    assert prepared.returncode == 0, prepared.stderr
    fifo = tmp / "run" / "kmsg"
    relay = start_relay(pod, fifo)  # a privileged container: every capability, no no_new_privs
    wait_until("the relay makes its FIFO", fifo.exists)
    st = os.lstat(fifo)
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == 0  # nobody else writes
    # /dev/kmsg is open: the relay has dropped everything privileged gave it
    status = relay.status()
    assert status["Uid"].split()[:2] == ["0", "0"] and status["NoNewPrivs"] == "1"
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == status["CapInh"] == NO_CAPS

    # Rules matching what this test can make the kernel itself log; the shipped rules match amdgpu only.
    comm = f"rwd{secrets.token_hex(4)}"
    rules = tmp / "rules.yml"
    rules.write_text(
        f"version: 1\nrules:\n  - class: test_segfault\n    severity: info\n"
        f"    anchors: ['^{comm}\\[\\d+\\]: segfault at ']\n"
    )
    os.chmod(rules, 0o644)
    events, test_class = "rocm_kernel_events_total", {"class": "test_segfault"}

    first = start_exporter(pod, host, fifo, "exporter-1", f"--kernel-log.rules={rules}")
    first.wait_value("rocm_watchdog_source_up", 1.0, source="kernel-log")
    marker = user_marker(f"first-{comm}")  # user space: read (the cursor moves), never counted
    wait_until("the exporter reads the marker", lambda: last_seq(host) >= marker)
    assert first.value(events, **test_class) is None  # a class of its own: no series before its first event
    seq1 = kernel_record(comm, tmp)  # the kernel's own record, through the relay
    first.wait_value(events, 1.0, **test_class)
    # counted at once; the cursor follows within PERSIST_EVERY_SECONDS (and at the latest on the stop below)
    wait_until("the cursor records it", lambda: last_seq(host) >= seq1)
    assert seq1 > marker
    lost = first.value("rocm_kernel_log_records_lost_total")
    assert first.proc.stop() == 0
    before = cursor(host)
    counted = before["counts"]
    assert isinstance(counted, list) and [(c, n) for _, c, n in counted] == [("test_segfault", 1)]
    wait_until("the relay sees its reader go", lambda: any(e.get("event") == "reader_gone" for e in relay.events()))

    # While no exporter runs, the kernel logs another one: nobody reads it yet.
    seq2 = kernel_record(comm, tmp)
    # The restarted exporter gets the whole ring buffer again from the relay: the first record is skipped (its
    # cursor counted it), the second counted. Exactly once: 2, not 3 (counted twice) nor 1 (missed).
    second = start_exporter(pod, host, fifo, "exporter-2", f"--kernel-log.rules={rules}")
    second.wait_value("rocm_watchdog_source_up", 1.0, source="kernel-log")
    marker = user_marker(f"second-{comm}")
    wait_until("the restarted exporter reads past the replay", lambda: last_seq(host) >= marker > seq2)
    assert second.value(events, **test_class) == 2.0
    assert second.value("rocm_kernel_log_records_lost_total") == lost
    assert cursor(host)["boot_id"] == before["boot_id"]
    assert not [e for e in second.proc.events() if e.get("event") == "state_file_corrupt"]
    seq3 = kernel_record(comm, tmp)  # and one while it runs
    second.wait_value(events, 3.0, **test_class)
    wait_until("the cursor records it", lambda: last_seq(host) >= seq3)
    assert seq3 > seq2 > seq1
    assert second.proc.stop() == 0
    for name in ("baseline.json", CURSOR_FILE):
        assert (host.state_dir / name).stat().st_uid == POD_UID

    assert relay.stop() == 0  # SIGTERM ends it cleanly
    names = [e.get("event") for e in relay.events()]
    assert names.count("reader_connected") == 2 and names[-1] == "relay_stopped"


# -- (d) the state dir ------------------------------------------------------------------------------------------
def test_prepare_state_gives_the_host_path_dir_to_the_exporter(pod: Pod, host: FakeRoot) -> None:
    state = host.state_dir
    kern_log = host.root / "kern.log"
    unsaved = "rocm_watchdog_state_file_unsaved"

    # as Kubernetes makes it: root-owned 0755, so uid 10001 cannot save its baseline or its cursor
    exporter = start_exporter(pod, host, kern_log, "exporter-1")
    exporter.wait_value(unsaved, 1.0, file="baseline.json")
    exporter.wait_value(unsaved, 1.0, file=CURSOR_FILE)
    assert exporter.proc.stop() == 0
    assert os.listdir(state) == []

    # prepare-state without CAP_CHOWN: exit 2, one clear line, nothing changed
    failed = prepare_state(pod, state, bounding="-all")
    assert failed.returncode == 2
    assert failed.stderr.startswith(f"rocm-watchdog prepare-state: cannot change the owner of {state}:")
    assert "Operation not permitted" in failed.stderr and "CAP_CHOWN" in failed.stderr
    st = os.stat(state)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755)

    prepared = prepare_state(pod, state)
    assert prepared.returncode == 0, prepared.stderr
    st = os.stat(state)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (POD_UID, POD_UID, 0o700)

    exporter = start_exporter(pod, host, kern_log, "exporter-2")
    wait_until("the baseline and the cursor saved", lambda: {"baseline.json", CURSOR_FILE} <= set(os.listdir(state)))
    exporter.wait_value("rocm_kernel_events_total", 1.0, pci_bus=GPU, **{"class": "gpu_reset_begin"})
    # served only while 1: saved files have no unsaved series
    assert exporter.value(unsaved, file="baseline.json") is None and exporter.value(unsaved, file=CURSOR_FILE) is None
    assert exporter.value("rocm_kernel_events_total", pci_bus=GPU, **{"class": "gpu_reset_begin"}) == 1.0
    assert exporter.proc.stop() == 0
    # the baseline, the cursor and the GPU verdict for node-problem-detector (exporter/sinks/health_file.py)
    assert sorted(os.listdir(state)) == ["baseline.json", "gpu-health", CURSOR_FILE]
    assert {(state / n).stat().st_uid for n in os.listdir(state)} == {POD_UID}

    # Again on the next pod start (the dir now closed to root without CAP_DAC_OVERRIDE): nothing changes, and
    # CAP_CHOWN alone is enough (FOWNER is not used).
    again = prepare_state(pod, state, bounding="-all,+chown")
    assert again.returncode == 0, again.stderr
    st = os.stat(state)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (POD_UID, POD_UID, 0o700)
    assert {(state / n).stat().st_uid for n in os.listdir(state)} == {POD_UID}
    refused = prepare_state(pod, state, bounding="-all")
    assert refused.returncode == 2 and "CAP_CHOWN" in refused.stderr
    st = os.stat(state)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (POD_UID, POD_UID, 0o700)  # left as it was


def test_prepare_state_never_follows_links_out_of_the_dir(tmp_path: Path) -> None:
    outside = tmp_path / "etc-shadow"
    outside.write_text("root's\n")
    state = tmp_path / "state"
    (state / "sub" / "deeper").mkdir(parents=True)
    (state / "baseline.json").write_text("{}")
    (state / "sub" / "deeper" / "old.json").write_text("{}")
    os.chmod(state / "sub", 0o000)  # even a closed subdirectory
    (state / "link").symlink_to(outside)
    (state / "sub" / "link-dir").symlink_to(tmp_path)
    os.link(outside, state / "hardlink")
    os.mkfifo(state / "fifo")
    result = prepare_state_dir(state, POD_UID, POD_UID)
    owners = {str(p.relative_to(state)): (p.lstat().st_uid, stat.S_IMODE(p.lstat().st_mode)) for p in state.rglob("*")}
    assert owners["baseline.json"][0] == owners["sub/deeper/old.json"][0] == POD_UID
    assert owners["sub"] == owners["sub/deeper"] == (POD_UID, 0o700)
    for left in ("link", "sub/link-dir", "hardlink", "fifo"):
        assert owners[left][0] == 0, left
    assert outside.stat().st_uid == 0 and tmp_path.stat().st_uid == 0
    assert sorted(s.split(":")[0] for s in result.skipped) == sorted(
        str(state / n) for n in ("fifo", "hardlink", "link", "sub/link-dir")
    )
    assert prepare_state_dir(state, POD_UID, POD_UID).changed == []  # idempotent

    link = tmp_path / "state-link"
    link.symlink_to(state)
    with pytest.raises(PrepareError, match="is a symlink"):
        prepare_state_dir(link, POD_UID, POD_UID)
    (tmp_path / "file").write_text("")
    with pytest.raises(PrepareError, match="not a directory"):
        prepare_state_dir(tmp_path / "file", POD_UID, POD_UID)
    created = prepare_state_dir(tmp_path / "new", POD_UID, POD_UID)
    assert created.changed == [str(tmp_path / "new")] and (tmp_path / "new").stat().st_uid == POD_UID


def test_prepare_state_flags(rocm_watchdog: tuple[list[str], dict[str, str]], tmp_path: Path) -> None:
    argv, env = rocm_watchdog
    bad = subprocess.run(
        [*argv, "prepare-state", f"--state.dir={tmp_path}", "--owner=exporter"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "--owner: expected UID:GID as numbers" in bad.stderr


# -- the relay in-process: what it writes, where, and what it does when the reader or the ring buffer goes -------
class RelayThread:
    def __init__(self, relay: KmsgRelay) -> None:
        self.relay = relay
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.relay.run()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.relay.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        assert self.error is None, self.error


def read_records(fd: int, count: int, limit_seconds: float = 10) -> list[bytes]:
    """``count`` whole kmsg records (header plus dictionary lines) from a FIFO read end; bounded."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = b""
    deadline = time.monotonic() + limit_seconds
    while time.monotonic() < deadline:
        poller.poll(100)
        with contextlib.suppress(BlockingIOError):
            data += os.read(fd, 65536)
        lines = data.split(b"\n")
        heads = [i for i, line in enumerate(lines) if line and not line.startswith(b" ")]
        if len(heads) > count:
            return [b"\n".join(lines[a:b]) + b"\n" for a, b in itertools.pairwise(heads[: count + 1])]
    raise AssertionError(f"fewer than {count} records in {limit_seconds} s: {data[:300]!r}")


def test_relay_replaces_whatever_is_at_its_path_and_restarts_for_each_reader(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("not to be written\n")
    run = tmp_path / "run"
    run.mkdir()
    fifo = run / "kmsg"
    fifo.symlink_to(victim)  # a symlink (or a stale file, or an old FIFO) at --to is replaced, never followed
    relay = RelayThread(KmsgRelay(KMSG, fifo, drop_privileges=False))
    try:
        wait_until("the FIFO", lambda: stat.S_ISFIFO(os.lstat(fifo).st_mode), 10)
        assert victim.read_text() == "not to be written\n"
        assert stat.S_IMODE(os.lstat(fifo).st_mode) == 0o644
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            first = read_records(reader, 3)
        finally:
            os.close(reader)
        wait_until("the relay sees its reader go", lambda: not relay.relay.connected, 10)
        # exactly what /dev/kmsg gives: "prio,seq,usec,flags;message"
        seqs = [int(r.split(b",", 2)[1]) for r in first]
        assert seqs == sorted(seqs) and all(b";" in r.split(b"\n")[0] for r in first)
        # a new reader (a restarted exporter) gets the ring buffer again from its oldest record
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            again = read_records(reader, 3)
        finally:
            os.close(reader)
        assert again == first
    finally:
        relay.stop()
    assert relay.relay.overruns == 0


def test_relay_passes_an_overrun_on_as_a_gap(tmp_path: Path) -> None:
    """EPIPE from /dev/kmsg (records overwritten before they were read) does not stop the relay: the next record
    follows, and its sequence number shows the gap to the exporter."""
    reads = [0]

    def overrun_once(fd: int, size: int) -> bytes:
        reads[0] += 1
        if reads[0] == 2:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        return os.read(fd, size)

    fifo = tmp_path / "kmsg"
    relay = RelayThread(KmsgRelay(KMSG, fifo, read=overrun_once, drop_privileges=False))
    try:
        wait_until("the FIFO", fifo.exists, 10)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            records = read_records(reader, 3)
        finally:
            os.close(reader)
    finally:
        relay.stop()
    assert relay.relay.overruns == 1 and len(records) == 3
