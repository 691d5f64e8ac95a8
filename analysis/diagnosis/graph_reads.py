"""What the rules read off one step's graph (loops/graph.py): the kernels a range launched,
how they grow, its host-to-device copies, its blocking calls, whether it reads back. Pure
functions of a graph and the windows (host clock) that scope it; the pricer averages them
over a loop's modeled steps (pricing.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ..loops.edits import launched, named_ops
from ..loops.graph import CALL, Graph
from .sync_sites import call_kinds


def h2d_spans(g: Graph) -> list[tuple[int, int, int]]:
    """(end of the thread's launch or sync before it, end of its call, bytes) of each
    host-to-device copy the step's range thread launched (the queries a copy's dispatch
    makes, `cudaStreamIsCapturing` and the like, are part of it)."""
    if "copy_kind" not in g.ops or not len(g.ops):
        return []
    ops, by_call = launched(g)
    row = ops - len(g.calls)
    h2d = (g.ops["kind"].to_numpy()[row] == 1) & (g.ops["copy_kind"].to_numpy()[row] == 1)
    label = np.array(g.label, dtype=object)
    mine = np.flatnonzero((g.kind == CALL) & (g.thread == g.tid)
                          & np.isin(label, ("launch", "sync")))
    mine = mine[np.argsort(g.start[mine], kind="stable")]
    out = []
    for c, b in zip(by_call[h2d].tolist(), g.ops["bytes"].to_numpy()[row[h2d]].tolist(),
                    strict=True):
        k = int(np.searchsorted(g.start[mine], g.start[c]))
        prev = int(g.end[mine[k - 1]]) if k > 0 else g.lo
        out.append((prev, int(g.end[c]), int(b)))
    return out


def sync_kinds(g: Graph) -> Counter:
    """The step's blocking calls on its range's thread by what caused them (SYNC_SAID)."""
    return Counter(call_kinds(g).values())


def kernel_time(g: Graph, pattern: str, windows) -> tuple[int, int, int]:
    """(kernels matching `pattern`, their ns, every kernel's ns) of one step's graph,
    those launched in `windows` (the range's instances; all where none)."""
    kernel, hit = scoped_kernels(g, pattern, windows)
    ns = g.end - g.start
    return len(hit), int(ns[hit].sum()), int(ns[kernel].sum())


def scoped_kernels(g: Graph, pattern: str, windows) -> tuple[np.ndarray, np.ndarray]:
    """The step's kernels launched in `windows` (all where none), and those of them
    whose name matches `pattern`, in start order."""
    ops0 = len(g.calls)
    kernel = np.flatnonzero(g.ops["kind"].to_numpy() == 0) + ops0
    if windows:
        kernel = kernel[launched_in(g, kernel, windows)]
    hit = np.intersect1d(kernel, named_ops(g, pattern))
    return kernel, hit[np.argsort(g.start[hit], kind="stable")]


def growth_of(g: Graph, pattern: str, windows, least: int) -> float | None:
    """How the step's kernels matching `pattern` grow in start order: the rank
    correlation with their order of their durations, or of their grids where that is
    higher (1: each longer, or over more blocks, than the one before; about 0 for
    kernels of one size). A concatenation's grid follows its output's size, where a small
    tensor's copy time stays within its launch's jitter (0.9 to 1.2 µs for a tensor grown
    from 16 to 1,000 KiB on the H200); None under `least` of them. Where the range has
    several instances in the step, each with `least` of them or more, the median of
    theirs: a loop's steps modeled as one round of an outer range hold many instances of
    the step, and a tensor grown in each step makes a sawtooth over the round, not a
    trend (seed 77's g09, 8 rounds of 32 steps)."""
    hit = scoped_kernels(g, pattern, windows)[1]
    if len(hit) < least:
        return None
    groups = [x for x in _by_window(g, hit, windows) if len(x) >= least] or [hit]
    return float(np.median([_trend(g, x) for x in groups]))


def _trend(g: Graph, hit: np.ndarray) -> float:
    """The rank trend of the kernels' durations, or grids (blocks) where higher."""
    sizes = [(g.end - g.start)[hit]]
    if "grid" in g.ops:
        sizes.append(g.ops["grid"].to_numpy()[hit - len(g.calls)] // 1024)   # blocks
    return max(_rank_trend(x) for x in sizes)


def _by_window(g: Graph, ops: np.ndarray, windows) -> list[np.ndarray]:
    """The operations grouped by the window (of `windows`) they were launched in, each
    group in the given order; one group where no windows are given."""
    if not windows:
        return [ops]
    t = g.op_launched()[ops - len(g.calls)]
    w = np.array(windows, dtype=np.int64)
    inside = (t[:, None] >= w[:, 0]) & (t[:, None] < w[:, 1])
    which = np.where(inside.any(1), inside.argmax(1), -1)
    return [ops[which == i] for i in np.unique(which[which >= 0]).tolist()]


def _rank_trend(values: np.ndarray) -> float:
    """The rank correlation of `values` with their order (ties share their rank)."""
    rank = pd.Series(values).rank()
    if rank.std() == 0:
        return 0.0
    return float(np.corrcoef(np.arange(len(rank)), rank.to_numpy())[0, 1])


def started_in(t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the windows `w` ((start, end) rows, the end out)."""
    return ((t[:, None] >= w[:, 0]) & (t[:, None] < w[:, 1])).any(1)


def launched_in(g: Graph, op_nodes: np.ndarray, windows) -> np.ndarray:
    """Whether each operation was launched in one of `windows` (a call of the step's
    that started there; False for one no call of the step launched)."""
    t = g.op_launched()[np.asarray(op_nodes, dtype=np.int64) - len(g.calls)]
    return started_in(t, np.array(windows, dtype=np.int64))


def read_back(g: Graph, windows) -> int:
    """The bytes of the device-to-host copies the step launched in `windows` (all where
    none)."""
    if "copy_kind" not in g.ops or not len(g.ops):
        return 0
    row = np.flatnonzero((g.ops["kind"].to_numpy() == 1) & (g.ops["copy_kind"].to_numpy() == 2))
    if len(row) and windows:
        row = row[launched_in(g, row + len(g.calls), windows)]
    return int(g.ops["bytes"].to_numpy()[row].sum()) if len(row) else 0
