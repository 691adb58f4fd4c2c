"""``--smi.backend=auto`` when no tool works, with stub tools run as real subprocesses: the failure is reported per
tool (``rocm_watchdog_source_up{source="rocm-smi"}`` and ``{source="amd-smi"}``, each with its own error), and once
a tool works the other one is simply not in use."""

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


def test_no_tool_installed_fails_under_both_names(tmp_path: Path) -> None:
    source, store = setup(tmp_path)
    with structlog.testing.capture_logs() as logs:
        assert not run_source(source, store)
    assert up(store, "amd-smi") == 0 and up(store, "rocm-smi") == 0
    assert error(store, "amd-smi").startswith("amd-smi could not be started")
    assert error(store, "rocm-smi").startswith("rocm-smi could not be started")
    failed = {e["source"]: e["error"] for e in logs if e["event"] == "source_failed"}
    assert set(failed) == {"amd-smi", "rocm-smi"}
    assert "rocm-smi" not in failed["amd-smi"] and "amd-smi" not in failed["rocm-smi"], "each its own error"


def test_the_missing_tool_says_so_and_the_broken_one_says_why(tmp_path: Path) -> None:
    """rocm-smi is installed but broken (exits 1 with an error); amd-smi is not installed at all."""
    source, store = setup(tmp_path)
    broken = make_stub(tmp_path, "rocm-smi")
    broken.set("--help", stdout="usage: rocm-smi [-h] [--json]\n")
    broken.set("", exit=1, stderr="ERROR: No DRM devices available. Exiting\n")
    with structlog.testing.capture_logs():
        assert not run_source(source, store)
    assert "could not be started" in error(store, "amd-smi")
    rocm = error(store, "rocm-smi")
    assert "No DRM devices available" in rocm and "could not be started" not in rocm
    reg = registry(store)
    for tool in ("amd-smi", "rocm-smi"):
        assert reg.get_sample_value("rocm_watchdog_source_up", {"source": tool}) == 0
        assert reg.get_sample_value("rocm_watchdog_source_failures_total", {"source": tool}) == 1

    # rocm-smi repaired: it is chosen, and amd-smi, not in use, has no up series (its failure count stays)
    rocm_smi_stub(tmp_path, MI100)
    with structlog.testing.capture_logs() as logs:
        assert run_source(source, store)
    assert source.name == "rocm-smi"
    assert up(store, "rocm-smi") == 1 and up(store, "amd-smi") is None
    assert registry(store).get_sample_value("rocm_watchdog_source_failures_total", {"source": "amd-smi"}) == 1
    assert [e["source"] for e in logs if e["event"] == "source_recovered"] == ["rocm-smi"]
