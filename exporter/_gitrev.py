"""The git revision and branch of a checkout, read from its .git files: no ``git`` process, no cost worth measuring.

Nothing here imports the package or anything outside the standard library: the package build loads this file on
its own (exporter/_buildhook.py), in an environment that has setuptools only.
"""

from __future__ import annotations

import re
from pathlib import Path

UNKNOWN = "unknown"
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


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
