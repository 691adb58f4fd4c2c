"""gpu_metrics in the exporter (issue 10 item 2): the sysfs source reads each GPU's binary table on its interval,
and ``once`` exports every reading the table has, per GPU and per partition, and nothing it does not have.

The tables are built member by member at the kernel structs' offsets (tests/gpu_metrics_builder.py) from the field
values in tests/fakeroot.py; every expected value below is computed here from those field values with the units the
kernel header gives (percent, MHz, KB, GB/s, 0.1 GT/s, 2^-16 J...), not by the exporter's normalisers. One root
carries a real MI100 capture.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from fakeroot import (
    MI300X_PARTITIONS,
    FakeRoot,
    build_root,
    gpu_metrics_file,
    mi100_gpu,
    mi300x_gpu,
    mi300x_metrics_fields,
    mi300x_node,
    radeon_gpu,
    radeon_metrics_fields,
)
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from promtool import check_metrics
from structlog.testing import capture_logs
from test_sysfs_telemetry import run_once

from exporter.metrics import names
from exporter.metrics.collector import make_registry
from exporter.model.gpu import SysfsSnapshot
from exporter.model.gpu_metrics import FieldValue
from exporter.parsers.gpu_metrics import parse_gpu_metrics
from exporter.parsers.gpu_metrics.reading import energy_unit_joules, gpu_metrics_reading
from exporter.sources import deadline
from exporter.sources.sysfs import SysfsSource, read_sysfs
from exporter.store import SnapshotStore

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels]

MODES = ("CPX", "DPX", "SPX", "SPX", "SPX", "SPX", "SPX", "SPX")
FILLED = 2  # the GPU of the node whose sysfs lacks the readings the table also has: the table fills them

# Every family that only the gpu_metrics table feeds.
TABLE_SPECS = (
    names.GPU_THROTTLED,
    names.GPU_THROTTLE_ACTIVE,
    names.GPU_ACCUMULATION_TICKS,
    names.GPU_THROTTLE_RESIDENCY,
    names.GPU_ENGINE_ACTIVITY,
    names.GPU_XCC_BUSY,
    names.GPU_XCC_VIOLATION,
    names.GPU_XGMI_WIDTH,
    names.GPU_XGMI_SPEED,
    names.GPU_XGMI_ACTIVE,
    names.GPU_XGMI_INACTIVE,
    names.GPU_XGMI_READ,
    names.GPU_XGMI_WRITE,
    names.GPU_PCIE_BANDWIDTH,
    names.GPU_PCIE_REPLAY_ROLLOVERS,
    names.GPU_PCIE_RECOVERIES,
    names.GPU_PCIE_NAKS_SENT,
    names.GPU_PCIE_NAKS_RECEIVED,
    names.GPU_PCIE_OTHER_END_RECOVERIES,
    names.GPU_ENERGY,
)
# Families sysfs feeds that the table fills where sysfs has nothing.
FILLED_SPECS = (
    names.GPU_BUSY,
    names.GPU_TEMPERATURE,
    names.GPU_POWER,
    names.GPU_PCIE_SPEED,
    names.GPU_PCIE_WIDTH,
    names.GPU_CLOCK,
    names.GPU_MEMORY_BUSY,
    names.GPU_PCIE_REPLAYS,
)


def samples(text: str, specs: tuple[names.Spec, ...]) -> dict[Sample, float]:
    wanted = {s.name for s in specs}
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def key(spec: names.Spec, pci_bus: str, **labels: str) -> Sample:
    return (spec.name, tuple(sorted({"pci_bus": pci_bus, **labels}.items())))


def bdf(i: int, function: int = 0) -> str:
    return f"0000:{0x05 + 0x10 * i:02x}:00.{function}"


def _list(value: object) -> list[int]:
    assert isinstance(value, list)
    return [v for v in value if isinstance(v, int)]


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


# ---- the 8x MI300X node ----------------------------------------------------------------------------------


def node(tmp_path: Path) -> FakeRoot:
    """``mi300x_node``: GPU 0 in CPX (8 partitions), GPU 1 in DPX (2), the rest SPX; GPU ``FILLED`` without the
    sysfs files whose readings the table also has (busy, hwmon temperatures and power, PCIe link, replays,
    mem_busy_percent, pp_dpm_sclk)."""
    root = mi300x_node(tmp_path, MODES)
    gpu = root.gpus[FILLED]
    gpu.busy_percent = None
    gpu.temps_millidegrees = ()
    gpu.power_microwatts = None
    gpu.link_speed = None
    gpu.link_width = None
    for name in ("pcie_replay_count", "mem_busy_percent", "pp_dpm_sclk"):
        gpu.files.pop(name)
    gpu.omit = frozenset({"pcie_replay_count", "mem_busy_percent"})
    root.rebuild()
    return root


def expected_node() -> dict[Sample, float]:
    """Every sample of ``TABLE_SPECS`` the node must export, from the fields its tables were built with."""
    out: dict[Sample, float] = {}
    for i, mode in enumerate(MODES):
        n = MI300X_PARTITIONS[mode]
        f = mi300x_metrics_fields(i, n)
        bus = bdf(i)
        # v1.8 has no throttle status (MI300 reports residency instead): no rocm_gpu_throttled, no reasons
        out[key(names.GPU_ACCUMULATION_TICKS, bus)] = _int(f["accumulation_counter"])
        for reason in ("prochot", "ppt", "socket_thm", "vr_thm", "hbm_thm"):
            out[key(names.GPU_THROTTLE_RESIDENCY, bus, reason=reason)] = _int(f[f"{reason}_residency_acc"])
        out[key(names.GPU_XGMI_WIDTH, bus)] = _int(f["xgmi_link_width"])  # lanes
        out[key(names.GPU_XGMI_SPEED, bus)] = _int(f["xgmi_link_speed"]) * 1e9 / 8  # Gbps
        statuses = [status for status in _list(f["xgmi_link_status"]) if status != 2]  # 2: not available
        out[key(names.GPU_XGMI_ACTIVE, bus)] = sum(statuses)
        for link, status in enumerate(_list(f["xgmi_link_status"])):
            if status == 0:
                out[key(names.GPU_XGMI_INACTIVE, bus, link=str(link))] = 1
        for spec, name in ((names.GPU_XGMI_READ, "xgmi_read_data_acc"), (names.GPU_XGMI_WRITE, "xgmi_write_data_acc")):
            for link, kilobytes in enumerate(_list(f[name])):  # links 0-6 given, 7 left all ones
                out[key(spec, bus, link=str(link))] = kilobytes * 1024
        out[key(names.GPU_PCIE_BANDWIDTH, bus)] = _int(f["pcie_bandwidth_inst"]) * 1e9  # GB/s
        out[key(names.GPU_PCIE_REPLAY_ROLLOVERS, bus)] = _int(f["pcie_replay_rover_count_acc"])
        out[key(names.GPU_PCIE_RECOVERIES, bus)] = _int(f["pcie_l0_to_recov_count_acc"])
        out[key(names.GPU_PCIE_NAKS_SENT, bus)] = _int(f["pcie_nak_sent_count_acc"])
        out[key(names.GPU_PCIE_NAKS_RECEIVED, bus)] = _int(f["pcie_nak_rcvd_count_acc"])
        out[key(names.GPU_PCIE_OTHER_END_RECOVERIES, bus)] = _int(f["pcie_lc_perf_other_end_recovery"])
        out[key(names.GPU_ENERGY, bus)] = _int(f["energy_accumulator"]) / 65536  # 15.259 uJ counts on MI300X
        stats = f["xcp_stats"]
        assert isinstance(stats, list) and len(stats) == n
        for k, xcp in enumerate(stats):
            assert isinstance(xcp, dict)
            part = bdf(i, k)  # partition k is function k; partition 0 the PCI function itself
            busy = _list(xcp["gfx_busy_inst"])
            assert len(busy) == 8 // n
            # a partition's only XCC is its rocm_gpu_busy_ratio, not a series of its own (the PCI function's busy
            # ratio is its gpu_busy_percent: its XCCs keep theirs)
            if len(busy) > 1 or k == 0:
                for xcc, percent in enumerate(busy):
                    out[key(names.GPU_XCC_BUSY, part, xcc=str(xcc))] = percent / 100
            jpeg = _list(xcp["jpeg_busy"])
            out[key(names.GPU_ENGINE_ACTIVITY, part, engine="vcn")] = _list(xcp["vcn_busy"])[0] / 100
            out[key(names.GPU_ENGINE_ACTIVITY, part, engine="jpeg")] = sum(jpeg) / len(jpeg) / 100
            # violation ticks per physical GPU, summed over the XCCs of all its partitions
            for counter in (
                "gfx_below_host_limit_ppt",
                "gfx_below_host_limit_thm",
                "gfx_below_host_limit_total",
                "gfx_low_utilization",
            ):
                sample = key(names.GPU_XCC_VIOLATION, bus, counter=counter)
                out[sample] = out.get(sample, 0) + sum(_list(xcp[f"{counter}_acc"]))
    return out


def expected_node_filled() -> dict[Sample, float]:
    """The samples of ``FILLED_SPECS``: sysfs's where it has them (the mi300x_gpu preset's files), the table's
    where it does not, and each partition's busy ratio from its XCCs."""
    out: dict[Sample, float] = {}
    for i, mode in enumerate(MODES):
        n = MI300X_PARTITIONS[mode]
        f = mi300x_metrics_fields(i, n)
        bus = bdf(i)
        stats = f["xcp_stats"]
        assert isinstance(stats, list)
        for k in range(1, n):  # partitions on amdgpu_xcp devices: no files of their own
            xcp = stats[k]
            assert isinstance(xcp, dict)
            busy = _list(xcp["gfx_busy_inst"])
            out[key(names.GPU_BUSY, bdf(i, k))] = sum(busy) / len(busy) / 100
        # MI300X: no edge sensor, no temperature_edge in v1.8: vrsoc is the table's only addition
        out[key(names.GPU_TEMPERATURE, bus, sensor="vrsoc")] = _int(f["temperature_vrsoc"])
        clocks = {"mclk": 1300e6, "fclk": 2000e6, "socclk": 1200e6, "vclk": 914e6, "dclk": 711e6}  # pp_dpm_*
        if i != FILLED:
            out[key(names.GPU_BUSY, bus)] = 0.0  # gpu_busy_percent
            out[key(names.GPU_TEMPERATURE, bus, sensor="junction")] = 41.0  # hwmon
            out[key(names.GPU_TEMPERATURE, bus, sensor="mem")] = 36.0
            out[key(names.GPU_POWER, bus)] = 172.0  # hwmon power1_input
            out[key(names.GPU_PCIE_SPEED, bus)] = 16.0  # current_link_speed
            out[key(names.GPU_PCIE_WIDTH, bus)] = 16.0
            out[key(names.GPU_MEMORY_BUSY, bus)] = 0.12  # mem_busy_percent
            out[key(names.GPU_PCIE_REPLAYS, bus)] = 3.0  # pcie_replay_count, not the table's 40 + i
            clocks["sclk"] = 19e6  # pp_dpm_sclk's deep-sleep level
        else:
            busy = _list(stats[0]["gfx_busy_inst"]) if isinstance(stats[0], dict) else []
            out[key(names.GPU_BUSY, bus)] = sum(busy) / len(busy) / 100  # SPX: XCP 0 is the whole GPU
            out[key(names.GPU_TEMPERATURE, bus, sensor="junction")] = _int(f["temperature_hotspot"])
            out[key(names.GPU_TEMPERATURE, bus, sensor="mem")] = _int(f["temperature_mem"])
            out[key(names.GPU_POWER, bus)] = _int(f["curr_socket_power"])  # watts
            out[key(names.GPU_PCIE_SPEED, bus)] = _int(f["pcie_link_speed"]) / 10  # 0.1 GT/s
            out[key(names.GPU_PCIE_WIDTH, bus)] = _int(f["pcie_link_width"])
            out[key(names.GPU_MEMORY_BUSY, bus)] = _int(f["average_umc_activity"]) / 100
            out[key(names.GPU_PCIE_REPLAYS, bus)] = _int(f["pcie_replay_count_acc"])
            clocks["sclk"] = _list(f["current_gfxclk"])[0] * 1e6  # MHz, XCC 0
        for domain, hertz in clocks.items():
            out[key(names.GPU_CLOCK, bus, domain=domain)] = hertz
    return out


def test_the_node_reads_every_table_without_a_warning(tmp_path: Path) -> None:
    snap = read_sysfs(node(tmp_path).sys)
    assert snap.warnings == () and snap.read_errors == ()
    gpus = {g.pci_bus: g for g in snap.gpus}
    assert len(gpus) == 8 + 7 + 1  # 8 PCI functions, GPU 0's 7 and GPU 1's 1 amdgpu_xcp partitions
    for i in range(8):
        assert gpus[bdf(i)].gpu_metrics is not None and gpus[bdf(i)].xcp is not None
    for k in range(1, 8):
        part = gpus[bdf(0, k)]
        assert part.gpu_metrics is None  # a partition has no table of its own ...
        assert part.xcp is not None and part.xcp.index == k  # ... only its XCP of its GPU's


def test_once_on_the_node_exports_every_reading_per_gpu_and_partition(tmp_path: Path) -> None:
    text = run_once(node(tmp_path))
    check_metrics(text)
    assert samples(text, TABLE_SPECS) == pytest.approx(expected_node(), rel=1e-12)
    assert samples(text, FILLED_SPECS) == pytest.approx(expected_node_filled(), rel=1e-12)
    # spot checks in the exposition's own spelling, by hand from mi300x_metrics_fields
    assert 'rocm_gpu_energy_joules_total{pci_bus="0000:05:00.0"} 74565.4044342041' in text  # 0x123456789 / 2^16
    assert 'rocm_gpu_busy_ratio{pci_bus="0000:05:00.3"} 0.03' in text  # CPX: one XCC per partition, its busy
    assert 'rocm_gpu_xcc_busy_ratio{pci_bus="0000:05:00.3"' not in text  # ... and no series again per XCC
    assert 'rocm_gpu_xgmi_link_inactive{link="6",pci_bus="0000:15:00.0"} 1.0' in text
    assert 'rocm_gpu_xgmi_read_bytes_total{link="7"' not in text  # not available: no series, not 0
    assert "rocm_gpu_throttled{" not in text and "rocm_gpu_throttle_active{" not in text
    assert 'engine="mm"' not in text  # v1.8 has no average_mm_activity
    # the table's copies of sysfs readings are not exported twice
    assert 'rocm_gpu_temperature_celsius{pci_bus="0000:05:00.0",sensor="hotspot"}' not in text
    assert text.count('rocm_gpu_pcie_replays_total{pci_bus="0000:05:00.0"}') == 1
    # what the table costs, in series of the table-only families (the final report states these)
    per_bus: dict[str, int] = {}
    for _, labels in samples(text, TABLE_SPECS):
        per_bus[dict(labels)["pci_bus"]] = per_bus.get(dict(labels)["pci_bus"], 0) + 1

    def inactive(i: int) -> int:
        return _list(mi300x_metrics_fields(i, MI300X_PARTITIONS[MODES[i]])["xgmi_link_status"]).count(0)

    # SPX GPU: 1 accumulation + 5 residency + 2 XGMI gauges + 1 active-link count + its inactive links + 2 x 7 XGMI
    # traffic series + 6 PCIe + 1 energy, its one XCP's 8 XCC busy + 2 engines, and 4 violation counters
    per_gpu = 1 + 5 + 2 + 1 + 14 + 6 + 1 + 4
    assert per_bus[bdf(3)] == per_gpu + inactive(3) + 8 + 2 == 44 + inactive(3)
    assert per_bus[bdf(0)] == per_gpu + inactive(0) + 1 + 2  # CPX: the PCI function is partition 0, with 1 XCC
    assert per_bus[bdf(0, 5)] == 2  # a CPX partition: its 2 engines (its one XCC is its busy ratio)
    assert per_bus[bdf(1, 1)] == 4 + 2  # a DPX partition: 4 XCCs, 2 engines
    partitions = sum(MI300X_PARTITIONS[mode] - 1 for mode in MODES)
    xccs = sum(8 for mode in MODES if MI300X_PARTITIONS[mode] == 1) + 1 + 4 + 4  # SPX GPUs, CPX's function, DPX
    assert sum(per_bus.values()) == sum(per_gpu + inactive(i) for i in range(8)) + xccs + 2 * (8 + partitions)


# ---- a Radeon and an MI100 -------------------------------------------------------------------------------


def test_once_on_a_radeon_exports_the_subset_a_v1_3_table_has(tmp_path: Path) -> None:
    f = radeon_metrics_fields()
    gpu = radeon_gpu("0000:0b:00.0", gpu_metrics=gpu_metrics_file("gpu_metrics_v1_3", f))
    root = build_root(tmp_path, [gpu], name="radeon")
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()
    text = run_once(root)
    check_metrics(text)
    bus = "0000:0b:00.0"
    assert samples(text, TABLE_SPECS) == {
        key(names.GPU_THROTTLED, bus): 1.0,
        key(names.GPU_THROTTLE_ACTIVE, bus, reason="PPT0"): 1.0,  # bit 0
        key(names.GPU_THROTTLE_ACTIVE, bus, reason="TEMP_HOTSPOT"): 1.0,  # bit 36
        key(names.GPU_ENGINE_ACTIVITY, bus, engine="mm"): _int(f["average_mm_activity"]) / 100,
        key(names.GPU_ENERGY, bus): _int(f["energy_accumulator"]) / 65536,
    }
    filled = samples(text, FILLED_SPECS)
    temperatures = {
        dict(labels)["sensor"]: v for (name, labels), v in filled.items() if name == names.GPU_TEMPERATURE.name
    }
    # hwmon's three, then the three VR sensors only the table has (its edge/hotspot/mem are hwmon's already)
    assert temperatures == {"edge": 45.0, "junction": 52.0, "mem": 60.0, "vrgfx": 48.0, "vrsoc": 47.0, "vrmem": 50.0}
    clocks = {dict(labels)["domain"]: v for (name, labels), v in filled.items() if name == names.GPU_CLOCK.name}
    # sclk/mclk from hwmon, vclk from pp_dpm_vclk; no socclk table and no starred dclk level: the table's
    assert clocks == {"sclk": 1825e6, "mclk": 1249e6, "vclk": 29e6, "socclk": 1200e6, "dclk": 25e6}
    assert filled[key(names.GPU_BUSY, bus)] == 0.03 and filled[key(names.GPU_MEMORY_BUSY, bus)] == 0.07  # sysfs
    assert filled[key(names.GPU_PCIE_REPLAYS, bus)] == 0.0 and filled[key(names.GPU_POWER, bus)] == 38.0
    # and nothing a v1.3 table does not have (the equality above): no XGMI, PCIe counters, residency, XCCs
    assert "rocm_gpu_xgmi_read_bytes_total{" not in text and "rocm_gpu_xcc_busy_ratio{" not in text


def test_once_on_an_mi100_with_its_real_capture(tmp_path: Path) -> None:
    """The real MI100 table (mi100_arcturus_v1_3_a.bin): energy in joules (Arcturus), the VR temperatures hwmon
    does not have, throttle status 0; every other reading of it is sysfs's already."""
    root = build_root(tmp_path, [mi100_gpu("0000:43:00.0")], name="mi100")
    assert read_sysfs(root.sys).warnings == ()
    text = run_once(root)
    check_metrics(text)
    bus = "0000:43:00.0"
    assert samples(text, TABLE_SPECS) == {
        key(names.GPU_THROTTLED, bus): 0.0,
        key(names.GPU_ENGINE_ACTIVITY, bus, engine="mm"): 0.0,
        key(names.GPU_ENERGY, bus): 59231.0,  # one count per joule, not 59231 x 15.259 uJ
    }
    filled = samples(text, FILLED_SPECS)
    temperatures = {
        dict(labels)["sensor"]: v for (name, labels), v in filled.items() if name == names.GPU_TEMPERATURE.name
    }
    assert temperatures == {"edge": 45.0, "junction": 49.0, "mem": 45.0, "vrgfx": 46.0, "vrsoc": 45.0, "vrmem": 42.0}
    clocks = {dict(labels)["domain"]: v for (name, labels), v in filled.items() if name == names.GPU_CLOCK.name}
    assert clocks == {"sclk": 300e6, "mclk": 1200e6, "fclk": 1402e6, "socclk": 1000e6, "vclk": 0.0, "dclk": 0.0}


# ---- tables that cannot be decoded cleanly -----------------------------------------------------------------

MI300X = "0000:05:00.0"


def _source_snapshots(root: FakeRoot, runs: int = 2) -> tuple[SysfsSnapshot, list[MutableMapping[str, Any]]]:
    source = SysfsSource(root.config(), deadline_seconds=5)
    with capture_logs() as logs:
        for _ in range(runs):
            snap = source.collect()
    return snap, logs


def _exposition(root: FakeRoot, snap: SysfsSnapshot) -> str:
    store = SnapshotStore()
    store.register("sysfs", 15, 45)
    store.record_success("sysfs", snap, 0.01, time.time())
    return generate_latest(make_registry(store, root.config())).decode()


_V1_8 = gpu_metrics_file("gpu_metrics_v1_8", mi300x_metrics_fields(0))

BAD_TABLES = {
    # a v1.8 table cut after 40 bytes: the members that fit, one warning
    "truncated": (_V1_8[:40], "partial", "v1.8"),
    # format revision 9: nothing but the header can be read
    "unknown_format": (bytes([0x20, 0x00, 0x09, 0x00]) + b"\x00" * 28, "unparsable", "v9.0"),
    # garbage, whose "header" names format 0xee
    "garbage": (b"\xee" * 120, "unparsable", "v238.238"),
    # three bytes: not a table at all
    "short": (b"\x78\x00\x01", "unparsable", ""),
    # a newer content revision of v1.x than the parser knows (v1.12) on a fixed v1.8 body: not an attribute list,
    # so read as v1.8, with a warning
    "future": (_V1_8[:3] + bytes([12]) + _V1_8[4:], "partial", "v1.12"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_a_bad_table_is_one_warning_a_counted_error_and_no_crash(tmp_path: Path, case: str) -> None:
    data, error, revision = BAD_TABLES[case]
    root = build_root(tmp_path, [mi300x_gpu(MI300X, gpu_metrics=data)], name=case)
    snap, logs = _source_snapshots(root)
    (gpu,) = snap.gpus
    assert gpu.sysfs_read == "ok" and gpu.busy_ratio == 0.0  # the rest of the GPU is read as usual
    counts = {(e.file, e.error): e.count for e in snap.read_errors}
    assert counts == {("gpu_metrics", error): 2}  # counted on every read ...
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1  # ... logged once per GPU and revision
    assert warnings[0]["pci_bus"] == MI300X
    if revision:
        assert (warnings[0]["event"], warnings[0]["revision"]) == ("gpu_metrics_decode_warning", revision)
    else:
        assert (warnings[0]["event"], warnings[0]["file"]) == ("sysfs_read_error", "gpu_metrics")
    text = _exposition(root, snap)
    assert f'rocm_gpu_sysfs_read_errors_total{{error="{error}",file="gpu_metrics",pci_bus="{MI300X}"}} 2.0' in text
    if case == "truncated":
        # what fits in 40 bytes: temperatures, power, activity, energy (bytes 32-39); nothing after it
        assert gpu.gpu_metrics is not None and gpu.gpu_metrics.energy_joules == 0x1_2345_6789 / 65536
        assert gpu.gpu_metrics.xcps == () and gpu.gpu_metrics.accumulation_ticks is None
        assert f'rocm_gpu_energy_joules_total{{pci_bus="{MI300X}"}}' in text
    elif case != "future":
        assert gpu.gpu_metrics is None
        assert "rocm_gpu_energy_joules_total{" not in text and "rocm_gpu_xgmi_links_active{" not in text


def test_a_changed_revision_is_logged_again(tmp_path: Path) -> None:
    root = build_root(tmp_path, [mi300x_gpu(MI300X, gpu_metrics=BAD_TABLES["truncated"][0])])
    source = SysfsSource(root.config(), deadline_seconds=5)
    with capture_logs() as logs:
        source.collect()
        (root.pci_dir(MI300X) / "gpu_metrics").write_bytes(BAD_TABLES["future"][0])
        source.collect()
        snap = source.collect()
    revisions = [e["revision"] for e in logs if e["event"] == "gpu_metrics_decode_warning"]
    assert revisions == ["v1.8", "v1.12"]
    assert {(e.file, e.error): e.count for e in snap.read_errors} == {("gpu_metrics", "partial"): 3}


def test_an_empty_file_is_no_table_and_no_error(tmp_path: Path) -> None:
    root = build_root(tmp_path, [mi300x_gpu(MI300X, gpu_metrics=b"")])
    snap = read_sysfs(root.sys)
    assert snap.gpus[0].gpu_metrics is None and snap.read_errors == () and snap.warnings == ()


# ---- reads that cannot wedge -------------------------------------------------------------------------------


def test_a_fifo_in_place_of_gpu_metrics_does_not_wedge(tmp_path: Path) -> None:
    root = build_root(tmp_path, [mi300x_gpu(MI300X, gpu_metrics=gpu_metrics_file("gpu_metrics_v1_8", {}))])
    path = root.pci_dir(MI300X) / "gpu_metrics"
    path.unlink()
    os.mkfifo(path)  # nobody ever writes it: open() or read() of it would block for good
    started = time.monotonic()
    snap, _ = _source_snapshots(root)
    assert time.monotonic() - started < 5
    (gpu,) = snap.gpus
    assert gpu.sysfs_read == "ok" and gpu.gpu_metrics is None and gpu.vram_total_bytes == 206_158_430_208
    assert {(e.file, e.error): e.count for e in snap.read_errors} == {("gpu_metrics", "not_regular_file"): 2}


@pytest.fixture
def blocking_gpu_metrics(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """``read_regular`` of any gpu_metrics file blocks until the event is set, as a hung SMU blocks its read."""
    gate = threading.Event()
    real = deadline.read_regular

    def read(path: str | os.PathLike[str], limit: int) -> bytes:
        if os.fspath(path).endswith("/gpu_metrics") and os.path.exists(path):
            gate.wait(30)
        return real(path, limit)

    monkeypatch.setattr(deadline, "read_regular", read)
    yield gate
    gate.set()


def test_a_gpu_metrics_read_that_blocks_is_cut_by_the_deadline(
    tmp_path: Path, blocking_gpu_metrics: threading.Event
) -> None:
    gpus = [
        mi300x_gpu(MI300X, gpu_metrics=gpu_metrics_file("gpu_metrics_v1_8", mi300x_metrics_fields(0))),
        mi300x_gpu("0000:15:00.0", card=2, render=129, kfd_node=2, unique_id=0x77),
    ]
    root = build_root(tmp_path, gpus, name="blocking")
    source = SysfsSource(root.config(), deadline_seconds=0.5)
    started = time.monotonic()
    snap = source.collect()
    assert time.monotonic() - started < 2
    a, b = snap.gpus
    assert (a.sysfs_read, a.gpu_metrics) == ("timeout", None)
    assert source._gpu_reads.blocked_on(MI300X) == "gpu_metrics"
    assert b.sysfs_read == "ok" and b.busy_ratio == 0.0
    blocking_gpu_metrics.set()
    deadline_at = time.monotonic() + 5
    while source._gpu_reads.runner.stuck() and time.monotonic() < deadline_at:
        time.sleep(0.01)
    again = source.collect()
    assert again.gpus[0].sysfs_read == "ok" and again.gpus[0].gpu_metrics is not None


# ---- the reading of other revisions ------------------------------------------------------------------------


def test_apu_v2_capture_reading() -> None:
    """The real APU capture (v2.2): centi-Celsius, the socket in W on this firmware, GPU clocks under their sysfs
    names, and neither the CPU cores' temperatures nor their clocks."""
    data = (Path(__file__).parent / "fixtures" / "gpu_metrics" / "apu_v2_2_netip_device.bin").read_bytes()
    r = gpu_metrics_reading(parse_gpu_metrics(data), "0x1638")
    assert r.temperatures_celsius == (("edge", 40.0), ("soc", 40.0))  # temperature_gfx, temperature_soc: 4000
    assert dict(r.clocks_hertz) == {
        "sclk": 400e6,
        "socclk": 400e6,
        "mclk": 6e6,  # current_uclk as the firmware wrote it
        "fclk": 400e6,
        "vclk": 400e6,
        "dclk": 400e6,
    }
    assert (r.power_watts, r.throttle_status, r.throttle_reasons) == (7.0, 0, ())
    assert (r.gfx_activity_ratio, r.mm_activity_ratio, r.energy_joules) == (0.0, 0.0, None)


def test_apu_activity_is_centi_percent_and_v3_has_residency() -> None:
    v2_4 = gpu_metrics_reading(
        parse_gpu_metrics(
            gpu_metrics_file("gpu_metrics_v2_4", {"average_gfx_activity": 2500, "average_mm_activity": 10001})
        )
    )
    assert v2_4.gfx_activity_ratio == 0.25 and v2_4.mm_activity_ratio is None  # 100.01 % is no ratio
    fields: dict[str, FieldValue] = {
        "temperature_gfx": 4512,
        "temperature_skin": 3300,
        "average_gfx_activity": 40,  # % [0-100] in v3.0
        "average_vcn_activity": 7,
        "throttle_residency_prochot": 11,
        "throttle_residency_thm_gfx": 12,
        "average_socket_power": 15_250,  # mW
    }
    v3 = gpu_metrics_reading(parse_gpu_metrics(gpu_metrics_file("gpu_metrics_v3_0", fields)))
    assert v3.temperatures_celsius == (("edge", 45.12), ("skin", 33.0))
    assert (v3.gfx_activity_ratio, v3.vcn_activity_ratio, v3.power_watts) == (0.4, 0.07, 15.25)
    assert v3.throttle_residency_ticks == (("prochot", 11), ("thm_gfx", 12))
    assert v3.throttle_status is None and v3.accumulation_ticks is None


def test_v1_5_device_wide_media_engines_and_asic_throttle_status() -> None:
    fields: dict[str, FieldValue] = {
        "vcn_activity": [10, 20],  # the other two instances not available
        "jpeg_activity": [4, 0, 2],
        "throttle_status": 0x3,  # ASIC bits: throttled, but no names
        "energy_accumulator": 3 * 65536,
        "pcie_link_speed": 160,
        "pcie_bandwidth_inst": 12,
    }
    r = gpu_metrics_reading(parse_gpu_metrics(gpu_metrics_file("gpu_metrics_v1_5", fields)), "0x74A1")
    assert (r.vcn_activity_ratio, r.jpeg_activity_ratio) == (0.15, 0.02)
    assert (r.throttle_status, r.throttle_reasons) == (3, ())
    assert (r.energy_joules, r.energy_unit_joules) == (3.0, 2.0**-16)
    assert (r.pcie_link_speed_gts, r.pcie_bandwidth_bytes_per_second) == (16.0, 12e9)
    assert r.xcps == () and r.xgmi_read_bytes == () and r.xgmi_link_active == ()


@pytest.mark.parametrize(
    ("device_id", "unit"),
    [("0x738c", 1.0), ("0x738E", 1.0), ("0x7388", 1.0), ("0x7390", 1.0), ("0x74a1", 2.0**-16), (None, 2.0**-16)],
)
def test_energy_unit_by_device(device_id: str | None, unit: float) -> None:
    assert energy_unit_joules(device_id) == unit
