"""Work on another core without pickling its inputs: `beside(fn)` forks the process, the
child computes fn() over the parent's memory as it stands (copy-on-write: the frames of a
100k-range trace are not copied or pickled) and sends its pickled result back through a
pipe; `result()` in the parent reads it. The analysis is Python work holding the GIL, so a
thread gains nothing; a process forked here starts in a few milliseconds, where a worker
pool would pickle the trace.

fn() must be pure computation over memory, or write only files of its own: the child never
touches an SQLite connection of the parent (a connection must not cross a fork) and leaves
through os._exit (no atexit handler, no buffered output flushed twice).

The same value either way: where fork is missing, only one core is free, another Python
thread runs (a lock it holds would stay held in the child), or ANALYSIS_FORKS=0, fn() runs
in the parent when its result is asked for; a child that raises or dies makes the parent
compute fn() itself, so an error is raised where and as it would have been without the
fork.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

FAILED = b"-"
"""What a child sends when fn() raised: the parent computes fn() itself."""


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                    # not Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether beside() forks: fork exists, two cores are free, this is the only Python
    thread, and ANALYSIS_FORKS is not 0."""
    return (hasattr(os, "fork") and cores() > 1 and threading.active_count() == 1
            and os.environ.get("ANALYSIS_FORKS") != "0")


class Beside(Generic[T]):
    """fn() computed in a forked child (or later in this process: see the module doc)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn, self.pid, self.fd = fn, 0, -1
        self.done: tuple[T] | None = None
        if can_fork():
            self._fork()

    def _fork(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                          # the child: compute, send, leave
            os.close(read)
            _child(self.fn, write)
        os.close(write)
        self.pid, self.fd = pid, read

    def result(self) -> T:
        """fn()'s value: the child's, else computed here."""
        if self.done is None:
            data = self._collect()
            self.done = (pickle.loads(data) if data and data != FAILED else self.fn(),)
        return self.done[0]

    def _collect(self) -> bytes:
        """The child's bytes (b"" without a child, or when it died), the child reaped."""
        if self.pid == 0:
            return b""
        with os.fdopen(self.fd, "rb") as pipe:
            self.fd = -1
            data = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        return data if os.waitstatus_to_exitcode(status) == 0 else b""

    def close(self) -> None:
        """Let go of a child whose result is not wanted (it ends on the closed pipe)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0

    def __enter__(self) -> Beside[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def beside(fn: Callable[[], T]) -> Beside[T]:
    """Start fn() on another core (Beside); `with beside(fn) as job: ... job.result()`."""
    return Beside(fn)


def _child(fn: Callable[[], T], write: int) -> None:
    """The forked child's whole life: fn(), its pickle into `write`, os._exit."""
    code = 0
    try:
        try:
            data = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:                 # noqa: BLE001 - the parent computes it again
            data = FAILED
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
    except BaseException:                     # noqa: BLE001 - the parent went away
        code = 1
    os._exit(code)
