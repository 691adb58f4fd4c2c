"""Small pure helpers the tool parsers share."""

from __future__ import annotations

import re

# Values the tools print for "could not read": never 0, always None.
MISSING_VALUES = frozenset({"", "n/a", "na", "unknown", "not supported", "none", "xxxx", "-"})

_BDF = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$")


def is_missing(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in MISSING_VALUES)


def normalize_bdf(value: str | None) -> str | None:
    """``0000:1E:00.0`` / ``1e:00.0`` -> ``0000:1e:00.0``; None for anything that is not a BDF."""
    if value is None:
        return None
    m = _BDF.match(value.strip())
    if not m:
        return None
    domain = int(m["domain"], 16) if m["domain"] else 0
    return f"{domain:04x}:{m['bus'].lower()}:{m['dev'].lower()}.{m['fn']}"


def parse_int(value: object) -> int | None:
    """Decimal or 0x-hex integer, None for a missing or unparsable value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if not isinstance(value, str) or is_missing(value):
        return None
    text = value.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


_UNIQUE_ID = re.compile(r"^(?:0[xX])?(?P<hex>[0-9a-fA-F]{1,16})$")


def unique_id_form(value: object) -> str | None:
    """A GPU unique id in any form the tools print -> the canonical form (``hex(int)``, lower case, no leading
    zeros), the one the sysfs source and the baseline use (``parsers.sysfs.canonical_unique_id``).

    ``0x5A4AD1C2A8BA3E1F``, ``0x5a4ad1c2a8ba3e1f``, bare ``5a4ad1c2a8ba3e1f`` (older rocm-smi JSON) and amdgpu's
    zero-padded ``%016llx`` all give ``0x5a4ad1c2a8ba3e1f``. N/A and the like are None; so is 0 (KFD's "none").
    Anything else (more than 16 hex digits, not hex) is not a unique id: None, and the caller warns.
    """
    if not isinstance(value, str) or is_missing(value):
        return None
    m = _UNIQUE_ID.match(value.strip())
    if m is None:
        return None
    number = int(m["hex"], 16)
    return hex(number) if number else None
