"""The command line's speed tricks, kept out of the analysis: no cyclic garbage collection
while a command runs, writes forked beside the main work, and a fast exit.

Only `python -m analysis` (and the `nsight-workflows` analysis subcommands) use these;
the analysis modules and the Python API never depend on them.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn

from .errors import ToolError

_COLLECT_IN_CHILDREN = {"on": False}
_EXIT_FOLLOWS = {"on": False}


def _collect_in_child() -> None:
    if _COLLECT_IN_CHILDREN["on"]:
        gc.enable()


os.register_at_fork(after_in_child=_collect_in_child)


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """No cyclic garbage collection in this process while the block runs. The analysis
    builds large, acyclic data (frames, 100k ranges, 40k document entries): the
    collector's repeated passes over it took about 0.4 s of 2.6 s on an emit_nvtx trace,
    and found nothing to free. Reference counting still frees everything; processes
    forked meanwhile (window workers, writers beside) collect as usual."""
    was = gc.isenabled()
    gc.disable()
    _COLLECT_IN_CHILDREN["on"] = was
    try:
        yield
    finally:
        _COLLECT_IN_CHILDREN["on"] = False
        if was and not _EXIT_FOLLOWS["on"]:
            gc.enable()         # (before an exit_now, the first collection would visit
                                # every object the command made: 0.13 s on 110k ranges)


class Beside:
    """Work run in forked processes while this one goes on: `start(work)` forks (or, where
    fork is not available, runs `work` here and now); leaving the `with` block waits for
    every child and raises ToolError if one failed (its traceback goes to stderr).

    For independent writes of a document whose tables are final: ranges.csv and the range
    list of systems.json of a 110k-range trace are written while the entries are made
    and the findings worked out."""

    def __init__(self) -> None:
        self.children: list = []

    def start(self, work: Callable[[], object]) -> None:
        if "fork" not in multiprocessing.get_all_start_methods():
            work()
            return
        child = multiprocessing.get_context("fork").Process(target=_uncollected, args=(work,),
                                                            daemon=True)
        child.start()
        self.children.append(child)

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.join()
        failed = [c.exitcode for c in self.children if c.exitcode != 0]
        self.children = []
        if failed and exc[0] is None:
            raise ToolError(f"writing beside the report failed (exit code {failed[0]})")


def _uncollected(work: Callable[[], object]) -> None:
    """A writer beside runs briefly over acyclic rows: no collector (as its parent)."""
    gc.disable()
    work()


_KEPT: list[object] = []


def exit_follows() -> None:
    """Declare that this process ends with exit_now as soon as its command returns (the
    command-line entry points do): no collection is run after it, and what `keep` is
    given is never freed."""
    _EXIT_FOLLOWS["on"] = True


def keep(obj: object) -> None:
    """When exit_follows: hold `obj` until the process ends, for exit_now to drop with the
    rest of the heap (a document of 110k range entries took 0.15 s to free, one object at
    a time, just before the exit that would have freed it for nothing). Otherwise (a
    command run inside a longer-lived process) nothing is held."""
    if _EXIT_FOLLOWS["on"]:
        _KEPT.append(obj)


def exit_now(code: int) -> NoReturn:
    """End the process with `code` without tearing its heap down: the standard streams are
    flushed, every report is already written and closed, every child joined. Freeing a
    few million objects one by one took 0.2 s of 2.5 s on a 100k-range trace. For the
    analysis command line only (`main` itself returns, for callers in the same process)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed pipe or stream: nothing to keep
            pass
    os._exit(code)
