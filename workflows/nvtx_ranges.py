"""NVTX ranges in the toolkit's domain: the runner's `<workload>/<variant>` ranges and the
sub-ranges a variant opens for its own phases (fwd / bwd / opt).

Sub-ranges are emitted only while the runner's timed range is open: the warm-up calls
(compilation, autotuning) run the same code before any range opens and must leave no
range behind, or the trace would hold top-level `fwd` ranges full of compilation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import NVTX_DOMAIN

_TIMED = {"open": False}


def push_pop():
    """push/pop functions in the toolkit domain (the `nvtx` package)."""
    import nvtx

    domain = nvtx.get_domain(NVTX_DOMAIN)
    return (lambda name: domain.push_range(domain.get_event_attributes(message=name)),
            domain.pop_range)


@contextlib.contextmanager
def timed_range(name: str) -> Iterator[None]:
    """A range the runner times in; sub-ranges inside it are recorded."""
    push, pop = push_pop()
    push(name)
    _TIMED["open"] = True
    try:
        yield
    finally:
        _TIMED["open"] = False
        pop()


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """A variant's sub-range: `<workload>/<variant>/<name>` while timed, else nothing."""
    if not _TIMED["open"]:
        yield
        return
    push, pop = push_pop()
    push(name)
    try:
        yield
    finally:
        pop()
