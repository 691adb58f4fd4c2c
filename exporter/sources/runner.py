"""The one place that starts processes.

``run(argv, timeout_seconds, max_bytes)`` starts the program in its own session (so its own process group),
reads stdout and stderr concurrently up to ``max_bytes`` each, and on timeout kills the whole group (a tool
that forks helpers, or a wrapper script, leaves nothing behind). argv only: never a shell.

``stop_all`` (serve's shutdown, on SIGTERM, SIGINT or the shutdown deadline) kills the group of every tool
running and starts no new one, so a signal never leaves a tool behind. Two things no signal can end: a tool
blocked in uninterruptible sleep (D state, e.g. rocm-smi inside a hung GPU's driver) dies only when the kernel
lets it, so the wait for it after SIGKILL is bounded (``KILL_WAIT_SECONDS``, then ``tool_not_gone`` is logged);
and a helper that moved itself to a session of its own is no longer in the group: ``serve`` kills those when it
inherits them (``exporter.sources.orphans``, which also has every tool killed by the kernel when the exporter is
SIGKILLed: ``setpriv --pdeathsig KILL``).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

import msgspec

from exporter.logging import get_logger
from exporter.sources.orphans import kill_orphans, with_pdeathsig

log = get_logger("runner")

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# How long to wait for a killed tool to go: a SIGKILLed process in D state goes only when its syscall returns.
KILL_WAIT_SECONDS = 5.0

# How long stop_all waits for a start in progress (fork + exec) to give it a pid it can kill.
START_WAIT_SECONDS = 1.0

# Processes running now, so a shutdown can end them instead of waiting out their timeouts; and how many are
# being started (Popen has not returned yet), so that stop_all does not miss one while the process exits.
_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()
_started = threading.Condition(_running_lock)
_starting = 0
_stopping = threading.Event()


class CommandResult(msgspec.Struct, frozen=True):
    argv: tuple[str, ...]
    returncode: int | None  # None when the program could not be started or was killed
    stdout: str
    stderr: str
    duration_seconds: float
    timed_out: bool = False
    truncated: bool = False  # stdout or stderr went over max_bytes; the rest was discarded
    error: str | None = None  # why it could not be started (not found, permission denied)
    not_found: bool = False  # it could not be started because the executable does not exist

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.returncode == 0


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _reap_killed(proc: subprocess.Popen[bytes]) -> bool:
    """Wait a bounded time for a killed tool; False when it is still there (uninterruptible sleep): subprocess
    reaps it later, whenever it goes."""
    try:
        proc.wait(timeout=KILL_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        log.warning("tool_not_gone", tool=proc.args[0] if isinstance(proc.args, tuple) else proc.args, pid=proc.pid)
        return False
    return True


def run(
    argv: Sequence[str],
    timeout_seconds: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``argv`` and return what happened; never raises for a failing or hanging program."""
    global _starting
    args = tuple(argv)
    start = time.monotonic()
    with _running_lock:
        if _stopping.is_set():
            return CommandResult(args, None, "", "", 0.0, error="not started: the exporter is shutting down")
        _starting += 1
    proc: subprocess.Popen[bytes] | None = None
    try:
        command, unstartable = with_pdeathsig(args, env)
        if unstartable is not None:
            missing = unstartable.startswith("No such file or directory")
            return CommandResult(args, None, "", "", time.monotonic() - start, error=unstartable, not_found=missing)
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
            close_fds=True,
        )
    except OSError as exc:
        return CommandResult(
            args,
            None,
            "",
            "",
            time.monotonic() - start,
            error=f"{exc.strerror or exc}: {args[0]}",
            not_found=isinstance(exc, FileNotFoundError),
        )
    finally:
        with _running_lock:
            _starting -= 1
            if proc is not None:
                _running.add(proc)
            _started.notify_all()
            stopping = _stopping.is_set()

    assert proc.stdout is not None and proc.stderr is not None
    if stopping:  # stop_all ran while it started: end this one too (stop_all may have killed it already)
        _kill_group(proc)
    try:
        return _collect(proc, args, start, timeout_seconds, max_bytes)
    finally:
        with _running_lock:
            _running.discard(proc)
            if _starting == 0:  # no tool half-started: every child not in _running is a tool's orphan
                kill_orphans({p.pid for p in _running})


def stop_all() -> None:
    """Kill every running tool (whole process groups) and start no new one, for the rest of this process.

    For a daemon's shutdown: a job stuck on a hung tool would otherwise hold the interpreter's exit for the
    rest of its timeout, and an amd-smi job would go on to its next subcommand.
    """
    _stopping.set()
    with _running_lock:
        # A tool being started has no pid yet: wait (briefly) until it has, or the process could exit first and
        # leave it running.
        _started.wait_for(lambda: _starting == 0, timeout=START_WAIT_SECONDS)
        running = list(_running)
    for proc in running:
        _kill_group(proc)


def _collect(
    proc: subprocess.Popen[bytes], args: tuple[str, ...], start: float, timeout_seconds: float, max_bytes: int
) -> CommandResult:
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    sizes = dict.fromkeys(chunks, 0)
    truncated = False
    timed_out = False
    deadline = start + timeout_seconds
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=remaining):
                fd = key.fd
                data = os.read(fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                room = max_bytes - sizes[fd]
                if room > 0:
                    chunks[fd].append(data[:room])
                if len(data) > room:
                    truncated = True
                sizes[fd] += len(data)
    returncode: int | None
    if timed_out:
        _kill_group(proc)
        returncode = None
        _reap_killed(proc)
    else:
        # Both pipes closed: the program exited, or detached its output. Wait what remains of the budget.
        try:
            returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode, timed_out = None, True
            _reap_killed(proc)
    # Children that outlived the leader still belong to the group: do not leave them running.
    _kill_group(proc)
    proc.stdout.close()
    proc.stderr.close()
    return CommandResult(
        args,
        returncode,
        b"".join(chunks[out_fd]).decode("utf-8", "replace"),
        b"".join(chunks[err_fd]).decode("utf-8", "replace"),
        time.monotonic() - start,
        timed_out=timed_out,
        truncated=truncated,
    )


class Spawned:
    """A long-running program ``spawn`` started (the demo's Prometheus and Alertmanager): its own session, so
    ``stop`` ends it and whatever it forked; ``stop_all`` kills it too."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def poll(self) -> int | None:
        """The exit code once it has exited, else None."""
        return self._proc.poll()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """SIGTERM to its group, then SIGKILL after ``timeout_seconds``; reaped (bounded, as ``run``)."""
        try:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGTERM)
                try:
                    self._proc.wait(timeout=timeout_seconds)
                except subprocess.TimeoutExpired:
                    _kill_group(self._proc)
                    _reap_killed(self._proc)
            _kill_group(self._proc)  # helpers it left behind
        finally:
            with _running_lock:
                _running.discard(self._proc)


def spawn(argv: Sequence[str], output: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Spawned:
    """Start ``argv`` to run until stopped, in its own session, stdin from /dev/null, stdout and stderr appended
    to the file ``output``. Raises OSError when it cannot be started (not found, not executable), or when the
    exporter is shutting down."""
    args = tuple(argv)
    with _running_lock:
        if _stopping.is_set():
            raise OSError(f"not started: the exporter is shutting down: {args[0]}")
        with open(output, "ab") as log_file:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                close_fds=True,
            )
        _running.add(proc)
    return Spawned(proc)
