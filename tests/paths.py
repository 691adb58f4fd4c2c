"""Where the tests find the shared captures: ``../shared`` beside the project root (the layout every checkout
and CI run has), overridable with ROCM_WATCHDOG_SHARED."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ROCM_WATCHDOG_SHARED", PROJECT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
DATA = Path(__file__).parent / "data"

if not FIXTURES.is_dir():
    raise RuntimeError(f"shared captures not found at {FIXTURES}: check out the project beside ../shared")
