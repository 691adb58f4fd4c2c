"""What this build is: version, git revision and branch, build date, Python version and platform.

``--version`` prints it as node_exporter does and ``rocm_watchdog_build_info`` carries it as labels. The revision,
branch and date come from ``exporter/_build.py`` when the package build wrote one (``exporter/_buildhook.py``:
``pip install .`` from a checkout, the image build), else from the git metadata of the checkout the code runs
from (``exporter/_gitrev.py``), else ``unknown``.
"""

from __future__ import annotations

import functools
import platform
import sys
from pathlib import Path

import msgspec

from exporter._gitrev import UNKNOWN, git_revision


class BuildInfo(msgspec.Struct, frozen=True):
    version: str
    revision: str
    branch: str
    build_date: str
    python_version: str  # e.g. 3.11.14
    python_implementation: str  # CPython, PyPy
    platform: str  # linux/x86_64, as Go's GOOS/GOARCH

    def version_text(self, program: str = "rocm-watchdog") -> str:
        """The ``--version`` text, node_exporter's layout."""
        return (
            f"{program}, version {self.version} (branch: {self.branch}, revision: {self.revision})\n"
            f"  build date:       {self.build_date}\n"
            f"  python version:   {self.python_version} ({self.python_implementation})\n"
            f"  platform:         {self.platform}\n"
        )


@functools.cache
def build_info() -> BuildInfo:
    from exporter import __version__

    try:
        from exporter import _build  # type: ignore[attr-defined,unused-ignore]  # written by the package build

        revision, branch, date = str(_build.REVISION), str(_build.BRANCH), str(_build.BUILD_DATE)
    except ImportError:
        revision, branch = git_revision(Path(__file__).resolve().parent.parent)
        date = UNKNOWN
    return BuildInfo(
        version=__version__,
        revision=revision,
        branch=branch,
        build_date=date,
        python_version=platform.python_version(),
        python_implementation=platform.python_implementation(),
        platform=f"{sys.platform}/{platform.machine() or UNKNOWN}",
    )


__all__ = ["UNKNOWN", "BuildInfo", "build_info", "git_revision"]
