"""Launches that wait for a full launch queue: the host's fourth way of waiting for the GPU.

A CUDA launch returns at once while the device's launch queue has room. A host that runs
far enough ahead of the GPU fills it, and from then on each launch returns only when the
GPU has finished an operation and freed a slot: the host runs at the GPU's pace, and its
time shows as long launch calls, not as syncs.

What the H200 showed (tests/data/queue_ab, driver 580.159.04, under Nsight Systems): at
every launch that waited in its full loop, 1,022 operations were queued or running ahead,
and the launch returned 0.2 to 1.5 µs after one of them ended. Where 40 of the operations
ahead were GEMM kernels with large argument blocks, 981 to 983 were ahead: the queue's
room is counted in its entries, and a kernel with more arguments takes more of it. A
long launch with a few hundred operations ahead and none ending inside it (battery seed
30) waited for something else.

`queue_waits` finds those launches in a step, for graph.py's RELEASE edges: a launch call
that lasted QUEUE_WAIT_NS or more while QUEUE_DEPTH or more operations it did not launch
itself were queued or running (launched by earlier calls, not yet done; the kernels of
one CUDA graph launch count once: one entry of the queue), and that
returned within QUEUE_RETURN_NS of the end of an operation that ended inside it (the slot
it waited for). It ends after that operation, as a synchronize does: a change that makes
the GPU's work faster frees the slot sooner, and one that makes it the host's turn again
(the queue no longer full) leaves the launch its own return.
"""

from __future__ import annotations

import numpy as np

QUEUE_WAIT_NS = 100_000
"""A launch call this long or longer may have waited for the queue (a launch that does not
wait returns in microseconds)."""
QUEUE_SLOTS = 1_024
"""The launch queue's room, in operations of small argument blocks, as measured on the
H200 (1,022 ahead at every launch that waited: the module doc)."""
QUEUE_DEPTH = QUEUE_SLOTS // 2
"""Operations queued or running ahead of a launch for its wait to be the queue's: half the
queue's room, so that kernels with large argument blocks (983 ahead where 40 were GEMMs)
still count, while a launch slowed by a module load or an allocation, with a short queue
ahead of it, does not."""
QUEUE_RETURN_NS = 20_000
"""A launch that waited for a slot returns this soon after the operation that freed it
(0.2 to 1.5 µs measured; 15 µs where a GEMM's larger entry had to be freed)."""


def queue_waits(launch: np.ndarray, start: np.ndarray, end: np.ndarray,
                op_launched: np.ndarray, op_end: np.ndarray,
                op_entry: np.ndarray | None = None) -> list[tuple[int, int]]:
    """(operation, launch call) pairs: each launch call that waited for the queue (see the
    module doc) and the operation that ended last inside it. `launch`: the launch calls'
    indices into `start`/`end` (the calls' times); `op_launched`: each operation's launch
    time (its call's start; -1 where the step does not hold its call, an earlier step's),
    `op_end`: its end; `op_entry`: the queue entry each operation came in (its correlation
    id: the kernels of one CUDA graph launch are one entry), else one each."""
    out: list[tuple[int, int]] = []
    long = launch[(end[launch] - start[launch]) >= QUEUE_WAIT_NS]
    for i in long.tolist():
        s, e = int(start[i]), int(end[i])
        ahead = (op_launched < s) & (op_end > s)
        entries = int(ahead.sum()) if op_entry is None else len(np.unique(op_entry[ahead]))
        if entries < QUEUE_DEPTH:
            continue
        inside = np.flatnonzero((op_end >= s) & (op_end <= e))
        if not len(inside):
            continue
        last = int(inside[np.argmax(op_end[inside])])
        if e - int(op_end[last]) <= QUEUE_RETURN_NS:
            out.append((last, i))
    return out
