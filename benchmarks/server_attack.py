"""The HTTP server under attack (issue 23): the figures of RELIABILITY.md's rows, measured on a real ``serve``.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python benchmarks/server_attack.py [--only cost18,burst,shared] [--repeats 3]
    PYTHONPATH=. .venv/bin/python benchmarks/server_attack.py --project /tmp/old --only cost18 --repeats 1

``--project`` runs the ``serve`` of another checkout (the code before a change, for its "before" figures); the
clients are this file's. Every exporter runs on the 8-GPU fake host with 1024 open files (systemd's default), this
process with its limit raised to the hard one (at most 8192): it holds the attackers' sockets.

- ``cost18``: a users file with a cost-18 hash (as exporter-toolkit's own test file has; made from a cost-4 hash
  with its cost field rewritten, which costs what a real one does to check) and a cost-10 user. Time from
  starting the process to the first answer (a 401 for an unknown user), against the same with a cost-10 file
  alone (the start of the process itself); the 401 of an unknown user and of the cost-10 user's wrong password
  (median of ``--repeats``, each from an address of its own: the brute-force limit stays out of it); the
  warning's estimate of one check of the cost-18 hash. The cost-18 user's own wrong password is not timed (about
  16 s here a check): the estimate says it.
- ``burst``: 1000 complete ``GET /metrics`` opened at once, from 100 addresses and from one: how each ended.
- ``full``: 240 GETs at once from 100 addresses on a server that stays full: ``exporter.http.serve`` alone in a
  process (``serve-full``), 64 connections at most, each answer 0.4 s of one of its 8 workers (a slow handler), so
  answers end 8 at a time every 0.4 s for 12 s: how each GET ended, and what the server dropped.
- ``shared``: an attacker guessing passwords as fast as it is answered from the scraper's own address, for
  ``--seconds``, while the scraper (its pair verified first) scrapes every 0.2 s: what each got.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import bcrypt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

NOFILE = 1024
GET = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"


def _limit_files() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(NOFILE, hard), hard))


class Exporter:
    """``serve`` on the fake host, on a port of its own; ``started`` is when the process was started."""

    def __init__(self, project: Path, base: Path, *extra: str) -> None:
        from fakeroot import FakeOther, build_root, capture_gpus

        root = build_root(base, capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc()], cpu_nodes=2)
        (root.root / "kern.log").write_text("")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.log = base / "serve.log"
        argv = [sys.executable, "-m", "exporter", "serve", f"--web.listen-address=127.0.0.1:{self.port}",
                f"--path.rootfs={root.root}", f"--state.dir={root.state_dir}",
                f"--kernel-log.path={root.root / 'kern.log'}", "--no-collector.rocm-smi", "--no-collector.amd-smi",
                "--log.format=json", *extra]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(project)}
        self.started = time.monotonic()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out, env=env, cwd=project, preexec_fn=_limit_files)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == name:
                    found.append(event)
        return found

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def basic(user: bytes, password: bytes) -> bytes:
    return b"Authorization: Basic " + base64.b64encode(user + b":" + password) + b"\r\n"


async def request(port: int, source: str = "127.0.0.1", extra: bytes = b"", timeout: float = 120) -> tuple[str, float]:
    """One GET on a new connection: its status ("closed", an error's name, "timeout") and how long it took."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    start = loop.time()
    first = b""
    try:
        sock.bind((source, 0))
        await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port)), timeout)
        await loop.sock_sendall(sock, GET + extra + b"\r\n")
        first = await asyncio.wait_for(loop.sock_recv(sock, 65536), timeout)
        while await asyncio.wait_for(loop.sock_recv(sock, 262144), timeout):
            pass
        status = first[9:12].decode() or "closed"
    except asyncio.TimeoutError:
        status = "timeout"
    except OSError as exc:  # a 503 refusal may be followed by a reset: answered all the same
        status = first[9:12].decode() if first.startswith(b"HTTP/1.1 503 ") else type(exc).__name__
    finally:
        sock.close()
    return status, loop.time() - start


async def first_answer(exporter: Exporter, extra: bytes, limit: float = 180) -> tuple[str, float]:
    """Seconds from the process's start to its first answer to a request sent as soon as it listens."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", exporter.port), timeout=0.2):
                break
        except OSError:
            await asyncio.sleep(0.02)
    status, _ = await request(exporter.port, "127.0.8.1", extra, timeout=limit)
    return status, time.monotonic() - exporter.started


def cost18(project: Path, tmp: Path, repeats: int) -> dict[str, Any]:
    expensive = bcrypt.hashpw(b"unknowable", bcrypt.gensalt(4))
    expensive = expensive[:4] + b"18" + expensive[6:]
    scraper = bcrypt.hashpw(b"right", bcrypt.gensalt(10))
    files = {
        "cost10_only": f"basic_auth_users:\n  prometheus: {scraper.decode()}\n",
        "with_cost18": f"basic_auth_users:\n  admin: {expensive.decode()}\n  prometheus: {scraper.decode()}\n",
    }
    out: dict[str, Any] = {}
    for label, text in files.items():
        base = tmp / label
        base.mkdir()
        (base / "web.yml").write_text(text)
        starts, unknown, known = [], [], []
        estimate = None
        for n in range(repeats):
            exporter = Exporter(project, base / f"run{n}", f"--web.config.file={base / 'web.yml'}")
            try:
                status, seconds = asyncio.run(first_answer(exporter, basic(b"mallory", b"guess")))
                starts.append(round(seconds, 2))
                assert status == "401", status
                for k in range(repeats):
                    status, took = asyncio.run(request(exporter.port, f"127.0.8.{10 + k}", basic(b"nobody", b"x")))
                    assert status == "401", status
                    unknown.append(took * 1e3)
                    status, took = asyncio.run(request(exporter.port, f"127.0.8.{50 + k}", basic(b"prometheus", b"x")))
                    assert status == "401", status
                    known.append(took * 1e3)
                warned = exporter.events("http_auth_hash_expensive")
                estimate = warned[0]["seconds_per_uncached_check"] if warned else estimate
            finally:
                exporter.stop()
        out[label] = {
            "start_to_first_answer_s": starts,
            "unknown_user_401_ms_median": round(statistics.median(unknown), 1),
            "cost10_wrong_password_401_ms_median": round(statistics.median(known), 1),
            "warned_seconds_per_cost18_check": estimate,
        }
    return out


async def _burst(port: int, sources: list[str]) -> dict[str, Any]:
    start = asyncio.get_running_loop().time()
    results = await asyncio.gather(*(request(port, source, timeout=60) for source in sources))
    outcomes = Counter(status for status, _ in results)
    return {"outcomes": dict(outcomes), "seconds": round(asyncio.get_running_loop().time() - start, 2)}


def burst(project: Path, tmp: Path, repeats: int) -> dict[str, Any]:
    exporter = Exporter(project, tmp / "burst")
    try:
        asyncio.run(first_answer(exporter, b""))
        runs: dict[str, list[dict[str, Any]]] = {"hundred_addresses": [], "one_address": []}
        for _ in range(repeats):
            runs["hundred_addresses"].append(
                asyncio.run(_burst(exporter.port, [f"127.0.1.{1 + n % 100}" for n in range(1000)]))
            )
            time.sleep(1)
            runs["one_address"].append(asyncio.run(_burst(exporter.port, ["127.0.0.10"] * 1000)))
            time.sleep(1)
    finally:
        exporter.stop()
    return runs


async def _shared(port: int, seconds: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    right = basic(b"prometheus", b"right")
    status, _ = await request(port, extra=right)  # the scraper's pair, verified by its one bcrypt
    assert status == "200", status
    stop = loop.time() + seconds
    scrapes: Counter[str] = Counter()
    guesses: Counter[str] = Counter()
    latencies: list[float] = []

    async def scraper() -> None:
        while loop.time() < stop:
            started = loop.time()
            status, took = await request(port, extra=right, timeout=10)
            scrapes[status] += 1
            latencies.append(took * 1e3)
            await asyncio.sleep(max(0.0, 0.2 - (loop.time() - started)))

    async def attacker() -> None:
        n = 0
        while loop.time() < stop:
            n += 1
            status, _ = await request(port, extra=basic(b"prometheus", b"guess%d" % n), timeout=10)
            guesses[status] += 1

    await asyncio.gather(scraper(), attacker())
    latencies.sort()
    return {"scraper": dict(scrapes), "scraper_max_ms": round(latencies[-1], 1), "attacker": dict(guesses)}


def shared(project: Path, tmp: Path, seconds: float) -> dict[str, Any]:
    (tmp / "shared").mkdir()
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(10)).decode()
    (tmp / "shared" / "web.yml").write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    exporter = Exporter(project, tmp / "shared" / "run", f"--web.config.file={tmp / 'shared' / 'web.yml'}")
    try:
        asyncio.run(first_answer(exporter, b""))
        return asyncio.run(_shared(exporter.port, seconds))
    finally:
        exporter.stop()


FULL_CONNECTIONS = 64
# Answers that end 8 at a time every 0.4 s: longer than the old server waited for a connection to close (0.2 s)
FULL_ANSWER_SECONDS = 0.4
FULL_WORKERS = 8
FULL_GETS = 240


def serve_full(port: int) -> None:
    """``serve-full PORT``: the HTTP server of the checkout on PYTHONPATH, full of slow answers (see ``full``)."""
    import exporter
    from exporter.http import Limits, make_app, serve
    from exporter.webconfig import WebConfig

    print(f"exporter from {Path(exporter.__file__).parent}", file=sys.stderr, flush=True)

    def slow(openmetrics: bool, gz: bool) -> bytes:
        time.sleep(FULL_ANSWER_SECONDS)
        return b"x 1\n"

    app = make_app(slow, WebConfig(), lambda: (True, "ok"))
    limits = Limits(max_connections=FULL_CONNECTIONS, max_requests=0, workers=FULL_WORKERS)
    server = serve(f"127.0.0.1:{port}", app, WebConfig(), limits=limits)
    print("serving", flush=True)
    signal.sigwait({signal.SIGTERM})
    print(json.dumps({"dropped": dict(server.stats().dropped)}), flush=True)
    server.shutdown()


def full(project: Path, repeats: int) -> list[dict[str, Any]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # inherited: the child waits for it with sigwait
    env = {**os.environ, "PYTHONPATH": str(project)}
    proc = subprocess.Popen([sys.executable, __file__, "serve-full", str(port)], env=env, cwd=project,
                            stdout=subprocess.PIPE, text=True, preexec_fn=_limit_files)  # fmt: skip
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    runs = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
        for _ in range(repeats):
            runs.append(asyncio.run(_burst(port, [f"127.0.1.{1 + n % 100}" for n in range(FULL_GETS)])))
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    last = [line for line in out.splitlines() if line.startswith('{"dropped"')][-1]  # the server logs there too
    dropped = {k: v for k, v in json.loads(last)["dropped"].items() if v}
    return [*runs, {"server_dropped_in_all": dropped}]


def main() -> None:
    if sys.argv[1:2] == ["serve-full"]:
        # the checkout on PYTHONPATH (--project), not this file's
        sys.path[:] = [p for p in sys.path if p not in (str(ROOT), str(ROOT / "tests"))]
        serve_full(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="cost18,burst,full,shared")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="of the shared-address attack")
    parser.add_argument("--project", type=Path, default=ROOT, help="the checkout whose serve runs")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    results: dict[str, Any] = {"project": str(args.project), "python": sys.version.split()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        for case in args.only.split(","):
            if case == "cost18":
                results["cost18"] = cost18(args.project, tmp, args.repeats)
            elif case == "burst":
                results["burst"] = burst(args.project, tmp, args.repeats)
            elif case == "full":
                results["full"] = full(args.project, args.repeats)
            elif case == "shared":
                results["shared_address"] = shared(args.project, tmp, args.seconds)
            else:
                parser.error(f"unknown case {case!r}")
            print(json.dumps({case: results.get(case) or results.get("shared_address")}), flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
