"""A step's time in a run of steps like it: its GPU backlog carried into the next step.

A step's graph is one window of its run (graph.py): its host work from its start to the
next step's, and the GPU work running in it, earlier steps' included at their measured
times. Replayed alone with a change, the step ends when its own host and GPU work end. In
the run it does not: the next step's host work starts when this step's host work ends,
while this step's kernels may still run, and the next step's kernels queue behind them.
A sync removed from a GPU-bound step lets the next step's Python run under this step's
kernels; the step alone would only see its own wait shortened.

So a change is priced on the step's *steady period*: the time between two steps' starts
in a long run of steps that replay like this one. The work earlier steps left on the GPU
when the step starts (its backlog, `b`) holds the step's first operation on each stream
(the BACKLOG edges, graph.py, from the step's start); the measured earlier operations no
longer hold its own. Replayed with backlog `b`, the step's host ends at `host` and its GPU
work at `gpu` (both from the step's start): the next step starts with backlog
`max(0, gpu - host)`; a call released by earlier steps' work (a sync draining the
backlog) is released when the backlog ends, its measured end moved with it. From the
measured backlog, a few rounds of that reach the fixed
point of a loop the host holds (the backlog stays put: a step that syncs empties it), or
show a loop the GPU holds (the backlog grows by the same amount each round). The period is
`max(host, gpu - b)`: the host's step, or the GPU's step once it is fed back to back.

A run's last step ends with its GPU backlog (graph.build's `gpu_end`): it is priced as it
ran, alone (`Replayed.time`). So is a step whose own GPU work is not all in its graph (a
GPU so far behind that the operations its launches made run past what was read of the
export): its GPU step is unknown.
"""

from __future__ import annotations

import numpy as np

from .graph import BACKLOG, EVENT, OP, RELEASE, STREAM, Graph
from .replay import offsets, replay

ROUNDS = 4
"""Rounds of the backlog's fixed point at most: a loop the host holds settles in one or
two, one the GPU holds shows its GPU step from the second on."""
SETTLED_NS = 1_000
"""A backlog that moves less than this between rounds has settled."""


def period(g: Graph, off: np.ndarray, keep: np.ndarray) -> int:
    """The step's steady period (ns, see the module doc) replayed with edge offsets `off`
    and kept edges `keep` (replay.py's, a change applied or not)."""
    own = g.own_ops()
    if g.run_end or not len(own) or not _complete(g):
        return replay(g, off, keep).time(g)
    src, dst, kind = g.src, g.dst, g.edge
    mine = np.zeros(g.n, dtype=bool)
    mine[own] = True
    held = np.isin(kind, (STREAM, EVENT)) & ~mine[src // 2] & mine[dst // 2]
    kept, moved = keep & ~held, off.copy()
    floor = kind == BACKLOG                  # from the step's START node (graph.py)
    drain = (kind == RELEASE) & (g.kind[src // 2] == OP) & ~mine[src // 2]
    start = int(g.start[g.n - 2])
    b = measured = _measured_backlog(g, mine)
    host = gpu = used = 0
    for _ in range(ROUNDS):
        moved[floor] = g.lo + b - start
        moved[drain] = off[drain] + b - measured     # the backlog's end moves with it
        r = replay(g, moved, kept)
        host = int(r.times[g.end_point]) - g.lo
        gpu = int(r.times[2 * own + 1].max()) - g.lo
        used, b = b, max(0, gpu - host)
        if abs(b - used) < SETTLED_NS:
            break
    return max(host, gpu - used)


def _complete(g: Graph) -> bool:
    """Whether every launch of the step's calls has its GPU operation in the graph."""
    if "complete" not in g.cache:
        n = len(g.calls)
        launches = g.calls["corr"].to_numpy()[np.array(g.label[:n]) == "launch"]
        g.cache["complete"] = bool(np.isin(launches, g.ops["corr"].to_numpy()).all())
    return g.cache["complete"]


def _measured_backlog(g: Graph, mine: np.ndarray) -> int:
    """How long the GPU still ran earlier steps' work after the step started (ns)."""
    ops0 = len(g.calls)
    earlier = ops0 + np.flatnonzero(~mine[ops0:ops0 + len(g.ops)])
    return max(0, int(g.end[earlier].max()) - g.lo) if len(earlier) else 0


def steady_unchanged(g: Graph) -> int:
    """The step's steady period replayed unchanged (kept with the graph)."""
    if "steady" not in g.cache:
        off, _ = offsets(g)
        g.cache["steady"] = period(g, off, np.ones(len(off), dtype=bool))
    return g.cache["steady"]
