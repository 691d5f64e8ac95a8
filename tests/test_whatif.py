"""Each change of the step graph on a synthetic step whose saving is worked out by hand
(times in µs; U = 1,000 ns, so a freed call's own return is below UNBLOCKED_NS).

The replay's rules the hand sums follow: the edge that came last at measurement time
keeps its measured gap; a launch edge that did not bind takes the step's median binding
launch gap, a stream edge the median binding stream gap (0 where none bound), a freed
call its return after what it waited for. A step's time is its steady period in a run of
such steps (loops/steady.py): its host's time where the host holds it, else its GPU work
fed back to back, the first kernel no longer waiting for its launch (the step before
keeps the GPU busy through it): a change that leaves the GPU holding the step saves the
first kernel's launch latency (10 in these steps) besides what the step alone shows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from analysis.load.nsys_host import api_part
from analysis.load.nsys_steps import StepRows
from analysis.loops.changes import CHANGES, Change, apply, saving
from analysis.loops.edges import build

U = 1_000
MAIN = 1 << 24 | 1
LAUNCH, SYNC, ASYNC, COPY = ("cudaLaunchKernel_v7000", "cudaStreamSynchronize_v3020",
                             "cudaMemcpyAsync_v3020", "cudaMemcpy_v3020")
KERNEL, MEMCPY = 0, 1


def _step(calls: list[tuple], ops: list[tuple], syncs: list[int] = ()) -> StepRows:
    """(start, end, corr, name) calls on the main thread; (kind, start, end, corr, bytes,
    copy_kind, pageable, name) operations on stream 7; sync records (corr) on stream 7."""
    c = pd.DataFrame([(MAIN, s * U, e * U, k, n) for s, e, k, n in calls],
                     columns=["tid", "start_ns", "end_ns", "corr", "name"])
    c["part"] = [api_part(n) for n in c["name"]]
    o = pd.DataFrame([(k, s * U, e * U, corr, 0, 7, b, ck, p, name)
                      for k, s, e, corr, b, ck, p, name in ops],
                     columns=["kind", "start_ns", "end_ns", "corr", "device", "stream", "bytes",
                              "copy_kind", "pageable", "name"])
    s = pd.DataFrame([(corr, 7, -1, 3, 0, 0) for corr in syncs],
                     columns=["corr", "stream", "event", "type", "start_ns", "end_ns"])
    osrt = pd.DataFrame({"tid": pd.Series(dtype="int64"), "start_ns": pd.Series(dtype="int64"),
                         "end_ns": pd.Series(dtype="int64"), "name": pd.Series(dtype=object)})
    return StepRows(1 << 24, 0, 0, c, o, s, osrt)


def _kernel(start: int, end: int, corr: int, name: str = "k") -> tuple:
    return (KERNEL, start, end, corr, 0, 0, 0, name)


def _saved(rows: StepRows, end: int, change: Change) -> float:
    """The step's saving in µs."""
    return saving(build(rows, MAIN, 0, end * U), change) / U


def test_every_change_is_said() -> None:
    assert set(CHANGES) == {"no_sync", "no_break", "no_memory", "host_ahead", "one_graph",
                            "pinned_async", "readback_on_device", "no_building",
                            "faster_kernels", "fused", "prefetch", "no_gil", "input_ahead",
                            "gpu_fed", "no_fill", "one_cat", "batch_on_device", "foreach",
                            "one_pass", "fixed_shape", "size_given", "index_on_device",
                            "unique_mask"}


def test_a_runs_last_sync_on_earlier_work_still_ends_with_that_work() -> None:
    """A range beside the step that only syncs, last in its run, launched nothing: the
    kernel it waits for was launched by the step before. Its sync removed, the run still
    ends when that kernel does (the closing synchronize waits for it), so what came after
    the kernel is all it saves (before: 985 of 1,010); seen as 1.8 ms of a 2.1 ms
    GPU-bound loop on the generated battery (seed 28, g08). Not the run's last, the wait
    is saved."""
    rows = _step([(10, 1_000, 2, "cudaDeviceSynchronize_v3020")],
                 [_kernel(-500, 990, 1)], syncs=[2])
    last = build(rows, MAIN, 0, 1_010 * U, gpu_end=True)
    assert saving(last, Change("no_sync")) == 20 * U    # what came after the kernel
    assert _saved(rows, 1_010, Change("no_sync")) > 900


def _copy_step() -> StepRows:
    """A kernel (10-60), a 30 µs host-to-device copy behind it on the same stream that the
    host waits for (a blocking `.to('cuda')`), then the kernel that uses it (97-150)."""
    return _step([(0, 5, 1, LAUNCH), (6, 8, 2, ASYNC), (9, 92, 3, SYNC), (93, 95, 4, LAUNCH)],
                 [_kernel(10, 60, 1), (MEMCPY, 60, 90, 2, 64 << 20, 1, 0, ""),
                  _kernel(97, 150, 4)], syncs=[3])


def test_prefetch_takes_the_copy_off_the_compute_stream() -> None:
    """The copy made a step ahead on a side stream: no wait, its 30 µs off the stream:
    the second kernel follows the first (its stream gap kept), and the GPU holds the
    step: 50 + 7 + 53 = 110 of 150."""
    assert 39 <= _saved(_copy_step(), 150, Change("prefetch")) <= 47


def test_a_change_scoped_to_a_range_leaves_the_rest_of_the_step() -> None:
    """A finding's change acts inside its range's windows only: the same prefetch scoped
    to a window before the copy's call saves nothing, one around it the whole saving."""
    whole = _saved(_copy_step(), 150, Change("prefetch"))
    assert _saved(_copy_step(), 150, Change("prefetch", scope=((0, 5 * U),))) == 0
    assert _saved(_copy_step(), 150, Change("prefetch", scope=((6 * U, 95 * U),))) == whole


def _cache_emptied_step() -> StepRows:
    """A host-bound step: a launch (0-5), `torch.cuda.empty_cache()`'s cudaFree (10-40,
    its range 8-42), then the step's next tensor allocated again (cudaMalloc 50-70) and
    launched (72-77); the kernels short."""
    return _step([(0, 5, 1, LAUNCH), (10, 40, 2, "cudaFree_v3020"),
                  (50, 70, 3, "cudaMalloc_v3020"), (72, 77, 4, LAUNCH)],
                 [_kernel(6, 8, 1), _kernel(78, 80, 4)])


def test_memory_given_back_in_a_range_and_asked_again_after_it_goes_with_it() -> None:
    """no_memory scoped to the range that empties the cache takes the cudaFree (30 µs)
    and the cudaMalloc that asks again for the memory later in the step (20 µs); scoped
    to a range that gives nothing back, the allocation outside it stays."""
    whole = _saved(_cache_emptied_step(), 80, Change("no_memory"))
    assert whole == pytest.approx(50, abs=1)
    assert _saved(_cache_emptied_step(), 80, Change("no_memory", scope=((8 * U, 42 * U),))) \
        == pytest.approx(whole)
    assert _saved(_cache_emptied_step(), 80, Change("no_memory", scope=((0, 6 * U),))) == 0


@pytest.mark.parametrize("name", [SYNC, "cudaEventSynchronize_v3020"])
def test_no_sync_lets_the_host_run_ahead_of_the_gpu(name: str) -> None:
    """The host's wait goes: the second launch comes early, the second kernel follows the
    first back to back, the GPU holds the step (90 + 30 = 120 of 160)."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 102, 2, name), (110, 115, 3, LAUNCH)],
                 [_kernel(10, 100, 1), _kernel(120, 150, 3)], syncs=[2])
    assert _saved(rows, 160, Change("no_sync")) == 40


def test_no_sync_of_a_scalar_read_takes_its_dispatch_too() -> None:
    """`.item()`: a 4-byte copy, then a synchronize; without them the copy follows the
    kernel, the second kernel follows the copy (90 + 1 + 30 = 121 of 160)."""
    rows = _step([(0, 5, 1, LAUNCH), (20, 25, 2, ASYNC), (26, 102, 3, SYNC),
                  (110, 115, 4, LAUNCH)],
                 [_kernel(10, 100, 1), (MEMCPY, 100, 101, 2, 4, 2, 0, ""),
                  _kernel(120, 150, 4)], syncs=[3])
    assert _saved(rows, 160, Change("no_sync")) == 39


def test_no_sync_frees_a_blocking_copy() -> None:
    """A cudaMemcpy device to host: the thread no longer waits for it (94 + 30 = 124)."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 105, 2, COPY), (110, 115, 3, LAUNCH)],
                 [_kernel(10, 100, 1), (MEMCPY, 100, 104, 2, 4 << 20, 2, 0, ""),
                  _kernel(120, 150, 3)])
    assert _saved(rows, 160, Change("no_sync")) == 36


def test_no_break_also_drops_the_resume_of_the_second_graph() -> None:
    """A graph broken on `.item()`: besides the wait and the read's dispatch, the host
    work between the two graphs (102 -> 110) goes; the GPU still bounds the step."""
    rows = _step([(0, 5, 1, LAUNCH), (20, 25, 2, ASYNC), (26, 102, 3, SYNC),
                  (110, 115, 4, LAUNCH), (116, 121, 5, LAUNCH)],
                 [_kernel(10, 100, 1), (MEMCPY, 100, 101, 2, 4, 2, 0, ""),
                  _kernel(120, 150, 4), _kernel(150, 200, 5)], syncs=[3])
    assert _saved(rows, 210, Change("no_break")) == 39    # 91 + 30 + 50 = 171 of 210
    host = _step([(0, 5, 1, LAUNCH), (20, 25, 2, ASYNC), (26, 32, 3, SYNC),
                  (90, 95, 4, LAUNCH)],
                 [_kernel(10, 20, 1), (MEMCPY, 20, 21, 2, 4, 2, 0, ""), _kernel(100, 110, 4)],
                 syncs=[3])
    assert _saved(host, 120, Change("no_break")) == 75      # the resume (32 -> 90) gone too:
    # the read's call returns 4 after its copy (9), the sync 5 later, the launch at once
    # (15 -> 20), then the 25 after it: the host ends at 45 of 120


def test_no_sync_removes_a_device_synchronize_and_its_dispatch() -> None:
    """torch.cuda.synchronize() that waits for nothing (its kernel ended at 20), in an
    NVTX range of its own entered at 20: where the finding names it (`whole`), the call
    (3) and the CPU time from its range's start (10), its Python, go with it, as the
    remedy removes the line (13 of 70); without its own range only the call goes (the
    CPU time before it is other statements'); another call's finding, or a stream
    synchronize there, saves nothing."""
    device = _step([(0, 5, 1, LAUNCH), (30, 33, 2, "cudaDeviceSynchronize_v3020"),
                    (40, 45, 3, LAUNCH)], [_kernel(10, 20, 1), _kernel(50, 60, 3)])
    assert _saved(device, 70, Change("no_sync", whole=True)) == 3
    g = build(device, MAIN, 0, 70 * U)
    g.entered = np.array([[20 * U, 34 * U]], dtype=np.int64)
    assert saving(g, Change("no_sync", whole=True)) / U == 13
    assert saving(g, Change("no_sync")) / U == 0
    stream = _step([(0, 5, 1, LAUNCH), (30, 33, 2, SYNC), (40, 45, 3, LAUNCH)],
                   [_kernel(10, 20, 1), _kernel(50, 60, 3)], syncs=[2])
    assert _saved(stream, 70, Change("no_sync", whole=True)) == 0


def test_a_later_sync_waits_for_the_work_an_earlier_one_no_longer_waits_for() -> None:
    """A stream synchronize waits for the kernel (to 48); a device synchronize after it
    (60) waited for nothing. Taking only the first wait away, the second waits for the
    kernel instead (edges._Drained): the step ends at 56, not 27 (12 of 70 saved); both
    taken away, 32."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 50, 2, SYNC),
                  (60, 62, 3, "cudaDeviceSynchronize_v3020")], [_kernel(10, 48, 1)], syncs=[2])
    assert _saved(rows, 70, Change("no_sync", scope=((0, 55 * U),))) == 12
    assert _saved(rows, 70, Change("no_sync")) == 32


def test_a_sync_sites_change_takes_no_other_sites_read() -> None:
    """A `.tolist()` (its copy, a sync ending at 20, then its list built to 60), then a
    scalar read that waits for a kernel (73-95). The second site's change (its segment
    20-96) takes its own wait and dispatch (16), not the list the first site's read
    builds, whose CPU time ends in its segment (before, 56); unscoped, both (69)."""
    rows = _step([(0, 5, 1, LAUNCH), (10, 15, 2, ASYNC), (16, 20, 3, SYNC),
                  (60, 65, 4, LAUNCH), (70, 72, 5, ASYNC), (73, 95, 6, SYNC)],
                 [_kernel(6, 8, 1), (MEMCPY, 11, 12, 2, 16 << 10, 2, 0, ""),
                  _kernel(66, 90, 4), (MEMCPY, 91, 92, 5, 4, 2, 0, "")], syncs=[3, 6])
    assert _saved(rows, 100, Change("no_sync", scope=((20 * U, 96 * U),))) == 16
    assert _saved(rows, 100, Change("no_sync")) == 69


def test_no_memory_drops_the_free_that_waits_and_the_malloc() -> None:
    """cudaFree waits for the kernel, cudaMalloc takes 20: both gone, the second kernel
    follows the first (40 + 25 = 65 of 130)."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 52, 2, "cudaFree_v3020"),
                  (60, 80, 3, "cudaMalloc_v3020"), (85, 90, 4, LAUNCH)],
                 [_kernel(10, 50, 1), _kernel(95, 120, 4)])
    assert _saved(rows, 130, Change("no_memory")) == 65


def test_host_ahead_drops_the_cpu_time_between_calls_in_its_windows() -> None:
    """The 45 between the launches goes; the CPU time after the last call stays
    (5 + 5 + 25 = 35 of 80)."""
    rows = _step([(0, 5, 1, LAUNCH), (50, 55, 2, LAUNCH)],
                 [_kernel(10, 20, 1), _kernel(60, 70, 2)])
    assert _saved(rows, 80, Change("host_ahead", windows=((0, 130 * U),))) == 45
    assert _saved(rows, 80, Change("host_ahead", windows=((60 * U, 70 * U),))) == 0


def test_host_ahead_of_the_threads_own_cpu_keeps_its_waits_for_the_gil() -> None:
    """Between the launches, 20 of the 45 are a wait for the GIL (an OS call:
    pthread_cond_timedwait): host_ahead takes all 45, with `own_cpu` the 25 of CPU time
    only (a loop that waits for another thread's GIL, whose finding that is)."""
    rows = dataclasses.replace(
        _step([(0, 5, 1, LAUNCH), (50, 55, 2, LAUNCH)], [_kernel(10, 20, 1), _kernel(60, 70, 2)]),
        osrt=pd.DataFrame({"tid": [MAIN], "start_ns": [20 * U], "end_ns": [40 * U],
                           "name": ["pthread_cond_timedwait"]}))
    whole = ((0, 130 * U),)
    assert _saved(rows, 80, Change("host_ahead", windows=whole)) == 45
    assert _saved(rows, 80, Change("host_ahead", windows=whole, own_cpu=True)) == 25


def test_one_graph_launches_everything_at_once() -> None:
    """Three launches replayed as one graph: kernels back to back (6), the host's time
    after its last launch (15) holds the step (15 of 60)."""
    rows = _step([(0, 5, 1, LAUNCH), (20, 25, 2, LAUNCH), (40, 45, 3, LAUNCH)],
                 [_kernel(10, 12, 1), _kernel(30, 32, 2), _kernel(50, 52, 3)])
    assert _saved(rows, 60, Change("one_graph")) == 45


def test_pinned_async_frees_the_thread_and_runs_at_the_pinned_rate() -> None:
    """A 46 MB pageable copy held the thread 50; pinned at 2 TB/s it takes 23 and the
    thread goes on: the kernel follows the copy (25 + 35 = 60), the host ends at 62."""
    rows = _step([(0, 50, 1, ASYNC), (55, 60, 2, LAUNCH)],
                 [(MEMCPY, 2, 48, 1, 46_000_000, 1, 1, ""), _kernel(65, 100, 2)])
    assert _saved(rows, 110, Change("pinned_async", pinned_bps=2e12)) == 48


def test_pinned_async_leaves_a_readback_to_pageable_memory_waiting() -> None:
    """The same copy back to the host (copyKind 2, to pageable memory): pinning a source
    and copying non_blocking is an upload's remedy; the host needs what it reads back,
    so the thread still waits (seed 83's g14: its upload's fix took its readback's wait)."""
    rows = _step([(0, 50, 1, ASYNC), (55, 60, 2, LAUNCH)],
                 [(MEMCPY, 2, 48, 1, 46_000_000, 2, 1, ""), _kernel(65, 100, 2)])
    assert _saved(rows, 110, Change("pinned_async", pinned_bps=2e12)) == 0


def test_readback_on_device_drops_the_copy_its_wait_and_the_host_work_on_it() -> None:
    """A 64 MiB `.cpu()`, its synchronize and the numpy on it (62 -> 100) gone: the
    second kernel follows the first (30 + 10 = 40 of 125)."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 8, 2, ASYNC), (9, 62, 3, SYNC), (100, 105, 4, LAUNCH)],
                 [_kernel(10, 40, 1), (MEMCPY, 40, 60, 2, 64 << 20, 2, 0, ""),
                  _kernel(110, 120, 4)], syncs=[3])
    assert _saved(rows, 125, Change("readback_on_device")) == 85


def test_readback_on_device_keeps_the_host_work_after_the_reads_own_range() -> None:
    """The same `.cpu()` in an NVTX range of its own that ends at 70: of the 38 of host
    work after its synchronize, the 8 to its range's end are the read's (the numpy on
    it) and go; the 30 after it are the next statement's (a CPU sort before the next
    launch) and stay, the next launch 30 later than with them gone: 63 of 125, not 85.
    So where the read has no range and the next statement's begins at 70 (its sort in a
    range of its own, the next launch in it)."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 8, 2, ASYNC), (9, 62, 3, SYNC), (100, 105, 4, LAUNCH)],
                 [_kernel(10, 40, 1), (MEMCPY, 40, 60, 2, 64 << 20, 2, 0, ""),
                  _kernel(110, 120, 4)], syncs=[3])
    for entered in ([6, 70], [70, 110]):
        g = build(rows, MAIN, 0, 125 * U)
        g.entered = np.array([entered], dtype=np.int64) * U
        assert saving(g, Change("readback_on_device")) / U == 63


def test_readback_on_device_drops_the_reads_own_dispatch_too() -> None:
    """`.tolist()` of a small tensor: the host's work since the launch before it (a
    driver query at 20-25, and the 15 before that) is the read's own dispatch and goes
    with the copy: the synchronize only returns (5), the second launch follows it
    (10-15), its kernel at the launch gap (20-30), the step 5 later: 35 of 125."""
    rows = _step([(0, 5, 1, LAUNCH), (20, 25, 5, "cudaPointerGetAttributes_v4000"),
                  (26, 28, 2, ASYNC), (29, 62, 3, SYNC), (100, 105, 4, LAUNCH)],
                 [_kernel(10, 12, 1), (MEMCPY, 12, 14, 2, 16 << 10, 2, 0, ""),
                  _kernel(110, 120, 4)], syncs=[3])
    assert _saved(rows, 125, Change("readback_on_device")) == 90


def test_host_work_before_a_steps_first_call_can_go() -> None:
    """A batch built in Python before the step's first call (0 -> 30): the step starts
    on its thread at its range's start, so host_ahead over that window takes the 30
    (it was a fixed start before the first call): 32 of 62."""
    rows = _step([(30, 35, 1, LAUNCH), (36, 60, 2, SYNC)], [_kernel(40, 55, 1)], syncs=[2])
    assert _saved(rows, 62, Change("host_ahead", windows=((0, 30 * U),))) == 30
    assert _saved(rows, 62, Change("host_ahead", windows=((40 * U, 50 * U),))) == 0


def test_no_building_drops_module_loads_and_the_host_work_beside_them() -> None:
    """A module load and an attribute query every call: gone with the CPU time between
    calls; the second kernel follows the first (20 + 10 = 30), the host ends at 35."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 30, 2, "cuModuleLoadData"),
                  (32, 34, 3, "cuFuncGetAttribute"), (40, 45, 4, LAUNCH)],
                 [_kernel(10, 20, 1), _kernel(50, 60, 4)])
    assert _saved(rows, 70, Change("no_building")) == 35
    plain = _step([(0, 5, 1, LAUNCH), (40, 45, 4, LAUNCH)],
                  [_kernel(10, 20, 1), _kernel(50, 60, 4)])
    assert _saved(plain, 70, Change("no_building")) == 0      # no module load: no change


def test_faster_kernels_save_at_the_wall_only_where_the_step_waits_for_them() -> None:
    """An sgemm at twice the speed: 50 saved where the host waits for it, nothing where
    the host holds the step."""
    fast = Change("faster_kernels", kernels=(("sgemm", 0.5),))
    bound = _step([(0, 5, 1, LAUNCH), (6, 112, 2, SYNC)], [_kernel(10, 110, 1, "sgemm_128")],
                  syncs=[2])
    assert _saved(bound, 120, fast) == 50
    held = _step([(0, 5, 1, LAUNCH), (200, 205, 2, LAUNCH)],
                 [_kernel(10, 20, 1, "sgemm_128"), _kernel(210, 215, 2)])
    assert _saved(held, 220, fast) == 0


def test_a_fused_epilogue_takes_no_time() -> None:
    """A GEMM (10-110) and its separate ReLU (110-130) the host waits for: fused, the
    ReLU's 20 go (its work done in the GEMM's epilogue); a pattern naming no kernel saves
    nothing."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 8, 2, LAUNCH), (9, 132, 3, SYNC)],
                 [_kernel(10, 110, 1, "nvjet_gemm"), _kernel(110, 130, 2, "triton_relu")],
                 syncs=[3])
    assert _saved(rows, 140, Change("fused", kernels=(("^triton_relu$", 0.0),))) == 20
    assert _saved(rows, 140, Change("fused", kernels=(("(?!)", 0.0),))) == 0


def test_no_fill_removes_the_fill_and_its_launch() -> None:
    """torch.zeros then an op that overwrites it: the fill (10-60) and its launch go; the
    add launches 1 after the start and runs at the step's launch gap (11-41), the sync
    returns 2 after it, the step ends 8 later: 51 of 100."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 8, 2, LAUNCH), (9, 92, 3, SYNC)],
                 [_kernel(10, 60, 1, "vectorized_elementwise_kernel<4, FillFunctor<float>>"),
                  _kernel(60, 90, 2, "add_kernel")], syncs=[3])
    assert _saved(rows, 100, Change("no_fill", kernels=(("FillFunctor", 0.0),))) == 49
    assert _saved(rows, 100, Change("no_fill", kernels=(("(?!)", 0.0),))) == 0


def test_one_cat_keeps_the_longest_concatenation_only() -> None:
    """Three growing cats (5, 10, 20 long) back to back, which the host waits for: the
    first two, their launches and the host's time before the second go, the longest
    stays: the step is shorter by the two kernels' 15 (a pattern naming none: 0)."""
    cat = "CatArrayBatchedCopy_vectorized"
    rows = _step([(0, 5, 1, LAUNCH), (10, 15, 2, LAUNCH), (20, 25, 3, LAUNCH),
                  (26, 67, 4, SYNC)],
                 [_kernel(30, 35, 1, cat), _kernel(35, 45, 2, cat), _kernel(45, 65, 3, cat)],
                 syncs=[4])
    assert _saved(rows, 70, Change("one_cat", kernels=((cat, 0.0),))) == 15
    assert _saved(rows, 70, Change("one_cat", kernels=(("(?!)", 0.0),))) == 0


def test_one_cat_takes_the_dispatch_of_each_cat_it_removes() -> None:
    """Host-bound cats, each a driver call then its launch (the time between them is the
    op's dispatch): the first two cats' calls and the host time before them go; the
    third's dispatch (10 + 4 + 1 + 2), its kernel at its launch gap (6 + 3), the sync and
    the step's end (2 + 2) remain: 28 of 52."""
    get, cat = "cuKernelGetName", "CatArrayBatchedCopy"
    rows = _step([(0, 4, 11, get), (5, 7, 1, LAUNCH), (17, 21, 12, get), (22, 24, 2, LAUNCH),
                  (34, 38, 13, get), (39, 41, 3, LAUNCH), (42, 50, 4, SYNC)],
                 [_kernel(10, 11, 1, cat), _kernel(25, 27, 2, cat), _kernel(45, 48, 3, cat)],
                 syncs=[4])
    assert _saved(rows, 52, Change("one_cat", kernels=((cat, 0.0),))) == 24
    # a wait between two cats (the GIL handed to another thread, 12-16) is the second
    # cat's dispatch too: it goes with it, and the saving stays 24
    waited = dataclasses.replace(rows, osrt=pd.DataFrame({
        "tid": [MAIN], "start_ns": [12 * U], "end_ns": [16 * U],
        "name": ["pthread_cond_timedwait"]}))
    assert _saved(waited, 52, Change("one_cat", kernels=((cat, 0.0),))) == 24


def test_gpu_fed_saves_only_what_the_host_waited_for() -> None:
    """The GPU no longer waits for the second launch: the second kernel runs at 20 -> 30,
    but the host's own time still holds the step; only the sync's wait goes (14 of 80)."""
    rows = _step([(0, 5, 1, LAUNCH), (50, 55, 2, LAUNCH), (56, 72, 3, SYNC)],
                 [_kernel(10, 20, 1), _kernel(60, 70, 2)], syncs=[3])
    assert _saved(rows, 80, Change("gpu_fed")) == 14


def test_batch_on_device_frees_a_copy_its_sampled_windows_meet() -> None:
    """A batch made in Python (5-40) and copied from pageable memory (40-105, waiting for
    the kernel before it): sampled windows stand anywhere in the lines' time, so a copy
    they meet is freed (as host_ahead frees one starting in its window) and the CPU time
    they cover goes; host_ahead over the same window, after the copy's start, frees
    nothing."""
    rows = _step([(0, 5, 1, LAUNCH), (40, 105, 2, COPY), (110, 115, 3, LAUNCH)],
                 [_kernel(10, 100, 1), (MEMCPY, 100, 104, 2, 4 << 10, 1, 1, ""),
                  _kernel(120, 150, 3)])
    late = ((50 * U, 70 * U),)
    freed = _saved(rows, 160, Change("batch_on_device", windows=late))
    assert freed > 0 and _saved(rows, 160, Change("host_ahead", windows=late)) == 0
    assert freed == _saved(rows, 160, Change("host_ahead", windows=((40 * U, 41 * U),)))
    both = _saved(rows, 160, Change("batch_on_device", windows=((20 * U, 60 * U),)))
    assert both == _saved(rows, 160, Change("host_ahead", windows=((20 * U, 60 * U),)))


def test_a_batch_on_device_has_no_sync_after_its_copy() -> None:
    """torch.tensor(rows, device="cuda") copies from pageable memory and then waits for the
    stream (a cudaStreamSynchronize after the copy). Made on the device, neither wait is
    left: with the Python that built the batch (5-120) gone, the sync would otherwise wait
    for the kernel launched before it (10-100), which the Python hid as it ran (the
    generated battery, seed 28 g21: 0.81 of 2.16 ms priced, now 2.1)."""
    from analysis.loops.changes import _and_its_sync
    from analysis.loops.replay import offsets, replay

    rows = _step([(0, 5, 1, LAUNCH), (120, 125, 2, ASYNC), (126, 140, 3, SYNC),
                  (141, 146, 4, LAUNCH)],
                 [_kernel(10, 100, 1), (MEMCPY, 125, 128, 2, 4 << 10, 1, 1, ""),
                  _kernel(150, 160, 4)], syncs=[3])
    g = build(rows, MAIN, 0, 170 * U)
    assert _and_its_sync(g, np.array([1])).tolist() == [1, 2]
    assert _and_its_sync(g, np.array([0])).tolist() == [0]     # a launch is no copy
    off, _ = offsets(g)
    keep = np.ones(len(off), dtype=bool)
    changed = off.copy()
    apply(g, Change("batch_on_device", windows=((5 * U, 125 * U),)), changed, keep)
    r = replay(g, changed, keep)
    assert r.times[2 * 2 + 1] - r.times[2 * 2] <= 5 * U       # the sync returns at once
    assert r.times[2 * 2 + 1] < 100 * U                         # not after the kernel


def test_foreach_takes_the_launches_its_sampled_windows_meet() -> None:
    """Three per-tensor launches with CPU time between them (0-5, 8-13, 16-21, host-bound:
    each 1 µs kernel starts just after its launch returns): made as one multi-tensor op
    over a window meeting all three, their launches and the CPU between them go; host_ahead
    over the same window takes the CPU time only."""
    rows = _step([(0, 5, 1, LAUNCH), (8, 13, 2, LAUNCH), (16, 21, 3, LAUNCH)],
                 [_kernel(6, 7, 1), _kernel(14, 15, 2), _kernel(22, 23, 3)])
    w = ((0, 22 * U),)
    cpu = _saved(rows, 30, Change("host_ahead", windows=w))
    assert _saved(rows, 30, Change("foreach", windows=w)) > cpu > 0


EW = "vectorized_elementwise_kernel"


def _chain_step(middle: str) -> StepRows:
    """Four elementwise kernels of one launch configuration, GPU-bound (10, 4, 10, 10
    long from 10), the third `middle`; the host waits for them all."""
    rows = _step([(0, 2, 1, LAUNCH), (3, 5, 2, LAUNCH), (6, 8, 3, LAUNCH), (9, 11, 4, LAUNCH),
                  (12, 46, 5, SYNC)],
                 [_kernel(10, 20, 1, EW), _kernel(20, 24, 2, EW), _kernel(24, 34, 3, middle),
                  _kernel(34, 44, 4, EW)], syncs=[5])
    rows.ops["grid"] = 64 * 1024 + 128
    return rows


def test_one_pass_keeps_the_shortest_kernel_of_a_chain() -> None:
    """The chain made one kernel: the shortest stays, the other three kernels go with
    their launches and the host time before them. Its launch ends at 3 (1 + 2), it runs
    at the launch gap (8) for 4, the sync returns 2 after it and the step ends 4 later:
    21 of 50. A GEMM in the middle breaks the chain (three kernels are none), and so does
    another launch configuration."""
    grid = 64 * 1024 + 128
    assert _saved(_chain_step(EW), 50, Change("one_pass", grids=(grid,))) == 29
    assert _saved(_chain_step("sgemm"), 50, Change("one_pass", grids=(grid,))) == 0
    assert _saved(_chain_step(EW), 50, Change("one_pass", grids=(grid + 1,))) == 0


def test_one_pass_keeps_the_work_before_a_blocking_call() -> None:
    """Two blocking copies (a checkpoint's), 10 µs of Python between them and 12 after,
    then a host-bound chain of four (5, 2, 3, 3 long): the chain made one takes three
    launches (2 each) and the Python before each since the launch or blocking call
    before it (12, 2, 2): 22. The Python between the copies is the checkpoint's, not the
    chain's dispatch, and stays."""
    grid = 64 * 1024 + 128
    rows = _step([(0, 5, 1, COPY), (15, 20, 2, COPY), (32, 34, 3, LAUNCH), (36, 38, 4, LAUNCH),
                  (40, 42, 5, LAUNCH), (44, 46, 6, LAUNCH)],
                 [(MEMCPY, 1, 4, 1, 1 << 20, 2, 1, ""), (MEMCPY, 16, 19, 2, 1 << 20, 2, 1, ""),
                  _kernel(35, 40, 3, EW), _kernel(40, 42, 4, EW), _kernel(42, 45, 5, EW),
                  _kernel(46, 49, 6, EW)])
    rows.ops["grid"] = grid
    assert _saved(rows, 50, Change("one_pass", grids=(grid,))) == 22


def _mask_step(count: str, select: str) -> StepRows:
    """x[x > 0], host-bound: the compare, a count kernel, the count read back (a 4-byte
    copy and its sync), a select kernel and the gather, each launch after 10 of the
    host's dispatch."""
    return _step([(0, 5, 1, LAUNCH), (15, 20, 2, LAUNCH), (30, 35, 3, ASYNC),
                  (36, 45, 4, SYNC), (55, 60, 5, LAUNCH), (70, 75, 6, LAUNCH)],
                 [_kernel(6, 8, 1, "vectorized_elementwise_kernel"), _kernel(21, 23, 2, count),
                  (MEMCPY, 40, 41, 3, 4, 2, 0, ""), _kernel(61, 63, 5, select),
                  _kernel(76, 78, 6, "index_elementwise_kernel")], syncs=[4])


def test_fixed_shape_takes_the_count_and_its_dispatch() -> None:
    """Boolean-mask indexing made torch.where: besides the wait (no_sync), the count
    kernel, the copy, the select kernel and the host's dispatch of each go; the compare
    and the gather stay. Where no counting kernel precedes the read (`.item()` of a
    sum), fixed_shape is no_sync."""
    rows = _mask_step("cub::DeviceReduceSingleTileKernel", "DeviceSelectSweepKernel")
    assert _saved(rows, 80, Change("no_sync")) == 15
    assert _saved(rows, 80, Change("fixed_shape")) == 55    # and 3 dispatches of 10 + 5,
    # less the copy's return the no_sync step kept
    plain = _mask_step("reduce_kernel", "vectorized_elementwise_kernel")
    assert _saved(plain, 80, Change("fixed_shape")) == _saved(plain, 80, Change("no_sync"))


def test_unique_mask_takes_the_sort_too() -> None:
    """torch.unique made a fixed-size mask: its radix sort (the first kernel here, in
    place of the compare) goes with the count, the copy and the select, and the dispatch
    of each: the sort's launch call (5; the step's first call, no host time before it)
    more than fixed_shape, which leaves a sort to another op; a step with no count read
    back is no_sync."""
    rows = _mask_step("cub::DeviceReduceSingleTileKernel", "DeviceSelectSweepKernel")
    rows.ops.loc[rows.ops.index[0], "name"] = "DeviceRadixSortOnesweepKernel"
    assert _saved(rows, 80, Change("fixed_shape")) == 55
    assert _saved(rows, 80, Change("unique_mask")) == 60
    plain = _mask_step("reduce_kernel", "vectorized_elementwise_kernel")
    assert _saved(plain, 80, Change("unique_mask")) == _saved(plain, 80, Change("no_sync"))


def test_the_steady_period_carries_the_backlog_into_the_next_step() -> None:
    """A step whose host syncs on its 90 µs kernel, then runs 40 µs of Python before the
    next step's launch: alone, removing the sync saves only the wait's tail; in a run,
    the next step's Python runs under this step's kernel, the GPU holds the loop (90 of
    the 140 measured): 50."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 101, 2, SYNC)], [_kernel(10, 100, 1)], syncs=[2])
    assert _saved(rows, 140, Change("no_sync")) == 50


def test_a_sync_on_earlier_steps_work_drains_a_backlog_the_steady_run_has_not() -> None:
    """A step that first syncs on a kernel an earlier step launched (a checkpoint's copy
    after seven GPU-bound steps), then launches its own 100 µs kernel and works 190 µs on
    the host: in a run of steps like it the backlog it drains is gone (its host holds the
    run), so taking the sync away saves nothing; the measured 300 µs wait was the earlier
    steps' GPU work, which the fix leaves to run (seed 55 g07's torch.save in a GPU-bound
    loop: priced 3.39 ms a step of 1.41 before, 1.36 after)."""
    rows = _step([(0, 300, 2, SYNC), (305, 310, 3, LAUNCH)],
                 [_kernel(-100, 300, 1), _kernel(310, 410, 3)], syncs=[2])
    assert _saved(rows, 500, Change("no_sync")) == 0


def test_a_step_the_host_holds_saves_nothing_from_faster_kernels() -> None:
    """Host work of 100 µs a step beside a 20 µs kernel it never waits for: the kernel
    made twice as fast leaves the period at the host's 100."""
    rows = _step([(0, 5, 1, LAUNCH), (50, 55, 2, LAUNCH)], [_kernel(10, 20, 1), _kernel(60, 70, 2)])
    assert _saved(rows, 100, Change("faster_kernels", kernels=(("k", 0.5),))) == 0


def test_a_step_whose_launches_lack_their_kernels_is_priced_alone() -> None:
    """A launch whose kernel was not read (a GPU far behind): the step's GPU step is
    unknown, so the change is priced on the step alone: it ends with its kernel, at 100
    of 140 (in a run it would be 50, as above)."""
    rows = _step([(0, 5, 1, LAUNCH), (6, 101, 2, SYNC), (102, 104, 3, LAUNCH)],
                 [_kernel(10, 100, 1)], syncs=[2])
    assert _saved(rows, 140, Change("no_sync")) == 40


def test_a_python_batch_spans_from_the_launch_before_to_its_copy() -> None:
    """A batch built in Python between a launch (ends at 5) and its host-to-device copy
    (42-50): its span starts after the launch, not after the copy's own stream query
    (40-41), so the list building (5 -> 40) is inside it."""
    from analysis.diagnosis.graph_reads import h2d_spans

    rows = _step([(0, 5, 1, LAUNCH), (40, 41, 2, "cudaStreamIsCapturing_v10000"),
                  (42, 50, 3, ASYNC)],
                 [_kernel(10, 20, 1), (MEMCPY, 45, 48, 3, 12_544, 1, 1, "")])
    assert h2d_spans(build(rows, MAIN, 0, 60 * U)) == [(5 * U, 50 * U, 12_544)]


def _repeat_step(between: int) -> StepRows:
    """repeat_interleave without output_size, host-bound: a scan, its total read back
    (an 8-byte copy and its sync), `between` check kernels (the comparison and the
    reduction of `(repeats >= 0).all()`), that flag read back (a 1-byte copy and its
    sync), then the kernels that fill the output; each call after 10 µs of dispatch."""
    calls, ops, t, corr = [], [], 0, 1

    def call(name: str, length: int = 5) -> int:
        nonlocal t, corr
        calls.append((t, t + length, corr, name))
        t, corr = t + length + 10, corr + 1
        return corr - 1

    def launch(name: str) -> None:
        c = call(LAUNCH)
        ops.append(_kernel(calls[-1][1] + 1, calls[-1][1] + 3, c, name))

    def read(size: int) -> int:
        c = call(ASYNC)
        ops.append((MEMCPY, calls[-1][1] - 2, calls[-1][1] - 1, c, size, 2, 0, ""))
        return call(SYNC, 4)

    launch("DeviceScanKernel")
    syncs = [read(8)]
    for k in range(between):
        launch("reduce_kernel" if k == between - 1 else EW)
    syncs.append(read(1))
    launch("compute_cuda_kernel")
    launch("_scatter_gather_elementwise_kernel")
    return _step(calls, ops, syncs=syncs)


def test_a_size_given_takes_both_reads_and_the_check_between_them() -> None:
    """repeat_interleave(output_size=n): besides the waits, both reads (copy, sync and the
    dispatch before each) and the check between them (two kernels and their dispatch)
    go; the scan and the kernels that fill the output stay. Five kernels between the
    reads are no check of one call (CHECK_OPS): they stay, the reads still go."""
    rows = _repeat_step(2)
    end = rows.calls["end_ns"].max() // U + 10
    plain = _saved(rows, end, Change("no_sync"))
    given = _saved(rows, end, Change("size_given"))
    assert plain == 28 and given == 88       # 2 reads of 15 + 14, 2 checks of 15
    two = _repeat_step(5)
    end = two.calls["end_ns"].max() // U + 10
    assert _saved(two, end, Change("no_sync")) < _saved(two, end, Change("size_given")) \
        < given


def test_a_total_read_back_after_a_scan_is_a_size_and_given_by_its_change() -> None:
    """Without a line (a range the Python samples missed), the CUDA pattern says it: a
    scalar read right after a scan is the total repeat_interleave sizes its output by
    (`size`), the next read an `.item()`; the finding's change is then size_given."""
    from analysis.diagnosis.rules.sync_split import change_for
    from analysis.diagnosis.sync_sites import call_kinds

    rows = _repeat_step(2)
    g = build(rows, MAIN, 0, (rows.calls["end_ns"].max() // U + 10) * U)
    assert list(call_kinds(g).values()) == ["size", "item"]
    assert change_for("size", None) == "size_given"
    assert change_for("item", "torch.repeat_interleave") == "size_given"
    assert change_for("item", "Tensor.tolist") == "readback_on_device"
    assert change_for("nonzero", None) == "fixed_shape"
    assert change_for("nonzero", "torch.functional._unique_impl") == "unique_mask"


def test_a_scoped_change_takes_the_host_work_leaving_its_range_up_to_the_range_end() -> None:
    """A `.tolist()` range (0-60): its copy read back and waited for, then the list built
    in Python until the next range's first call at 100. Its readback kept on the device
    takes the list's CPU time inside the range (20-60), not the next range's (60-100);
    before, none of it (the next call lies outside the scope)."""
    rows = _step([(0, 5, 1, LAUNCH), (10, 15, 2, ASYNC), (16, 20, 3, SYNC),
                  (100, 105, 4, LAUNCH)],
                 [_kernel(6, 8, 1), (MEMCPY, 11, 12, 2, 16 << 10, 2, 0, ""),
                  _kernel(106, 108, 4)], syncs=[3])
    whole = _saved(rows, 110, Change("readback_on_device"))
    scoped = _saved(rows, 110, Change("readback_on_device", scope=((0, 60 * U),)))
    assert whole - scoped == 40


def test_a_syncs_release_floor_is_a_syncs_latency_not_a_blocking_copys() -> None:
    """A pageable upload (its call 20-250 returns 150 µs after the kernel before it ends:
    the host stages the data), its stream sync (the copy's end wakes it 4 µs later), then
    a device sync called at 330, after everything ended: that release did not bind, and
    its floor is a sync's wake-up, 4 µs, not the median with the copy call's 150 µs
    (which kept the device sync 64 µs after the copy once the upload stopped blocking:
    seed 66 g09's pinned upload, 0.058 ms priced of 0.150, 0.113 with the floor)."""
    from analysis.loops.graph import RELEASE
    from analysis.loops.replay import offsets
    rows = _step([(0, 5, 1, LAUNCH), (20, 250, 2, ASYNC), (252, 274, 3, SYNC),
                  (330, 334, 4, "cudaDeviceSynchronize_v3020")],
                 [_kernel(10, 100, 1), (MEMCPY, 110, 270, 2, 4 << 20, 1, 1, "")],
                 syncs=[3, 4])
    g = build(rows, MAIN, 0, 400 * U)
    off, binds = offsets(g)
    release = np.flatnonzero(np.asarray(g.edge) == RELEASE)
    late = [e for e in release.tolist() if g.gap[e] == 64 * U]
    assert len(late) == 1 and not binds[late[0]] and off[late[0]] == 4 * U
    copy_call = [e for e in release.tolist() if g.gap[e] == 150 * U]
    assert len(copy_call) == 1 and binds[copy_call[0]] and off[copy_call[0]] == 150 * U


def test_a_pinned_copy_starts_as_a_kernel_does_without_the_staging() -> None:
    """A pageable upload called at 30 whose copy began at 110, once the host had staged
    its first chunk, then a device sync: made pinned and asynchronous, the copy starts at
    the step's launch latency after its call (the kernel launched at 0 began at 10: 40)
    and runs at the pinned rate (4 MB at 100 GB/s: 40 µs), and the sync waits for it to
    end at 80 (seed 58 g22: 0.302 ms of 0.405 realized, 0.224 with the copy kept at its
    measured start)."""
    from analysis.loops.replay import offsets, replay
    rows = _step([(0, 5, 1, LAUNCH), (30, 200, 2, ASYNC), (202, 210, 3, SYNC),
                  (215, 220, 4, "cudaDeviceSynchronize_v3020")],
                 [_kernel(10, 20, 1), (MEMCPY, 110, 190, 2, 4_000_000, 1, 1, "")],
                 syncs=[3, 4])
    g = build(rows, MAIN, 0, 230 * U)
    off, _ = offsets(g)
    changed, keep = off.copy(), np.ones(len(off), dtype=bool)
    apply(g, Change("pinned_async", pinned_bps=1e11), changed, keep)
    times = replay(g, changed, keep).times
    copy = len(g.calls) + 1
    assert times[2 * copy] == 40 * U and times[2 * copy + 1] == 80 * U
    assert times[2 * 3 + 1] >= 80 * U                    # the device sync waits for it


def test_a_pinned_copy_makes_no_synchronize_after_it() -> None:
    """A blocking `.to()` from pageable memory: its copy call (0-50) and the synchronize
    it makes right after (52-60). From pinned memory with non_blocking=True PyTorch makes
    no synchronize: the call takes no time in the replay, not only no wait (seed 52 g13:
    4 µs a step); the launch after it starts right after the copy's own call."""
    from analysis.loops.replay import offsets, replay
    rows = _step([(0, 50, 1, ASYNC), (52, 60, 2, SYNC), (62, 66, 3, LAUNCH)],
                 [(MEMCPY, 5, 48, 1, 1 << 20, 1, 1, ""), _kernel(70, 80, 3)], syncs=[2])
    g = build(rows, MAIN, 0, 90 * U)
    off, _ = offsets(g)
    changed, keep = off.copy(), np.ones(len(off), dtype=bool)
    apply(g, Change("pinned_async", pinned_bps=1e12), changed, keep)
    times = replay(g, changed, keep).times
    assert times[2 * 1 + 1] == times[2 * 1]                 # the synchronize: no time
    assert times[2 * 2] - times[2 * 0 + 1] <= 4 * U          # the launch follows the copy


def test_kernels_taken_away_leave_no_gap_on_their_stream() -> None:
    """Three concatenations, each 6 after the one before on an otherwise idle stream,
    then a readback that waits for them: made one, the two taken away leave neither
    their time nor their 6 of stream gap, and the readback follows the one kept (seed 65
    g31: 52 concatenations made one kept 0.31 ms of such gaps, priced 0.345 ms of 0.649;
    0.63 without them)."""
    from analysis.loops.replay import offsets, replay
    cat = "CatArrayBatchedCopy"
    rows = _step([(0, 2, 1, LAUNCH), (3, 5, 2, LAUNCH), (6, 8, 3, LAUNCH),
                  (9, 10, 4, ASYNC), (11, 40, 5, SYNC)],
                 [_kernel(10, 11, 1, cat), _kernel(17, 18, 2, cat), _kernel(24, 25, 3, cat),
                  (MEMCPY, 31, 33, 4, 8, 2, 0, "")], syncs=[5])
    g = build(rows, MAIN, 0, 45 * U)
    off, _ = offsets(g)
    changed, keep = off.copy(), np.ones(len(off), dtype=bool)
    apply(g, Change("one_cat", kernels=((cat, 0.0),)), changed, keep)
    times = replay(g, changed, keep).times
    ops0 = len(g.calls)
    kept, copy = ops0, ops0 + 3
    assert times[2 * copy] - times[2 * kept + 1] <= 7 * U     # one gap, not three


def _allocating_step(after: int) -> StepRows:
    """A host-bound step of launches 10 µs apart (5 µs calls, 5 µs between), a cudaMalloc
    (40-140) with 15 µs of CPU time before it and `after` µs after it, then launches
    again; the kernels short. The step ends 30 after the malloc's next launch."""
    t = 140 + after
    calls = [(10 * i, 10 * i + 5, i + 1, LAUNCH) for i in range(3)] + [
        (40, 140, 10, "cudaMalloc_v3020")] + [
        (t + 10 * i, t + 10 * i + 5, 20 + i, LAUNCH) for i in range(3)]
    ops = [_kernel(s + 6, s + 8, k) for s, _, k, n in calls if n == LAUNCH]
    return _step(sorted(calls), ops)


def test_no_memory_cuts_the_allocators_own_host_work_beside_the_call() -> None:
    """The malloc's 100 goes; so do the CPU time before it (15) and after it (60) down to
    the thread's usual 5 between launches: 100 + 10 + 55 = 165. A gap after it longer
    than the call (a batch built in Python after an allocation, 400) is the program's and
    stays: 100 + 10."""
    assert _saved(_allocating_step(60), 230, Change("no_memory")) == 165
    assert _saved(_allocating_step(400), 570, Change("no_memory")) == 110
