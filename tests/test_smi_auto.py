"""``--smi.backend=auto`` when no tool works, with stub tools run as real subprocesses: neither installed is a state
(``rocm_watchdog_source_absent{source="smi"}``, one log line, no failing source); an installed tool that fails is
reported under its own name with its own error; once a tool works the other one is simply not in use."""

from __future__ import annotations

from pathlib import Path

import structlog
from msgspec.structs import replace
from paths import FIXTURES
from prometheus_client import CollectorRegistry
from stubs import make_stub, rocm_smi_stub

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.scheduler import run_source
from exporter.sources.smi import AutoSmiSource
from exporter.store import SnapshotStore

MI100 = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"


def setup(tmp_path: Path) -> tuple[AutoSmiSource, SnapshotStore]:
    config = replace(
        Config(),
        rocm_smi_path=str(tmp_path / "rocm-smi"),
        amd_smi_path=str(tmp_path / "amd-smi"),
        smi_timeout_seconds=5.0,
    )
    store = SnapshotStore()
    for name in AutoSmiSource.names:  # as the scheduler registers an auto job
        store.register(name, 30, 120)
    return AutoSmiSource(config), store


def registry(store: SnapshotStore) -> CollectorRegistry:
    return make_registry(store, Config())


def up(store: SnapshotStore, tool: str) -> float | None:
    return registry(store).get_sample_value("rocm_watchdog_source_up", {"source": tool})


def error(store: SnapshotStore, tool: str) -> str:
    entry = store.view(0).entries[tool]
    assert entry.health.last_error is not None
    return entry.health.last_error


def absent(store: SnapshotStore) -> float | None:
    return registry(store).get_sample_value("rocm_watchdog_source_absent", {"source": "smi"})


def test_no_tool_installed_is_a_state_not_two_failures(tmp_path: Path) -> None:
    """Neither tool installed (a node read from sysfs only): one series and one log line say so, no source fails
    (no up series at 0, so RocmWatchdogSourceFailing has nothing to fire on), and a tool installed later is used."""
    source, store = setup(tmp_path)
    with structlog.testing.capture_logs() as logs:
        assert run_source(source, store)
        assert run_source(source, store)  # said once, not every interval
    assert up(store, "amd-smi") is None and up(store, "rocm-smi") is None
    assert absent(store) == 1
    reg = registry(store)
    for tool in ("amd-smi", "rocm-smi"):
        assert reg.get_sample_value("rocm_watchdog_source_failures_total", {"source": tool}) == 0
        assert reg.get_sample_value("rocm_watchdog_source_stale", {"source": tool}) is None
    assert [e["event"] for e in logs] == ["smi_tool_absent"], logs
    assert logs[0]["log_level"] == "info" and "neither amd-smi nor rocm-smi is installed" in logs[0]["message"]

    rocm_smi_stub(tmp_path, MI100)  # installed later: chosen on the next run, and the absent series goes
    with structlog.testing.capture_logs() as logs:
        assert run_source(source, store)
    assert source.name == "rocm-smi" and up(store, "rocm-smi") == 1 and absent(store) is None
    assert "tool_selected" in [e["event"] for e in logs]

    (tmp_path / "rocm-smi").unlink()  # and uninstalled again: looked for again, absent again, still no failure
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            run_source(source, store)
    assert absent(store) == 1 and up(store, "rocm-smi") is None and up(store, "amd-smi") is None
    assert "smi_tool_absent" in [e["event"] for e in logs]


def test_an_installed_tool_that_fails_still_fails(tmp_path: Path) -> None:
    """rocm-smi is installed but broken (exits 1 with an error); amd-smi is not installed at all: rocm-smi fails
    with its own error, amd-smi (nothing to run) has no series, and nothing says the tools are absent."""
    source, store = setup(tmp_path)
    broken = make_stub(tmp_path, "rocm-smi")
    broken.set("--help", stdout="usage: rocm-smi [-h] [--json]\n")
    broken.set("", exit=1, stderr="ERROR: No DRM devices available. Exiting\n")
    with structlog.testing.capture_logs() as logs:
        assert not run_source(source, store)
    rocm = error(store, "rocm-smi")
    assert "No DRM devices available" in rocm and "could not be started" not in rocm
    assert [e["source"] for e in logs if e["event"] == "source_failed"] == ["rocm-smi"]
    reg = registry(store)
    assert reg.get_sample_value("rocm_watchdog_source_up", {"source": "rocm-smi"}) == 0
    assert reg.get_sample_value("rocm_watchdog_source_failures_total", {"source": "rocm-smi"}) == 1
    assert up(store, "amd-smi") is None and absent(store) is None

    # an installed amd-smi that cannot be run (not executable) is a failure too, not an absence
    amd = tmp_path / "amd-smi"
    amd.write_text("#!/bin/sh\n")
    amd.chmod(0o644)
    with structlog.testing.capture_logs():
        assert not run_source(source, store)
    assert "could not be started" in error(store, "amd-smi") and up(store, "amd-smi") == 0
    amd.unlink()

    # rocm-smi repaired: it is chosen, and amd-smi, not in use, has no up series (its failure count stays)
    rocm_smi_stub(tmp_path, MI100)
    with structlog.testing.capture_logs() as logs:
        assert run_source(source, store)
    assert source.name == "rocm-smi"
    assert up(store, "rocm-smi") == 1 and up(store, "amd-smi") is None
    assert registry(store).get_sample_value("rocm_watchdog_source_failures_total", {"source": "amd-smi"}) == 1
    assert [e["source"] for e in logs if e["event"] == "source_recovered"] == ["rocm-smi"]
