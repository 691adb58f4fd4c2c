"""Helpers for tests that check exposition text with the real promtool and compare with golden files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"

# Samples whose values depend on the clock or the machine: their values are replaced before comparing.
VOLATILE = re.compile(
    r"^(rocm_watchdog_source_duration_seconds|rocm_watchdog_source_last_success_timestamp_seconds"
    r"|rocm_kernel_event_last_timestamp_seconds|rocm_baseline_timestamp_seconds"
    r"|rocm_device_condition_since_timestamp_seconds"
    # serve's own process_*, python_* and scrape-duration series (exporter/metrics/selfmetrics.py)
    r"|process_[a-z_]+|python_gc_[a-z_]+|rocm_watchdog_scrape_duration_seconds_(?:count|sum)"
    # the HTTP server's own counters (exporter/server/stats.py): how many scrapes it took to get ready
    r"|rocm_watchdog_http_[a-z_]+)(\{[^}]*\})? .*$"
)
# Samples whose labels depend on the build or the machine: the git revision and branch, the Python version.
VOLATILE_LABELS = re.compile(r"^(rocm_watchdog_build_info|python_info)\{[^}]*\}( .*)$")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (Debian package 'prometheus'; the README's test command installs it)")
    return path


def check_metrics(text: str) -> None:
    """``promtool check metrics`` must accept the exposition with no finding at all."""
    proc = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), proc.stdout + proc.stderr


def normalise(text: str) -> str:
    lines = []
    for line in text.splitlines():
        m = VOLATILE.match(line)
        labels = VOLATILE_LABELS.match(line)
        if m:
            line = f"{m.group(1)}{m.group(2) or ''} <volatile>"
        elif labels:
            line = f"{labels.group(1)}{{<volatile>}}{labels.group(2)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def compare_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / name
    actual = normalise(text)
    if update or not path.exists():
        path.write_text(actual)
        if not update:
            pytest.fail(f"golden file {path} did not exist; written now, review and commit it")
        return
    expected = path.read_text()
    assert actual == expected, f"exposition differs from {path}; rerun with --update-golden after review"
