"""Helpers the tests of the deployment paths share: the checkov scripts/test installs, and the port a started
``serve`` reports in its ``serving`` log line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHECKOV_VERSION = "3.3.30"  # the version scripts/test installs (into its own virtualenv)


def checkov() -> str:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for candidate in (
        os.environ.get("ROCM_WATCHDOG_CHECKOV"),
        shutil.which("checkov"),
        str(cache / "rocm-watchdog" / f"checkov-{CHECKOV_VERSION}" / "bin" / "checkov"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("checkov is not installed (scripts/test installs it into its own virtualenv)")


def serving_port(proc: subprocess.Popen[str], max_lines: int = 200) -> int:
    """The port from the JSON ``serving`` line of a ``serve`` started with ``--log.format json`` and stderr piped;
    fails the test with the last lines said when it exits or talks too long first (bounded)."""
    assert proc.stderr is not None
    said: list[str] = []
    for _ in range(max_lines):
        line = proc.stderr.readline()
        if not line:
            break
        said.append(line)
        if line.startswith("{") and json.loads(line).get("event") == "serving":
            return int(json.loads(line)["port"])
    code = proc.wait(timeout=30)
    pytest.fail(f"serve did not start (exit {code}):\n{''.join(said[-30:])}")
