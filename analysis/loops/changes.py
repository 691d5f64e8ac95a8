"""Causes as changes of a step's graph: each finding's saving is the replay's difference.

A change takes a step's graph and its edges' offsets (replay.offsets) and returns the
offsets and the edges kept with the cause removed; `saving(g, change)` replays the step
both ways. The changes, each said in one sentence (CHANGES, the findings' saving_model):

    no_sync        the host no longer waits: synchronize calls and blocking copies end
                   after their own return, not after the GPU work they waited for, and
                   the wait to take the GIL back after each goes; a scalar read back
                   (`.item()`, `nonzero`'s count) loses its dispatch too, and a device
                   synchronize (`torch.cuda.synchronize()`) goes whole with its dispatch
    fixed_shape    a boolean-mask index made fixed-shape (torch.where): no_sync, and the
                   count read back, the counting kernels before it (CUB's select and
                   reduce; a sort stays), the selecting ones after it and the host's
                   dispatch of each gone
    unique_mask    torch.unique made a fixed-size mask (index_fill_ on a zeroed mask):
                   fixed_shape, and the sort before the count (its kernels and memsets) gone
    size_given     a size the library reads back given by the caller (repeat_interleave's
                   output_size): no_sync, and its reads, their syncs and the check it
                   runs between them (`(repeats >= 0).all()`) gone with their dispatch
    no_break       a compiled function no longer broken on a value the host reads: no_sync,
                   and the host work between its two graphs gone
    no_memory      the allocator reuses its blocks: memory calls take no time, nor the
                   waits to take the GIL back after them, and a free no longer waits for
                   the GPU; the allocator's host work just before and after each (a
                   gap longer than the thread's usual one after a launch, no longer
                   than the call) takes the usual time; where its range gives memory
                   back, the thread's allocations in the rest of the step go too (asked
                   again)
    host_ahead     the range's host work is prepared ahead (workers, prefetch): the CPU
                   time between calls, the OS calls and the waits for other threads in
                   its windows are gone, its copies are asynchronous (`own_cpu`: the CPU
                   time only, beside a GIL holder whose waits are its own finding)
    one_graph      the launches are replayed as one CUDA graph: the launch calls and the
                   CPU time between them are gone, kernels start back to back
    pinned_async   pageable copies made pinned and asynchronous: the calling thread no
                   longer waits for them, nor for the GIL after them, the synchronize
                   right after each (a blocking `.to()`'s) is not made, and they run at
                   the pinned rate
    readback_on_device  a device-to-host readback kept on the device: the copy, its wait,
                   the read's own dispatch before it (edits.dispatch) and the host work on
                   the copy after it are gone
    index_on_device  a CPU index tensor kept on the GPU: the index's copy before each
                   indexing (sync_changes.index_uploads), its dispatch and its wait gone
    no_building    kernels not built every call: in a step that loads modules, its
                   module loads, other CUDA calls and CPU time between calls are gone
    faster_kernels the named kernels run at the speed given (their roofline, or the
                   tensor-core rate)
    fused          the kernels fusion removes take no time (faster_kernels at speed 0:
                   their work done inside the kernel before them)
    no_fill        a fill whose buffer the next operation overwrites removed (torch.empty
                   for torch.zeros): the fill kernels and the calls that launched them gone
    one_cat        growing concatenations made as one: of the step's concatenation
                   kernels the longest stays; the others, and the host's dispatch of
                   each (its calls and waits since the launch or blocking call before) gone
    one_pass       each chain of elementwise kernels (chains.py) made one: its shortest
                   kernel stays (one pass over the tensor); the others, and the host's
                   dispatch of each (its calls and waits, the GIL's among them), gone
    prefetch       the host-to-device copies made a step ahead on a side stream: the
                   calls that launched them and the synchronize calls after them no
                   longer wait, and the copies leave the compute stream (their time on it
                   gone: the copy engine works beside the kernels; the most a prefetch
                   gives while a step's copies take less than its kernels)
    no_gil         no other Python thread holds the GIL: the waits for it take no time
    input_ahead    the next batch is ready when the loop asks for it: host_ahead over the
                   windows the loop's thread waited for its DataLoader (its Python
                   samples in the worker queue's reads)
    batch_on_device  a batch built on the GPU, not from Python data: host_ahead over the
                   spans from the launch before each of its copies to the copy (else the
                   sampling intervals of the lines that built it): their CPU time and
                   blocking copies gone
    foreach        per-tensor ops of a Python loop made as one multi-tensor op: the
                   same over the host spans of the chains its line launched (else the
                   sampling intervals of the line), its launches gone too, and of the
                   kernels they made the shortest left, back to back
    gpu_fed        the GPU never waits for the host: each operation follows the one before
                   it on its stream, not the call that launched it (the most any host-side
                   fix of idle gaps can give)

Windows (host_ahead) and kernel speeds (faster_kernels) come as arguments. A change
priced for a finding is scoped to its range (`scope`: the range's instances on the clock):
a step as it runs holds the host work between its instances and the other ranges of the
iteration, and a remedy of the finding's range leaves those as they are. Only the edges
into nodes of the scope change: calls (any thread) and OS calls that start in one of its
windows, and the GPU operations those calls launched; and for no_memory, the allocations
that ask again for what the scope gave back (_asked_again).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .change import CHANGES, Change
from .edits import (
    calls_labelled,
    calls_named,
    edges,
    free,
    gil_waits,
    gone,
    in_scope,
    launched,
    launcher,
    launchers,
    near,
    on_thread,
    ops_gone,
    overlap,
    unblocked,
    within,
)
from .graph import CALL, LAUNCH, OP, OS, OWN, PROGRAM, STEP, THREAD, Graph
from .kernel_changes import faster_kernels, no_fill, one_cat, one_pass
from .replay import offsets
from .steady import period, steady_unchanged
from .sync_changes import (
    fixed_shape,
    index_on_device,
    no_break,
    no_sync,
    readback_on_device,
    size_given,
    synced_after,
    then_syncs,
    unique_mask,
)

Windows = list[tuple[int, int]]


WHOLE_STEP = ("no_gil",)
"""Changes that act on the whole step as it runs, whatever the finding's range: the other
thread that held the GIL gone, the loop's thread waits for it nowhere (a range beside the
step, or nested in it, waited as the step did)."""

MEMORY = r"Malloc|Free|MemAlloc|MemFree|HostAlloc|MemPool|MemCreate|MemMap|MemUnmap|MemRelease"
MODULES = r"ModuleLoad|LibraryLoad"


def apply(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """`change` applied to the offsets and the kept edges (in place), on the edges into
    its scope's nodes only where it has one, and on the CPU time leaving the scope up to
    its part inside (_leaving_cut)."""
    if not change.scope:
        APPLY[change.name](g, change, off, keep)
        return
    changed, kept = off.copy(), keep.copy()
    APPLY[change.name](g, change, changed, kept)
    sel = _scoped_edges(g, change.scope)
    if change.name == "no_memory":
        sel |= _asked_again(g, change.scope)
    off[sel], keep[sel] = changed[sel], kept[sel]
    _leaving_cut(g, change.scope, off, changed, ~sel)


def _leaving_cut(g: Graph, scope: tuple[tuple[int, int], ...], off: np.ndarray,
                 changed: np.ndarray, free_edges: np.ndarray) -> None:
    """The host's CPU time leaving the scope (PROGRAM edges, of `free_edges`, from a call
    that starts in it to one that does not: the list `.tolist()` builds after its copy,
    up to the next range's first call) loses what the change took off it, at most its
    span inside the scope's windows."""
    src, dst, kind = edges(g)
    inside = in_scope(g, scope)
    out = np.flatnonzero(free_edges & (kind == PROGRAM) & inside[src // 2]
                         & ~inside[dst // 2])
    if not len(out):
        return
    span = overlap(g.points[src[out]], g.points[dst[out]], near(scope, g.lo, g.hi))
    off[out] -= np.minimum(np.maximum(off[out] - changed[out], 0), span)


def _scoped_edges(g: Graph, scope: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The edges into nodes of the scope (see the module doc); a STEP edge by its
    source."""
    inside = in_scope(g, scope)
    if len(g.ops):
        ops0 = len(g.calls)
        launcher = launchers(g, ops0 + np.arange(len(g.ops)))
        inside[ops0:ops0 + len(g.ops)] = (launcher >= 0) & inside[np.maximum(launcher, 0)]
    src, dst, kind = edges(g)
    node = np.where(kind == STEP, src // 2, dst // 2)
    return inside[node]


FREES = r"Free|MemRelease|MemUnmap"
ASKS = r"Malloc|MemAlloc|HostAlloc|MemCreate|MemMap"


def _asked_again(g: Graph, scope: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The edges into the range thread's allocations outside the scope, where the scope
    gives memory back (a free of that thread inside it; else none): memory given back is
    asked for again by the rest of the step (`torch.cuda.empty_cache()` beside the step:
    the step's next tensors each a cudaMalloc), and a cache kept takes those calls away
    too, and the CPU time right after each (_allocator_gaps)."""
    src, dst, kind = edges(g)
    inside = within(g.start, near(scope, g.lo, g.hi))
    frees = on_thread(g, calls_named(g, FREES))
    if not inside[frees].any():
        return np.zeros(len(src), dtype=bool)
    asks = on_thread(g, calls_named(g, ASKS))
    again = np.zeros(g.n, dtype=bool)
    again[asks[~inside[asks]]] = True
    return again[np.where(kind == STEP, src // 2, dst // 2)] | ((kind == PROGRAM)
                                                                & again[src // 2])


def _no_memory(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """The memory calls gone, and the waits to take the GIL back right after each (the
    call let it go: edits.unblocked), as a sync's; the allocator's host work beside each
    cut to the thread's usual time between calls (_allocator_gaps)."""
    nodes = on_thread(g, calls_named(g, MEMORY))
    _allocator_gaps(g, off, nodes)
    unblocked(g, off, keep, nodes)
    gone(g, off, nodes)


MIN_LAUNCH_GAPS = 3
"""The fewest launches of the range's thread in a step whose CPU time after each, to the
next call, tells the thread's usual time between calls (_allocator_gaps); with fewer, the
gaps beside memory calls stay."""


def _allocator_gaps(g: Graph, off: np.ndarray, nodes: np.ndarray) -> None:
    """The CPU time between calls just before and just after each memory call of `nodes`
    cut to the thread's usual time between calls (its median after a launch, in the step),
    where it is longer than that and no longer than the memory call's own time: the
    allocator's host work around a call to the driver (its search and lock before, the
    new segment's bookkeeping after), which a cache that keeps its blocks does not do.
    On seeds 11-79's host loops that empty the cache, the gaps beside the memory calls
    took 30 to 100 µs where the thread's others took 9 to 14, 15 to 200 µs a step that
    the fix saved beside the calls themselves. A gap longer than the call is the
    program's own work (a batch built in Python after an allocation) and stays."""
    src, dst, kind = edges(g)
    prog = kind == PROGRAM
    launches = on_thread(g, calls_labelled(g, "launch"))
    between = prog & np.isin(src // 2, launches)         # after a launch, to the next call
    if between.sum() < MIN_LAUNCH_GAPS or not len(nodes):
        return
    usual = int(np.median(off[between]))
    own = np.zeros(g.n, dtype=np.int64)
    mine = (kind == OWN) & np.isin(src // 2, nodes)
    own[src[mine] // 2] = off[mine]
    beside = np.maximum(own[dst // 2], own[src // 2])       # the memory call's own time
    cut = prog & (beside > 0) & (off > usual) & (off <= beside)
    off[cut] = usual


def _host_ahead(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """The range thread's time between calls, in OS calls and waiting for other threads
    inside the windows gone (each edge loses what of its span lies in them; with
    `own_cpu`, its CPU time between calls only: a wait for the GIL, in an OS call, is
    the GIL's holder's); its copies there asynchronous."""
    src, dst, kind = edges(g)
    pts = g.points
    w = near(change.windows, int(pts.min()), int(pts.max()))
    mine = g.thread[dst // 2] == g.tid
    held = mine & (kind == PROGRAM) if change.own_cpu else mine & (
        np.isin(kind, (PROGRAM, THREAD)) | ((kind == OWN) & (g.kind[dst // 2] == OS)))
    cut = overlap(pts[src], pts[dst], w)
    off[held] = np.maximum(off[held] - cut[held], 0)
    if not change.own_cpu:
        keep &= ~((kind == THREAD) & mine & (cut > 0))     # nor waits for another thread
    copies = on_thread(g, calls_named(g, r"Memcpy|Memset"))
    met = overlap(g.start[copies], g.end[copies], w) > 0 if change.name in SAMPLED \
        else within(g.start[copies], w)       # sampled windows: a copy they meet
    free(g, off, keep, _and_its_sync(g, copies[met]))


def _and_its_sync(g: Graph, copies: np.ndarray) -> np.ndarray:
    """The copy calls and the synchronize call right after each (synced_after): an
    asynchronous copy has neither wait."""
    return np.union1d(copies, _syncs_after(g, copies))


def _syncs_after(g: Graph, copies: np.ndarray) -> np.ndarray:
    """The synchronize call right after each of the copy calls (synced_after)."""
    return np.array([b for _, b in synced_after(g, copies)], dtype=np.int64)


def _foreach(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """host_ahead over the line's windows, and the launches they meet gone: the
    per-tensor ops made as one. Of the kernels those launches made in each window, the
    shortest stays (one kernel over every tensor), the others and the stream gaps before
    them go."""
    _host_ahead(g, change, off, keep)
    w = near(change.windows, int(g.points.min()), int(g.points.max()))
    launches = on_thread(g, calls_labelled(g, "launch"))
    hit = launches[overlap(g.start[launches], g.end[launches], w) > 0]
    gone(g, off, hit)
    ops, by_call = launched(g)
    for a, b in w.tolist():
        mine = ops[np.isin(by_call, hit) & (g.start[by_call] >= a) & (g.start[by_call] <= b)]
        if len(mine) > 1:
            ops_gone(g, off, np.delete(mine, np.argmin(g.end[mine] - g.start[mine])))


SAMPLED = ("batch_on_device", "foreach")
"""Changes whose windows are sampling intervals: a call they meet is the lines' call."""


def _one_graph(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    launches = on_thread(g, calls_labelled(g, "launch"))
    if len(launches) < 2:
        return
    first, last = g.start[launches].min(), g.end[launches].max()
    src, dst, kind = edges(g)
    span = (g.points[dst] > first) & (g.points[dst] <= last) & (g.thread[dst // 2] == g.tid)
    off[span & np.isin(kind, (PROGRAM, OWN)) & (g.kind[dst // 2] == CALL)] = 0
    off[kind == LAUNCH] = 0


def _copy_ops(g: Graph, pageable: bool) -> np.ndarray:
    """The step's copy nodes; with `pageable`, its uploads from pageable memory only: a
    readback to pageable memory is not what pinning the source and copying non_blocking
    changes (the host needs the value it waits for; readback_in_loop's change keeps it on
    the device). Counting it made an upload's fix take the readback's wait for the GPU
    too: seed 83's g14, 0.825 ms a step priced for an upload whose fix saved 0.556."""
    ops0 = len(g.calls)
    ops = g.ops
    is_copy = (ops["kind"].to_numpy() == 1)
    if pageable and "pageable" in ops:
        is_copy &= ops["pageable"].to_numpy().astype(bool)
    if pageable and "copy_kind" in ops:
        is_copy &= ops["copy_kind"].to_numpy() == 1
    return ops0 + np.flatnonzero(is_copy)


def _pinned_async(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """The pageable copies' calls and syncs no longer wait, nor wait for the GIL after
    them (a blocking copy lets the GIL go for as long as it waits, and another Python
    thread takes it; an asynchronous one returns at once: seed 65 g21, a 16 MiB upload
    beside a GIL-holding thread, saved 7.3 ms a step where the copy took 1.9), and they
    run at the pinned rate. The synchronize a blocking `.to()` makes right after its copy
    is not made at all (a non_blocking copy from pinned memory makes none): its own time
    goes too (seed 52 g13: 4 µs a step)."""
    ops = _copy_ops(g, pageable=True)
    if not len(ops):
        return
    copies = on_thread(g, launcher(g, ops))
    syncs = _syncs_after(g, copies)
    unblocked(g, off, keep, np.union1d(copies, syncs))
    gone(g, off, syncs)
    src, dst, kind = edges(g)
    started = (kind == LAUNCH) & np.isin(dst, 2 * ops)     # no staging before the DMA
    off[started] = np.minimum(off[started], launch_latency(g))
    if change.pinned_bps and "bytes" in g.ops:
        ops0 = len(g.calls)
        size = g.ops["bytes"].to_numpy()[ops - ops0]
        for node, b in zip(ops.tolist(), size.tolist(), strict=True):
            sel = (kind == OWN) & (src == 2 * node)
            off[sel] = np.minimum(off[sel], int(b / change.pinned_bps * 1e9))


def launch_latency(g: Graph) -> int:
    """The step's launch latency: the median time from a call to the start of the kernel
    it launched, over the launches that set their kernel's start (an idle stream; 0 where
    none did). A pageable copy starts later than that, once the host has staged its first
    chunk (seed 58 g22: 80 µs); a copy from pinned memory starts as a kernel does."""
    off, binds = offsets(g)
    src, dst, kind = edges(g)
    ops0 = len(g.calls)
    kernel = np.zeros(2 * g.n, dtype=bool)
    kernel[2 * (ops0 + np.flatnonzero(g.ops["kind"].to_numpy() == 0))] = True
    seen = off[binds & (kind == LAUNCH) & kernel[dst]]
    return int(np.median(seen)) if len(seen) else 0


def _no_building(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """In a step that loads modules, the host's work beside its launches and syncs is
    building kernels (runtime compilation, plans, attributes): gone."""
    if not len(on_thread(g, calls_named(g, MODULES))):
        return
    mine = np.flatnonzero((g.kind == CALL) & (g.thread == g.tid))
    building = mine[np.isin(np.array(g.label, dtype=object)[mine],
                            ("module", "other_cuda"))]
    gone(g, off, building)
    src, dst, kind = edges(g)
    off[(kind == PROGRAM) & (g.thread[dst // 2] == g.tid)] = 0


def _prefetch(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """The range thread's host-to-device copies off the compute stream and waited for by
    nobody (see CHANGES)."""
    ops0 = len(g.calls)
    h2d = ops0 + np.flatnonzero(np.array(g.label[ops0:ops0 + len(g.ops)]) == "copy_h2d")
    calls = on_thread(g, launcher(g, h2d))
    if not len(calls):
        return
    free(g, off, keep, then_syncs(g, calls))
    gone(g, off, h2d[np.isin(launchers(g, h2d), calls)])


def _no_gil(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    gone(g, off, gil_waits(g))


def _gpu_fed(g: Graph, change: Change, off: np.ndarray, keep: np.ndarray) -> None:
    """No operation waits for its launch: the launch edges dropped (an operation first
    on its stream in the step keeps its measured start)."""
    keep &= g.edge != LAUNCH


APPLY: dict[str, Callable[[Graph, Change, np.ndarray, np.ndarray], None]] = {
    "no_sync": no_sync, "fixed_shape": fixed_shape, "unique_mask": unique_mask,
    "no_break": no_break,
    "size_given": size_given,
    "no_memory": _no_memory, "host_ahead": _host_ahead,
    "one_graph": _one_graph, "pinned_async": _pinned_async,
    "readback_on_device": readback_on_device, "no_building": _no_building,
    "index_on_device": index_on_device,
    "faster_kernels": faster_kernels, "fused": faster_kernels, "prefetch": _prefetch,
    "no_fill": no_fill, "one_cat": one_cat, "one_pass": one_pass,
    "no_gil": _no_gil,
    "input_ahead": _host_ahead, "batch_on_device": _host_ahead, "foreach": _foreach,
    "gpu_fed": _gpu_fed}


def saving(g: Graph, change: Change) -> int:
    """The step's steady period (steady.py: in a run of such steps, its GPU backlog
    carried) replayed unchanged less replayed with `change` (ns, >= 0); kept with the
    graph (the documents of one export can share its graphs)."""
    memo = ("saving", change)
    if memo not in g.cache:
        off, _ = offsets(g)
        keep = np.ones(len(off), dtype=bool)
        changed = off.copy()
        apply(g, change, changed, keep)
        g.cache[memo] = max(steady_unchanged(g) - period(g, changed, keep), 0)
    return g.cache[memo]


__all__ = ["CHANGES", "Change", "OP", "WHOLE_STEP", "apply", "saving"]
