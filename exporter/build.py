"""What this build is: version, git revision and branch, build date, Python version and platform.

``--version`` prints it as node_exporter does and ``rocm_watchdog_build_info`` carries it as labels. The revision,
branch and date come from ``exporter/_build.py`` when the package build wrote one (``exporter/_buildhook.py``:
``pip install .`` from a checkout, the image build), else from the git metadata of the checkout the code runs
from (read as files: no ``git`` process, no cost worth measuring), else ``unknown``.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# No import of the package here: the package build loads this file on its own (exporter/_buildhook.py).
UNKNOWN = "unknown"
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


@dataclass(frozen=True, slots=True)
class BuildInfo:
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


def git_revision(checkout: Path) -> tuple[str, str]:
    """(revision, branch) of the checkout at ``checkout`` from its .git files; ``unknown`` where unreadable.
    A detached HEAD has the branch ``HEAD``, as ``git rev-parse --abbrev-ref HEAD`` says."""
    try:
        git = checkout / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            pointer = git.read_text().strip()
            if not pointer.startswith("gitdir:"):
                return UNKNOWN, UNKNOWN
            git = (checkout / pointer.removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if _SHA.fullmatch(head):
            return head, "HEAD"
        if not head.startswith("ref: "):
            return UNKNOWN, UNKNOWN
        ref = head.removeprefix("ref: ")
        branch = ref.removeprefix("refs/heads/")
        common = git
        if (git / "commondir").is_file():  # worktrees keep refs in the main repository
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            loose = base / ref
            if loose.is_file():
                sha = loose.read_text().strip()
                return (sha if _SHA.fullmatch(sha) else UNKNOWN), branch
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and _SHA.fullmatch(sha):
                    return sha, branch
        return UNKNOWN, branch  # a branch without a commit yet
    except (OSError, UnicodeDecodeError):
        return UNKNOWN, UNKNOWN


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
