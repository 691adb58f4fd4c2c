"""The package build's hook (``[tool.setuptools.cmdclass]`` in pyproject.toml): writes ``exporter/_build.py``
with the git revision, branch and build date into the built package, never into the checkout; and copies the
shipped alert rules and Alertmanager example (``alerts/``, ``ALERT_FILES``) to ``exporter/data/alerts`` in it, for
``rocm-watchdog demo --with-prometheus`` in an installed package.

Used only while building; the installed package imports ``exporter._build``, not this. The values come from the
environment when the build gives them (``ROCM_WATCHDOG_REVISION``, ``ROCM_WATCHDOG_BRANCH``,
``SOURCE_DATE_EPOCH`` for a reproducible date), else from the checkout's git metadata, else ``unknown``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools.command.build_py import build_py as _build_py  # type: ignore[import-untyped,unused-ignore]


def _gitrev() -> ModuleType:
    """exporter/_gitrev.py, loaded by its path: setuptools loads this hook by path too, the package it belongs to
    is not importable while it is being built, and its dependencies (msgspec) are not installed where it is."""
    path = Path(__file__).resolve().parent / "_gitrev.py"
    spec = importlib.util.spec_from_file_location("_rocm_watchdog_gitrev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_module(source_root: Path, environ: dict[str, str] | None = None) -> str:
    env = dict(os.environ if environ is None else environ)
    gitrev = _gitrev()
    revision, branch = gitrev.git_revision(source_root)
    revision = env.get("ROCM_WATCHDOG_REVISION") or revision
    branch = env.get("ROCM_WATCHDOG_BRANCH") or branch
    epoch = env.get("SOURCE_DATE_EPOCH")
    try:
        built = float(epoch) if epoch else time.time()
        date = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime(built))
    except ValueError:
        date = gitrev.UNKNOWN
    return (
        '"""Written by the package build (exporter/_buildhook.py); not in the repository."""\n\n'
        f"REVISION = {revision!r}\nBRANCH = {branch!r}\nBUILD_DATE = {date!r}\n"
    )


ALERT_FILES = ("rocm-watchdog.rules.yml", "alertmanager.example.yml")


class BuildPy(_build_py):  # type: ignore[misc,unused-ignore]
    def run(self) -> None:
        super().run()
        source_root = Path(__file__).resolve().parent.parent
        target = Path(self.build_lib) / "exporter" / "_build.py"
        if not self.dry_run and target.parent.is_dir():
            target.write_text(build_module(source_root))
            alerts = target.parent / "data" / "alerts"
            for name in ALERT_FILES:
                if (source_root / "alerts" / name).is_file():  # an sdist made without alerts/ builds without them
                    alerts.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source_root / "alerts" / name, alerts / name)

    def get_outputs(self, *args: Any, **kwargs: Any) -> list[str]:
        outputs: list[str] = list(super().get_outputs(*args, **kwargs))
        alerts = Path(self.build_lib) / "exporter" / "data" / "alerts"
        return [*outputs, str(Path(self.build_lib) / "exporter" / "_build.py"), *(str(alerts / n) for n in ALERT_FILES)]
