"""The tests' fake host builder: the package's (``exporter/fakehost/builder.py``), which also finds the shared
KFD topology captures here by name (``capture_gpus("mi210-8gpu-xgmi-pcie")``)."""

from __future__ import annotations

from paths import FIXTURES

from exporter.fakehost import builder
from exporter.fakehost.builder import *  # noqa: F403

KFD_CAPTURES = FIXTURES / "sysfs" / "kfd-topology"
if KFD_CAPTURES not in builder.KFD_CAPTURE_DIRS:
    builder.KFD_CAPTURE_DIRS.append(KFD_CAPTURES)
