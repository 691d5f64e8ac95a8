"""The changes of a step's graph that act on its kernels (changes.py says each): named
kernels made faster, fills removed, growing concatenations made one, chains of
elementwise kernels fused into one pass."""

from __future__ import annotations

import numpy as np

from .chains import chains, grid_of, kept
from .change import Change
from .edits import dispatch, edges, gaps_gone, gone, launcher, named_ops, on_thread, ops_gone
from .graph import OWN, Graph


def faster_kernels(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    src, dst, kind = edges(g)
    for pattern, factor in change.kernels:
        sel = (kind == OWN) & np.isin(src, 2 * named_ops(g, pattern))
        off[sel] = (off[sel] * factor).astype(np.int64)


def no_fill(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """The named fill kernels and the range thread's calls that launched them gone."""
    for pattern, _ in change.kernels:
        fills = named_ops(g, pattern)
        ops_gone(g, off, fills)
        gone(g, off, on_thread(g, launcher(g, fills)))


KEPT_BEFORE = ("launch", "sync")
"""Where the dispatch of a kernel a kernel change takes away starts: after the launch
before it, or after a blocking call, whose wait and the work before it the change
keeps (seed 59 g34: a GeLU chain's first kernel, launched after a checkpoint's blocking
copies, took the save's 18 ms with it, a chain priced 1.4 ms a step where its fix saved
0.03 to 0.34 ms)."""


def one_cat(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """Of the named concatenation kernels, the longest stays (one copy of everything);
    the others and their dispatch gone (undispatched)."""
    for pattern, _ in change.kernels:
        cats = named_ops(g, pattern)
        if len(cats) >= 2:
            undispatched(g, off, np.delete(cats, np.argmax(g.end[cats] - g.start[cats])),
                         after=KEPT_BEFORE)


def one_pass(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """Of each chain of the change's launch configurations, the shortest kernel stays
    (chains.kept); the others and their dispatch gone (undispatched), its waits for the
    GIL among them: each op's dispatch lets the GIL go and waits to take it back, so an
    op fewer is a wait fewer (the generated battery: a per-parameter AdamW made fused,
    or a GeLU expression made F.gelu, beside a thread that holds the GIL, saved 80% and
    50% of their loops)."""
    mine = [c for c in chains(g) if grid_of(g, c) in change.grids]
    if mine:
        stay = np.array([kept(g, c) for c in mine], dtype=np.int64)
        undispatched(g, off, np.setdiff1d(np.concatenate(mine), stay), spare=stay,
                     after=KEPT_BEFORE)


def undispatched(g: Graph, off: np.ndarray, ops: np.ndarray,
                 spare: np.ndarray | None = None, after: tuple[str, ...] = ("launch",)
                 ) -> None:
    """The operations gone, and the range thread's dispatch of each (edits.dispatch: its
    calls and OS calls since the launch, or a call labelled in `after`, before; the waits
    for the GIL among them, and the CPU time between them). The launch of an operation
    in `spare` stays (a CUDA graph launches many)."""
    launches = launcher(g, ops)
    if spare is not None:
        launches = np.setdiff1d(launches, launcher(g, spare))
    calls = dispatch(g, on_thread(g, launches), after)
    ops_gone(g, off, ops)
    gone(g, off, calls)
    gaps_gone(g, off, calls)
