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
import queue
import select
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


class _Forker:
    """The one thread that starts every tool, for as long as the process lives.

    The parent-death signal (``setpriv --pdeathsig KILL``) is the kernel's for the *thread* that forked: a tool
    forked by a thread that ends (a deadline worker that was abandoned, a short-lived helper thread) gets it then,
    or, when ``setpriv`` asks for it after that thread is gone, never, and then outlives a SIGKILLed exporter. Forks
    from this thread only (a daemon thread that never returns) tie every tool to the process itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._calls: queue.SimpleQueue[tuple[tuple[str, ...], dict[str, str] | None, list[object], threading.Event]]
        self._calls = queue.SimpleQueue()

    def popen(self, command: tuple[str, ...], env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="tool-forker", daemon=True)
                try:
                    thread.start()
                except RuntimeError as exc:  # can't start new thread: out of threads or memory
                    raise OSError(f"cannot start the tools' thread: {exc}") from None
                self._thread = thread
        box: list[object] = []
        done = threading.Event()
        self._calls.put((command, env, box, done))
        done.wait()
        (outcome,) = box
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, subprocess.Popen)
        return outcome

    def _loop(self) -> None:
        while True:
            command, env, box, done = self._calls.get()
            try:
                box.append(
                    subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        start_new_session=True,
                        env=env,
                        close_fds=True,
                    )
                )
            except Exception as exc:  # handed to the caller, which says why the tool could not start
                box.append(exc)
            finally:
                done.set()


_forker = _Forker()


def _exited(proc: subprocess.Popen[bytes], timeout_seconds: float) -> bool:
    """Wait up to ``timeout_seconds`` for ``proc`` to exit, *without reaping it*: until it is reaped its pid (which
    names its process group) cannot be given to another process, so a group kill after this one cannot hit a
    stranger's group (pid_max is 32768 on many hosts: a freed pid is soon reused, and every tool and spawned
    program leads a group of its own)."""
    if proc.returncode is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # no pidfd (a kernel before 5.3): poll without reaping
        deadline = time.monotonic() + timeout_seconds
        while True:
            with contextlib.suppress(ChildProcessError):
                if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.01)
                    continue
            return True
    try:
        readable, _, _ = select.select([fd], [], [], max(0.0, timeout_seconds))
        return bool(readable)
    finally:
        os.close(fd)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the group ``proc`` leads; nothing once it has been reaped (its pid may be another's now)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _reap(proc: subprocess.Popen[bytes], wait_seconds: float) -> int | None:
    """Reap ``proc`` once it has exited within ``wait_seconds`` (its exit code), under the lock, so that stop_all
    never kills the group of a pid already given back; None when it is still there (uninterruptible sleep):
    subprocess, or the orphan sweep, reaps it later, whenever it goes."""
    if not _exited(proc, wait_seconds):
        log.warning("tool_not_gone", tool=proc.args[0] if isinstance(proc.args, tuple) else proc.args, pid=proc.pid)
        return None
    with _running_lock:
        code = proc.wait()  # a zombie: at once
        _running.discard(proc)
    return code


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
        proc = _forker.popen(command, dict(env) if env is not None else None)
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
    # Both pipes closed: the program exited, or detached its output. Wait what remains of the budget (not reaping).
    if not timed_out and not _exited(proc, max(0.0, deadline - time.monotonic())):
        timed_out = True
    # The whole group, the leader not reaped yet (its pid still names the group): children that outlived the
    # leader belong to it, and are not left running.
    _kill_group(proc)
    code = _reap(proc, KILL_WAIT_SECONDS if timed_out else 0.0)
    returncode = None if timed_out else code
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
        """The exit code once it has exited, else None. It is not reaped (``stop`` does that, after it has ended
        the group its pid names)."""
        if self._proc.returncode is not None:
            return self._proc.returncode
        try:
            info = os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self._proc.poll()
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """SIGTERM to its group, then SIGKILL after ``timeout_seconds``; reaped (bounded, as ``run``)."""
        try:
            if not _exited(self._proc, 0.0):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGTERM)
                _exited(self._proc, timeout_seconds)
            _kill_group(self._proc)  # helpers it left behind, and itself after the timeout (not reaped yet)
            _reap(self._proc, KILL_WAIT_SECONDS)
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
