"""Launches that wait for a full launch queue: the host's fourth way of waiting for the GPU.

A CUDA launch returns at once while the device's launch queue has room. A host that runs
far enough ahead of the GPU (a thousand launches or so) fills it, and from then on each
launch returns only when the GPU has finished an operation and freed a slot: the
host runs at the GPU's pace, and its time shows as long launch calls, not as syncs.

`queue_waits` finds those launches in a step, for graph.py's RELEASE edges: a launch call
that lasted QUEUE_WAIT_NS or more while QUEUE_DEPTH or more operations it did not launch
itself were queued or running (launched by earlier calls, not yet done), and during which
an operation ended. It ends after the operation that ended last inside it, as a
synchronize does: a change that makes the GPU's work faster frees the slot sooner, and
one that makes it the host's turn again (the queue no longer full) leaves the launch its
own return.
"""

from __future__ import annotations

import numpy as np

QUEUE_WAIT_NS = 100_000
"""A launch call this long or longer may have waited for the queue (a launch that does not
wait returns in microseconds)."""
QUEUE_DEPTH = 256
"""Operations queued or running ahead of a launch for its wait to be the queue's (a launch
slowed by a module load or an allocation has a short queue ahead of it)."""


def queue_waits(launch: np.ndarray, start: np.ndarray, end: np.ndarray,
                op_launched: np.ndarray, op_end: np.ndarray) -> list[tuple[int, int]]:
    """(operation, launch call) pairs: each launch call that waited for the queue (see the
    module doc) and the operation that ended last inside it. `launch`: the launch calls'
    indices into `start`/`end` (the calls' times); `op_launched`: each operation's launch
    time (its call's start; -1 where the step does not hold its call, an earlier step's),
    `op_end`: its end."""
    out: list[tuple[int, int]] = []
    long = launch[(end[launch] - start[launch]) >= QUEUE_WAIT_NS]
    for i in long.tolist():
        s, e = int(start[i]), int(end[i])
        ahead = (op_launched < s) & (op_end > s)
        if int(ahead.sum()) < QUEUE_DEPTH:
            continue
        inside = np.flatnonzero((op_end >= s) & (op_end <= e))
        if len(inside):
            out.append((int(inside[np.argmax(op_end[inside])]), i))
    return out
