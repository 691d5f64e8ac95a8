"""The primitive edits of a step's graph that the changes (changes.py) are made of: which
nodes a change touches (calls by name, operations by kernel name, the calls that
launched operations, the range thread's), and what it does to their edges' offsets
(gone: no time; free: no wait; gaps_gone: no CPU time before them)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .graph import CALL, OS, OWN, PROGRAM, RELEASE, STREAM, Graph, program_order


def edges(g: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each edge's source point, destination point and kind."""
    return g.src, g.dst, g.edge


def calls_named(g: Graph, pattern: str) -> np.ndarray:
    """Call nodes whose name matches `pattern`."""
    return np.flatnonzero(g.calls["name"].str.contains(pattern, regex=True).to_numpy())


def calls_labelled(g: Graph, label: str) -> np.ndarray:
    """Call nodes whose host part (the graph's label: "launch", "sync", "memory" ...) is
    `label`."""
    return np.flatnonzero(np.array(g.label[:len(g.calls)], dtype=object) == label)


def on_thread(g: Graph, nodes: np.ndarray) -> np.ndarray:
    """The nodes on the range's own thread."""
    return nodes[g.thread[nodes] == g.tid]


UNBLOCKED_NS = 5_000
"""What a copy or synchronize call that no longer waits still takes: about an
asynchronous cudaMemcpyAsync's or an idle cudaStreamSynchronize's return (5 us)."""


def free(g: Graph, off: np.ndarray, keep: np.ndarray, nodes: np.ndarray) -> None:
    """The calls at `nodes` no longer wait: their release edges dropped, and their own
    time at most UNBLOCKED_NS (a blocking copy's call held the thread for the copy)."""
    src, dst, kind = edges(g)
    ends = 2 * nodes + 1
    keep &= ~((kind == RELEASE) & np.isin(dst, ends))
    own = (kind == OWN) & np.isin(src, 2 * nodes)
    off[own] = np.minimum(off[own], UNBLOCKED_NS)


def unblocked(g: Graph, off: np.ndarray, keep: np.ndarray, calls: np.ndarray) -> None:
    """The calls no longer wait (free), nor wait to take the GIL back after them: a
    call that blocks lets the GIL go, another Python thread takes it, and the thread
    waits up to a switch interval for it (gil_after); one that returns at once does not
    (no_sync, no_memory, pinned_async)."""
    free(g, off, keep, calls)
    gone(g, off, gil_after(g, calls))


def gone(g: Graph, off: np.ndarray, nodes: np.ndarray) -> None:
    """The nodes take no time (their OWN edges' offsets 0)."""
    src, dst, kind = edges(g)
    off[(kind == OWN) & np.isin(src, 2 * nodes)] = 0


def ops_gone(g: Graph, off: np.ndarray, ops: np.ndarray) -> None:
    """GPU operations taken away: no time on their stream, nor the gap before each there
    (an operation not launched leaves none: seed 65 g31's 52 concatenations made one kept
    a floor gap of 6 µs each, 0.31 ms of an idle stream, in which the step's readback
    then waited)."""
    gone(g, off, ops)
    src, dst, kind = edges(g)
    off[(kind == STREAM) & np.isin(dst, 2 * np.asarray(ops, dtype=np.int64))] = 0


GIL_AFTER_NS = 50_000
"""How soon after a call returns a wait for the GIL is its thread taking the GIL back
(CPython releases it around a blocking CUDA call; with another Python thread running,
the thread then waits up to the switch interval for it)."""


def gil_waits(g: Graph) -> np.ndarray:
    """The range thread's waits for the GIL (label "gil": loops/gil.py marks them)."""
    return np.flatnonzero(np.array(g.label, dtype=object) == "gil")


def gil_after(g: Graph, calls: np.ndarray) -> np.ndarray:
    """The GIL waits (gil_waits) that start within GIL_AFTER_NS of one of `calls` ending:
    the GIL taken back after the call."""
    waits = gil_waits(g)
    if not len(waits) or not len(calls):
        return waits[:0]
    ends = np.sort(g.end[calls])
    at = np.searchsorted(ends, g.start[waits], side="right") - 1
    near = (at >= 0) & (g.start[waits] - ends[np.maximum(at, 0)] <= GIL_AFTER_NS)
    return waits[near]


def gaps_gone(g: Graph, off: np.ndarray, before: np.ndarray) -> None:
    """The CPU time between calls just before the nodes `before` gone (PROGRAM edges into
    their starts)."""
    src, dst, kind = edges(g)
    off[(kind == PROGRAM) & np.isin(dst, 2 * before)] = 0


def launchers(g: Graph, op_nodes: np.ndarray) -> np.ndarray:
    """Each operation's launching call node (-1 where no call of the step launched it)."""
    return g.op_calls()[np.asarray(op_nodes, dtype=np.int64) - len(g.calls)]


def launched(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The operations the range's thread launched, in launch order, and the call that
    launched each; kept with the graph (chains and fixed_shape walk the same sequence)."""
    memo = ("launched",)
    if memo not in g.cache:
        nodes = len(g.calls) + np.arange(len(g.ops))
        call = launchers(g, nodes)
        mine = (call >= 0) & (g.thread[np.maximum(call, 0)] == g.tid)
        order = np.argsort(g.start[call[mine]], kind="stable")
        g.cache[memo] = nodes[mine][order], call[mine][order]
    return g.cache[memo]


def launcher(g: Graph, op_nodes: np.ndarray) -> np.ndarray:
    """The calls of the step that launched the operations."""
    calls = launchers(g, op_nodes)
    return calls[calls >= 0]


def named_ops(g: Graph, pattern: str) -> np.ndarray:
    """Operation nodes whose kernel name, short or demangled, matches `pattern` (case
    ignored): `FillFunctor` is in the demangled name only, under the short name all of
    PyTorch's elementwise kernels share. Each distinct name tested once, and the nodes
    kept with the graph (rules and prices ask again)."""
    memo = ("named_ops", pattern)
    if memo not in g.cache:
        rx = re.compile(pattern, re.I)
        hit = np.zeros(len(g.ops), dtype=bool)
        for col in ("name", "demangled"):
            if col in g.ops:
                codes, names = pd.factorize(g.ops[col].to_numpy(dtype=object))
                fits = np.array([rx.search(str(n)) is not None for n in names] + [False])
                hit |= fits[codes]
        g.cache[memo] = len(g.calls) + np.flatnonzero(hit)
    return g.cache[memo]


COUNTING = r"nonzero|select|flagged|cub::|DeviceSelect|DeviceReduce"
"""The kernels that count what a boolean mask, nonzero or unique keep (CUB's select,
reduce and sort), before the count is read back."""


def dispatch(g: Graph, calls: np.ndarray, after: tuple[str, ...] = ("launch",)) -> np.ndarray:
    """The range thread's nodes that dispatch each of `calls` (call nodes: launches, or a
    copy back): its calls and OS calls after the launch (or the call of `calls`) before
    it on the thread, up to it and itself (an op's driver calls, such as
    cuKernelGetName, and its waits, for the GIL among them, come just before its call).
    `after`: the labels of the calls a dispatch starts after ("sync" too where a blocking
    call before it ends another op's work, as an upload's wait before an index's copy)."""
    mine = program_order(g, np.flatnonzero(((g.kind == CALL) | (g.kind == OS))
                                           & (g.thread == g.tid)))
    wanted, out, since = set(calls.tolist()), [], []
    for node in mine.tolist():
        since.append(node)
        if node in wanted:
            out.extend(since)
            since = []
        elif g.label[node] in after:
            since = []
    return np.array(out, dtype=np.int64)


def near(windows, lo: int, hi: int) -> np.ndarray:
    """The windows ((start, end) pairs on the clock) that meet [lo, hi], as an (n, 2)
    array: a range's instances over the whole trace, cut to the few a step can touch."""
    w = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
    return w[(w[:, 1] >= lo) & (w[:, 0] <= hi)]


def within(times: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the windows `w` (near's array)."""
    out = np.zeros(len(times), dtype=bool)
    for a, b in w.tolist():
        out |= (times >= a) & (times <= b)
    return out


def in_scope(g: Graph, scope: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Per node, whether it is a call or OS call that starts in one of the scope's
    windows (a finding's: changes.apply acts on the edges into them)."""
    return np.isin(g.kind, (CALL, OS)) & within(g.start, near(scope, g.lo, g.hi))


def overlap(lo: np.ndarray, hi: np.ndarray, w: np.ndarray) -> np.ndarray:
    """How much of each span [lo, hi] lies inside the windows `w` (near's array), ns."""
    out = np.zeros(len(lo), dtype=np.int64)
    for a, b in w.tolist():
        out += np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0, None)
    return out
