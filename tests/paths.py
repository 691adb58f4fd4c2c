"""Where the tests find the shared captures: ``../shared`` beside the project root (the layout every checkout
and CI run has), overridable with ROCM_WATCHDOG_SHARED."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
_CANDIDATES = [Path(p) for p in (os.environ.get("ROCM_WATCHDOG_SHARED"),) if p] + [
    PROJECT.parent / "shared",
    Path("/work/shared"),  # the workplace's copy, for a checkout made elsewhere (e.g. a clone in a temp dir)
]
SHARED = next((p for p in _CANDIDATES if (p / "fixtures").is_dir()), _CANDIDATES[0])
FIXTURES = SHARED / "fixtures"
DATA = Path(__file__).parent / "data"

if not FIXTURES.is_dir():
    raise RuntimeError(f"shared captures not found in {', '.join(map(str, _CANDIDATES))}: set ROCM_WATCHDOG_SHARED")
