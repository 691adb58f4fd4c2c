"""The HTTP server, chosen by measurement: candidate servers side by side on loopback, same pre-rendered bytes.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python benchmarks/http_servers.py [--duration 3] [--repeats 3] [--only ours,waitress]

Each candidate runs in its own process and serves the same synthetic exposition (about 90 KiB and 1.4 MB,
as an 8-GPU and a 64-GPU scrape are) from a provider ``get_exposition(openmetrics, gzip) -> bytes``, with
prometheus_client's content negotiation. ``wrk`` (Debian package ``wrk``) loads it with 1, 8, 32 and 100
concurrent connections, keep-alive (as Prometheus scrapes) and one connection per request (a fleet's burst of
new connections: what a short listen backlog turns into 1 s SYN retransmits), each for ``--duration``
seconds, ``--repeats`` times; the table gives medians of p50/p99/max and the sum of errors (socket errors and
non-2xx). Then each candidate faces a slowloris from 127.0.0.2 (``--attack-rate`` new connections a second,
default 25, each dribbling a valid request head a byte a second, for ``--attack-seconds``) while a scraper on
127.0.0.1 scrapes twice a second: scrapes answered and the slowest. Each server runs with ``--nofile`` (1024)
open files, systemd's default. node_exporter (Debian ``prometheus-node-exporter``) is the anchor: its textfile
collector serving a file of the same bytes, and its drm collector on the fake 8-GPU host
(``--collector.disable-defaults --collector.drm``); ``rocm-watchdog serve`` itself runs on that host too.
Candidates not installed are skipped: waitress, cheroot, gunicorn, uvicorn(+httptools), granian are measured only
when present in the environment (``pip install`` them into the venv).

Also ``benchmarks/http_servers.py serve NAME PORT SIZE``: run one candidate in the foreground.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = {"90k": 90 * 1024, "1.4M": 1_400_000}
WORKERS = 4


# --- the body: a synthetic exposition of a given size -------------------------------------------------------


def synthetic_exposition(size: int) -> bytes:
    """Families of GPU-like gauges with pci_bus labels until ``size`` bytes; deterministic."""
    out: list[str] = []
    total = 0
    family = 0
    while total < size:
        name = f"bench_gpu_metric_{family}"
        lines = [f"# HELP {name} Synthetic benchmark family {family}.", f"# TYPE {name} gauge"]
        for gpu in range(64):
            lines.append(f'{name}{{pci_bus="0000:{gpu:02x}:00.0",partition="0",card="{gpu}"}} {family * 1.5 + gpu}')
        chunk = "\n".join(lines) + "\n"
        out.append(chunk)
        total += len(chunk)
        family += 1
    return "".join(out).encode()


def make_provider(size: int) -> Callable[[bool, bool], bytes]:
    text = synthetic_exposition(size)
    om = text + b"# EOF\n"
    variants = {
        (False, False): text,
        (True, False): om,
        (False, True): gzip.compress(text, 6, mtime=0),
        (True, True): gzip.compress(om, 6, mtime=0),
    }

    def get_exposition(openmetrics: bool, gz: bool) -> bytes:
        return variants[(openmetrics, gz)]

    return get_exposition


def _negotiate(accept: str, accept_encoding: str) -> tuple[bool, bool]:
    from exporter.http import wants_gzip, wants_openmetrics

    return wants_openmetrics(accept), wants_gzip(accept_encoding)


def wsgi_app_for(provider: Callable[[bool, bool], bytes]) -> Callable[..., Iterable[bytes]]:
    from exporter.http import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"Not Found\n"]
        om, gz = _negotiate(environ.get("HTTP_ACCEPT", ""), environ.get("HTTP_ACCEPT_ENCODING", ""))
        body = provider(om, gz)
        headers = [("Content-Type", CONTENT_TYPE_OPENMETRICS if om else CONTENT_TYPE_TEXT)]
        headers.append(("Content-Length", str(len(body))))
        if gz:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app


def asgi_app_for(provider: Callable[[bool, bool], bytes]) -> Callable[..., Any]:
    from exporter.http import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["path"] != "/metrics":
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Not Found\n"})
            return
        om, gz = _negotiate(headers.get("accept", ""), headers.get("accept-encoding", ""))
        body = provider(om, gz)
        out = [(b"content-type", (CONTENT_TYPE_OPENMETRICS if om else CONTENT_TYPE_TEXT).encode())]
        out.append((b"content-length", str(len(body)).encode()))
        if gz:
            out.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": out})
        await send({"type": "http.response.body", "body": body})

    return app


# For gunicorn and granian, which import the app by name: the size comes from the environment.
def _env_provider() -> Callable[[bool, bool], bytes]:
    return make_provider(int(os.environ.get("BENCH_BODY_BYTES", str(SIZES["90k"]))))


def __getattr__(name: str) -> Any:  # module-level lazy apps: benchmarks.http_servers:wsgi_app / asgi_app
    if name == "wsgi_app":
        return wsgi_app_for(_env_provider())
    if name == "asgi_app":
        return asgi_app_for(_env_provider())
    raise AttributeError(name)


# --- the candidates, each run in its own process ------------------------------------------------------------


def serve_candidate(name: str, port: int, size: int) -> None:
    provider = make_provider(size)
    host = "127.0.0.1"
    if name == "wsgiref":  # the server before this change: a thread per connection, listen backlog 5
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            allow_reuse_address = True

        class Quiet(WSGIRequestHandler):
            timeout = 30

            def log_message(self, format: str, *args: Any) -> None:
                pass

        make_server(host, port, wsgi_app_for(provider), server_class=Server, handler_class=Quiet).serve_forever()
    elif name == "ours":
        from exporter.http import App, Limits, serve
        from exporter.webconfig import WebConfig

        app = App(provider, lambda: (True, "ok"), b"")
        serve(f"{host}:{port}", app, WebConfig(), limits=Limits(workers=WORKERS))  # as shipped: max-requests 40
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    elif name == "waitress":
        import waitress

        waitress.serve(
            wsgi_app_for(provider), host=host, port=port, threads=WORKERS, backlog=1024, connection_limit=512,
            channel_timeout=10, _quiet=True,
        )  # fmt: skip
    elif name == "cheroot":
        from cheroot import wsgi

        server = wsgi.Server((host, port), wsgi_app_for(provider), numthreads=WORKERS, request_queue_size=1024)
        server.timeout = 10
        server.start()
    elif name in ("uvicorn-h11", "uvicorn-httptools"):
        import uvicorn

        uvicorn.run(
            asgi_app_for(provider), host=host, port=port, backlog=1024, http=name.split("-")[1], loop="asyncio",
            log_level="warning", access_log=False, timeout_keep_alive=120,
        )  # fmt: skip
    else:
        raise SystemExit(f"unknown candidate {name}")


def candidate_argv(name: str, port: int, size: int) -> tuple[list[str], dict[str, str]] | None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_BODY_BYTES": str(size)}
    py = sys.executable
    bindir = Path(sys.executable).parent
    modules = {"waitress": "waitress", "cheroot": "cheroot", "uvicorn-h11": "uvicorn", "uvicorn-httptools": "httptools"}
    if name in modules:
        try:
            __import__(modules[name])
        except ImportError:
            return None
    if name in ("wsgiref", "ours", *modules):
        return [py, __file__, "serve", name, str(port), str(size)], env
    if name == "gunicorn-gthread":
        exe = bindir / "gunicorn"
        if not exe.exists():
            return None
        return [
            str(exe), "-k", "gthread", "-w", "1", "--threads", str(WORKERS), "--backlog", "1024",
            "--keep-alive", "120", "--timeout", "30", "-b", f"127.0.0.1:{port}", "--log-level", "warning",
            "benchmarks.http_servers:wsgi_app",
        ], env  # fmt: skip
    if name == "granian":
        exe = bindir / "granian"
        if not exe.exists():
            return None
        return [
            str(exe), "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backlog", "1024", "--log-level", "warning", "benchmarks.http_servers:asgi_app",
        ], env  # fmt: skip
    return None


def node_exporter_argv(kind: str, port: int, size: int, tmp: Path) -> list[str] | None:
    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        return None
    if kind == "textfile":
        directory = tmp / f"textfile-{size}"
        directory.mkdir(exist_ok=True)
        (directory / "bench.prom").write_bytes(synthetic_exposition(size))
        return [exe, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                "--collector.textfile", f"--collector.textfile.directory={directory}"]  # fmt: skip
    sys.path.insert(0, str(ROOT / "tests"))
    from fakeroot import FakeOther, build_root, capture_gpus

    if tmp not in _DRM_ROOTS:
        gpus = capture_gpus("mi210-8gpu-xgmi-pcie")
        _DRM_ROOTS[tmp] = build_root(tmp / "drm", gpus, others=[FakeOther.bmc()], cpu_nodes=2).sys
    return [exe, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults", "--collector.drm",
            f"--path.sysfs={_DRM_ROOTS[tmp]}"]  # fmt: skip


_DRM_ROOTS: dict[Path, Path] = {}


def exporter_argv(port: int, tmp: Path) -> list[str]:
    """rocm-watchdog itself on the 8-GPU fake host (no smi tool: sysfs, devices, kernel log, processes)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fakeroot import FakeOther, build_root, capture_gpus

    if tmp not in _EXPORTER_ROOTS:
        root = build_root(tmp / "rocm-watchdog", capture_gpus("mi210-8gpu-xgmi-pcie"), others=[FakeOther.bmc()],
                          cpu_nodes=2)  # fmt: skip
        (root.root / "kern.log").write_text("")
        _EXPORTER_ROOTS[tmp] = (root.root, root.state_dir)
    rootfs, state = _EXPORTER_ROOTS[tmp]
    return [sys.executable, "-m", "exporter", "serve", f"--web.listen-address=127.0.0.1:{port}",
            f"--path.rootfs={rootfs}", f"--state.dir={state}", f"--kernel-log.path={rootfs / 'kern.log'}",
            "--no-collector.rocm-smi", "--no-collector.amd-smi", "--log.level=error"]  # fmt: skip


_EXPORTER_ROOTS: dict[Path, tuple[Path, Path]] = {}


# --- load -------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def run_wrk(url: str, connections: int, seconds: float, close: bool) -> dict[str, float]:
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "--latency"]
    if close:
        argv += ["-H", "Connection: close"]
    out = subprocess.run([*argv, url], capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    result = {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "requests": 0.0, "errors": 0.0}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("50%", "99%"):
            result["p" + parts[0][:-1]] = _ms(parts[1])
        elif parts[:1] == ["Latency"] and len(parts) >= 4:
            result["max"] = _ms(parts[3])
        elif "requests in" in line:
            result["requests"] = float(parts[0])
        elif line.strip().startswith("Socket errors"):
            result["errors"] += sum(int(n) for n in re.findall(r"\d+", line))
        elif line.strip().startswith("Non-2xx"):
            result["errors"] += int(parts[-1])
    return result


async def _slowloris(port: int, seconds: float, rate: int, scrape_every: float) -> dict[str, float]:
    """Attackers from 127.0.0.2 dribble a valid request head, one byte a second each (a request line, then a
    header that never ends); a scraper on 127.0.0.1 scrapes meanwhile."""
    loop = asyncio.get_running_loop()
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "
    attackers: dict[socket.socket, int] = {}  # socket -> bytes sent
    refused = 0
    latencies: list[float] = []
    failures = 0
    stop_at = loop.time() + seconds

    async def connect() -> None:
        nonlocal refused
        s = socket.socket()
        s.setblocking(False)
        try:
            s.bind(("127.0.0.2", 0))
            await asyncio.wait_for(loop.sock_connect(s, ("127.0.0.1", port)), 2)
            attackers[s] = 0
        except (OSError, asyncio.TimeoutError):
            refused += 1
            s.close()

    async def attack() -> None:
        while loop.time() < stop_at:
            started = loop.time()
            await asyncio.gather(*(connect() for _ in range(rate)))  # all at once: a stalled one delays no other
            for s, sent in list(attackers.items()):
                try:
                    s.send(head[sent : sent + 1] or b"a")
                    attackers[s] = sent + 1
                except OSError:
                    del attackers[s]
                    s.close()
            await asyncio.sleep(max(0.0, 1 - (loop.time() - started)))

    async def scrape() -> None:
        nonlocal failures
        while loop.time() < stop_at:
            start = loop.time()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = await asyncio.wait_for(reader.read(), 5)
                writer.close()
                if not data.startswith(b"HTTP/1.1 200") and not data.startswith(b"HTTP/1.0 200"):
                    raise OSError(data[:40])
                latencies.append((loop.time() - start) * 1e3)
            except (OSError, asyncio.TimeoutError):
                failures += 1
            await asyncio.sleep(max(0.0, scrape_every - (loop.time() - start)))

    await asyncio.gather(attack(), scrape())
    held = len(attackers)
    for s in attackers:
        s.close()
    return {
        "ok": len(latencies),
        "failed": failures,
        "max_ms": max(latencies, default=float("nan")),
        "attackers_open_at_end": held,
        "attack_connects_failed": refused,
    }


def slowloris(port: int, seconds: float = 20, rate: int = 25) -> dict[str, float]:
    return asyncio.run(_slowloris(port, min(seconds, 60), min(rate, 200), 0.5))


def rss_mib(pid: int) -> float:
    try:
        import psutil

        proc = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20
    except Exception:
        return float("nan")


def measure_target(label: str, start: Callable[[int], subprocess.Popen[bytes]], args: argparse.Namespace,
                   cases: list[tuple[str, int, bool]], attack: bool) -> list[dict[str, Any]]:  # fmt: skip
    port = free_port()
    proc = start(port)
    rows: list[dict[str, Any]] = []
    if args.attack_only:
        cases = []
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}/metrics"
        if cases:
            run_wrk(url, 8, 1, False)  # warm up
        for size_name, conns, close in cases:
            runs = [run_wrk(url, conns, args.duration, close) for _ in range(args.repeats)]
            row = {
                "target": label, "size": size_name, "conns": conns, "mode": "close" if close else "keep-alive",
                "p50": statistics.median(r["p50"] for r in runs), "p99": statistics.median(r["p99"] for r in runs),
                "max": statistics.median(r["max"] for r in runs), "errors": int(sum(r["errors"] for r in runs)),
                "rps": statistics.median(r["requests"] / args.duration for r in runs),
            }  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
        rss = rss_mib(proc.pid)
        for row in rows:
            row["rss_mib"] = rss
        if attack:
            result = slowloris(port, args.attack_seconds, args.attack_rate)
            what = f"slowloris {args.attack_rate} conn/s x 1 B/s, {args.attack_seconds:g} s, open files {args.nofile}"
            result.update({"target": label, "attack": what})
            rows.append(result)
            print(json.dumps(result), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """Tables per body and mode: p50 / p99 ms per concurrency, then max ms and errors over all of them."""
    out: list[str] = []
    loads = [r for r in rows if "conns" in r]
    conns = sorted({int(r["conns"]) for r in loads})
    for size, mode in sorted({(r["size"], r["mode"]) for r in loads}, key=lambda k: (k[0] == "drm", k[0], k[1])):
        out.append(f"\n**{size}, {mode}**: p50 / p99 ms at {', '.join(map(str, conns))} connections\n")
        columns = " | ".join(f"c={c}" for c in conns)
        out.append(f"| server | {columns} | worst max ms | errors | req/s at c={max(conns)} |")
        out.append("|---" * (len(conns) + 4) + "|")
        for target in dict.fromkeys(r["target"] for r in loads):
            mine = {
                int(r["conns"]): r for r in loads if r["target"] == target and (r["size"], r["mode"]) == (size, mode)
            }
            if not mine:
                continue
            cells = [f"{mine[c]['p50']:.1f} / {mine[c]['p99']:.1f}" if c in mine else "" for c in conns]
            worst = max(r["max"] for r in mine.values())
            errors = sum(int(r["errors"]) for r in mine.values())
            rps = f"{mine[max(conns)]['rps']:.0f}" if max(conns) in mine else ""
            out.append(f"| {target} | " + " | ".join(cells) + f" | {worst:.0f} | {errors} | {rps} |")
    attacks = [r for r in rows if "attack" in r]
    if attacks:
        out.append(f"\n**{attacks[0]['attack']}** from 127.0.0.2, a scraper on 127.0.0.1 every 0.5 s\n")
        out.append("| server | scrapes answered | slowest answered ms | RSS after the load runs MiB |")
        out.append("|---|---|---|---|")
        rss = {r["target"]: f"{r['rss_mib']:.0f}" for r in loads if r["size"] == "90k" and "rss_mib" in r}
        for r in attacks:
            total = int(r["ok"]) + int(r["failed"])
            out.append(f"| {r['target']} | {r['ok']} of {total} | {r['max_ms']:.0f} | {rss.get(r['target'], '')} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("serve")
    one.add_argument("name")
    one.add_argument("port", type=int)
    one.add_argument("size", type=int)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated candidate names")
    parser.add_argument("--connections", default="1,8,32,100")
    parser.add_argument("--no-attack", action="store_true")
    parser.add_argument("--attack-only", action="store_true", help="only the slowloris, no load runs")
    parser.add_argument("--attack-rate", type=int, default=25, help="new slowloris connections a second")
    parser.add_argument("--attack-seconds", type=float, default=20)
    parser.add_argument("--nofile", type=int, default=1024, help="RLIMIT_NOFILE of each server (systemd's default)")
    parser.add_argument("--json", type=Path, help="also write every row here")
    parser.add_argument("--table", type=Path, help="print the markdown tables of a --json file and exit")
    args = parser.parse_args()
    if args.table:
        print(markdown(json.loads(args.table.read_text())))
        return
    if args.command == "serve":
        serve_candidate(args.name, args.port, args.size)
        return
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    args.duration = max(1.0, min(args.duration, 30.0))
    args.repeats = max(1, min(args.repeats, 9))
    conns = [int(c) for c in args.connections.split(",")]
    nofile = args.nofile

    def limit_files() -> None:  # in the child: the open-file limit a systemd service gets by default
        import resource

        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))

    cases = [("90k", c, False) for c in conns] + [("90k", c, True) for c in conns]
    cases += [("1.4M", c, False) for c in conns]
    names = ["ours", "wsgiref", "waitress", "cheroot", "gunicorn-gthread", "uvicorn-h11", "uvicorn-httptools",
             "granian"]  # fmt: skip
    wanted = set(filter(None, args.only.split(","))) or {
        *names,
        "rocm-watchdog",
        "node_exporter-textfile",
        "node_exporter-drm",
    }
    print(f"# python {platform.python_version()}, {os.cpu_count()} cpus, {platform.platform()}, "
          f"wrk -t1, {args.duration:g} s x {args.repeats}", flush=True)  # fmt: skip
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name not in wanted:
                continue
            for size_name in ("90k", "1.4M"):
                size = SIZES[size_name]
                spec = candidate_argv(name, 0, size)
                if spec is None:
                    print(json.dumps({"target": name, "skipped": "not installed"}), flush=True)
                    break

                def start(port: int, name: str = name, size: int = size) -> subprocess.Popen[bytes]:
                    argv, env = candidate_argv(name, port, size) or ([], {})
                    return subprocess.Popen(
                        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit_files
                    )

                mine = [c for c in cases if c[0] == size_name]
                if args.attack_only and size_name != "90k":
                    continue
                rows += measure_target(name, start, args, mine, attack=size_name == "90k" and not args.no_attack)
        if "rocm-watchdog" in wanted and not args.attack_only:

            def start_rw(port: int) -> subprocess.Popen[bytes]:
                env = {**os.environ, "PYTHONPATH": str(ROOT)}
                return subprocess.Popen(
                    exporter_argv(port, Path(tmp)), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    preexec_fn=limit_files,
                )  # fmt: skip

            mine = [("8-GPU", c, close) for s, c, close in cases if s == "90k"]
            rows += measure_target("rocm-watchdog", start_rw, args, mine, attack=False)
        for kind in ("textfile", "drm"):
            if f"node_exporter-{kind}" not in wanted:
                continue
            if args.attack_only and kind == "drm":
                continue
            for size_name in ("90k", "1.4M") if kind == "textfile" else ("drm",):
                if args.attack_only and size_name != "90k":
                    continue
                size = SIZES.get(size_name, 0)
                if node_exporter_argv(kind, 0, size, Path(tmp)) is None:
                    print(json.dumps({"target": "node_exporter", "skipped": "not installed"}), flush=True)
                    break

                def start_ne(port: int, kind: str = kind, size: int = size) -> subprocess.Popen[bytes]:
                    argv = node_exporter_argv(kind, port, size, Path(tmp)) or []
                    return subprocess.Popen(
                        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit_files
                    )

                mine = [(size_name, c, close) for s, c, close in cases if s == ("90k" if kind == "drm" else size_name)]
                attack = size_name in ("90k", "drm") and not args.no_attack and kind == "textfile"
                rows += measure_target(f"node_exporter-{kind}", start_ne, args, mine, attack)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(markdown(rows))


if __name__ == "__main__":
    main()
