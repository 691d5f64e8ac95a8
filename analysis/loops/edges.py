"""The edges of a step's graph (graph.py's module doc lists them), built from the export.

`build` makes the nodes (graph.nodes) and then each kind of edge in turn: a thread's own
order and its calls' durations, launches, stream order and event waits, the releases of
blocking calls and of launches that waited for a full launch queue (queue.py), the
allocator taken in turn by the process's threads, and the waits of one thread for another.
"""

from __future__ import annotations

import numpy as np

from ..load.nsys_sqlite import os_pid
from ..load.nsys_steps import StepRows
from .graph import (
    ALLOC,
    BACKLOG,
    BLOCKING_PARTS,
    CALL,
    END,
    EVENT,
    HOST_PARTS,
    LAUNCH,
    OS,
    OWN,
    PROGRAM,
    RELEASE,
    STEP,
    STREAM,
    THREAD,
    WAITS,
    Graph,
    nodes,
    program_order,
)
from .queue import queue_waits

ALLOC_HANDOFF_NS = 5_000
"""A memory call that starts this soon after another thread's memory call ended took the
allocator from it (PyTorch's caching allocator holds one lock per device around its
cudaMalloc and cudaFree calls, and the driver serializes them within a process)."""


def build(rows: StepRows, tid: int, lo: int, hi: int, gpu_end: bool = False) -> Graph:
    """The step's graph: its nodes and every edge of the module doc (`gpu_end`: the step
    is its run's last, ending with its GPU work)."""
    g = nodes(rows, tid, lo, hi)
    ops0 = len(g.calls)
    _own(g)
    _program(g)
    if gpu_end:
        _backlog(g)
    g.run_end = gpu_end
    _launch(g, ops0)
    _stream(g, ops0)
    _queued(g, ops0)
    _release(g, ops0)
    _queue_full(g, ops0)
    _allocator(g)
    _thread(g)
    _kicked(g)
    return g


def _own(g: Graph) -> None:
    """Each node's start -> its end (the step's end node: no time)."""
    g.add_many(2 * np.arange(g.n), 2 * np.arange(g.n) + 1, OWN)


def _program(g: Graph) -> None:
    """Program order on each thread (calls and OS calls by start), and the step's end
    after the range thread's last node."""
    order = program_order(g, np.flatnonzero((g.kind == CALL) | (g.kind == OS)))
    same = g.thread[order[1:]] == g.thread[order[:-1]]
    g.add_many(2 * order[:-1][same] + 1, 2 * order[1:][same], PROGRAM)
    mine = order[g.thread[order] == g.tid]
    if len(mine):                       # a call still running at a run's end: its start
        last = int(mine[-1])
        g.add(2 * last + int(g.end[last] <= g.hi), g.end_point - 1, STEP)


def _backlog(g: Graph) -> None:
    """The step's end after the last GPU operation that ends by then, its calls' or an
    earlier step's (the run's end waits for its GPU backlog: a range beside the step
    that only syncs, last in its run, launched nothing, and the work it waited for still
    ends the run)."""
    ops = len(g.calls) + np.arange(len(g.ops))
    ops = ops[g.end[ops] <= g.hi]
    if len(ops):
        g.add(2 * int(ops[np.argmax(g.end[ops])]) + 1, g.end_point - 1, STEP)


def _queued(g: Graph, ops0: int) -> None:
    """The step's start -> the first operation its calls launched on each stream (no
    time here; steady.py gives it the GPU work earlier steps left)."""
    own = g.own_ops()
    if not len(own):
        return
    key = (g.ops["device"].to_numpy() * (1 << 32) + g.ops["stream"].to_numpy())[own - ops0]
    order = np.lexsort((g.start[own], key))
    first = own[order][np.r_[True, key[order][1:] != key[order][:-1]]]
    g.add_many(np.full(len(first), 2 * (g.n - 2)), 2 * first, BACKLOG)


def _launch(g: Graph, ops0: int) -> None:
    """Each operation after the call that launched it (same correlation id; a call made
    inside another launches as the outer one)."""
    call = g.op_calls()
    op = ops0 + np.arange(len(call))
    ok = (call >= 0) & (g.start[np.maximum(call, 0)] <= g.start[op])
    g.add_many(2 * call[ok], 2 * op[ok], LAUNCH)


def _stream(g: Graph, ops0: int) -> None:
    """Stream order: each operation after the previous one on its device and stream; the
    first one launched after a stream wait (cudaStreamWaitEvent) after the work other
    streams finished before it."""
    ops = g.ops
    order = np.lexsort((ops["start_ns"].to_numpy(), ops["stream"].to_numpy(),
                        ops["device"].to_numpy()))
    key = ops["device"].to_numpy() * (1 << 32) + ops["stream"].to_numpy()
    same = key[order[1:]] == key[order[:-1]]
    g.add_many(2 * (ops0 + order[:-1][same]) + 1, 2 * (ops0 + order[1:][same]), STREAM)
    _event_waits(g, ops0, key)


def _event_waits(g: Graph, ops0: int, key: np.ndarray) -> None:
    """After a stream wait (cudaStreamWaitEvent), the first operation launched on the
    waiting stream (its sync record's, else the next launched) starts after the work
    launched on other streams before the wait."""
    ops = g.ops
    waits = [i for i, n in enumerate(g.calls["name"].tolist())
             if n.startswith(("cudaStreamWaitEvent", "cuStreamWaitEvent"))]
    if not waits:
        return
    launched = g.op_launched()
    stream_of = dict(zip(g.syncs["corr"].tolist(), g.syncs["stream"].tolist(), strict=True))
    corr = g.calls["corr"].to_numpy()
    for w in waits:
        t = int(g.start[w])
        later = np.flatnonzero(launched > t)
        stream = stream_of.get(int(corr[w]), -1)
        if stream >= 0:
            later = later[ops["stream"].to_numpy()[later] == stream]
        if not len(later):
            continue
        first = int(later[np.argmin(launched[later])])
        other = np.flatnonzero((key != key[first]) & (launched >= 0) & (launched < t)
                               & (ops["end_ns"].to_numpy() <= g.start[ops0 + first]))
        if len(other):
            done = int(other[np.argmax(ops["end_ns"].to_numpy()[other])])
            g.add(2 * (ops0 + done) + 1, 2 * (ops0 + first), EVENT)


def _release(g: Graph, ops0: int) -> None:
    """A blocking call ends after the operation it waited for: the one (of its stream,
    when its sync record names one) that ended last inside the call."""
    calls, ops = g.calls, g.ops
    part = calls["part"].to_numpy()
    memory = np.array([("Memcpy" in n or "Memset" in n or "Free" in n)
                       for n in calls["name"].tolist()], dtype=bool)
    blocking = np.flatnonzero(np.isin(part, BLOCKING_PARTS) | memory).tolist()
    if not blocking:
        return
    stream_of = dict(zip(g.syncs["corr"].tolist(), g.syncs["stream"].tolist(), strict=True)) \
        if len(g.syncs) else {}
    event_of = dict(zip(g.syncs["corr"].tolist(), g.syncs["event"].tolist(), strict=True)) \
        if len(g.syncs) else {}
    o_end, o_stream = ops["end_ns"].to_numpy(), ops["stream"].to_numpy()
    corrs = calls["corr"].to_numpy()
    syncs = set(np.flatnonzero(part == HOST_PARTS.index("sync")).tolist())
    drained = _Drained(g)
    for i in blocking:
        s, e, corr = int(g.start[i]), int(g.end[i]), int(corrs[i])
        inside = (o_end >= s) & (o_end <= e)
        stream = stream_of.get(corr, -1)
        plain = event_of.get(corr, -1) in (-1, 4294967295)      # not an event's sync
        if stream >= 0 and plain:
            inside &= o_stream == stream
        hit = np.flatnonzero(inside)
        if len(hit):
            j = int(hit[np.argmax(o_end[hit])])
            g.add(2 * (ops0 + j) + 1, 2 * i + 1, RELEASE)
        if i in syncs and plain:
            for j in drained.last_before(int(g.start[i]), stream):
                g.add(2 * (ops0 + j) + 1, 2 * i + 1, RELEASE)


class _Drained:
    """A synchronize call ends after the work launched before it: per stream (its own,
    or every stream for a device synchronize), the last operation launched before the
    call. Where that work had ended before the call, the edge costs nothing as measured;
    a replay that delays the work (an earlier wait taken away) makes the call wait for it,
    as it would. Each stream's operations sorted once by launch, found by bisection."""

    def __init__(self, g: Graph) -> None:
        launched = g.op_launched()              # an earlier step's: from its own start
        launched = np.where(launched >= 0, launched, g.ops["start_ns"].to_numpy()) \
            if len(g.ops) else np.zeros(0)
        o_stream = g.ops["stream"].to_numpy() if len(g.ops) else np.zeros(0, dtype=np.int64)
        self.streams: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for s in np.unique(o_stream).tolist():
            mine = np.flatnonzero(o_stream == s)
            mine = mine[np.argsort(launched[mine], kind="stable")]
            self.streams[int(s)] = (launched[mine], mine)

    def last_before(self, t: int, stream: int) -> list[int]:
        """The operations (rows) launched last before `t`, one per stream waited on."""
        out = []
        for s, (times, rows) in self.streams.items():
            if stream >= 0 and s != stream:
                continue
            k = int(np.searchsorted(times, t, side="left"))
            if k:
                out.append(int(rows[k - 1]))
        return out


def _queue_full(g: Graph, ops0: int) -> None:
    """A launch that waited for the full launch queue ends after the operation that
    freed its slot (queue.py)."""
    launch = np.flatnonzero(np.array(g.label[:ops0]) == "launch")
    if not len(launch) or not len(g.ops):
        return
    for op, i in queue_waits(launch, g.start, g.end, g.op_launched(),
                             g.ops["end_ns"].to_numpy(), g.ops["corr"].to_numpy()):
        g.add(2 * (ops0 + op) + 1, 2 * i + 1, RELEASE)


def _allocator(g: Graph) -> None:
    """The allocator as an engine of the process: a memory call that starts within
    ALLOC_HANDOFF_NS of the end of the memory call of another thread of its process that
    ran before it starts after that call (it waited for the allocator). Where the thread
    had its own work until then, program order binds it and this edge costs nothing
    (replay.offsets: its floor is zero)."""
    mem = np.flatnonzero(np.array(g.label[:len(g.calls)], dtype=object) == "memory")
    if len(mem) < 2:
        return
    mem = mem[np.lexsort((g.start[mem], os_pid(g.thread[mem])))]
    a, b = mem[:-1], mem[1:]
    gap = g.start[b] - g.end[a]
    took = (os_pid(g.thread[a]) == os_pid(g.thread[b])) & (g.thread[a] != g.thread[b]) \
        & (gap >= 0) & (gap <= ALLOC_HANDOFF_NS)
    g.add_many(2 * a[took] + 1, 2 * b[took], ALLOC)


def _thread(g: Graph) -> None:
    """A thread resumes after the other thread's work it waited for: a wait (WAITS) ends
    after the CUDA call of another thread that ended last inside it; and, where no OS
    call was traced, the range's thread resumes after a gap (between two of its nodes) no
    earlier than the last call another thread ended in that gap."""
    calls = np.flatnonzero(g.kind == CALL)
    os0 = len(g.calls) + len(g.ops)
    _released(g, calls, os0 + np.flatnonzero(g.osrt["name"].isin(WAITS).to_numpy(dtype=bool)))
    cpu = program_order(g, np.flatnonzero(((g.kind == CALL) | (g.kind == OS) | (g.kind == END))
                                          & (g.thread == g.tid)))
    a, b = cpu[:-1], cpu[1:]
    names = g.osrt["name"].to_numpy()
    waited = np.array([g.kind[i] == OS and names[i - os0] in WAITS for i in a.tolist()],
                      dtype=bool)
    a, b = a[~waited], b[~waited]
    other = calls[g.thread[calls] != g.tid]
    if not len(other) or not len(b):
        return
    ends = np.sort(g.end[other])
    last = np.searchsorted(ends, g.start[b], side="right") - 1
    ok = (last >= 0) & (ends[np.maximum(last, 0)] >= g.end[a])
    if ok.any():
        by_end = other[np.argsort(g.end[other], kind="stable")]
        g.add_many(2 * by_end[last[ok]] + 1, 2 * b[ok], THREAD)


def _kicked(g: Graph) -> None:
    """A node of another thread that nothing in the step comes before (no wait of its
    thread traced) starts after the range thread's call that ended last before it: the
    work that thread does in the step is work the step gave it."""
    fed = np.zeros(2 * g.n, dtype=bool)
    fed[np.asarray(g.dst, dtype=np.int64)] = True
    cpu = np.flatnonzero((g.kind == CALL) | (g.kind == OS))
    mine = cpu[g.thread[cpu] == g.tid]
    for i in cpu[(g.thread[cpu] != g.tid) & ~fed[2 * cpu] & (g.start[cpu] >= g.lo)].tolist():
        before = mine[g.end[mine] <= g.start[i]]
        if len(before):
            g.add(2 * int(before[np.argmax(g.end[before])]) + 1, 2 * i, THREAD)


def _released(g: Graph, calls: np.ndarray, waits: np.ndarray) -> None:
    """An edge to each wait's end from the call of another thread that ended last inside
    the wait (the first such node where several end together)."""
    for t in np.unique(g.thread[waits]).tolist():
        mine = waits[g.thread[waits] == t]
        other = calls[g.thread[calls] != t]
        if not len(other):
            continue
        other = other[np.argsort(g.end[other], kind="stable")]
        ends = g.end[other]
        last = np.searchsorted(ends, g.end[mine], side="right") - 1
        ok = (last >= 0) & (ends[np.maximum(last, 0)] >= g.start[mine])
        first = np.searchsorted(ends, ends[last[ok]], side="left")
        g.add_many(2 * other[first] + 1, 2 * mine[ok] + 1, THREAD)
