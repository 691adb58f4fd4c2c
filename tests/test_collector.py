"""The collector over fixed snapshots: golden exposition, promtool, staleness, no I/O at scrape time."""

from __future__ import annotations

import re

from paths import DATA, FIXTURES
from prometheus_client import generate_latest
from promtool import check_metrics, compare_golden

from exporter.build import build_info
from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.model.gpu import DrmMinor, GpuIdentity, RasCount, SysfsSnapshot
from exporter.model.processes import ProcessInfo, ProcessSnapshot
from exporter.parsers.amd_smi import merge_amd_smi_reports, parse_amd_smi
from exporter.parsers.rocm_smi import parse_rocm_smi
from exporter.store import SnapshotStore

NOW = 1_800_000_000.0
AMD = FIXTURES / "smi" / "amd-smi"


def filled_store() -> SnapshotStore:
    store = SnapshotStore()
    for name, interval in (("rocm-smi", 30.0), ("amd-smi", 30.0), ("sysfs", 15.0), ("processes", 30.0)):
        store.register(name, interval, 3 * interval + 20)
    rocm = parse_rocm_smi((FIXTURES / "smi" / "rocm-smi" / "telegraf-vega-20-WKS-GL-XE.json").read_text())
    amd = merge_amd_smi_reports(
        [
            parse_amd_smi((AMD / "amdsmi-changelog-rocm630_list_text_2gpu-uuid-redacted.txt").read_text()),
            parse_amd_smi((DATA / "amd-smi" / "metric-mem-usage_json_value-unit_2gpu.json").read_text()),
            parse_amd_smi((AMD / "amdsmi-changelog-rocm620_process_text_sudo.txt").read_text()),
        ]
    )
    sysfs = SysfsSnapshot(
        gpus=(
            GpuIdentity(
                pci_bus="0000:23:00.0",
                unique_id="0x5a4ad1c2a8ba3e1f",
                card=DrmMinor("card1", "card", 1, (226, 1)),
                render=DrmMinor("renderD128", "render", 128, (226, 128)),
                kfd_node=1,
                gpu_id=45412,
                driver="amdgpu",
                device_id="0x74a1",
                model="AMD Instinct MI300X",
                numa_node=0,
                vram_used_bytes=123,
                busy_ratio=0.25,
                temperatures_celsius=(("edge", 41.0), ("junction", 45.5)),
                power_watts=150.5,
                pcie_link_speed_gts=32.0,
                pcie_link_width=16,
                ras=(RasCount("umc", 2, 0, 1),),
            ),
        )
    )
    processes = ProcessSnapshot(
        (
            ProcessInfo(pid=3127, name="python3", user="alice", vram_used_bytes=1 << 30, container_id="c" * 64),
            ProcessInfo(pid=4000, name="idle", user="bob", vram_used_bytes=0),
            ProcessInfo(pid=4001, name="unknown-vram"),
        )
    )
    store.record_success("rocm-smi", rocm, 1.5, NOW - 10)
    store.record_success("amd-smi", amd, 2.5, NOW - 10)
    store.record_success("sysfs", sysfs, 0.01, NOW - 5)
    store.record_success("processes", processes, 0.02, NOW - 5)
    store.record_failure("processes", "procfs not found at /proc", 0.001, NOW - 1)
    return store


def test_golden(update_golden: bool) -> None:
    registry = make_registry(filled_store(), Config(top_processes=2), clock=lambda: NOW)
    text = generate_latest(registry).decode()
    check_metrics(text)
    compare_golden("collector.prom", text, update_golden)


def test_sysfs_wins_then_amd_smi_then_rocm_smi() -> None:
    registry = make_registry(filled_store(), Config(), clock=lambda: NOW)
    assert registry.get_sample_value("rocm_gpu_vram_used_bytes", {"pci_bus": "0000:23:00.0"}) == 123  # sysfs
    # VRAM total: sysfs did not say, amd-smi did (MiB -> bytes)
    assert registry.get_sample_value("rocm_gpu_vram_total_bytes", {"pci_bus": "0000:23:00.0"}) == 196592 * 1048576
    assert registry.get_sample_value("rocm_gpus") == 3  # 23:00.0 and 26:00.0 (amd-smi) + the MI50 (rocm-smi)


def test_stale_sources_are_withdrawn_but_health_stays() -> None:
    store = filled_store()
    later = NOW + 200  # past 3 x 30 s + 20 s for the tools, 3 x 15 + 20 for sysfs
    registry = make_registry(store, Config(), clock=lambda: later)
    assert registry.get_sample_value("rocm_gpus") is None
    assert registry.get_sample_value("rocm_gpu_info", {"pci_bus": "0000:23:00.0"}) is None
    assert registry.get_sample_value("rocm_watchdog_source_stale", {"source": "rocm-smi"}) == 1
    assert registry.get_sample_value("rocm_watchdog_source_up", {"source": "processes"}) == 0
    assert registry.get_sample_value("rocm_watchdog_source_failures_total", {"source": "processes"}) == 1


def test_pending_sources_report_up_0_and_pending_1_until_their_first_run() -> None:
    """A registered source has its health series from the first scrape: up 0 while pending, told from a failure by
    rocm_watchdog_source_pending 1 (the alert on up == 0 ignores it), which is served only while 1, as stale only
    while stale; a name its source did not use has none."""
    store = SnapshotStore()
    store.register("rocm-smi", 30, 110)
    store.register("amd-smi", 30, 110)
    store.register("sysfs", 1, 3)
    registry = make_registry(store, Config(), clock=lambda: NOW)

    def sample(name: str, source: str) -> float | None:
        return registry.get_sample_value(name, {"source": source})

    for source in ("rocm-smi", "amd-smi", "sysfs"):
        assert sample("rocm_watchdog_source_failures_total", source) == 0
        assert sample("rocm_watchdog_source_up", source) == 0
        assert sample("rocm_watchdog_source_pending", source) == 1
        assert sample("rocm_watchdog_source_stale", source) is None
    assert store.view(NOW).pending() == ("amd-smi", "rocm-smi", "sysfs")
    store.record_failure("sysfs", "boom", 0.1, NOW)
    store.record_success("rocm-smi", object(), 0.1, NOW)
    store.first_run_over(("amd-smi", "rocm-smi"))  # the auto-selected tool's run: amd-smi was not chosen
    assert store.view(NOW).pending() == ()
    assert (sample("rocm_watchdog_source_up", "sysfs"), sample("rocm_watchdog_source_pending", "sysfs")) == (0, None)
    assert sample("rocm_watchdog_source_up", "rocm-smi") == 1
    assert sample("rocm_watchdog_source_pending", "rocm-smi") is None
    assert sample("rocm_watchdog_source_up", "amd-smi") is None
    assert sample("rocm_watchdog_source_pending", "amd-smi") is None
    store.register("sysfs", 2, 6)  # a reload keeps it: not pending again
    assert store.view(NOW).pending() == ()
    build = build_info()
    labels = {"version": "0.1.0", "revision": build.revision, "branch": build.branch}
    assert registry.get_sample_value("rocm_watchdog_build_info", {**labels, "pythonversion": build.python_version}) == 1


def test_state_files_share_one_family() -> None:
    from exporter.model.kernel import KernelLogState

    store = filled_store()
    store.register("kernel-log", 1, 3)
    store.record_success("kernel-log", KernelLogState(cursor_corrupt=True), 0.001, NOW)
    registry = make_registry(store, Config(), clock=lambda: NOW)
    text = generate_latest(registry).decode()
    assert text.count("# TYPE rocm_watchdog_state_file_corrupt gauge") == 1
    assert registry.get_sample_value("rocm_watchdog_state_file_corrupt", {"file": "kernel-log-cursor.json"}) == 1
    check_metrics(text)


def test_the_driver_version_is_host_wide() -> None:
    # The rocm-smi capture (MI50, driver 5.9.17) does not list the amd-smi GPUs nor the sysfs one: all the same,
    # one module drives them all.
    registry = make_registry(filled_store(), Config(), clock=lambda: NOW)
    text = generate_latest(registry).decode()
    drivers = set(re.findall(r'rocm_gpu_info\{[^}]*driver="([^"]*)"', text))
    assert drivers == {"5.9.17"}
