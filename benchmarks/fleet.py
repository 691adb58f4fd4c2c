"""A fleet on one machine: N rocm-watchdog exporters (2 fake GPUs each), one Prometheus with the shipped rules, one
Alertmanager with the shipped example config: what it costs, per host and for Prometheus, at a scrape interval.

Run from the repository root: ``PYTHONPATH=. .venv/bin/python benchmarks/fleet.py [--hosts 50]
[--scrape-interval 1s 2s] [--seconds 30]``. Needs Debian's prometheus and prometheus-alertmanager (scripts/test
installs them). The harness is tests/fleet.py, the one tests/test_fleet.py asserts on; here Prometheus also scrapes
itself (job "prometheus") for its TSDB figures. No assertions; every wait is bounded (a fleet start is at most
2 minutes, then a warm-up, the measured window and a few drift round trips of at most two minutes each).

Per scrape interval it prints: how long the fleet took to come up; CPU (cores, averaged over the window, from
psutil) and RSS of the exporters, Prometheus and Alertmanager; series per host (``scrape_samples_scraped``, and
``scrape_series_added`` summed over the window: 0 means no churn); Prometheus' ``prometheus_tsdb_head_series`` and
``rate(prometheus_tsdb_head_samples_appended_total[30s])``; and how long a drift (``/dev/kfd`` chmod 0666 on one
host, host after host) takes to reach the pager webhook and, after the chmod back, to be resolved, with the rules'
``for:`` at 3 s and ``keep_firing_for:`` at 5 s as in the test.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fleet import Fleet, wait_until  # noqa: E402


def scalar(fleet: Fleet, expr: str) -> float:
    result = fleet.query(expr)
    return float(result[0]["value"][1]) if result else float("nan")


def values(fleet: Fleet, expr: str) -> list[float]:
    return sorted(float(r["value"][1]) for r in fleet.query(expr))


def spread(xs: list[float], fmt: str = "{:.0f}") -> str:
    if not xs:
        return "-"
    lo, med, hi = min(xs), statistics.median(xs), max(xs)
    return fmt.format(med) if lo == hi else f"{fmt.format(med)} ({fmt.format(lo)}-{fmt.format(hi)})"


def drift_round_trip(fleet: Fleet, index: int, limit_seconds: float = 60) -> tuple[float, float]:
    """Seconds from a chmod on one host to the page, and from the chmod back to the resolved notification."""
    host = fleet.hosts[index]
    pager = fleet.hooks["pager"]

    def seen(status: str) -> bool:
        return any(
            a["labels"].get("instance") == host.instance and a["labels"]["alertname"] == "RocmDeviceNodePermissionDrift"
            for a in pager.distinct(status).values()
        )

    t = time.monotonic()
    host.root.chmod("kfd", 0o666)
    fired = wait_until(lambda: seen("firing"), limit_seconds, interval=0.1)
    to_page = time.monotonic() - t if fired else float("nan")
    t = time.monotonic()
    host.root.chmod("kfd", 0o660)
    resolved = wait_until(lambda: seen("resolved"), limit_seconds, interval=0.1)
    to_resolved = time.monotonic() - t if resolved else float("nan")
    return to_page, to_resolved


def run(hosts: int, interval: str, seconds: float, warmup: float, drifts: int) -> list[str]:
    rows: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="rocm-watchdog-fleet-") as tmp,
        Fleet(Path(tmp), hosts_count=hosts, scrape_interval=interval, self_scrape=True) as fleet,
    ):
        t = time.monotonic()
        fleet.start()
        up = time.monotonic() - t
        time.sleep(warmup)
        window = f"{max(1, int(seconds))}s"
        usage = fleet.usage(seconds)
        job = '{job="rocm-watchdog"}'
        samples = values(fleet, f"scrape_samples_scraped{job}")
        added = values(fleet, f"sum_over_time(scrape_series_added{job}[{window}])")
        durations = [v * 1e3 for v in values(fleet, f"scrape_duration_seconds{job}")]
        head_series = scalar(fleet, "prometheus_tsdb_head_series")
        appended = scalar(fleet, "sum(rate(prometheus_tsdb_head_samples_appended_total[30s]))")
        fleet_series = scalar(fleet, f"sum(scrape_samples_scraped{job})")
        trips = [drift_round_trip(fleet, i % hosts) for i in range(drifts)]
        to_page, to_resolved = [t[0] for t in trips], [t[1] for t in trips]
        mib = 1024 * 1024
        rows.append(
            f"| {interval} | {hosts} | {up:.0f} s ({fleet.timings['exporters_serving']:.0f} s to serve) "
            f"| {sum(usage.exporter_cpu):.2f} (each {spread(usage.exporter_cpu, '{:.3f}')}) "
            f"| {spread([r / mib for r in usage.exporter_rss])} "
            f"| {usage.prometheus_cpu:.2f} / {usage.prometheus_rss / mib:.0f} "
            f"| {usage.alertmanager_cpu:.2f} / {usage.alertmanager_rss / mib:.0f} "
            f"| {spread(samples)} | {sum(added):.0f} | {spread(durations, '{:.1f}')} "
            f"| {head_series:.0f} ({fleet_series:.0f} from the fleet) | {appended:.0f} "
            f"| {spread(to_page, '{:.1f}')} / {spread(to_resolved, '{:.1f}')} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--scrape-interval", nargs="+", default=["1s", "2s"])
    parser.add_argument("--seconds", type=float, default=30, help="the measured window (at most 300)")
    parser.add_argument("--warmup", type=float, default=10, help="after every target is up (at most 120)")
    parser.add_argument("--drifts", type=int, default=3, help="drift round trips, one host after another (at most 10)")
    args = parser.parse_args()
    hosts = max(1, min(args.hosts, 200))
    seconds, warmup = max(5.0, min(args.seconds, 300.0)), max(0.0, min(args.warmup, 120.0))
    drifts = max(1, min(args.drifts, 10))
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus; "
        f"{hosts} hosts x 2 GPUs; window {seconds:.0f} s after a {warmup:.0f} s warm-up; {drifts} drift round trips\n"
    )
    print(
        "| scrape interval | hosts | fleet up | exporters CPU, cores: sum (each median, min-max) | exporter RSS MiB "
        "| Prometheus CPU / RSS MiB | Alertmanager CPU / RSS MiB | samples per host per scrape "
        "| series added in the window | scrape ms | head series | samples appended/s "
        "| drift to page / to resolved, s (median, min-max) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for interval in args.scrape_interval:
        for row in run(hosts, interval, seconds, warmup, drifts):
            print(row, flush=True)


if __name__ == "__main__":
    main()
