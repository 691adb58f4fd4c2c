"""The pure sysfs parsers, on the formats of sysfs-devfs.md and on every real KFD capture."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paths import FIXTURES

from exporter.model import ParseError
from exporter.model.gpu import RasCount
from exporter.parsers import sysfs as p

CAPTURES = FIXTURES / "sysfs" / "kfd-topology"
PROCFS_CARD0 = FIXTURES / "sysfs" / "procfs-drm-amdgpu" / "sys" / "class" / "drm" / "card0" / "device"


def _capture_property_files() -> list[Path]:
    return sorted(CAPTURES.glob("*/nodes/*/properties")) + sorted(CAPTURES.glob("*/topology/nodes/*/properties"))


def test_uevent_of_a_drm_minor_and_a_pci_function() -> None:
    assert p.parse_uevent("MAJOR=226\nMINOR=128\nDEVNAME=dri/renderD128\nDEVTYPE=drm_minor\n") == {
        "MAJOR": "226",
        "MINOR": "128",
        "DEVNAME": "dri/renderD128",
        "DEVTYPE": "drm_minor",
    }
    pci = p.parse_uevent((PROCFS_CARD0 / "uevent").read_text())
    assert pci["DRIVER"] == "amdgpu"
    assert pci["PCI_SLOT_NAME"] == "0000:09:00.0"
    assert pci["MODALIAS"] == "pci:v00001002d0000687Fsv00001043sd000004C4bc03sc00i00"


def test_uevent_garbage_names_the_line() -> None:
    with pytest.raises(ParseError) as err:
        p.parse_uevent("DRIVER=amdgpu\nthis is not a uevent line\n")
    assert err.value.line == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("226:128\n", (226, 128)), ("226:0", (226, 0)), ("510:0\n", (510, 0)), ("226:200\n", (226, 200))],
)
def test_dev(text: str, expected: tuple[int, int]) -> None:
    assert p.parse_dev(text) == expected


@pytest.mark.parametrize("text", ["", "226\n", "226:x\n", "a:b", "226:1\n226:2\n"])
def test_dev_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        p.parse_dev(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16.0 GT/s PCIe\n", 16.0),
        ("8.0 GT/s PCIe\n", 8.0),
        ("2.5 GT/s PCIe", 2.5),
        ("32.0 GT/s PCIe\n", 32.0),
        ("8 GT/s\n", 8.0),  # kernels before 4.17 printed no fraction and no "PCIe"
        ("Unknown\n", None),
        ("Unknown speed\n", None),
        ("\n", None),
    ],
)
def test_link_speed(text: str, expected: float | None) -> None:
    assert p.parse_link_speed(text) == expected


def test_link_speed_garbage() -> None:
    with pytest.raises(ParseError):
        p.parse_link_speed("fast\n")


def test_link_width_zero_is_unknown_not_zero() -> None:
    assert p.parse_link_width("16\n") == 16
    assert p.parse_link_width("0\n") is None


def test_busy_percent_is_a_ratio() -> None:
    assert p.parse_busy_percent("4\n") == 0.04
    assert p.parse_busy_percent("100\n") == 1.0
    assert p.parse_busy_percent("\n") is None
    with pytest.raises(ParseError):
        p.parse_busy_percent("250\n")
    with pytest.raises(ParseError):
        p.parse_busy_percent("busy\n")


def test_hwmon_units() -> None:
    assert p.parse_millidegrees("35000\n") == 35.0
    assert p.parse_millidegrees("-5500\n") == -5.5
    assert p.parse_microwatts("42000000\n") == 42.0
    assert p.parse_microwatts("123456\n") == 0.123456


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ue: 0\nce: 0\n", RasCount("umc", correctable=0, uncorrectable=0)),
        ("ue: 2\nce: 17\nde: 3\n", RasCount("umc", correctable=17, uncorrectable=2, deferred=3)),
        ("ce: 5\nue: 1\n", RasCount("umc", correctable=5, uncorrectable=1)),  # by key, not by position
    ],
)
def test_ras_count(text: str, expected: RasCount) -> None:
    assert p.parse_ras_count("umc", text) == expected


@pytest.mark.parametrize("text", ["", "ue: 0\nce: x\n", "errors: 3\n", "ue: 1\nue: 2\n"])
def test_ras_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        p.parse_ras_count("gfx", text)


def test_unique_id_from_both_sides_is_one_form() -> None:
    # amdgpu prints %016llx, KFD prints the same u64 as %llu.
    assert p.canonical_unique_id("0123456789abcdef\n") == "0x123456789abcdef"
    assert p.unique_id_from_kfd(81985529216486895) == "0x123456789abcdef"
    # MI210 capture, node 2
    assert p.unique_id_from_kfd(1801979520617338022) == "0x1901ead3a2ecd4a6"
    assert p.canonical_unique_id("1901EAD3A2ECD4A6\n") == "0x1901ead3a2ecd4a6"
    assert p.canonical_unique_id("\n") is None
    assert p.unique_id_from_kfd(0) is None
    with pytest.raises(ParseError):
        p.canonical_unique_id("not-an-id\n")


@given(st.integers(min_value=1, max_value=(1 << 64) - 1))
def test_unique_id_sysfs_and_kfd_agree(value: int) -> None:
    assert p.canonical_unique_id(f"{value:016x}\n") == p.unique_id_from_kfd(value)


@pytest.mark.parametrize(
    ("domain", "location", "bdf"),
    [
        (0, 25344, "0000:63:00.0"),  # MI210 node 2
        (0, 768, "0000:03:00.0"),
        (0, 1280, "0000:05:00.0"),  # MI300X CPX partition 0
        (0, 1287, "0000:05:00.7"),  # ... partition 7
        (1, 2816, "0001:0b:00.0"),  # MI308X second socket
        (0, 0x0A09, "0000:0a:01.1"),  # device bits
    ],
)
def test_bdf_from_location(domain: int, location: int, bdf: str) -> None:
    assert p.bdf_from_location(domain, location) == bdf


def test_physical_bdf_clears_the_partition_bits() -> None:
    assert p.physical_bdf("0000:05:00.7") == "0000:05:00.0"
    assert p.physical_bdf("0001:0b:00.0") == "0001:0b:00.0"
    with pytest.raises(ParseError):
        p.physical_bdf("05:00.7")


def test_kfd_properties_parse_by_key_and_keep_u64() -> None:
    props = p.parse_kfd_properties(
        (CAPTURES / "mi210-8gpu-xgmi-pcie" / "topology" / "nodes" / "2" / "properties").read_text()
    )
    assert props["drm_render_minor"] == 128
    assert props["location_id"] == 25344
    assert props["hive_id"] == 12609507387757274807
    assert props["unique_id"] == 1801979520617338022
    node = p.kfd_node_from_properties(2, props, gpu_id=None, name=None)
    assert node is not None
    assert (node.pci_bus, node.render_minor, node.unique_id, node.device_id) == (
        "0000:63:00.0",
        128,
        "0x1901ead3a2ecd4a6",
        "0x740f",
    )


def test_kfd_properties_garbage_names_the_line() -> None:
    with pytest.raises(ParseError) as err:
        p.parse_kfd_properties("simd_count 4\nlocation_id\n")
    assert err.value.line == 2


def test_kfd_old_kernel_without_domain_is_segment_0() -> None:
    props = p.parse_kfd_properties((CAPTURES / "mi25-1gpu-plus-copy" / "nodes" / "1" / "properties").read_text())
    assert "domain" not in props
    node = p.kfd_node_from_properties(1, props, gpu_id=13261, name=None)
    assert node is not None
    assert (node.pci_bus, node.domain, node.render_minor, node.gpu_id, node.device_id) == (
        "0000:19:00.0",
        None,
        128,
        13261,
        "0x6860",
    )


def test_kfd_cpu_node_is_none() -> None:
    props = p.parse_kfd_properties((CAPTURES / "mi308x-cpx-2socket" / "nodes" / "0" / "properties").read_text())
    assert p.kfd_node_from_properties(0, props, gpu_id=0, name=None) is None


@pytest.mark.parametrize("path", _capture_property_files(), ids=lambda x: str(x.relative_to(CAPTURES)))
def test_every_captured_kfd_node_parses(path: Path) -> None:
    props = p.parse_kfd_properties(path.read_text())
    node = p.kfd_node_from_properties(int(path.parent.name), props, gpu_id=None, name=None)
    if props["simd_count"] == 0:
        assert node is None
        return
    assert node is not None
    assert node.render_minor is not None and 128 <= node.render_minor <= 191
    assert node.pci_bus is not None and node.pci_bus.endswith(f".{props['location_id'] & 7}")
    assert node.unique_id is not None and node.unique_id.startswith("0x")


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [("vendor", "0x1002\n", "0x1002"), ("device", "0x74A1\n", "0x74a1"), ("device", "0x6860", "0x6860")],
)
def test_hex_id(name: str, text: str, expected: str) -> None:
    assert p.parse_hex_id(text, name) == expected


def test_int_value() -> None:
    assert p.parse_int_value("8573157376\n") == 8573157376
    assert p.parse_int_value("-1\n") == -1
    assert p.parse_int_value("") is None
    with pytest.raises(ParseError):
        p.parse_int_value("12 MB\n")


@given(st.text(max_size=200))
def test_parsers_raise_only_parse_error(text: str) -> None:
    for parse in (
        p.parse_uevent,
        p.parse_dev,
        p.parse_link_speed,
        p.parse_busy_percent,
        p.parse_kfd_properties,
        p.canonical_unique_id,
        p.parse_int_value,
        lambda t: p.parse_ras_count("umc", t),
    ):
        with contextlib.suppress(ParseError):
            parse(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a connector (netdata#12616 shows the form): one key
        ("DEVTYPE=drm_connector\n", {"DEVTYPE": "drm_connector"}),
        # the ttm virtual device of older kernels (radeon-profile#46): an empty file
        ("", {}),
        # an amdgpu_xcp platform device (k8s-device-plugin#157): not bound, so no DRIVER
        ("MODALIAS=platform:amdgpu_xcp\n", {"MODALIAS": "platform:amdgpu_xcp"}),
        # a VGA-class function (level-zero#69 shows the form): PCI_CLASS in %X, colons inside values
        (
            "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_ID=1002:73BF\nPCI_SUBSYS_ID=1DA2:E438\nPCI_SLOT_NAME=0000:0b:00.0\n"
            "MODALIAS=pci:v00001002d000073BFsv00001DA2sd0000E438bc03sc00i00\n",
            {
                "DRIVER": "amdgpu",
                "PCI_CLASS": "30000",
                "PCI_ID": "1002:73BF",
                "PCI_SUBSYS_ID": "1DA2:E438",
                "PCI_SLOT_NAME": "0000:0b:00.0",
                "MODALIAS": "pci:v00001002d000073BFsv00001DA2sd0000E438bc03sc00i00",
            },
        ),
        # kfd's char device
        ("MAJOR=234\nMINOR=0\nDEVNAME=kfd\n", {"MAJOR": "234", "MINOR": "0", "DEVNAME": "kfd"}),
    ],
)
def test_uevent_forms_seen_in_the_wild(text: str, expected: dict[str, str]) -> None:
    assert p.parse_uevent(text) == expected


def test_pci_class_file_is_a_hex_id() -> None:
    # a bridge (class 0x060400) and a display controller, as the on-card switch walk reads them
    assert p.parse_hex_id("0x060400\n") == "0x60400"
    assert p.parse_hex_id("0x038000\n") == "0x38000"
