"""One step as a dependency graph, built from the edges the export holds (edges.py).

Every node is an interval with two points, its start (2i) and its end (2i + 1): each CUDA
call of the step's process (any thread), each OS runtime call outside CUDA calls, each GPU
operation running in the step, and the step's end on its range's thread. An edge says a
point happens no earlier than another point plus an offset:

    OWN       a node's start -> its end (its duration; for a call released by what it
              waited for, only its return)
    PROGRAM   the previous node's end on a thread -> the next start (the CPU time between)
    LAUNCH    a call's start -> the GPU operation it launched (correlation id)
    STREAM    the previous operation's end on a stream -> the next start
    EVENT     work recorded on other streams -> the first operation a stream waits with
    RELEASE   the operation a blocking call waited for (stream, device or event
              synchronize, a blocking copy or set, a free; a launch that waited for a
              full launch queue, queue.py) ends -> the call ends; and a synchronize
              call's last operation launched before it, per stream it waits on, though
              that had ended (the call waits for it where a replay delays it)
    THREAD    another thread's last call before a wait ends -> the wait (pthread_cond_wait,
              futex, poll ...) ends: the main thread waiting for the autograd thread
    ALLOC     a memory call of another thread of the process -> the memory call that took
              the allocator from it (started within microseconds of its end, edges.py)
    STEP      the range thread's last node -> the step's end (its start, where it still
              runs then: the wait at a run's end); for a run's last step (it
              ends when its GPU backlog does) also the last GPU operation its calls
              launched that ends by then
    BACKLOG   the step's start -> the first operation its calls launched on each stream
              (no time: what earlier steps left on the GPU holds it only in the steady
              replay, steady.py)

Each edge keeps its measured gap. Replayed unchanged (replay.py), the binding edge of each
point (the one whose source came last) carries its measured gap and every other edge the
smallest gap its kind shows in the step, so the replay gives back the measured times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..load.nsys_host import HOST_PARTS
from ..load.nsys_steps import StepRows

OWN, PROGRAM, LAUNCH, STREAM, EVENT, RELEASE, THREAD, STEP, BACKLOG, ALLOC = range(10)
EDGES = ("own", "program", "launch", "stream", "event", "release", "thread", "step",
         "backlog", "alloc")
CALL, OP, OS, END = range(4)
WAITS = ("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
         "futex", "poll", "ppoll", "epoll_wait", "epoll_pwait", "select", "pselect6",
         "sem_wait", "sem_timedwait", "sem_clockwait", "pthread_join",
         "pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_rwlock_rdlock",
         "pthread_rwlock_wrlock", "pthread_barrier_wait")
"""OS calls in which a thread waits for another thread of its process."""
BLOCKING_PARTS = (HOST_PARTS.index("sync"), HOST_PARTS.index("memory"))


@dataclass
class Graph:
    """A step's nodes and edges (see the module doc). Points: 2i start, 2i + 1 end."""

    lo: int                                  # the step's start (the range instance's)
    hi: int                                  # its end
    tid: int                                 # the range's thread
    kind: np.ndarray                         # CALL, OP, OS, END per node
    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray                       # tid of calls and OS calls; -1 for the rest
    label: list[str]                         # host part, op_label, "os" / "gil", "end"
    calls: pd.DataFrame                      # the step's calls (nodes 0..), as read
    ops: pd.DataFrame                        # its GPU operations (the next nodes)
    osrt: pd.DataFrame                       # its OS calls outside CUDA calls
    syncs: pd.DataFrame                      # the sync records of its blocking calls
    corr_of: dict[int, int] = field(default_factory=dict)   # correlation id -> call node
    run_end: bool = False                    # the run's last step (ends with its backlog)
    parts: list[tuple[np.ndarray, np.ndarray, int]] = field(default_factory=list)
    _joined: tuple | None = field(default=None, repr=False)
    _op_calls: np.ndarray | None = field(default=None, repr=False)
    entered: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    """(start, end) of the NVTX ranges the range's thread enters inside the step (their
    start in it): a range entered between two calls says the user's code moved on to
    another statement between them (sync_changes.index_uploads)."""
    replayed: object = field(default=None, repr=False)   # replay.Replayed, unchanged
    cache: dict = field(default_factory=dict, repr=False)  # replay's offsets and plan

    @property
    def n(self) -> int:
        return len(self.kind)

    @property
    def points(self) -> np.ndarray:
        """Every point's measured time (2i: node i's start, 2i + 1: its end)."""
        return np.column_stack([self.start, self.end]).ravel()

    def time(self, point: int) -> int:
        """A point's measured time."""
        i = point // 2
        return int(self.start[i] if point % 2 == 0 else self.end[i])

    def add(self, src: int, dst: int, edge: int) -> None:
        """An edge from point `src` to point `dst`."""
        self.add_many(np.array([src]), np.array([dst]), edge)

    def add_many(self, src: np.ndarray, dst: np.ndarray, edge: int) -> None:
        """Edges of one kind from points `src` to points `dst`."""
        if len(src):
            self.cache.clear()
            self.parts.append((np.asarray(src, dtype=np.int64),
                               np.asarray(dst, dtype=np.int64), edge))

    def _edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, kind) of every edge, joined once after the last was added."""
        if self._joined is None or self._joined[0] != len(self.parts):
            if self.parts:
                src = np.concatenate([p[0] for p in self.parts])
                dst = np.concatenate([p[1] for p in self.parts])
                kind = np.concatenate([np.full(len(p[0]), p[2], dtype=np.int64)
                                       for p in self.parts])
            else:
                src = dst = kind = np.zeros(0, dtype=np.int64)
            self._joined = (len(self.parts), (src, dst, kind))
        return self._joined[1]

    @property
    def src(self) -> np.ndarray:
        return self._edges()[0]

    @property
    def dst(self) -> np.ndarray:
        return self._edges()[1]

    @property
    def edge(self) -> np.ndarray:
        return self._edges()[2]

    @property
    def gap(self) -> np.ndarray:
        """Each edge's measured gap: its destination's time less its source's."""
        pt = self.points
        return pt[self.dst] - pt[self.src]

    def op_calls(self) -> np.ndarray:
        """Each GPU operation's launching call node (same correlation id; -1 where no call
        of the step launched it), made once: the nodes are fixed when edges are added."""
        if self._op_calls is None:
            self._op_calls = np.array([self.corr_of.get(int(c), -1)
                                       for c in self.ops["corr"].tolist()], dtype=np.int64)
        return self._op_calls

    def op_launched(self) -> np.ndarray:
        """Each GPU operation's launch: the start of its launching call (-1 where no call
        of the step launched it)."""
        call = self.op_calls()
        return np.where(call >= 0, self.start[np.maximum(call, 0)], -1)

    def own_ops(self) -> np.ndarray:
        """The nodes of the GPU operations launched by the step's own calls."""
        return len(self.calls) + np.flatnonzero(self.op_calls() >= 0)

    @property
    def end_point(self) -> int:
        return 2 * (self.n - 1) + 1


def op_label(kind: int, copy_kind: int) -> str:
    """A GPU operation's critical-path category: a kernel "gpu"; a copy by the engine
    direction it takes ("copy_h2d", "copy_d2h"); sets, device and peer copies
    "copy_other"."""
    if kind == 0:
        return "gpu"
    return {1: "copy_h2d", 2: "copy_d2h"}.get(int(copy_kind), "copy_other") \
        if kind == 1 else "copy_other"


def _inside(inner: tuple[np.ndarray, ...], outer: tuple[np.ndarray, ...]) -> np.ndarray:
    """For each interval of `inner` (tid, start, end arrays), the row of `outer` on its
    thread that holds it (the latest to start before it, when it also ends after it),
    else -1."""
    i_tid, i_start, i_end = inner
    o_tid, o_start, o_end = outer
    at = np.full(len(i_tid), -1, dtype=np.int64)
    for tid in np.unique(i_tid).tolist():
        pos = np.flatnonzero(i_tid == tid)
        rows = np.flatnonzero(o_tid == tid)
        if not len(rows):
            continue
        rows = rows[np.argsort(o_start[rows], kind="stable")]
        cs, ce = o_start[rows], o_end[rows]
        k = np.searchsorted(cs, i_start[pos], side="right") - 1
        ok = (k >= 0) & (i_end[pos] <= ce[np.maximum(k, 0)])
        at[pos[ok]] = rows[k[ok]]
    return at


def _outermost(calls: pd.DataFrame, sel: np.ndarray) -> tuple[pd.DataFrame, dict[int, int]]:
    """Of the calls at rows `sel`, those no other call of their thread holds (a driver
    call made inside a runtime call is part of it), and each correlation id -> its
    outermost call's row."""
    tids, starts = calls["tid"].to_numpy()[sel], calls["start_ns"].to_numpy()[sel]
    ends = calls["end_ns"].to_numpy()[sel]
    order = np.lexsort((-ends, starts, tids))
    tids, ends = tids[order].tolist(), ends[order].tolist()
    holder = list(range(len(order)))
    for i in range(1, len(order)):        # a call inside the one holding its predecessor
        h = holder[i - 1]
        if tids[h] == tids[i] and ends[i] <= ends[h]:
            holder[i] = h
    hold = np.array(holder, dtype=np.int64)
    keep = hold == np.arange(len(order))
    row_of = np.cumsum(keep) - 1
    corr = dict(zip(calls["corr"].to_numpy()[sel][order].tolist(), row_of[hold].tolist(),
                    strict=True))
    return calls.take(sel[order][keep]).reset_index(drop=True), corr


START = "step start"
"""The OS node (no time) at the step's start on its range's thread, the node before END,
first in program order on its thread (program_order): the time before the thread's first
call is program time a change can remove (input built there), not a fixed start."""


def nodes(rows: StepRows, tid: int, lo: int, hi: int) -> Graph:
    """The step's nodes: the outermost calls that start in [lo, hi), the OS calls outside
    them, the GPU operations running in it and those its calls launched (a step queued
    ahead of the GPU: they run after it), and the step's end (last)."""
    cs = rows.calls["start_ns"].to_numpy()
    calls, corr_of = _outermost(rows.calls, np.flatnonzero((cs >= lo) & (cs < hi)))
    c_tid, c_start, c_end = (calls[k].to_numpy() for k in ("tid", "start_ns", "end_ns"))
    o_tid, o_start, o_end = (rows.osrt[k].to_numpy() for k in ("tid", "start_ns", "end_ns"))
    near = np.flatnonzero((o_end > lo) & (o_start < hi))
    free = _inside((o_tid[near], o_start[near], o_end[near]), (c_tid, c_start, c_end)) < 0
    first = int(min([lo, *o_start[near[free]][o_tid[near[free]] == tid].tolist()]))
    osrt = pd.concat([rows.osrt.take(near[free]), pd.DataFrame(    # the step's start on its
        {"tid": [tid], "start_ns": [first], "end_ns": [first], "name": [START]})],  # thread
        ignore_index=True)
    p_start, p_end = rows.ops["start_ns"].to_numpy(), rows.ops["end_ns"].to_numpy()
    launched = np.isin(rows.ops["corr"].to_numpy(), np.fromiter(corr_of, dtype=np.int64,
                                                               count=len(corr_of)))
    ops = rows.ops.take(np.flatnonzero((p_end > lo) & ((p_start < hi) | launched))
                        ).reset_index(drop=True)
    n_o, n_s = len(ops), len(osrt)
    kind = np.repeat(np.array([CALL, OP, OS, END], dtype=np.int64), [len(calls), n_o, n_s, 1])
    last = np.array([hi], dtype=np.int64)

    def joined(*parts: np.ndarray) -> np.ndarray:      # np.r_ cost 20 us a call, here
        return np.concatenate([np.asarray(x, dtype=np.int64) for x in parts])

    start = joined(c_start, ops["start_ns"].to_numpy(), o_start[near[free]], [first], last)
    end = joined(c_end, ops["end_ns"].to_numpy(), o_end[near[free]], [first], last)
    thread = joined(c_tid, np.full(n_o, -1), o_tid[near[free]], [tid, tid])
    copy_kind = ops["copy_kind"].tolist() if "copy_kind" in ops else [0] * n_o
    label = [HOST_PARTS[p] for p in calls["part"].tolist()] + \
        [op_label(k, c) for k, c in zip(ops["kind"].tolist(), copy_kind, strict=True)] + \
        ["os"] * n_s + ["end"]
    return Graph(lo, hi, tid, kind, start, end, thread, label, calls, ops, osrt, rows.syncs,
                 corr_of)


def program_order(g: Graph, nodes: np.ndarray) -> np.ndarray:
    """`nodes` by thread, then start, the step's START node first on a tie."""
    later = np.ones(len(nodes), dtype=np.int64)
    later[nodes == g.n - 2] = 0                  # START: the node before END
    return nodes[np.lexsort((later, g.start[nodes], g.thread[nodes]))]
