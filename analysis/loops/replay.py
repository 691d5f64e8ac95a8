"""Replay a step's graph and read its critical path.

`replay(g)` walks the points in dependency order: each starts at the latest of what it
depends on, each edge adding its offset. The edge that came last at measurement time (the
binding one) adds its measured gap; every other edge the least its kind needs (`floors`:
a call's own return once what it waited for is gone, the step's typical launch latency
and back-to-back gap on a stream), so that an unchanged graph replays to the measured
times and a changed one (a sync removed, a kernel faster) moves what depends on it. A gap
measured negative (clocks of two sources a few ns apart) replays as zero: the replay's
error against the measured step, reported per loop.

`critical_path(g, r)` walks back from the step's end along the edge that set each point,
and files each stretch under what held it (CATEGORIES): the stretches are contiguous, so
they sum to the replayed step. Beside them, the other threads' stretches by thread
("thread:<global tid>") and the GIL waits' by the thread that held the GIL
("gil:<global tid>", gil.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..documents.entries import CATEGORIES, SAID
from .graph import (
    ALLOC,
    BACKLOG,
    CALL,
    EDGES,
    EVENT,
    LAUNCH,
    OP,
    OWN,
    PROGRAM,
    RELEASE,
    STEP,
    STREAM,
    THREAD,
    Graph,
)


class CycleError(ValueError):
    """A step whose edges go round in a cycle (clocks that disagree): it is not modeled."""


@dataclass
class Replayed:
    """Each point's replayed time and the edge that set it (-1: anchored at its measured
    time, nothing before it in the step)."""

    times: np.ndarray
    via: np.ndarray

    def wall(self, g: Graph) -> int:
        """The replayed step's wall time: its start to its end on the range's thread."""
        return int(self.times[g.end_point]) - g.lo

    def time(self, g: Graph) -> int:
        """The replayed step's time: to its end, or to the end of the GPU work it launched
        where that runs longer (a step whose host no longer waits is not done before its
        work is)."""
        own = g.own_ops()
        last = int(self.times[2 * own + 1].max()) if len(own) else g.lo
        return max(int(self.times[g.end_point]), last) - g.lo


def offsets(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(each edge's offset, whether it binds its point at measurement time); computed
    once per graph (the graph is complete when it is first replayed)."""
    if g.cache.get("offsets") is None:
        g.cache["offsets"] = _offsets(g)
    return g.cache["offsets"]


def _offsets(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    src, dst = np.asarray(g.src, dtype=np.int64), np.asarray(g.dst, dtype=np.int64)
    gap = np.maximum(np.asarray(g.gap, dtype=np.int64), 0)
    kind = np.asarray(g.edge, dtype=np.int64)
    if not len(src):
        return gap, np.zeros(0, dtype=bool)
    order = np.lexsort((kind != BACKLOG, g.points[src], dst))   # a tie: not the backlog
    last = np.r_[dst[order][1:] != dst[order][:-1], True]
    binds = np.zeros(len(src), dtype=bool)
    binds[order[last]] = True
    floor = gap.copy()
    woke_sync = (kind == RELEASE) & (np.array(g.label, dtype=object)[dst // 2] == "sync")
    for k in (LAUNCH, STREAM, RELEASE):     # a release that did not bind: the work had
        # ended before the call (edges._Drained); its latency is a sync's, not a blocking
        # copy's, whose release holds the host's staging of pageable memory after the
        # stream drained (seed 66 g09: 159 µs, and a device sync's floor was 64 µs)
        seen = gap[binds & (woke_sync if k == RELEASE else kind == k)]
        floor[kind == k] = np.minimum(gap[kind == k], int(np.median(seen)) if len(seen) else 0)
    floor[kind == EVENT] = 0
    floor[kind == BACKLOG] = 0
    floor[kind == ALLOC] = 0         # the allocator taken in turn: where it bound
    floor[kind == STEP] = 0          # "no earlier than": a call still running at the end
                                     # bounds the end only where nothing later does
    woke = (kind == RELEASE) | (kind == THREAD)
    woken = np.full(2 * g.n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(woken, dst[woke], gap[woke])   # the waker closest to the point counts
    own = np.flatnonzero((kind == OWN) & ~binds)
    floor[own] = np.minimum(gap[own], woken[dst[own]])
    _allocator_waits(g, src, dst, kind, binds, floor)
    return np.where(binds, gap, floor), binds


def _allocator_waits(g: Graph, src: np.ndarray, dst: np.ndarray, kind: np.ndarray,
                     binds: np.ndarray, floor: np.ndarray) -> None:
    """A thread's time before a memory call that took the allocator from another thread
    (a binding ALLOC edge) is its own work only up to where that thread's memory call had
    begun and its own previous node had ended: from there to the handoff it waited. Its
    program edge keeps the rest as its floor, so that a shorter memory call on the other
    thread hands the allocator over sooner."""
    took = np.flatnonzero((kind == ALLOC) & binds)
    if not len(took):
        return
    pt = g.points
    held_from = dict(zip(dst[took].tolist(), src[took].tolist(), strict=True))
    prog = np.flatnonzero((kind == PROGRAM) & np.isin(dst, dst[took]))
    for e in prog.tolist():
        holder = held_from[int(dst[e])]              # the other call's end point
        began = max(int(pt[src[e]]), int(pt[holder - 1]))
        floor[e] = max(0, int(floor[e]) - max(0, int(pt[holder]) - began))


def unchanged(g: Graph) -> Replayed:
    """The graph replayed with its own offsets (kept: every what-if compares with it)."""
    if g.replayed is None:
        g.replayed = replay(g)
    return g.replayed


def _plan(g: Graph) -> list[tuple[int, int, object]]:
    """The points that have edges into them, in dependency order, each as (point, its one
    edge, that edge's source) or (point, -1, ((edge, source), ...)); made once per graph.
    The measured order is tried first (edges nearly all go forward in time); where an edge
    goes back (clocks a few ns apart), a topological sort."""
    if g.cache.get("plan") is None:
        src, dst = np.asarray(g.src, dtype=np.int64), np.asarray(g.dst, dtype=np.int64)
        points = 2 * g.n
        order = np.lexsort((np.arange(points), g.points))
        pos = np.empty(points, dtype=np.int64)
        pos[order] = np.arange(points)
        if len(src) and not (pos[src] < pos[dst]).all():
            order = _topological(g, points, src, dst)
        by = np.argsort(dst, kind="stable")
        ptr = np.searchsorted(dst[by], np.arange(points + 1)).tolist()
        eid, s = by.tolist(), src.tolist()
        seq: list[tuple[int, int, object]] = []
        for p in order.tolist():
            a, b = ptr[p], ptr[p + 1]
            if b - a == 1:
                seq.append((p, eid[a], s[eid[a]]))
            elif b > a:
                seq.append((p, -1, tuple((k, s[k]) for k in eid[a:b])))
        g.cache["plan"] = seq
    return g.cache["plan"]


def _topological(g: Graph, points: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The points in an order every edge goes forward in (Kahn), else CycleError."""
    indeg = np.bincount(dst, minlength=points).tolist()
    by = np.argsort(src, kind="stable")
    ptr = np.searchsorted(src[by], np.arange(points + 1)).tolist()
    to = dst[by].tolist()
    ready = [p for p in range(points) if indeg[p] == 0]
    out: list[int] = []
    while ready:
        p = ready.pop()
        out.append(p)
        for q in to[ptr[p]:ptr[p + 1]]:
            indeg[q] -= 1
            if indeg[q] == 0:
                ready.append(q)
    if len(out) < points:
        raise CycleError(f"the step at {g.lo} has a dependency cycle ({points - len(out)} "
                         "points left)")
    return np.array(out, dtype=np.int64)


def replay(g: Graph, offset: np.ndarray | None = None,
           keep: np.ndarray | None = None) -> Replayed:
    """The graph's points replayed (`offset`: each edge's, default `offsets(g)`; `keep`:
    which edges stay, default all): each point with edges into it at the latest arrival
    (the first such edge on a tie), every other point at its measured time."""
    plan = _plan(g)
    off = (offsets(g)[0] if offset is None else offset).tolist()
    kept = keep.tolist() if keep is not None else [True] * len(off)
    times = g.points.tolist()
    via = [-1] * len(times)
    for p, k, s in plan:
        if k >= 0:
            if kept[k]:
                times[p], via[p] = times[s] + off[k], k
            continue
        best, v = 0, -1
        for kk, ss in s:
            if kept[kk] and (v < 0 or times[ss] + off[kk] > best):
                best, v = times[ss] + off[kk], kk
        if v >= 0:
            times[p], via[p] = best, v
    return Replayed(np.array(times, dtype=np.int64), np.array(via, dtype=np.int64))


def critical_path(g: Graph, r: Replayed) -> Counter[str]:
    """The replayed step's time by what held it (CATEGORIES), walking back from its end:
    the walk in Python over lists, what each stretch was filed under in numpy."""
    p, t = g.end_point, int(r.times[g.end_point])
    via, times, src = r.via.tolist(), r.times.tolist(), g.src.tolist()
    edges, spans = [], []
    anchored = 0
    while t > g.lo:
        e = via[p]
        if e < 0:
            anchored = t - g.lo
            break
        q = src[e]
        tq = max(min(times[q], t), g.lo)
        edges.append(e)
        spans.append(t - tq)
        p, t = q, tq
    out: Counter[str] = Counter()
    if edges:
        e = np.array(edges, dtype=np.int64)
        cat, ns = _categories(g, e), np.array(spans, dtype=np.float64)
        for c, total in enumerate(np.bincount(cat, weights=ns,
                                              minlength=len(CATEGORIES)).tolist()):
            if total:
                out[CATEGORIES[c]] += int(round(total))
        out.update(_by_thread(g, e, cat, ns))
    if anchored:
        held = _anchored(g, p // 2)
        out[held] += anchored
        if held == "other_thread":
            out[f"thread:{int(g.thread[p // 2])}"] += anchored
    return out


def _by_thread(g: Graph, e: np.ndarray, cat: np.ndarray, ns: np.ndarray) -> Counter[str]:
    """The other threads' share of the path by thread ("thread:<tid>"), and the GIL
    waits' by the thread that held the GIL ("gil:<tid>", gil.py)."""
    out: Counter[str] = Counter()
    a, b = g.src[e] // 2, g.dst[e] // 2
    other = cat == CATEGORIES.index("other_thread")
    who = np.where((g.thread[a] >= 0) & (g.thread[a] != g.tid), g.thread[a], g.thread[b])
    for t, span in zip(who[other].tolist(), ns[other].tolist(), strict=True):
        out[f"thread:{t}"] += int(round(span))
    holder = g.cache.get("gil_holder", {})
    gil = cat == CATEGORIES.index("gil")
    for node, span in zip(a[gil].tolist(), ns[gil].tolist(), strict=True):
        out[f"gil:{holder.get(node, -1)}"] += int(round(span))
    return out


def _categories(g: Graph, e: np.ndarray) -> np.ndarray:
    """What each edge held the path with (index into CATEGORIES): a node's own time its
    label (a call of another thread: other_thread), the time between calls CPU, a launch
    edge the launch latency, stream order and event waits GPU work, a release the sync."""
    at = {c: i for i, c in enumerate(CATEGORIES)}
    lab = np.array([at.get(x, at["other_cuda"]) for x in g.label], dtype=np.int64)
    kind, a, b = g.edge[e], g.src[e] // 2, g.dst[e] // 2
    mine_a, mine_b = g.thread[a] == g.tid, g.thread[b] == g.tid
    other = at["other_thread"]
    own = np.where(g.kind[a] == OP, lab[a], np.where(mine_a, lab[a], other))
    return np.select(
        [kind == OWN, np.isin(kind, (PROGRAM, STEP)), kind == LAUNCH,
         np.isin(kind, (STREAM, EVENT, BACKLOG)), kind == RELEASE],
        [own, np.where(mine_b, at["cpu"], other), at["launch"], at["gpu"], at["sync"]],
        other)


def _anchored(g: Graph, i: int) -> str:
    """What held the path before a node nothing in the step came before."""
    if g.kind[i] == OP:
        return g.label[i]
    mine = g.thread[i] == g.tid or not (g.kind[i] == CALL or g.thread[i] >= 0)
    return "cpu" if mine else "other_thread"


__all__ = ["CATEGORIES", "EDGES", "SAID", "Replayed", "critical_path", "offsets", "replay",
           "unchanged"]
