"""Pure parsers for the sysfs files of amdgpu, DRM and the KFD topology.

Text in, values out; no I/O. Every function raises only ``ParseError`` for text it does not understand.
A value the kernel prints for "unknown" (empty file, ``Unknown``) is ``None``, never 0. So is a reading
outside the physical range of its quantity (a negative clock, a 1e17 degree sensor): that is a firmware or
sensor glitch, not text the parser fails to understand, and exporting it would be a made-up value
(``parse_busy_percent`` predates this and raises ``ParseError``, which the source turns into None too). Formats
are those of sysfs-devfs.md sections 1.1 and 2, checked against the captures in shared/fixtures/sysfs; the
telemetry formats (pp_dpm_*, hwmon, ras/gpu_vram_bad_pages) are those amdgpu_pm.c, the swsmu ppt files and
amdgpu_ras.c print.
"""

from __future__ import annotations

import re

from exporter.model import ParseError
from exporter.model.gpu import KfdNode, RasCount, VramBadPages
from exporter.parsers.common import is_missing

_INT = re.compile(r"^-?[0-9]+$")
_DEV = re.compile(r"^([0-9]+):([0-9]+)$")
_LINK_SPEED = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*GT/s(?:\s+PCIe)?$", re.IGNORECASE)
_HEX_ID = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_RAS_LINE = re.compile(r"^(ue|ce|de)\s*:\s*(-?[0-9]+)$")
# pp_dpm_<clk>: "%d: %uMhz %s" (the current level starred, trailing space otherwise, or none at all), plus a
# lettered level on newer SMU code: "S: %uMhz *" (deep sleep, below level 0), "F: %uMhz *" (the actual clock
# between the levels of a fine-grained domain).
_DPM_LEVEL = re.compile(r"^([0-9]+|[A-Za-z]):\s*(-?[0-9]+)\s*[Mm][Hh][Zz]\s*(\*)?$")
# ras/gpu_vram_bad_pages: "0x%08x : 0x%08x : %1s" = page frame : page size : R|P|F, one line per page.
_BAD_PAGE = re.compile(r"^0x[0-9a-fA-F]{1,16}\s*:\s*0x[0-9a-fA-F]{1,16}\s*:\s*([A-Za-z])$")
_BAD_PAGE_FLAGS = {"R": "retired", "P": "pending", "F": "failed"}

# Physical ranges: a reading outside is a glitch and is None. Generous on purpose: they reject garbage,
# not unusual hardware (an MI355X board draws 1.4 kW, a board-input rail is 12 V, fans stop at 0 RPM).
_CELSIUS = (-100.0, 300.0)
_WATTS = (0.0, 10_000.0)
_MAX_MHZ = 20_000  # no amdgpu clock domain runs near 20 GHz
_VOLTS = (0.0, 60.0)
_MAX_RPM = 50_000
_MAX_U64 = (1 << 64) - 1


def _single_line(text: str, what: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        raise ParseError(f"{what}: expected one line, got {len(lines)}", line=2)
    return lines[0].strip() if lines else ""


def parse_int_value(text: str, what: str = "value") -> int | None:
    """A decimal sysfs integer (``8573157376\\n``, ``-1``); None for an empty file."""
    value = _single_line(text, what)
    if is_missing(value):
        return None
    if not _INT.match(value):
        raise ParseError(f"{what}: not an integer: {value[:40]!r}", line=1)
    return int(value)


def parse_hex_id(text: str, what: str = "id") -> str | None:
    """A PCI id file (``0x740f``) -> ``"0x740f"`` lower-case, 4 digits at least; None for an empty file."""
    value = _single_line(text, what)
    if is_missing(value):
        return None
    m = _HEX_ID.match(value)
    if not m:
        raise ParseError(f"{what}: not a hex id: {value[:40]!r}", line=1)
    return f"0x{int(m[1], 16):04x}"


def parse_string(text: str) -> str | None:
    """A one-line string attribute (product_name, vbios_version, current_compute_partition); None if empty."""
    value = text.strip()
    return None if is_missing(value) else value


def parse_uevent(text: str) -> dict[str, str]:
    """``KEY=value`` lines (DRM minor, PCI function, kfd uevent). Blank lines are skipped."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise ParseError(f"uevent: not KEY=value: {line[:60]!r}", line=number)
        out[key] = value
    return out


def parse_dev(text: str) -> tuple[int, int]:
    """A ``dev`` attribute, ``226:128\\n`` -> (226, 128)."""
    value = _single_line(text, "dev")
    m = _DEV.match(value)
    if not m:
        raise ParseError(f"dev: not major:minor: {value[:40]!r}", line=1)
    return int(m[1]), int(m[2])


def parse_link_speed(text: str) -> float | None:
    """``16.0 GT/s PCIe`` (or ``8 GT/s`` on old kernels) -> 16.0 GT/s; ``Unknown`` / empty -> None."""
    value = _single_line(text, "link speed")
    if is_missing(value) or value.lower().startswith("unknown"):
        return None
    m = _LINK_SPEED.match(value)
    if not m:
        raise ParseError(f"link speed: not 'N GT/s': {value[:40]!r}", line=1)
    return float(m[1])


def parse_link_width(text: str) -> int | None:
    """``16`` -> 16; 0 is what the PCI core prints when the link is down or unknown, so it is None."""
    width = parse_int_value(text, "link width")
    return None if width is None or width <= 0 else width


def parse_busy_percent(text: str) -> float | None:
    """``gpu_busy_percent`` (0..100) -> a 0..1 ratio."""
    value = parse_int_value(text, "busy percent")
    if value is None:
        return None
    if not 0 <= value <= 100:
        raise ParseError(f"busy percent out of range: {value}", line=1)
    return value / 100.0


def _in_range(value: float | None, low: float, high: float) -> float | None:
    return value if value is not None and low <= value <= high else None


def parse_millidegrees(text: str) -> float | None:
    """hwmon ``tempN_input`` in millidegrees Celsius -> degrees Celsius; None outside -100..300 C."""
    value = parse_int_value(text, "temperature")
    return _in_range(None if value is None else value / 1000.0, *_CELSIUS)


def parse_microwatts(text: str) -> float | None:
    """hwmon ``powerN_average`` / ``powerN_input`` / ``power1_cap*`` in microwatts -> watts; None outside
    0..10 kW."""
    value = parse_int_value(text, "power")
    return _in_range(None if value is None else value / 1_000_000.0, *_WATTS)


def parse_millivolts(text: str) -> float | None:
    """hwmon ``inN_input`` (vddgfx, vddnb, vddboard) in millivolts -> volts; None outside 0..60 V."""
    value = parse_int_value(text, "voltage")
    return _in_range(None if value is None else value / 1000.0, *_VOLTS)


def parse_hwmon_hertz(text: str) -> float | None:
    """hwmon ``freqN_input`` (sclk, mclk), already in hertz; None outside 0..20 GHz."""
    value = parse_int_value(text, "frequency")
    return _in_range(None if value is None else float(value), 0.0, _MAX_MHZ * 1e6)


def parse_fan_rpm(text: str) -> int | None:
    """hwmon ``fan1_input`` in RPM (0 is a stopped fan, zero-RPM mode); None outside 0..50000."""
    value = parse_int_value(text, "fan speed")
    return value if value is not None and 0 <= value <= _MAX_RPM else None


def parse_pwm_ratio(text: str) -> float | None:
    """hwmon ``pwm1`` duty cycle 0..255 -> 0..1; None outside 0..255."""
    value = parse_int_value(text, "pwm")
    return value / 255.0 if value is not None and 0 <= value <= 255 else None


def parse_u64(text: str, what: str = "value") -> int | None:
    """A count or size that cannot be negative (``mem_info_gtt_used``, ``pcie_replay_count``); None outside
    the u64 range the kernel prints it from."""
    value = parse_int_value(text, what)
    return value if value is not None and 0 <= value <= _MAX_U64 else None


def parse_dpm_clock_hz(text: str) -> float | None:
    """A ``pp_dpm_<clk>`` level table (``0: 852Mhz *``, ``1: 991Mhz``) -> the current clock in hertz.

    The current level is the starred one. A starred lettered level (``S:`` deep sleep, ``F:`` fine-grained)
    is the actual clock and wins over a starred numbered one; of several starred numbered levels (MI300's
    SMU stars both ends when they are within its 25 MHz tolerance of the clock) the first is taken. None
    when no level is starred (the clock matches no level), for an empty file, and below 0 or above 20 GHz.
    """
    numbered: int | None = None
    lettered: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        m = _DPM_LEVEL.match(line)
        if not m:
            raise ParseError(f"pp_dpm: not 'N: <MHz>Mhz [*]': {line[:60]!r}", line=number)
        if m[3] is None:
            continue
        mhz = int(m[2])
        if m[1].isdigit():
            numbered = mhz if numbered is None else numbered
        else:
            lettered = mhz if lettered is None else lettered
    current = lettered if lettered is not None else numbered
    return current * 1e6 if current is not None and 0 <= current <= _MAX_MHZ else None


def parse_vram_bad_pages(text: str) -> VramBadPages:
    """``ras/gpu_vram_bad_pages``: one ``0x<pfn> : 0x<size> : <flag>`` line per page, flag R (retired), P
    (pending) or F (failed to retire). An empty file is no bad page at all."""
    counts = dict.fromkeys(_BAD_PAGE_FLAGS.values(), 0)
    # a binary attribute: stray NULs past the last line are not content
    for number, raw in enumerate(text.replace("\0", "").splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        m = _BAD_PAGE.match(line)
        if not m:
            raise ParseError(f"gpu_vram_bad_pages: not '0x<pfn> : 0x<size> : R|P|F': {line[:60]!r}", line=number)
        status = _BAD_PAGE_FLAGS.get(m[1])
        if status is None:
            raise ParseError(f"gpu_vram_bad_pages: unknown flag {m[1]!r}", line=number)
        counts[status] += 1
    return VramBadPages(**counts)


def parse_ras_count(block: str, text: str) -> RasCount:
    """``ras/<block>_err_count``: ``ue: N\\nce: N`` and on newer kernels ``de: N``, parsed by key."""
    values: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        m = _RAS_LINE.match(line)
        if not m:
            raise ParseError(f"ras {block}: not 'ue|ce|de: N': {line[:60]!r}", line=number)
        if m[1] in values:
            raise ParseError(f"ras {block}: {m[1]} given twice", line=number)
        values[m[1]] = int(m[2])
    if not values:
        raise ParseError(f"ras {block}: empty counter file")
    return RasCount(
        block=block, correctable=values.get("ce"), uncorrectable=values.get("ue"), deferred=values.get("de")
    )


def canonical_unique_id(text: str) -> str | None:
    """amdgpu ``unique_id`` (``%016llx``: ``0123456789abcdef``) -> ``0x123456789abcdef`` (hex(int), lower-case).

    None for an empty file. The form is the one KFD's decimal unique_id maps to (``unique_id_from_kfd``).
    """
    value = _single_line(text, "unique_id")
    if is_missing(value):
        return None
    m = _HEX_ID.match(value)
    if not m:
        raise ParseError(f"unique_id: not 1..16 hex digits: {value[:40]!r}", line=1)
    return hex(int(m[1], 16))


def unique_id_from_kfd(value: int) -> str | None:
    """KFD's ``unique_id`` (``%llu``, the same u64 as amdgpu's) -> the canonical form; 0 means none."""
    if value <= 0:
        return None
    if value >= 1 << 64:
        raise ParseError(f"unique_id larger than 64 bits: {value}")
    return hex(value)


def parse_kfd_properties(text: str) -> dict[str, int]:
    """A KFD topology ``properties`` file: ``key value`` lines, values decimal (u64 for hive_id/unique_id).

    Parsed by key, never by position: the key set differs between kernels.
    """
    out: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        parts = raw.split()
        if not parts:
            continue
        # split + isdigit instead of a regex: this runs for every node of a 64-partition host each interval
        digits = parts[1][1:] if len(parts) == 2 and parts[1][:1] == "-" else parts[-1]
        if len(parts) != 2 or not (digits.isascii() and digits.isdigit()):
            raise ParseError(f"kfd properties: not 'key integer': {raw.strip()[:60]!r}", line=number)
        out[parts[0]] = int(parts[1])
    return out


def bdf_from_location(domain: int, location_id: int) -> str:
    """KFD ``domain`` + ``location_id`` -> ``dddd:bb:dd.f``. The function bits carry a partition's index."""
    if domain < 0 or location_id < 0 or location_id > 0xFFFF:
        raise ParseError(f"kfd location out of range: domain {domain}, location_id {location_id}")
    bus = (location_id >> 8) & 0xFF
    dev = (location_id >> 3) & 0x1F
    fn = location_id & 0x7
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def physical_bdf(bdf: str) -> str:
    """A partition's BDF -> the PCI function of its physical GPU (function bits cleared)."""
    if not _BDF.match(bdf):
        raise ParseError(f"not a lower-case BDF: {bdf!r}")
    return bdf[:-1] + "0"


def kfd_node_from_properties(node: int, props: dict[str, int], gpu_id: int | None, name: str | None) -> KfdNode | None:
    """One topology node -> ``KfdNode``; None for a CPU node (``simd_count`` 0).

    A GPU node without ``location_id`` or ``drm_render_minor`` keeps those fields None.
    """
    simd = props.get("simd_count")
    if simd is None:
        raise ParseError(f"kfd node {node}: no simd_count key")
    if simd <= 0:
        return None
    location = props.get("location_id")
    domain = props.get("domain")
    # Kernels before the domain key (4.x-5.x) only had PCI segment 0 in practice.
    pci_bus = bdf_from_location(domain or 0, location) if location is not None else None
    device = props.get("device_id")
    render = props.get("drm_render_minor")
    uid = props.get("unique_id")
    return KfdNode(
        node=node,
        gpu_id=gpu_id,
        render_minor=render if render is not None and render > 0 else None,
        pci_bus=pci_bus,
        unique_id=unique_id_from_kfd(uid) if uid is not None else None,
        device_id=f"0x{device:04x}" if device else None,
        domain=domain,
        location_id=location,
        name=name,
        gfx_target_version=props.get("gfx_target_version") or None,
    )
