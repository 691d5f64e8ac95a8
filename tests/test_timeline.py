"""The step as a timeline model: synthetic steps whose critical paths are known by hand,
and every loop of every committed capture replayed back to its measured wall time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.load import nsys_sqlite
from analysis.load.nsys_host import HOST_PARTS, api_part
from analysis.load.nsys_pysamples import PySamples
from analysis.load.nsys_steps import StepRows
from analysis.loops.changes import Change, saving
from analysis.loops.edges import build
from analysis.loops.gil import START_WINDOW_NS, interpreter_samples, mark_gil, thread_starts
from analysis.loops.graph import EDGES
from analysis.loops.replay import CATEGORIES, critical_path, offsets, replay
from analysis.loops.runs import TAIL_KEEP
from tests.conftest import DATA
from tests.shared_docs import analyzed, committed_exports

MAIN, AUTOGRAD = 1 << 24 | 1, 1 << 24 | 2


def _step(calls: list[tuple], ops: list[tuple] = (), osrt: list[tuple] = (),
          syncs: list[tuple] = ()) -> StepRows:
    """A step from (tid, start, end, corr, name) calls, (kind, start, end, corr, stream[,
    copy_kind]) operations, (tid, start, end, name) OS calls, (corr, stream) sync
    records."""
    c = pd.DataFrame(calls, columns=["tid", "start_ns", "end_ns", "corr", "name"])
    c["part"] = [api_part(n) for n in c["name"]]
    o = pd.DataFrame([op[:5] for op in ops],
                     columns=["kind", "start_ns", "end_ns", "corr", "stream"])
    o.insert(4, "device", 0)
    o["copy_kind"] = [op[5] if len(op) > 5 else 0 for op in ops]
    s = pd.DataFrame([(corr, st, -1, 3, 0, 0) for corr, st in syncs],
                     columns=["corr", "stream", "event", "type", "start_ns", "end_ns"])
    os_ = pd.DataFrame(list(osrt), columns=["tid", "start_ns", "end_ns", "name"])
    for f in (o, s, os_):
        for col in f.columns:
            if col != "name":
                f[col] = f[col].astype("int64")
    return StepRows(1 << 24, 0, 0, c, o, s, os_)


def _path(rows: StepRows, hi: int, lo: int = 0) -> dict[str, int]:
    g = build(rows, MAIN, lo, hi)
    r = replay(g)
    assert r.wall(g) == hi - lo                       # unchanged, the measured step
    path = critical_path(g, r)
    assert sum(path[c] for c in CATEGORIES) == hi - lo
    assert sum(v for k, v in path.items() if k.startswith("thread:")) == \
        path["other_thread"]
    return {k: v for k, v in path.items() if v and k in CATEGORIES}


def test_a_sync_mid_step_puts_the_gpu_work_it_waited_for_on_the_path() -> None:
    rows = _step([(MAIN, 0, 5, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 6, 102, 2, "cudaStreamSynchronize_v3020"),
                  (MAIN, 110, 115, 3, "cudaLaunchKernel_v7000")],
                 [(0, 10, 100, 1, 7), (0, 120, 150, 3, 7)], syncs=[(2, 7)])
    assert _path(rows, 160) == {"launch": 10 + 5, "gpu": 90, "sync": 2, "cpu": 8 + 45}


def test_a_step_the_host_holds_is_cpu_and_launches() -> None:
    rows = _step([(MAIN, 0, 5, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 50, 55, 2, "cudaLaunchKernel_v7000")],
                 [(0, 8, 12, 1, 7), (0, 58, 60, 2, 7)])
    assert _path(rows, 100) == {"launch": 10, "cpu": 45 + 45}


def test_two_streams_joined_by_an_event_wait() -> None:
    """Work on stream 8 waits (cudaStreamWaitEvent) for stream 7's kernel: the path runs
    through both kernels, then the sync on stream 8."""
    rows = _step([(MAIN, 0, 5, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 6, 8, 2, "cudaEventRecord_v3020"),
                  (MAIN, 9, 11, 3, "cudaStreamWaitEvent_v3020"),
                  (MAIN, 12, 15, 4, "cudaLaunchKernel_v7000"),
                  (MAIN, 16, 205, 5, "cudaStreamSynchronize_v3020")],
                 [(0, 10, 100, 1, 7), (0, 101, 200, 4, 8)], syncs=[(5, 8)])
    g = build(rows, MAIN, 0, 210)
    assert "event" in {EDGES[e] for e in g.edge}
    assert _path(rows, 210) == {"launch": 10, "gpu": 90 + 1 + 99, "sync": 5, "cpu": 5}


def test_the_main_thread_waits_for_the_backward_thread() -> None:
    """The main thread sits in pthread_cond_wait while the autograd thread (woken by the
    main thread's last call) launches the backward; it resumes after that thread's last
    call, copies the loss and syncs: the path runs through the other thread's launches,
    then the copy and the sync."""
    rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"),
                  (AUTOGRAD, 20, 25, 2, "cudaLaunchKernel_v7000"),
                  (AUTOGRAD, 60, 65, 3, "cudaLaunchKernel_v7000"),
                  (MAIN, 80, 84, 4, "cudaMemcpyAsync_v3020"),
                  (MAIN, 89, 97, 5, "cudaStreamSynchronize_v3020")],
                 [(0, 6, 8, 1, 7), (0, 27, 29, 2, 7), (0, 67, 69, 3, 7),
                  (1, 86, 95, 4, 7, 2)],
                 osrt=[(MAIN, 10, 75, "pthread_cond_wait"),
                       (AUTOGRAD, -50, 18, "pthread_cond_wait")], syncs=[(5, 7)])
    assert _path(rows, 100) == {"cpu": 3 + 5, "sync": 2, "copy_d2h": 9, "launch": 6 + 4,
                                "other_thread": 10 + 5 + 35 + 5 + 2 + 14}


def test_a_blocking_copy_ends_after_its_copy() -> None:
    rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 5, 130, 2, "cudaMemcpy_v3020")],
                 [(0, 8, 100, 1, 7), (1, 101, 128, 2, 7, 1)])
    assert _path(rows, 140) == {"launch": 8, "gpu": 92 + 1, "copy_h2d": 27, "sync": 2,
                                "cpu": 10}


def test_cuda_free_in_the_loop_waits_for_the_gpu() -> None:
    rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 5, 103, 2, "cudaFree_v3020")],
                 [(0, 8, 100, 1, 7)])
    assert HOST_PARTS[api_part("cudaFree_v3020")] == "memory"
    assert _path(rows, 110) == {"launch": 8, "gpu": 92, "sync": 3, "cpu": 7}


def test_a_removed_sync_replays_shorter() -> None:
    """The what-if the next stage prices: without the release edge, the sync costs its
    own return and the host goes on."""
    rows = _step([(MAIN, 0, 5, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 6, 102, 2, "cudaStreamSynchronize_v3020"),
                  (MAIN, 110, 115, 3, "cudaLaunchKernel_v7000")],
                 [(0, 10, 100, 1, 7), (0, 120, 150, 3, 7)], syncs=[(2, 7)])
    g = build(rows, MAIN, 0, 160)
    off, _ = offsets(g)
    keep = np.array([EDGES[e] != "release" for e in g.edge])
    assert replay(g, off, keep).wall(g) == 160 - (102 - 6 - 2)


CAPTURES = committed_exports(reference=False)
WITH_LOOPS = {"battery/item_sync_planted/trace", "battery/input_starved_planted/trace",
              "train_step/trace", "emit_nvtx_200/trace", "twins/item_autograd/trace",
              "twins/sync_timing/trace", "twins/foreach_adam/trace"}


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_loop_replays_to_its_run_time(capture: str) -> None:
    """Every loop range of every committed capture carries its critical path as it runs,
    summing to its run time (the runs' spans) within 2%, and its replayed run time within
    5% of it."""
    loops = _replayed_loops(capture)
    assert loops or capture not in WITH_LOOPS


BATTERY = sorted(p.parent.name for p in (DATA / "battery_gen").glob("gen_*/trace.sqlite.xz"))


@pytest.mark.battery
@pytest.mark.parametrize("seed", BATTERY)
def test_every_battery_loop_replays_to_its_run_time(seed: str) -> None:
    """The same of every loop of the generated battery's captures (a minute each to
    analyze on the 2-core machine: `make test-battery`, not the default suite)."""
    assert len(_replayed_loops(f"battery_gen/{seed}/trace")) >= 40


def _replayed_loops(capture: str) -> list:
    """The capture's modeled loops, each checked: its critical path sums to its run time
    within 2%, its replay within 5%."""
    doc = analyzed(capture)
    loops = [e for e in doc.ranges if e.modeled_instances]
    for e in loops:
        run = e.run_per_instance_ns * e.run_instances
        assert set(e.critical_path_ns) <= set(CATEGORIES)
        assert abs(sum(e.critical_path_ns.values()) - run) <= 0.02 * run, e.name
        assert abs(e.replayed_run_ns - run) <= 0.05 * run, e.name
        assert e.modeled_instances <= min(e.wall_instances, 16 + TAIL_KEEP)
    return loops


def test_the_item_sync_loop_runs_through_the_backward_thread_and_the_sync() -> None:
    """As it runs, the step waits in its `.item()` for the GPU work queued before it: GPU
    work holds most of the step; the window of `step/log` (from one `.item()` to the next)
    ends after the next backward, whose launches on the autograd thread hold it."""
    doc = analyzed("battery/item_sync_planted/trace")
    step = {e.name: e for e in doc.ranges}

    def share(name: str, what: str) -> float:
        e = step[name]
        return e.critical_path_ns.get(what, 0) / (e.run_per_instance_ns * e.run_instances)

    assert share("step", "gpu") > 0.5 and share("step", "sync") > 0
    assert share("step/log", "other_thread") > 0.1          # the backward's launches
    assert share("step/train", "gpu") > 0.5                 # drained by the next .item()


def test_a_graph_out_of_measured_order_replays_in_dependency_order() -> None:
    """An edge that goes back in measured time (two clocks a few ns apart) sends the
    replay through a topological order; the measured times still come back."""
    rows = _step([(MAIN, 0, 5, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 6, 50, 2, "cudaStreamSynchronize_v3020")],
                 [(0, 10, 40, 1, 7)], syncs=[(2, 7)])
    g = build(rows, MAIN, 0, 60)
    g.add(2 * 2 + 1, 2 * 0 + 1, EDGES.index("thread"))     # the op's end -> the call's end
    r = replay(g)
    off = offsets(g)[0]
    for p in range(2 * g.n):                                 # each point: its latest arrival
        into = np.flatnonzero(g.dst == p)
        if len(into):
            assert r.times[p] == max(r.times[g.src[e]] + off[e] for e in into)
            assert r.times[g.src[r.via[p]]] + off[r.via[p]] == r.times[p]
    assert r.times[1] == 40 and r.wall(g) == 61              # the late edge moved the rest


def test_nested_loops_are_sampled_inside_the_enclosing_loops_sample() -> None:
    """The step's forward, backward and optimizer are modeled in the steps the step's
    own sample holds, and every window inside another is cut from its rows, equal to a
    read of its own."""
    from analysis.load.nsys_steps import read_steps
    from analysis.loops.model import StepModels
    from analysis.trace import build as model

    path = DATA / "emit_nvtx_200/trace.sqlite"
    trace = model.attribute(nsys_sqlite.load(path))
    steps = StepModels(trace, path)
    keys = {steps.trace.keys.at[k, "path"]: k for k in steps.trace.keys.index}
    loop = [keys[f"train_emit_nvtx/step{s}"] for s in ("", "/fwd", "/bwd", "/opt")]
    picked = steps.samples(loop)
    outer = picked[loop[0]]
    assert len(outer) == 16
    r = trace.ranges
    lo, hi = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    for k in loop[1:]:
        assert len(picked[k]) == 16
        assert all(((lo[outer] <= lo[i]) & (hi[i] <= hi[outer])).any() for i in picked[k])
    rows = [int(i) for k in loop for i in picked[k][:3]]
    windows = [(int(r["pid"].iat[i]), int(lo[i]), int(hi[i])) for i in rows]
    together = read_steps(path, windows)
    for w, got in zip(windows, together, strict=True):
        alone = read_steps(path, [w])[0]
        for f in ("calls", "ops", "syncs", "osrt"):
            pd.testing.assert_frame_equal(getattr(alone, f), getattr(got, f),
                                          check_dtype=False)


def test_the_critical_path_plot_draws_each_loops_shares() -> None:
    """critical_path.svg: one bar per loop, its segments as wide as its shares."""
    import xml.etree.ElementTree as ET

    from analysis.render.svg import BAR_W, critical_path_svg
    from analysis.render.timeline_md import loop_entries, shares

    doc = analyzed("train_step/trace")
    svg = ET.fromstring(critical_path_svg(doc))
    ns = "{http://www.w3.org/2000/svg}"
    bars = [el for el in svg.iter(f"{ns}rect") if el.find(f"{ns}title") is not None]
    for e in loop_entries(doc):
        mine = [float(el.get("width")) for el in bars
                if el.find(f"{ns}title").text.startswith(f"{e.name}: ")]
        assert len(mine) == len(shares(e))
        assert sum(mine) == pytest.approx(BAR_W * sum(s for _, s in shares(e)) / 100, abs=1)


def test_a_wait_while_another_thread_runs_the_interpreter_is_the_gil() -> None:
    """The range's thread waits in pthread_cond_timedwait while another Python thread of
    its process has CPU samples in the interpreter: a GIL wait, held by that thread, that
    no_gil removes; the same wait with no such sample within SAMPLE_SLACK_NS stays an OS
    call."""
    rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 60, 64, 2, "cudaLaunchKernel_v7000")],
                 [(0, 6, 8, 1, 7), (0, 66, 70, 2, 7)],
                 osrt=[(MAIN, 10, 55, "pthread_cond_timedwait")])
    spinner = 1 << 24 | 9
    samples = pd.DataFrame({"global_tid": [spinner, spinner, MAIN, spinner],
                            "time_ns": [20, 30, 40, 10_000_000],
                            "module": ["python3.12", "libpython3.12.so.1.0", "python3.12",
                                       "python3.12"], "symbol": ""})
    for running, held in ((samples, "gil"), (samples.iloc[2:], "os")):
        g = build(rows, MAIN, 0, 80)
        mark_gil(g, interpreter_samples(running))
        path = critical_path(g, replay(g))
        assert path[held] == 45 and sum(path[c] for c in CATEGORIES) == 80
        assert path.get(f"gil:{spinner}", 0) == (45 if held == "gil" else 0)
        assert saving(g, Change("no_gil")) == (45 if held == "gil" else 0)


def test_a_thread_is_named_by_the_line_that_started_it() -> None:
    """The main thread's latest sample inside threading's Thread.start before a thread's
    first CPU sample names the user's line that started it; a start too long before, one
    after, or one of another process names none."""
    start = (("/usr/lib/python3.12/threading.py", "wait", 655),
             ("/usr/lib/python3.12/threading.py", "start", 997),
             ("./train.py", "spawn", 37), ("./train.py", "main", 80))
    other = (("./train.py", "step", 50), ("./train.py", "main", 82))
    late = (("/usr/lib/python3.12/threading.py", "start", 997), ("./train.py", "later", 90))
    t0 = 1_000_000_000
    py = PySamples(samples=pd.DataFrame({
        "global_tid": [MAIN] * 4, "stack": [0, 1, 1, 2],
        "time_ns": [t0 - 2_000_000, t0 - 1_000_000, t0 + 5, t0 + 1_000_000]}),
        stacks=[start, other, late])
    near, old, foreign = 1 << 24 | 9, 1 << 24 | 10, 2 << 24 | 11
    cpu = pd.DataFrame({"global_tid": [near, old, foreign],
                        "time_ns": [t0, t0 + START_WINDOW_NS + 3_000_000, t0],
                        "module": "python3.12", "symbol": ""})
    assert thread_starts(py, cpu, {near, old, foreign}) == {near: "train.py:37 in spawn"}
    assert thread_starts(PySamples(), cpu, {near}) == {}


def _allocator_step(malloc_at: int) -> StepRows:
    """The range's thread frees (90 µs) and then syncs on the kernel the autograd thread
    launches after its own cudaMalloc, which starts `malloc_at`."""
    return _step([(MAIN, 10_000, 100_000, 1, "cudaFree_v3020"),
                  (MAIN, 100_500, 200_100, 2, "cudaStreamSynchronize_v3020"),
                  (AUTOGRAD, 0, 5, 3, "cudaLaunchKernel_v7000"),
                  (AUTOGRAD, malloc_at, malloc_at + 9_000, 4, "cudaMalloc_v3020"),
                  (AUTOGRAD, malloc_at + 9_000, malloc_at + 9_010, 5,
                   "cudaLaunchKernel_v7000")],
                 [(0, 1_000, 2_000, 3, 7), (0, malloc_at + 10_000, 200_000, 5, 7)],
                 syncs=[(2, 7)])


def test_a_memory_call_that_took_the_allocator_from_another_thread_waits_for_it() -> None:
    """The allocator is taken in turn (edges.ALLOC_HANDOFF_NS): the autograd thread's
    cudaMalloc 1 µs after the range thread's cudaFree ended waited for it, so the free is
    on the path (as another thread's, from the autograd thread's side) and a shorter free
    moves the malloc, the kernel after it and the step's end; 20 µs later, it did not
    wait."""
    from analysis.loops.edges import ALLOC_HANDOFF_NS
    from analysis.loops.graph import OWN
    g = build(_allocator_step(101_000), MAIN, 0, 200_200)
    alloc = np.flatnonzero(g.edge == EDGES.index("alloc"))
    assert len(alloc) == 1 and (g.src[alloc[0]], g.dst[alloc[0]]) == (2 * 0 + 1, 2 * 3)
    off, binds = offsets(g)
    assert binds[alloc[0]]
    assert replay(g).wall(g) == 200_200
    free = np.flatnonzero((g.edge == OWN) & (g.src == 0))[0]
    faster = off.copy()
    faster[free] = 10_000                                    # the free 80 µs shorter
    assert replay(g, faster).wall(g) == 200_200 - 80_000
    late = build(_allocator_step(100_000 + ALLOC_HANDOFF_NS + 15_000), MAIN, 0, 220_000)
    assert not (late.edge == EDGES.index("alloc")).any()


@pytest.mark.parametrize(("call", "change"), [("cudaStreamSynchronize_v3020", "no_sync"),
                                             ("cudaFree_v3020", "no_memory")])
def test_a_call_removed_takes_the_gil_wait_after_it(call: str, change: str) -> None:
    """A synchronize, or a cudaFree (torch.cuda.empty_cache() beside a GIL-holding
    thread), at 10-30, after which the thread waits 25 for the GIL (32-57: another
    Python thread ran the interpreter while the call held none), then launches at 60.
    no_sync frees the sync's wait for its kernel, no_memory the free, and each the GIL
    wait after it (seed 61 g05's empty_cache: 0.51 ms a step priced of 4.5 realized
    before, 3.24 after); the same wait 100 µs after the call (past GIL_AFTER_NS) is
    another call's and stays."""
    spinner = 1 << 24 | 9
    samples = pd.DataFrame({"global_tid": [spinner] * 3, "time_ns": [35, 45, 100_040],
                            "module": "python3.12", "symbol": ""})
    for gap, saved in ((2, 20 + 25), (100_000, 20)):
        rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"), (MAIN, 10, 30, 2, call),
                      (MAIN, 60 + gap, 64 + gap, 3, "cudaLaunchKernel_v7000")],
                     [(0, 6, 30, 1, 7), (0, 66 + gap, 70 + gap, 3, 7)],
                     osrt=[(MAIN, 30 + gap, 55 + gap, "pthread_cond_timedwait")])
        rows.ops["bytes"] = 0                         # kernels only: no scalar read back
        g = build(rows, MAIN, 0, 80 + gap)
        mark_gil(g, interpreter_samples(samples))
        assert g.label.count("gil") == 1
        assert saving(g, Change(change)) == saved, gap


def test_a_pageable_copy_made_pinned_takes_the_gil_wait_after_it() -> None:
    """A pageable upload's call at 10-30 holds no GIL while its copy runs (13-28);
    another Python thread takes it and the thread waits 25 for it back (32-57).
    pinned_async frees the call from its copy (18) and takes the GIL wait after it, as
    no_sync does after a sync (an asynchronous copy returns at once: seed 65 g21's
    upload beside a GIL-holding thread saved 7.3 ms a step, its copy 1.9); the same wait
    100 µs after the call is another call's and stays."""
    spinner = 1 << 24 | 9
    samples = pd.DataFrame({"global_tid": [spinner] * 3, "time_ns": [35, 45, 100_040],
                            "module": "python3.12", "symbol": ""})
    for gap, saved in ((2, 18 + 25), (100_000, 18)):
        rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"),
                      (MAIN, 10, 30, 2, "cudaMemcpyAsync_v3020"),
                      (MAIN, 60 + gap, 64 + gap, 3, "cudaLaunchKernel_v7000")],
                     [(0, 6, 12, 1, 7), (1, 13, 28, 2, 7, 1), (0, 66 + gap, 70 + gap, 3, 7)],
                     osrt=[(MAIN, 30 + gap, 55 + gap, "pthread_cond_timedwait")])
        rows.ops["bytes"] = [0, 1 << 20, 0]
        g = build(rows, MAIN, 0, 80 + gap)
        mark_gil(g, interpreter_samples(samples))
        assert g.label.count("gil") == 1
        assert saving(g, Change("pinned_async")) == saved, gap


def test_a_scalar_read_removed_takes_the_gil_wait_of_its_dispatch() -> None:
    """`.item()` under another Python thread: after the launch (0-4) the thread waits 12
    for the GIL (8-20) to dispatch the read, copies 4 bytes back (20-22) and waits for
    it (22-35). no_sync takes the GIL wait of the read's dispatch with it: 12 more than
    the same step where no interpreter sample marks the wait as the GIL's."""
    spinner = 1 << 24 | 9
    rows = _step([(MAIN, 0, 4, 1, "cudaLaunchKernel_v7000"),
                  (MAIN, 20, 22, 2, "cudaMemcpyAsync_v3020"),
                  (MAIN, 22, 35, 3, "cudaStreamSynchronize_v3020"),
                  (MAIN, 40, 44, 4, "cudaLaunchKernel_v7000")],
                 [(0, 6, 8, 1, 7), (1, 21, 22, 2, 7, 2), (0, 46, 50, 4, 7)],
                 osrt=[(MAIN, 8, 20, "pthread_cond_timedwait")])
    rows.ops["bytes"] = [0, 4, 0]
    saved = {}
    for times in ([10, 15], [10_000_000]):         # near the wait; past SAMPLE_SLACK_NS
        g = build(rows, MAIN, 0, 52)
        mark_gil(g, interpreter_samples(pd.DataFrame({
            "global_tid": spinner, "time_ns": times, "module": "python3.12", "symbol": ""})))
        saved[len(times)] = saving(g, Change("no_sync"))
    assert saved[2] - saved[1] == 12
