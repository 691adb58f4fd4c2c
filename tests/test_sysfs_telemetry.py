"""sysfs telemetry (issue 10 item 1): the pure parsers over every file format, the sysfs source over a
Radeon-like and an MI300X-like fake root, and ``once`` exporting each reading per GPU, and nothing for a
file the GPU does not have.

Formats: ``pp_dpm_*`` as amdgpu's powerplay/swsmu code prints them (``%d: %uMhz %s``, ``S: %uMhz *`` for
deep sleep), hwmon in its units (Hz, mV, uW, RPM, 0..255), ``ras/gpu_vram_bad_pages`` as amdgpu_ras.c
prints it (``0x%08x : 0x%08x : %1s``); the Vega 10 ``pp_dpm_*`` files are a real capture.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakeroot import FakeRoot, FakeXcp, build_root, mi300x_gpu, radeon_gpu
from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import replace
from paths import FIXTURES, PROJECT
from prometheus_client.parser import text_string_to_metric_families
from promtool import check_metrics

from exporter.inventory import merge_gpus
from exporter.metrics import names
from exporter.model import ParseError
from exporter.model.gpu import GpuTelemetry, VramBadPages
from exporter.parsers import sysfs as p
from exporter.sources import sysfs as source
from exporter.sources.sysfs import read_sysfs

VEGA10 = FIXTURES / "sysfs" / "procfs-drm-amdgpu" / "sys" / "class" / "drm" / "card0" / "device"

# ---- pp_dpm_<clk> ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "hertz"),
    [("pp_dpm_sclk", 852e6), ("pp_dpm_mclk", 167e6), ("pp_dpm_socclk", 720e6), ("pp_dpm_dcefclk", 600e6)],
)
def test_dpm_clock_of_the_real_vega10_capture(name: str, hertz: float) -> None:
    assert p.parse_dpm_clock_hz((VEGA10 / name).read_text()) == hertz


@pytest.mark.parametrize(
    ("text", "hertz"),
    [
        ("0: 500Mhz \n1: 1800Mhz *\n2: 2526Mhz \n", 1800e6),  # trailing space after an unstarred level
        ("0: 500Mhz\n1: 1800Mhz *\n2: 2526Mhz\n", 1800e6),  # none (the S-table form)
        ("0: 500Mhz *\n1: 1800Mhz", 500e6),  # no final newline
        ("S: 19Mhz *\n0: 500Mhz\n1: 2100Mhz\n", 19e6),  # deep sleep, below level 0 (swsmu)
        ("F: 1432Mhz *\n0: 500Mhz\n1: 2100Mhz\n", 1432e6),  # fine-grained current clock (newer smu_cmn)
        ("0: 500Mhz *\nS: 19Mhz *\n", 19e6),  # a lettered level is the actual clock and wins
        ("0: 2100Mhz *\n1: 2110Mhz *\n", 2100e6),  # MI300 stars both ends within its tolerance: the first
        ("0: 300MHz *\n", 300e6),  # the unit's case
        ("S: 0Mhz *\n0: 500Mhz\n", 0.0),  # a gated clock is a real 0, the kernel's own reading
        ("0: 500Mhz \n1: 1600Mhz \n", None),  # no level starred: the clock matches none, unknown
        ("", None),
        ("\n", None),
        ("0: -5Mhz *\n", None),  # a negative clock
        ("0: 500Mhz \n1: 25000Mhz *\n", None),  # 25 GHz
    ],
)
def test_dpm_clock_formats(text: str, hertz: float | None) -> None:
    assert p.parse_dpm_clock_hz(text) == hertz


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("0: 8.0GT/s, x16 *\n", 1),  # pp_dpm_pcie is not a clock table
        ("0: 500Mhz\nfast\n", 2),
        ("0: 500\n", 1),  # no unit
        ("0: 500Khz *\n", 1),
        ("level 0: 500Mhz *\n", 1),
    ],
)
def test_dpm_clock_garbage_names_the_line(text: str, line: int) -> None:
    with pytest.raises(ParseError) as err:
        p.parse_dpm_clock_hz(text)
    assert err.value.line == line


# ---- hwmon -----------------------------------------------------------------------------------------------


def test_hwmon_frequency_is_already_hertz() -> None:
    assert p.parse_hwmon_hertz("1825000000\n") == 1.825e9
    assert p.parse_hwmon_hertz("0\n") == 0.0
    assert p.parse_hwmon_hertz("\n") is None
    assert p.parse_hwmon_hertz("-1\n") is None
    assert p.parse_hwmon_hertz("100000000000000000\n") is None  # 1e17 Hz
    with pytest.raises(ParseError):
        p.parse_hwmon_hertz("1.8 GHz\n")


def test_millivolts_to_volts() -> None:
    assert p.parse_millivolts("812\n") == 0.812
    assert p.parse_millivolts("12100\n") == 12.1  # vddboard
    assert p.parse_millivolts("0\n") == 0.0
    assert p.parse_millivolts("-5\n") is None
    assert p.parse_millivolts("65535000\n") is None
    assert p.parse_millivolts("") is None
    with pytest.raises(ParseError):
        p.parse_millivolts("0.8 V\n")


def test_fan_rpm_and_pwm() -> None:
    assert p.parse_fan_rpm("1187\n") == 1187
    assert p.parse_fan_rpm("0\n") == 0  # zero-RPM mode: the fan stands still
    assert p.parse_fan_rpm("-1\n") is None
    assert p.parse_fan_rpm("999999\n") is None
    assert p.parse_pwm_ratio("255\n") == 1.0
    assert p.parse_pwm_ratio("0\n") == 0.0
    assert p.parse_pwm_ratio("77\n") == 77 / 255
    assert p.parse_pwm_ratio("256\n") is None
    assert p.parse_pwm_ratio("-1\n") is None
    for parse in (p.parse_fan_rpm, p.parse_pwm_ratio):
        with pytest.raises(ParseError):
            parse("auto\n")


def test_power_and_temperature_out_of_physical_range_are_none() -> None:
    assert p.parse_microwatts("355000000\n") == 355.0
    assert p.parse_microwatts("0\n") == 0.0  # power1_cap_min of an MI300X
    assert p.parse_microwatts("-1000000\n") is None
    assert p.parse_microwatts("100000000000000000\n") is None  # 1e11 W
    assert p.parse_millidegrees("100000000000000000000\n") is None  # 1e17 degrees
    assert p.parse_millidegrees("-300000\n") is None  # below absolute zero
    assert p.parse_millidegrees("110000\n") == 110.0


def test_u64_counts_and_sizes() -> None:
    assert p.parse_u64("1099511627776\n") == 1 << 40
    assert p.parse_u64("0\n") == 0
    assert p.parse_u64("18446744073709551615\n") == (1 << 64) - 1
    assert p.parse_u64("18446744073709551616\n") is None
    assert p.parse_u64("-1\n") is None
    assert p.parse_u64("\n") is None
    with pytest.raises(ParseError):
        p.parse_u64("12 MB\n")


# ---- ras/gpu_vram_bad_pages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the example of amdgpu_ras.c's DOC comment
        ("0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n", VramBadPages(retired=1, pending=1)),
        ("0x00000001 : 0x00001000 : F\n", VramBadPages(failed=1)),
        ("", VramBadPages()),  # the driver prints nothing when it has no bad page
        ("0x00000001 : 0x00001000 : R\n\0\0\0", VramBadPages(retired=1)),  # binary attribute, NUL padding
        ("0x123456789 : 0x00001000 : R\n", VramBadPages(retired=1)),  # %08x is a minimum width
        ("0x0000abcd:0x00001000:R", VramBadPages(retired=1)),
    ],
)
def test_vram_bad_pages(text: str, expected: VramBadPages) -> None:
    assert p.parse_vram_bad_pages(text) == expected


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("0x00000001 : 0x00001000 : X\n", 1),  # not R, P or F
        ("0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000\n", 2),
        ("1 : 4096 : R\n", 1),
        ("ue: 0\nce: 0\n", 1),  # an err_count file
    ],
)
def test_vram_bad_pages_garbage_names_the_line(text: str, line: int) -> None:
    with pytest.raises(ParseError) as err:
        p.parse_vram_bad_pages(text)
    assert err.value.line == line


@given(st.text(max_size=200))
def test_telemetry_parsers_raise_only_parse_error(text: str) -> None:
    for parse in (
        p.parse_dpm_clock_hz,
        p.parse_hwmon_hertz,
        p.parse_millivolts,
        p.parse_fan_rpm,
        p.parse_pwm_ratio,
        p.parse_u64,
        p.parse_vram_bad_pages,
        p.parse_microwatts,
        p.parse_millidegrees,
    ):
        with contextlib.suppress(ParseError):
            parse(text)


# ---- the source on the two fake roots ---------------------------------------------------------------------

RADEON = "0000:0b:00.0"
MI300X_A, MI300X_A_PART, MI300X_B = "0000:05:00.0", "0000:05:00.1", "0000:15:00.0"

RADEON_TELEMETRY = GpuTelemetry(
    # sclk and mclk from hwmon (exact); vclk deep sleep from pp_dpm_vclk; dclk has no starred level
    clocks_hertz=(("sclk", 1825e6), ("mclk", 1249e6), ("vclk", 29e6)),
    power_cap_watts=355.0,
    power_cap_max_watts=402.0,
    power_cap_min_watts=320.0,
    fan_speed_rpm=1187,
    fan_pwm_ratio=77 / 255,
    voltages_volts=(("vddgfx", 0.812),),
    memory_busy_ratio=0.07,
    gtt_total_bytes=17179869184,
    gtt_used_bytes=118636544,
    visible_vram_total_bytes=25753026560,
    visible_vram_used_bytes=1627340800,
    pcie_replays=0,
    vram_bad_pages=None,
)

MI300X_A_TELEMETRY = GpuTelemetry(
    clocks_hertz=(
        ("sclk", 19e6),
        ("mclk", 1300e6),
        ("fclk", 2000e6),
        ("socclk", 1200e6),
        ("vclk", 914e6),
        ("dclk", 711e6),
    ),
    power_cap_watts=750.0,
    power_cap_max_watts=750.0,
    power_cap_min_watts=0.0,
    memory_busy_ratio=0.12,
    gtt_total_bytes=1 << 40,
    gtt_used_bytes=56623104,
    visible_vram_total_bytes=206158430208,
    visible_vram_used_bytes=1610612736,
    pcie_replays=3,
    vram_bad_pages=VramBadPages(retired=2, pending=1, failed=0),
)

# the second MI300X: busy, no bad page at all (an empty file), its own values everywhere
MI300X_B_FILES = {
    "pp_dpm_sclk": "0: 500Mhz\n1: 1432Mhz *\n2: 2100Mhz\n",
    "pp_dpm_mclk": "0: 900Mhz *\n1: 1300Mhz \n",
    "mem_busy_percent": "64\n",
    "mem_info_gtt_used": "1048576\n",
    "mem_info_vis_vram_used": "107374182400\n",
    "pcie_replay_count": "17\n",
    "ras/gpu_vram_bad_pages": "",
}
MI300X_B_TELEMETRY = replace(
    MI300X_A_TELEMETRY,
    clocks_hertz=(
        ("sclk", 1432e6),
        ("mclk", 900e6),
        ("fclk", 2000e6),
        ("socclk", 1200e6),
        ("vclk", 914e6),
        ("dclk", 711e6),
    ),
    power_cap_watts=650.0,
    memory_busy_ratio=0.64,
    gtt_used_bytes=1048576,
    visible_vram_used_bytes=107374182400,
    pcie_replays=17,
    vram_bad_pages=VramBadPages(),
)


def radeon_root(tmp_path: Path) -> FakeRoot:
    return build_root(tmp_path, [radeon_gpu(RADEON)], name="radeon")


def mi300x_root(tmp_path: Path) -> FakeRoot:
    """Two MI300X: 05:00.0 in DPX/NPS2 with its second partition on amdgpu_xcp.0 (05:00.1), 15:00.0 in SPX."""
    a = mi300x_gpu(
        MI300X_A,
        card=1,
        render=128,
        kfd_node=1,
        compute_partition="DPX",
        memory_partition="NPS2",
        partitions=(FakeXcp(xcp=0, index=1, card=2, render=129, kfd_node=2),),
    )
    b = mi300x_gpu(MI300X_B, card=3, render=130, kfd_node=3, unique_id=0x77)
    b.files.update(MI300X_B_FILES)
    b.hwmon_files["power1_cap"] = "650000000\n"
    return build_root(tmp_path, [a, b], cpu_nodes=1, name="mi300x")


def test_radeon_root_reads_what_a_radeon_has(tmp_path: Path) -> None:
    snap = read_sysfs(radeon_root(tmp_path).sys)
    assert snap.warnings == ()
    (gpu,) = snap.gpus
    assert gpu.telemetry == RADEON_TELEMETRY
    assert gpu.compute_partition is None and gpu.memory_partition is None


def test_mi300x_root_reads_every_gpu_and_nothing_for_a_partition(tmp_path: Path) -> None:
    snap = read_sysfs(mi300x_root(tmp_path).sys)
    assert snap.warnings == ()
    gpus = {g.pci_bus: g for g in snap.gpus}
    assert gpus[MI300X_A].telemetry == MI300X_A_TELEMETRY
    assert gpus[MI300X_B].telemetry == MI300X_B_TELEMETRY
    # the amdgpu_xcp partition has no telemetry files of its own: nothing is made up for it
    assert gpus[MI300X_A_PART].partition_device == "amdgpu_xcp.0"
    assert gpus[MI300X_A_PART].telemetry == GpuTelemetry()
    # the partition mode is the physical GPU's, reported once, on its PCI function
    views = {v.pci_bus: v for v in merge_gpus(snap, [])}
    assert (views[MI300X_A].compute_partition, views[MI300X_A].memory_partition) == ("DPX", "NPS2")
    assert (views[MI300X_B].compute_partition, views[MI300X_B].memory_partition) == ("SPX", "NPS1")
    assert views[MI300X_A_PART].compute_partition is None
    assert views[MI300X_A_PART].telemetry == GpuTelemetry()
    assert views[MI300X_A].telemetry == MI300X_A_TELEMETRY


def test_identity_only_reads_no_telemetry(tmp_path: Path) -> None:
    snap = read_sysfs(mi300x_root(tmp_path).sys, with_state=False)
    assert all(g.telemetry == GpuTelemetry() for g in snap.gpus)


def test_hwmon_clock_without_a_label_uses_amdgpu_s_numbering(tmp_path: Path) -> None:
    gpu = radeon_gpu(RADEON)
    del gpu.hwmon_files["freq1_label"]
    root = build_root(tmp_path, [gpu])
    (got,) = read_sysfs(root.sys).gpus
    assert dict(got.telemetry.clocks_hertz)["sclk"] == 1825e6


def test_an_implausible_reading_is_absent_and_the_rest_stays(tmp_path: Path) -> None:
    gpu = radeon_gpu(RADEON)
    gpu.hwmon_files.update({"fan1_input": "-1\n", "in0_input": "65535000\n", "power1_cap": "-355000000\n"})
    gpu.files["pp_dpm_mclk"] = "0: 96Mhz \n1: 99999Mhz *\n"
    gpu.hwmon_files.pop("freq2_input")  # so that pp_dpm_mclk is what says the memory clock
    root = build_root(tmp_path, [gpu])
    snap = read_sysfs(root.sys)
    assert snap.warnings == ()  # out of range is a glitch, not garbage
    t = snap.gpus[0].telemetry
    assert (t.fan_speed_rpm, t.voltages_volts, t.power_cap_watts) == (None, (), None)
    assert dict(t.clocks_hertz) == {"sclk": 1825e6, "vclk": 29e6}
    assert t == replace(
        RADEON_TELEMETRY,
        fan_speed_rpm=None,
        voltages_volts=(),
        power_cap_watts=None,
        clocks_hertz=(("sclk", 1825e6), ("vclk", 29e6)),
    )


def test_unreadable_or_garbage_files_are_absent_with_a_warning(tmp_path: Path) -> None:
    gpu = mi300x_gpu(MI300X_A, unreadable=frozenset({"pp_dpm_fclk", "mem_busy_percent"}))
    gpu.files["ras/gpu_vram_bad_pages"] = "0x00000001 : 0x00001000 : Q\n"
    root = build_root(tmp_path, [gpu])
    snap = read_sysfs(root.sys)
    t = snap.gpus[0].telemetry
    assert "fclk" not in dict(t.clocks_hertz) and dict(t.clocks_hertz)["mclk"] == 1300e6
    assert t.memory_busy_ratio is None and t.vram_bad_pages is None
    assert t.pcie_replays == 3
    rel = os.path.relpath(root.pci_dir(MI300X_A), root.sys)
    assert sorted(snap.warnings) == sorted(
        [
            f"{rel}/mem_busy_percent: unreadable (EISDIR: Is a directory)",
            f"{rel}/pp_dpm_fclk: unreadable (EISDIR: Is a directory)",
            f"{rel}/ras/gpu_vram_bad_pages: line 1: gpu_vram_bad_pages: unknown flag 'Q'",
        ]
    )


def test_a_bad_page_table_past_the_read_limit_is_not_counted_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = mi300x_gpu(MI300X_A)
    gpu.files["ras/gpu_vram_bad_pages"] = "".join(f"0x{n:08x} : 0x00001000 : R\n" for n in range(100))
    root = build_root(tmp_path, [gpu])
    assert read_sysfs(root.sys).gpus[0].telemetry.vram_bad_pages == VramBadPages(retired=100)
    monkeypatch.setattr(source, "_MAX_BAD_PAGES_READ", 28 * 99)
    snap = read_sysfs(root.sys)
    assert snap.gpus[0].telemetry.vram_bad_pages is None
    assert snap.warnings == (
        f"{os.path.relpath(root.pci_dir(MI300X_A), root.sys)}/ras/gpu_vram_bad_pages: larger than 2772 bytes, not read",
    )


# ---- once ------------------------------------------------------------------------------------------------

# The sample names of every family this issue adds.
TELEMETRY_SPECS = (
    names.GPU_CLOCK,
    names.GPU_POWER_CAP,
    names.GPU_POWER_CAP_MAX,
    names.GPU_POWER_CAP_MIN,
    names.GPU_FAN_SPEED,
    names.GPU_FAN_PWM,
    names.GPU_MEMORY_BUSY,
    names.GPU_GTT_TOTAL,
    names.GPU_GTT_USED,
    names.GPU_VISIBLE_VRAM_TOTAL,
    names.GPU_VISIBLE_VRAM_USED,
    names.GPU_PCIE_REPLAYS,
    names.GPU_VOLTAGE,
    names.GPU_VRAM_BAD_PAGES,
    names.GPU_PARTITION_MODE,
)

Sample = tuple[str, tuple[tuple[str, str], ...]]


def run_once(root: FakeRoot) -> str:
    """``once`` on the root with only the sysfs-fed collectors: no tool, no kernel log, no processes."""
    argv = [
        sys.executable, "-m", "exporter", "once",
        "--path.rootfs", str(root.root), "--state.dir", str(root.state_dir),
        "--no-collector.rocm-smi", "--no-collector.amd-smi", "--no-collector.kernel-log",
        "--no-collector.processes",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def telemetry_samples(text: str) -> dict[Sample, float]:
    wanted = {s.name for s in TELEMETRY_SPECS}
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def expected_samples(pci_bus: str, t: GpuTelemetry, partition: tuple[str, str] | None) -> dict[Sample, float]:
    """What one GPU must export: one sample per reading, none for an absent one."""
    bus = (("pci_bus", pci_bus),)
    out: dict[Sample, float] = {}
    for domain, hertz in t.clocks_hertz:
        out[(names.GPU_CLOCK.name, (("domain", domain), *bus))] = hertz
    for spec, value in (
        (names.GPU_POWER_CAP, t.power_cap_watts),
        (names.GPU_POWER_CAP_MAX, t.power_cap_max_watts),
        (names.GPU_POWER_CAP_MIN, t.power_cap_min_watts),
        (names.GPU_FAN_SPEED, t.fan_speed_rpm),
        (names.GPU_FAN_PWM, t.fan_pwm_ratio),
        (names.GPU_MEMORY_BUSY, t.memory_busy_ratio),
        (names.GPU_GTT_TOTAL, t.gtt_total_bytes),
        (names.GPU_GTT_USED, t.gtt_used_bytes),
        (names.GPU_VISIBLE_VRAM_TOTAL, t.visible_vram_total_bytes),
        (names.GPU_VISIBLE_VRAM_USED, t.visible_vram_used_bytes),
        (names.GPU_PCIE_REPLAYS, t.pcie_replays),
    ):
        if value is not None:
            out[(spec.name, bus)] = float(value)
    for sensor, volts in t.voltages_volts:
        out[(names.GPU_VOLTAGE.name, (*bus, ("sensor", sensor)))] = volts
    if t.vram_bad_pages is not None:
        for status in ("retired", "pending", "failed"):
            out[(names.GPU_VRAM_BAD_PAGES.name, (*bus, ("status", status)))] = getattr(t.vram_bad_pages, status)
    if partition is not None:
        labels = (("compute_partition", partition[0]), ("memory_partition", partition[1]), *bus)
        out[(names.GPU_PARTITION_MODE.name, labels)] = 1.0
    return out


def test_once_on_the_mi300x_root_exports_every_reading_per_gpu(tmp_path: Path) -> None:
    text = run_once(mi300x_root(tmp_path))
    check_metrics(text)
    expected = {
        **expected_samples(MI300X_A, MI300X_A_TELEMETRY, ("DPX", "NPS2")),
        **expected_samples(MI300X_B, MI300X_B_TELEMETRY, ("SPX", "NPS1")),
    }
    assert telemetry_samples(text) == expected
    # spot checks in the units Prometheus sees, independent of the helper above
    assert 'rocm_gpu_clock_hertz{domain="sclk",pci_bus="0000:05:00.0"} 1.9e+07' in text
    assert 'rocm_gpu_vram_bad_pages{pci_bus="0000:05:00.0",status="retired"} 2.0' in text
    assert 'rocm_gpu_vram_bad_pages{pci_bus="0000:15:00.0",status="retired"} 0.0' in text
    assert 'rocm_gpu_pcie_replays_total{pci_bus="0000:15:00.0"} 17.0' in text
    assert 'pci_bus="0000:05:00.1"' in text  # the partition is a GPU (rocm_gpu_info) ...
    assert not any(labels == (("pci_bus", MI300X_A_PART),) for _, labels in telemetry_samples(text))  # ... with none
    # an MI300X has no fan, no PWM, no voltage rails and no dcefclk: no series, not a 0
    assert "rocm_gpu_fan_speed_rpm{" not in text and "rocm_gpu_fan_pwm_ratio{" not in text
    assert "rocm_gpu_voltage_volts{" not in text and 'domain="dcefclk"' not in text


def test_once_on_the_radeon_root_exports_only_what_it_has(tmp_path: Path) -> None:
    text = run_once(radeon_root(tmp_path))
    check_metrics(text)
    assert telemetry_samples(text) == expected_samples(RADEON, RADEON_TELEMETRY, None)
    assert 'rocm_gpu_fan_pwm_ratio{pci_bus="0000:0b:00.0"} 0.30196078431372547' in text
    assert 'rocm_gpu_voltage_volts{pci_bus="0000:0b:00.0",sensor="vddgfx"} 0.812' in text
    # no RAS directory, no partition files, no fclk/socclk/dcefclk table, no starred dclk level
    for absent in ("rocm_gpu_vram_bad_pages{", "rocm_gpu_partition_mode_info{", 'domain="fclk"', 'domain="dclk"'):
        assert absent not in text
    # the families are still described, so a dashboard query never meets an unknown name
    assert "# TYPE rocm_gpu_vram_bad_pages gauge" in text
