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
they sum to the replayed step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from .graph import (
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

CATEGORIES = ("gpu", "copies", "launch", "cpu", "sync", "memory", "module", "other_cuda",
              "os", "other_thread")
"""What held the critical path: GPU work (kernels), copies and sets, kernel launch calls
and their latency, CPU time between calls on the range's thread, waiting for the GPU
(synchronize calls and their wake-up), memory management, module loads, other CUDA
calls, OS calls, and another thread of the process (its calls and the time between)."""
SAID = {"gpu": "GPU work", "copies": "copies", "launch": "launch calls",
        "cpu": "CPU between calls", "sync": "sync waiting", "memory": "memory management",
        "module": "module loads", "other_cuda": "other CUDA calls", "os": "OS calls",
        "other_thread": "another thread"}


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
    """(each edge's offset, whether it binds its point at measurement time)."""
    src, dst = np.asarray(g.src, dtype=np.int64), np.asarray(g.dst, dtype=np.int64)
    gap = np.maximum(np.asarray(g.gap, dtype=np.int64), 0)
    kind = np.asarray(g.edge, dtype=np.int64)
    if not len(src):
        return gap, np.zeros(0, dtype=bool)
    t_src = g.points[src]
    order = np.lexsort((t_src, dst))
    last = np.r_[dst[order][1:] != dst[order][:-1], True]
    binds = np.zeros(len(src), dtype=bool)
    binds[order[last]] = True
    floor = gap.copy()
    for k in (LAUNCH, STREAM):
        seen = gap[binds & (kind == k)]
        floor[kind == k] = np.minimum(gap[kind == k], int(np.median(seen)) if len(seen) else 0)
    floor[kind == EVENT] = 0
    own = kind == OWN
    woken = {int(d): int(x) for d, x in zip(dst[(kind == RELEASE) | (kind == THREAD)],
                                            gap[(kind == RELEASE) | (kind == THREAD)],
                                            strict=True)}
    for e in np.flatnonzero(own & ~binds).tolist():
        floor[e] = min(int(gap[e]), woken.get(int(dst[e]), int(gap[e])))
    return np.where(binds, gap, floor), binds


def replay(g: Graph, offset: np.ndarray | None = None,
           keep: np.ndarray | None = None) -> Replayed:
    """The graph's points replayed (`offset`: each edge's, default `offsets(g)`; `keep`:
    which edges stay, default all)."""
    off = offsets(g)[0] if offset is None else offset
    src, dst = np.asarray(g.src, dtype=np.int64), np.asarray(g.dst, dtype=np.int64)
    if keep is not None:
        src, dst, off = src[keep], dst[keep], off[keep]
        edges = np.flatnonzero(keep)
    else:
        edges = np.arange(len(src))
    points = 2 * g.n
    times = g.points.copy()
    via = np.full(points, -1, dtype=np.int64)
    indeg = np.bincount(dst, minlength=points)
    out: list[list[int]] = [[] for _ in range(points)]
    for k, s in enumerate(src.tolist()):
        out[s].append(k)
    best = np.full(points, np.iinfo(np.int64).min, dtype=np.int64)
    ready = [p for p in range(points) if indeg[p] == 0]
    done = 0
    while ready:
        p = ready.pop()
        done += 1
        t = int(times[p])
        for k in out[p]:
            d = int(dst[k])
            arrive = t + int(off[k])
            if arrive > best[d]:
                best[d], via[d] = arrive, int(edges[k])
            indeg[d] -= 1
            if indeg[d] == 0:
                times[d] = best[d]
                ready.append(d)
    if done < points:
        raise CycleError(f"the step at {g.lo} has a dependency cycle ({points - done} "
                         "points left)")
    return Replayed(times, via)


def critical_path(g: Graph, r: Replayed) -> Counter[str]:
    """The replayed step's time by what held it (CATEGORIES), walking back from its end."""
    out: Counter[str] = Counter()
    p, t = g.end_point, int(r.times[g.end_point])
    src = np.asarray(g.src, dtype=np.int64)
    kind = np.asarray(g.edge, dtype=np.int64)
    while t > g.lo:
        e = int(r.via[p])
        if e < 0:
            out[_anchored(g, p // 2)] += t - g.lo
            break
        q = int(src[e])
        tq = max(min(int(r.times[q]), t), g.lo)
        out[_category(g, int(kind[e]), q // 2, p // 2)] += t - tq
        p, t = q, tq
    return out


def _cpu(g: Graph, i: int, here: str) -> str:
    return here if g.thread[i] == g.tid else "other_thread"


def _category(g: Graph, edge: int, a: int, b: int) -> str:
    """What an edge from node a to node b held the path with."""
    if edge == OWN:
        label = g.label[a]
        if g.kind[a] == OP:
            return label
        return _cpu(g, a, label if label in CATEGORIES else "other_cuda")
    if edge in (PROGRAM, STEP):
        return _cpu(g, b, "cpu")
    if edge == LAUNCH:
        return "launch"
    if edge in (STREAM, EVENT):
        return "gpu"
    if edge == RELEASE:
        return "sync"
    return "other_thread"


def _anchored(g: Graph, i: int) -> str:
    """What held the path before a node nothing in the step came before."""
    if g.kind[i] == OP:
        return g.label[i]
    return _cpu(g, i, "cpu") if g.kind[i] == CALL or g.thread[i] >= 0 else "cpu"


__all__ = ["CATEGORIES", "EDGES", "SAID", "Replayed", "critical_path", "offsets", "replay"]
