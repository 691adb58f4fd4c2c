"""Reads that cannot wedge their caller: calls under a deadline in daemon threads, and file reads that never block
in ``open()``.

A sick GPU can make a read of one of its sysfs files block for as long as the GPU is hung: the read sits inside
the driver (a hung SMU, a reset holding a lock). Nothing can interrupt it from user space, so the only defence
is not to wait for it:

- ``DeadlineRunner.run`` runs one call per key (a GPU's files) in a worker thread, one after the other, handed
  over at once, and waits for each up to the deadline from its start. A call past the deadline is abandoned:
  its worker is left to finish it on its own and is never given other work (the keys after it go to a new
  worker), and while it is still running no new call for that key is started (the key is reported ``stuck``).
  So at most one thread per key can be stuck, and a stuck key delays the others by one deadline once. One
  worker reading the GPUs in turn costs what reading them in the caller would; a thread per GPU at once cost
  three times the CPU (GIL hand-offs between eight threads), which is most of the exporter's idle cost.
- ``read_regular`` opens with ``O_NONBLOCK`` and refuses anything that is not a regular file: a FIFO or a
  device node in place of a sysfs attribute would otherwise block in ``open()`` or ``read()`` for good. This is
  the cheap first line only: a hung GPU blocks inside ``read()`` of a regular file, and there the deadline is
  the protection.

Every thread here is a daemon thread, so the process can always exit. What a read in uninterruptible sleep (D
state) leaves behind: its thread cannot be killed, not even by SIGKILL, until the driver lets the read return.
The exporter does not wait for it: shutdown goes on and the interpreter exits, but the kernel keeps the process
(a zombie whose stuck thread still runs in the driver, with its open files) until that read returns; its
listening socket is closed explicitly at shutdown so a restart can bind the port again.
"""

from __future__ import annotations

import errno
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Mapping
from typing import Generic, Literal, TypeVar

import msgspec

T = TypeVar("T")

Status = Literal["done", "timeout", "stuck", "error"]


class NotRegularFile(OSError):
    """A FIFO, socket or device node where a regular file (a sysfs or procfs attribute) was expected."""

    kind = "not_regular_file"


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of the regular file ``path`` (one more than ``limit`` says it is larger).

    ``O_NONBLOCK`` makes ``open()`` return at once whatever the path is; ``fstat`` then refuses a directory
    (``IsADirectoryError``, EISDIR, as a plain read would) and anything else that is not a regular file
    (``NotRegularFile``). OSError as ``open``/``read`` raise it otherwise.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # sysfs gives an attribute in one read; procfs files may take several
            data = os.read(fd, limit + 1 - size)
            if not data:
                break
            chunks.append(data)
            size += len(data)
        return b"".join(chunks)
    finally:
        os.close(fd)


def error_kind(exc: OSError) -> str:
    """The ``error`` label of a failed read: the errno name (``EIO``, ``EACCES``, ``EISDIR``...), or
    ``not_regular_file``."""
    if isinstance(exc, NotRegularFile):
        return exc.kind
    return errno.errorcode.get(exc.errno or 0, "error")


class Outcome(msgspec.Struct, Generic[T], frozen=True):
    """How one keyed call ended: ``done`` (``value``), ``error`` (it raised ``error``), ``timeout`` (it passed the
    deadline and was abandoned) or ``stuck`` (not started: the call abandoned earlier has not returned yet)."""

    status: Status
    value: T | None = None
    error: BaseException | None = None
    # for timeout and stuck: how long the abandoned call has been running
    running_seconds: float = 0.0


class _Call(Generic[T]):
    __slots__ = ("done", "error", "fn", "started", "value")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.started = 0.0  # time.monotonic() when the worker took it (0.0: not taken)
        self.value: T | None = None
        self.error: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # reported to the caller, never lost in the thread
            self.error = exc
        finally:
            self.done.set()


class _Batch(Generic[T]):
    """Calls a worker runs in turn, handed over at once: the caller sleeps until the last returns or the one
    running passes the deadline, instead of waking (and handing over) once per call. Under ``lock`` the worker
    takes the next call and the caller cancels the ones not taken, so a call is never run twice nor lost."""

    __slots__ = ("calls", "cancelled", "done", "lock", "since", "taken")

    def __init__(self, calls: list[_Call[T]]) -> None:
        self.calls = calls
        self.lock = threading.Lock()
        self.done = threading.Event()  # set when the worker is through with it (every call run, or cancelled)
        self.taken = 0  # how many calls the worker took; the one running is calls[taken - 1]
        self.cancelled = False
        self.since = time.monotonic()  # when the running call was taken (before the first: when handed over)

    def take(self) -> _Call[T] | None:
        """The worker's next call; None when there is none left or the caller cancelled the rest."""
        with self.lock:
            if self.cancelled or self.taken == len(self.calls):
                return None
            call = self.calls[self.taken]
            self.taken += 1
            call.started = self.since = time.monotonic()
            return call

    def overdue(self, deadline_seconds: float) -> int | None:
        """Cancel the calls not taken and give the index of the running one if it has run past the deadline (or
        nothing was taken for that long); None while it is within it."""
        with self.lock:
            running = self.calls[self.taken - 1] if self.taken else None
            if self.done.is_set() or (running is not None and running.done.is_set()):
                return None
            if time.monotonic() - self.since < deadline_seconds:
                return None
            self.cancelled = True
            return max(self.taken - 1, 0)

    def wait_seconds(self, deadline_seconds: float) -> float:
        """How long the caller may sleep before the running call could be overdue (at least a millisecond: the
        worker may be between two calls)."""
        with self.lock:
            return max(0.001, self.since + deadline_seconds - time.monotonic())


class _Worker(Generic[T]):
    """A daemon thread that runs the batches put in its queue, until it is abandoned (it exits after its call)."""

    def __init__(self, name: str) -> None:
        self.calls: queue.SimpleQueue[_Batch[T] | None] = queue.SimpleQueue()
        self.abandoned = False
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            batch = self.calls.get()
            if batch is None:
                return
            while (call := batch.take()) is not None:
                call()
            batch.done.set()
            if self.abandoned:  # a call passed the deadline: another worker took over
                return


class DeadlineRunner(Generic[T]):
    """Keyed calls, run one after the other by a worker thread, each waited for up to a deadline; at most one
    running call per key.

    The calls go to the worker in one hand-off and the caller sleeps until the last one returned, or until the
    one running passes its deadline: then that one is abandoned with its worker, and the calls it had not taken
    go to a new worker. (One hand-off per call cost a thread switch each way per GPU and walk.)

    Not thread-safe: one caller at a time (a source's collect, which the scheduler never runs twice at once).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._running: dict[str, _Call[T]] = {}  # keys whose call was abandoned and has not returned yet
        self._worker: _Worker[T] | None = None

    def stuck(self) -> dict[str, float]:
        """{key: seconds its abandoned call has been running} for the calls that have not returned yet."""
        now = time.monotonic()
        return {k: now - c.started for k, c in self._running.items() if not c.done.is_set()}

    def run(self, calls: Mapping[str, Callable[[], T]], deadline_seconds: float) -> dict[str, Outcome[T]]:
        """Run the calls in turn, each waited for up to ``deadline_seconds`` from its start."""
        for key in [k for k, c in self._running.items() if c.done.is_set()]:
            del self._running[key]  # an abandoned call that returned since: its key may run again
        out: dict[str, Outcome[T]] = {}
        pending: list[tuple[str, _Call[T]]] = []
        for key, fn in calls.items():
            old = self._running.get(key)
            if old is not None:
                out[key] = Outcome("stuck", running_seconds=time.monotonic() - old.started)
            else:
                pending.append((key, _Call(fn)))
        while pending:
            try:
                worker = self._worker if self._worker is not None else _Worker[T](f"{self._name}-worker")
            except RuntimeError as exc:  # can't start new thread: the host is out of threads or memory
                out.update((key, Outcome("error", error=exc)) for key, _ in pending)
                break
            self._worker = worker
            batch = _Batch([call for _, call in pending])
            worker.calls.put(batch)
            overdue: int | None = None
            while overdue is None and not batch.done.wait(batch.wait_seconds(deadline_seconds)):
                overdue = batch.overdue(deadline_seconds)
            finished = pending if overdue is None else pending[:overdue]
            for key, call in finished:
                failed = call.error is not None
                out[key] = Outcome("error", error=call.error) if failed else Outcome("done", value=call.value)
            if overdue is None:
                break
            key, call = pending[overdue]
            worker.abandoned = True  # it is stuck in this call: the rest go to a new worker
            worker.thread.name = f"{self._name}-{key}"  # named after what it is stuck on (py-spy, tests)
            self._worker = None
            if call.started:
                self._running[key] = call
            out[key] = Outcome("timeout", running_seconds=time.monotonic() - (call.started or batch.since))
            pending = pending[overdue + 1 :]
        return {key: out[key] for key in calls}
