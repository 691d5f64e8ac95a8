"""The changes that take a sync away (changes.py applies them; CHANGES says each in one
sentence): the host stops waiting, and with the wait goes what the remedy removes around
it, by the user's call: a scalar read back loses its dispatch (no_sync), a count read back
its counting and selecting kernels (fixed_shape), a size the library reads back its reads
and the check between them (size_given), a readback the host converts its copy and the
host work on it (readback_on_device), an index tensor uploaded for each indexing its copy
(index_on_device), a broken graph its resume (no_break)."""

from __future__ import annotations

import numpy as np

from .change import Change
from .edits import (
    COUNTING,
    calls_named,
    dispatch,
    edges,
    free,
    gaps_gone,
    gil_waits,
    gone,
    in_scope,
    launched,
    launcher,
    launchers,
    named_ops,
    on_thread,
    ops_gone,
    overlap,
    unblocked,
)
from .graph import CALL, OS, PROGRAM, STEP, Graph
from .kernel_changes import undispatched

SYNCS = r"Synchronize|^cu(?:da)?Memcpy(?!.*Async)|^cu(?:da)?Memset(?!.*Async)|^cudaMemcpyAsync"


def no_sync(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """No wait, nor the wait for the GIL after it (another Python thread took the GIL
    while the sync held none: edits.unblocked); and a scalar read back (`.item()`, a count
    behind `nonzero`) takes its own dispatch with it: the CPU time just before its copy,
    and the waits for the GIL since the launch before it (the read is an op of its own);
    with `whole` (the finding's call is `torch.cuda.synchronize()`, which its remedy
    removes), each device synchronize goes with its call and dispatch
    (device_syncs_gone)."""
    syncs = on_thread(g, calls_named(g, SYNCS))
    unblocked(g, off, keep, syncs)
    if change.whole:
        device_syncs_gone(g, off)
    src, dst, kind = edges(g)
    reads = scalar_reads(g, change.scope)
    for copy, _ in reads:
        off[(kind == PROGRAM) & (dst == 2 * copy)] = 0
    if reads:
        mine = dispatch(g, np.array([copy for copy, _ in reads], dtype=np.int64))
        gone(g, off, np.intersect1d(mine, gil_waits(g)))
        unconverted(g, off, reads)


DEVICE_SYNC = r"^cu(?:da)?(?:Device|Ctx)Synchronize"
"""torch.cuda.synchronize()'s call."""


def device_syncs_gone(g: Graph, off: np.ndarray) -> None:
    """Each device synchronize on the range's thread takes no time; where nothing of its
    statement's own range (the innermost range that holds it: an NVTX range around
    `torch.cuda.synchronize()`) launched, synced or managed memory before it, so does its
    thread's time in that range up to it: its dispatch (the device queries of
    torch.cuda.synchronize among it). Elsewhere the time before it is other statements'."""
    device = on_thread(g, calls_named(g, DEVICE_SYNC))
    if not len(device):
        return
    gone(g, off, device)
    src, dst, kind = edges(g)
    e, label = g.entered, np.array(g.label, dtype=object)
    mine = np.flatnonzero(((g.kind == CALL) | (g.kind == OS)) & (g.thread == g.tid))
    for node in device.tolist():
        at = int(g.start[node])
        held = e[(e[:, 0] <= at) & (e[:, 1] > at), 0] if len(e) else e[:0, 0]
        if not len(held):
            continue
        lo = int(held.max())
        before = mine[(g.start[mine] >= lo) & (g.start[mine] < at)]
        if np.isin(label[before], ("launch", "sync", "memory")).any():
            continue
        gone(g, off, before)
        into = np.flatnonzero((kind == PROGRAM) & np.isin(dst, 2 * np.r_[before, node]))
        cut = overlap(g.points[src[into]], g.points[dst[into]],
                      np.array([[lo, at]], dtype=np.int64))
        off[into] = np.maximum(off[into] - cut, 0)


VECTOR_BYTES = 256
"""A small read back of more than this many bytes is a vector (`.tolist()`, `.numpy()`
of a slice), which the host converts value by value after its copy: a scalar's is not."""


def unconverted(g: Graph, off: np.ndarray, reads: list[tuple[int, int]]) -> None:
    """Of each vector read back (VECTOR_BYTES), the host's conversion gone: its CPU time
    from the sync's return to the thread's next call, or to the end of the range that
    holds the read where that ends first (the statement's own range; the next one's
    Python stays: host_work_gone)."""
    ops, by_call = launched(g)
    nbytes = g.ops["bytes"].to_numpy()
    host_work_gone(g, off, np.array([sync for copy, sync in reads if nbytes[
        ops[by_call == copy] - len(g.calls)].sum() > VECTOR_BYTES], dtype=np.int64))


def host_work_gone(g: Graph, off: np.ndarray, calls: np.ndarray) -> None:
    """The host's CPU time after each of `calls` gone: to the thread's next call, or to
    the end of the range that holds the call or the start of the next range the thread
    enters, where either comes first (the statement's own range ends, or the next
    statement's begins; its Python stays: seed 64 g38's `.tolist()` in a range of its
    own, then 60 ms of a CPU sort in the step before the next CUDA call, was priced
    63.5 ms a step of the 4.2 its fix saved where the sort went with the read; seed 65
    g12's `.tolist()` without a range, then 80 ms of a CPU sort in a range of its own,
    78.8 ms of 0.07)."""
    src, dst, kind = edges(g)
    e = g.entered
    for call in calls.tolist():
        at = int(g.end[call])
        bounds = np.r_[e[(e[:, 0] <= at) & (e[:, 1] > at), 1], e[e[:, 0] > at, 0]]
        after = np.isin(kind, (PROGRAM, STEP)) & (src == 2 * call + 1)
        cut = int(bounds.min()) - at if len(bounds) else None
        off[after] = np.maximum(off[after] - cut, 0) if cut is not None else 0


SCALAR_BYTES = 64 * 1024
"""A device-to-host copy of at most this many bytes, then a sync: a scalar read back."""


INDEXING = r"index|gather"
"""The kernels of indexing with an index tensor (index_elementwise_kernel, indexSelect,
a gather)."""


def index_uploads(g: Graph) -> list[tuple[int, int]]:
    """(copy call, sync call) of each host-to-device copy on the range's thread that a
    synchronize follows and whose next kernel launched on the thread indexes, in the same
    statement (no range entered between them: moved_on): a GPU tensor indexed with a CPU
    index tensor (`x[idx]`), which PyTorch copies to the GPU each time and waits for."""
    if "copy_kind" not in g.ops or not len(g.ops):
        return []
    ops0 = len(g.calls)
    up = ops0 + np.flatnonzero(g.ops["copy_kind"].to_numpy() == 1)
    pairs = synced_after(g, launcher(g, up))
    if not pairs:
        return []
    ops, by_call = launched(g)
    kernel = g.ops["kind"].to_numpy()[ops - ops0] == 0
    ops, by_call = ops[kernel], by_call[kernel]
    starts = g.start[by_call]
    order = np.argsort(starts, kind="stable")
    ops, starts = ops[order], starts[order]
    indexing = set(named_ops(g, INDEXING).tolist())
    out = []
    for copy, sync in pairs:
        k = int(np.searchsorted(starts, g.start[sync], side="right"))
        if k < len(ops) and int(ops[k]) in indexing and \
                not moved_on(g, int(g.start[copy]), int(starts[k])):
            out.append((copy, sync))
    return out


def moved_on(g: Graph, a: int, b: int) -> bool:
    """Whether the thread entered a range between times a and b that is still open at b:
    the call at b is another statement's than the call at a (an upload, then the next
    range's indexing)."""
    e = g.entered
    return bool(((e[:, 0] > a) & (e[:, 0] <= b) & (e[:, 1] > b)).any())


def index_on_device(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """The index tensor kept on the device: each index upload (index_uploads) gone, its
    copy's dispatch (the queries it makes, cudaStreamIsCapturing), the copy call, the copy,
    the synchronize after it, and the CPU time after each of those calls (the copy's
    return into the indexing op); with the finding's scope, only the uploads whose sync
    starts in it (another site's upload stays, as scalar_reads' reads do)."""
    pairs = index_uploads(g)
    inside = set(scoped(g, np.array([b for _, b in pairs], dtype=np.int64),
                        change.scope).tolist())
    pairs = [(a, b) for a, b in pairs if b in inside]
    if not pairs:
        return
    copies = np.array([c for c, _ in pairs], dtype=np.int64)
    calls = np.union1d(dispatch(g, copies, ("launch", "sync")),
                       np.array([b for _, b in pairs], dtype=np.int64))
    free(g, off, keep, calls)
    gone(g, off, calls)
    ops, by_call = launched(g)
    ops_gone(g, off, ops[np.isin(by_call, copies)])
    src, dst, kind = edges(g)
    off[(kind == PROGRAM) & np.isin(src, 2 * calls + 1)] = 0


def no_break(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """A graph that no longer breaks on a value the host reads: no sync, no dispatch of
    the read, and no host work between the two graphs (the resume into the second)."""
    no_sync(g, change, off, keep)
    src, dst, kind = edges(g)
    for _, sync in scalar_reads(g, change.scope):
        off[np.isin(kind, (PROGRAM, STEP)) & (src == 2 * sync + 1)] = 0


def scalar_reads(g: Graph, scope: tuple[tuple[int, int], ...] = ()
                 ) -> list[tuple[int, int]]:
    """(copy call, sync call) of each scalar read back on the range's thread; with a
    `scope` (a finding's windows), those whose sync starts in it: the change of one sync
    site takes no other site's read (seed 86 g19's `torch.unique` took the list its
    `.tolist()` builds, whose CPU time ends in the unique's segment)."""
    if "copy_kind" not in g.ops or not len(g.ops):
        return []
    ops0 = len(g.calls)
    small = (g.ops["copy_kind"].to_numpy() == 2) & (g.ops["bytes"].to_numpy() <= SCALAR_BYTES)
    reads = synced_after(g, launcher(g, ops0 + np.flatnonzero(small)))
    inside = set(scoped(g, np.array([b for _, b in reads], dtype=np.int64), scope).tolist())
    return [(a, b) for a, b in reads if b in inside]


def scoped(g: Graph, calls: np.ndarray, scope: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The calls that start in the scope's windows (all of them without a scope)."""
    return calls[in_scope(g, scope)[calls]] if scope else calls


def synced_after(g: Graph, copies: np.ndarray) -> list[tuple[int, int]]:
    """(copy call, sync call) of each of `copies` whose next call on the range's thread
    is a synchronize (PyTorch's copy back, or from pageable memory, waits there)."""
    wanted = set(copies.tolist())
    mine = np.flatnonzero((g.kind == CALL) & (g.thread == g.tid))
    mine = mine[np.argsort(g.start[mine], kind="stable")].tolist()
    return [(a, b) for a, b in zip(mine[:-1], mine[1:], strict=True)
            if a in wanted and g.label[b] == "sync"]


MEMSET = 2
"""A GPU operation's kind for a memset (graph.op_label: 0 kernel, 1 copy)."""

SELECTING = r"select|flagged|compact|nonzero"
"""The kernels that gather what a count read back sized (CUB's select and compact)."""


def fixed_shape(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """no_sync, and of each scalar read back, the copy, the run of counting kernels
    (edits.COUNTING) launched right before its copy (a sort before them stays: a mask made
    fixed-shape still orders nothing, but a sort is another op's) and the run of selecting
    ones right after its sync (SELECTING: a scan that follows, as repeat_interleave's,
    stays) gone, with the host's dispatch of each (kernel_changes.undispatched)."""
    _count_read_gone(g, change, off, keep, sort_too=False)


def unique_mask(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """fixed_shape for `torch.unique` made a fixed-size mask (index_fill_ on a zeroed
    mask): the sort it counts the distinct values of goes too (its radix sort's kernels
    and memsets in the run before the count)."""
    _count_read_gone(g, change, off, keep, sort_too=True)


def _count_read_gone(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray,
                     sort_too: bool) -> None:
    no_sync(g, change, off, keep)
    reads = scalar_reads(g, change.scope)
    if not reads:
        return
    ops, by_call = launched(g)
    kinds = g.ops["kind"].to_numpy()[ops - len(g.calls)]
    kernel = (kinds == 0) | ((kinds == MEMSET) if sort_too else False)
    kern, call = ops[kernel], by_call[kernel]
    counting = np.isin(kern, named_ops(g, COUNTING + (r"|sort" if sort_too else "")))
    if sort_too:                     # the sort's own memsets, between its kernels
        counting |= kinds[kernel] == MEMSET
    else:
        counting &= ~np.isin(kern, named_ops(g, "sort"))
    selecting = np.isin(kern, named_ops(g, SELECTING))
    out: list[int] = []
    for copy, _ in reads:
        k = int(np.searchsorted(g.start[call], g.start[copy]))
        i, j = k, k
        while i > 0 and counting[i - 1]:
            i -= 1
        while j < len(kern) and selecting[j]:
            j += 1
        if i < j:                      # a count read back: its kernels and its copy
            out += kern[i:j].tolist() + ops[by_call == copy].tolist()
    if out:
        undispatched(g, off, np.array(sorted(set(out)), dtype=np.int64))


CHECK_OPS = 4
"""The most operations between two reads of one library call: the check it runs on its
input between them (repeat_interleave's `(repeats >= 0).all()`: a comparison, a fill and
a reduction). More, and the reads are two calls (two steps' `repeat_interleave`)."""


def size_given(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """no_sync, and a size the library reads back given by the caller
    (`repeat_interleave(..., output_size=n)`): of its scalar reads back, each copy and
    its sync (with the host's work between them), and the operations launched between
    one read's sync and the next read's copy (the check it runs on its input:
    `(repeats >= 0).all()`, at most CHECK_OPS of them), gone with the host's dispatch
    of each."""
    no_sync(g, change, off, keep)
    reads = scalar_reads(g, change.scope)
    if not reads:
        return
    ops, by_call = launched(g)
    out: list[int] = []
    for k, (copy, _) in enumerate(reads):
        out += ops[by_call == copy].tolist()
        if k == 0:
            continue
        between = ops[(g.start[by_call] > g.end[reads[k - 1][1]])
                      & (g.start[by_call] < g.start[copy])]
        if len(between) <= CHECK_OPS:        # more: the two reads are two calls
            out += between.tolist()
    if out:
        undispatched(g, off, np.array(sorted(set(out)), dtype=np.int64))
    syncs = np.array([s for _, s in reads], dtype=np.int64)
    gone(g, off, syncs)                  # each sync, and the read's host work before it
    gaps_gone(g, off, syncs)


def readback_on_device(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    ops0 = len(g.calls)
    d2h = ops0 + np.flatnonzero((g.ops["kind"].to_numpy() == 1)
                                & (g.ops["copy_kind"].to_numpy() == 2)
                                if "copy_kind" in g.ops else np.zeros(len(g.ops), dtype=bool))
    calls = scoped(g, on_thread(g, launcher(g, d2h)), change.scope)
    if not len(calls):
        return
    free(g, off, keep, calls)
    ops_gone(g, off, d2h[np.isin(launchers(g, d2h), calls)])
    asked = dispatch(g, calls)             # the read's own dispatch (`.item()`, `.tolist()`)
    gone(g, off, asked)
    gaps_gone(g, off, asked)
    after = then_syncs(g, calls)          # the copy's own wait, then the host work on it
    host_work_gone(g, off, after)
    free(g, off, keep, after)


def then_syncs(g: Graph, calls: np.ndarray) -> np.ndarray:
    """The calls, each with the synchronize calls that follow it on its thread."""
    mine = np.flatnonzero((g.kind == CALL) & (g.thread == g.tid))
    mine = mine[np.argsort(g.start[mine], kind="stable")]
    pos = {int(c): k for k, c in enumerate(mine.tolist())}
    out = set()
    for c in calls.tolist():
        k = pos.get(int(c))
        while k is not None and k < len(mine):
            out.add(int(mine[k]))
            k += 1
            if k >= len(mine) or g.label[mine[k]] != "sync":
                break
    return np.array(sorted(out), dtype=np.int64)
