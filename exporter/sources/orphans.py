"""No tool outlives the exporter: the parent-death signal of each tool, and the descendants it leaves behind.

Two holes of a process-group kill, closed here for ``serve``:

- **The exporter killed by SIGKILL** (the OOM killer, ``kill -9``, a container runtime's last resort) runs no code:
  a tool it started would run on. Each tool is started through ``setpriv --pdeathsig KILL`` (util-linux, in every
  Debian and in the image), which asks the kernel for SIGKILL when the tool's parent goes, then execs the tool
  (the request survives exec). The kernel tracks the *thread* that forked: a tool started by a thread that ends
  is killed with it, or never when the request comes after that thread ended. Every tool is therefore forked by
  one thread that lives as long as the process (``runner._Forker``). A request made after the exporter died never
  fires either (setpriv does not check): a shell between setpriv and the tool (``PARENT_CHECK``) execs the tool
  only when its parent is still the exporter. Cost: two more execs per run (setpriv measured in BENCHMARKS.md;
  the shell not yet).
- **A helper that put itself in a session of its own** (``setsid``, a double fork) is out of the tool's group and
  is not reached by the group kill. ``serve`` makes the exporter a child subreaper (``PR_SET_CHILD_SUBREAPER``):
  an orphaned descendant of a tool is re-parented to the exporter instead of init, and after each tool run the
  runner kills and reaps every child of the exporter that is not a tool it is running (``kill_orphans``), logged
  as ``orphan_killed``.

What neither reaches: a helper whose parent tool is still alive when the exporter is SIGKILLed. The tool dies by
its parent-death signal, the helper is then re-parented to the next subreaper up (init, or the container's), and
nothing is left in the exporter to kill it; a tool's own helpers are gone only when they were started as direct
children in its group and the exporter was there to kill the group.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from exporter.logging import get_logger

log = get_logger("runner")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36
REAP_WAIT_SECONDS = 0.5  # how long to wait for a killed orphan to go (D state: reaped at a later run)
# Run by the shell setpriv execs, after the parent-death signal is set: setpriv does not look whether the parent
# is still there, and a request made after it died never fires (an exporter SIGKILLed between the fork and the
# prctl). The tool is exec'd only when its parent is still the exporter (its pid, $1), else it is not run at all.
PARENT_CHECK = '[ "$PPID" = "$1" ] || exit 137; shift; exec "$@"'
MAX_ROUNDS = 8  # an orphan's own children are re-parented when it dies: looked for again, a bounded number of times

_subreaper = False
_setpriv: str | None = None
_setpriv_looked = False
_setpriv_lock = threading.Lock()


def _libc() -> Any:
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (serve, once, before the first tool)."""
    global _subreaper
    libc = _libc()
    try:
        ok = libc is not None and libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except AttributeError:  # no prctl: not Linux
        ok = False
    _subreaper = ok
    if not ok:
        log.warning("subreaper_unavailable", reason="prctl(PR_SET_CHILD_SUBREAPER) failed")
    return ok


def is_subreaper() -> bool:
    return _subreaper


def setpriv() -> str | None:
    """The setpriv binary, looked for once; None when it is not installed (tools then run without the
    parent-death signal, said once as ``pdeathsig_unavailable``)."""
    global _setpriv, _setpriv_looked
    # Under the lock, and looked set only once the answer is there: the first runs of the smi sources start at
    # once in two threads, and the second used to read "looked for" before the first had found it, and so ran its
    # tool without the parent-death signal (left behind by a SIGKILLed exporter).
    with _setpriv_lock:
        if not _setpriv_looked:
            _setpriv = shutil.which("setpriv") or next(
                (p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.access(p, os.X_OK)), None
            )
            _setpriv_looked = True
            if _setpriv is None:
                reason = "setpriv (util-linux) not found: a SIGKILLed exporter leaves a running tool behind"
                log.warning("pdeathsig_unavailable", reason=reason)
        return _setpriv


def with_pdeathsig(argv: tuple[str, ...], env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], str | None]:
    """``argv`` run under ``setpriv --pdeathsig KILL``, and the error Popen would have raised for a program that
    cannot be started (setpriv would only exit 127 and say so on stderr). ``env``: the tool's environment, whose
    PATH finds a bare name as Popen would."""
    wrapper = setpriv()
    if wrapper is None:
        return argv, None
    program = argv[0]
    resolved = shutil.which(program, path=os.pathsep.join(os.get_exec_path(env)))
    if resolved is None:
        path = Path(program)
        exists = os.sep in program and path.exists()
        return argv, f"{'Permission denied' if exists else 'No such file or directory'}: {program}"
    return (wrapper, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", PARENT_CHECK, "sh", str(os.getpid()), resolved,
            *argv[1:]), None  # fmt: skip


def children() -> set[int]:
    """The pids of this process's children (every thread's: ``/proc/self/task/*/children``)."""
    out: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for task in tasks:
        with contextlib.suppress(OSError):
            out.update(int(pid) for pid in Path(f"/proc/self/task/{task}/children").read_text().split())
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def kill_orphans(ours: Collection[int]) -> list[int]:
    """Kill (SIGKILL) and reap every child of this process not in ``ours`` (the tools running now): descendants of
    tools, re-parented here because the exporter is their subreaper. The caller holds the runner's lock, so no
    tool is being started meanwhile. A no-op unless ``become_subreaper`` succeeded. Returns the pids killed."""
    if not _subreaper:
        return []
    killed: list[int] = []
    for _ in range(MAX_ROUNDS):
        orphans = children() - set(ours)
        if not orphans:
            break
        for pid in sorted(orphans):
            name = _comm(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # it may lead a group of its own (setsid): that whole group
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            log.warning("orphan_killed", pid=pid, process=name, reason="a tool's descendant outlived it")
        deadline = time.monotonic() + REAP_WAIT_SECONDS
        pending = set(orphans)
        while pending and time.monotonic() < deadline:
            for pid in list(pending):
                try:
                    done, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid
                if done:
                    pending.discard(pid)
            if pending:
                time.sleep(0.01)
        if pending:  # in uninterruptible sleep: a later run reaps it
            break
    return killed
