"""A loop's syncs split by the user's line that makes each (diagnosis/sync_sites.py), on
synthetic steps: two reads a step, each sampled nearest its own sync."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analysis.diagnosis.sync_sites import SyncSite, by_call, call_kinds, says, sync_sites
from analysis.load.nsys_pysamples import PySamples
from analysis.loops.changes import Change, saving
from analysis.loops.edges import build
from analysis.loops.sync_changes import index_uploads
from tests.test_whatif import ASYNC, LAUNCH, MAIN, MEMCPY, SYNC, U, _kernel, _step

STEP = 200


def _graph(k: int, first: str = "k"):
    """Step k: a kernel (the step's own work, named `first`), a small read back and its
    sync (ends at 100), then a guard's kernel, its read and sync (ends at 150)."""
    t = k * STEP
    rows = _step([(t + 0, t + 5, 1, LAUNCH), (t + 70, t + 72, 2, ASYNC),
                  (t + 73, t + 100, 3, SYNC), (t + 110, t + 115, 4, LAUNCH),
                  (t + 131, t + 133, 5, ASYNC), (t + 134, t + 150, 6, SYNC)],
                 [_kernel(t + 10, t + 60, 1, first), (MEMCPY, t + 60, t + 61, 2, 4, 2, 0, ""),
                  _kernel(t + 120, t + 130, 4), (MEMCPY, t + 131, t + 132, 5, 4, 2, 0, "")],
                 syncs=[3, 6])
    return build(rows, MAIN, t * U, (t + STEP) * U)


def _pricer(samples: list[tuple[int, tuple]], steps: int = 4, first: str = "k",
            graphs: list | None = None, inner: dict | None = None):
    """A pricer over `steps` steps (_graph's, or `graphs`), whose range's thread was
    sampled at (µs, line); `inner`: the windows of ranges inside, by path."""
    stacks = sorted({line for _, line in samples})
    py = PySamples(pd.DataFrame({"global_tid": MAIN, "time_ns": [t * U for t, _ in samples],
                                 "stack": [stacks.index(x) for _, x in samples]}),
                   [(("train.py", fn, ln),) for fn, ln in stacks])
    graphs = graphs or [_graph(k, first) for k in range(steps)]
    inner = inner or {}
    models = SimpleNamespace(windows=lambda path, pid: inner.get(path) or tuple(
        (g.lo, g.hi) for g in graphs), graphs=lambda key: graphs, py_samples=lambda: py,
        trace=SimpleNamespace(export=SimpleNamespace(working_dir=None),
                              keys=pd.DataFrame({"path": ["loop", "loop/step", *inner]})))
    return SimpleNamespace(models=models, modeled_key=lambda path, pid: 0,
                           threads=lambda path, pid: {MAIN})


def test_each_sync_is_named_by_the_line_sampled_nearest_its_end() -> None:
    """The step's own line is sampled in the first sync's segment too, but further from
    its end than the read's line: two sites, each with its segments and kind."""
    samples = [(k * STEP + dt, line) for k in range(4) for dt, line in
               ((50, ("step", 10)), (95, ("read", 20)), (145, ("guard", 30)))]
    sites = sync_sites(_pricer(samples), "loop/step")
    assert [s.line for s in sites] == [("read", 20), ("guard", 30)]
    assert all(s.kinds == ("item",) for s in sites)
    first = sites[0].windows[0]
    assert first[0] == 0 and first[1] == 110 * U + 1      # to the next call's start
    assert len(sites[1].windows) == 4


def test_without_samples_near_a_sync_its_site_has_no_line() -> None:
    samples = [(k * STEP + 95, ("read", 20)) for k in range(4)]
    sites = sync_sites(_pricer(samples), "loop/step")
    assert sites == [SyncSite(("read", 20), ("item",), sites[0].windows, "train.py"),
                     SyncSite(None, ("item",), sites[1].windows)]
    assert np.all(np.diff([w[0] for w in sites[1].windows]) == STEP * U)


def test_a_site_finding_names_its_line_and_acts_on_its_segments() -> None:
    """One finding per site where two lines sync: a count read back made fixed-shape, a
    `.tolist()` kept on the device; its change's scope is the site's segments."""
    from analysis.diagnosis.rules.host_rules import SYNC_REMEDY
    from analysis.diagnosis.rules.sync_split import site_finding, split
    from analysis.documents.types import PyLine

    tolist = PyLine(file="train.py", line=20, function="read", call="Tensor.tolist",
                    pct=30.0, code="v = x.tolist()", samples=12)
    e = SimpleNamespace(name="loop/step", wall_instances=16, lines=[tolist])
    rule = SimpleNamespace(finding=lambda **kw: kw)
    sites = [SyncSite(("read", 20), ("item",), ((0, 10),)),
             SyncSite(("mask", 40), ("nonzero",), ((10, 20),))]
    assert split(sites)
    read, mask = (site_finding(rule, e, s, {}, SYNC_REMEDY) for s in sites)
    assert read["change"] == "readback_on_device" and mask["change"] == "fixed_shape"
    assert read["evidence"]["lines_named"][0]["call"] == "Tensor.tolist"
    assert mask["evidence"]["site_windows"] == [[10, 20]]
    assert "train.py:20 in read in `Tensor.tolist`" in read["message"]
    assert mask["suggestion"] == SYNC_REMEDY["nonzero"]


def test_a_size_read_and_the_read_after_it_are_one_call_and_one_site() -> None:
    """A scan before the first read makes it a total (`size`, repeat_interleave's), and
    the read after it that call's check: one site, named from both segments' samples (the
    line sampled only in the check's segment, nearer its end than the step's own line in
    the first)."""
    samples = [(k * STEP + dt, line) for k in range(4) for dt, line in
               ((50, ("step", 10)), (145, ("rep", 88)))]
    sites = sync_sites(_pricer(samples, first="DeviceScanKernel"), "loop/step")
    assert [(s.line, s.kinds, len(s.windows)) for s in sites] == \
        [(("rep", 88), ("size", "item"), 8)]


def test_a_read_is_a_counts_only_where_a_count_was_launched_since_the_sync_before() -> None:
    """A count's kernel before the first read makes it a count's; the second read, after
    a plain kernel, is an `.item()` (before, any counting kernel earlier in the step made
    every later read a count's: a `.tolist()` after a `torch.unique`)."""
    assert list(call_kinds(_graph(0, "DeviceSelectSweepKernel")).values()) == \
        ["nonzero", "item"]


def _instance(i: int, steps: int = 4):
    """Instance i of a loop's range (at i * 1000 µs): `steps` steps of STEP µs, each a
    kernel launched at its start, a small read back and its sync (ends at +100)."""
    t0, calls, ops = i * 1000, [], []
    for k in range(steps):
        t, c = t0 + k * STEP, 3 * k + 1
        calls += [(t, t + 5, c, LAUNCH), (t + 70, t + 72, c + 1, ASYNC),
                  (t + 73, t + 100, c + 2, SYNC)]
        ops += [_kernel(t + 10, t + 60, c), (MEMCPY, t + 60, t + 61, c + 1, 4, 2, 0, "")]
    rows = _step(calls, ops, syncs=[3 * k + 3 for k in range(steps)])
    return build(rows, MAIN, t0 * U, (t0 + steps * STEP) * U)


def test_a_loop_range_names_each_steps_sync_by_one_line() -> None:
    """A loop's range whose modeled unit is its instance (four steps, a range `step`
    each): the k-th sync of every step is one line, named from all their samples. Half
    the steps were sampled only on the step's own work, far before the read (seed 88
    g09's CPU index: 17 of its 32 syncs took that line and the site half the saving);
    without the steps' range the four syncs stay apart."""
    graphs = [_instance(i) for i in range(3)]
    steps = tuple(((i * 1000 + k * STEP) * U, (i * 1000 + (k + 1) * STEP) * U)
                  for i in range(3) for k in range(4))
    samples = [(i * 1000 + k * STEP + (95 if k % 2 == 0 else 30),
                ("read", 20) if k % 2 == 0 else ("step", 10)) for i in range(3) for k in range(4)]
    sites = sync_sites(_pricer(samples, graphs=graphs, inner={"loop/step": steps}), "loop")
    assert [(s.line, len(s.kinds)) for s in sites] == [(("read", 20), 4)]
    apart = sync_sites(_pricer(samples, graphs=graphs), "loop")
    assert [(s.line, len(s.kinds)) for s in apart] == [(("read", 20), 2), (("step", 10), 2)]


def test_a_loop_ranges_sync_is_the_line_sampled_last_before_the_waits() -> None:
    """Over a loop range's steps, the line sampled nearest of all before the syncs names
    them, not the smallest median: a read whose dispatch runs long (its samples 95 to 5
    µs before the sync's end, median 70) and one sample of another line 40 µs before
    (seed 89 g02: the cause range's push, against an `if` on a tensor slowed by a
    GIL-holding thread)."""
    graphs = [_instance(i) for i in range(3)]
    steps = tuple(((i * 1000 + k * STEP) * U, (i * 1000 + (k + 1) * STEP) * U)
                  for i in range(3) for k in range(4))
    samples = [(i * 1000 + k * STEP + at, ("read", 20)) for i in range(3) for k in range(4)
               for at in ((5, 10, 30, 95)[k],)] + [(1000 + STEP + 60, ("push", 87))]
    sites = sync_sites(_pricer(samples, graphs=graphs, inner={"loop/step": steps}), "loop")
    assert [(s.line, len(s.kinds)) for s in sites] == [(("read", 20), 4)]


def test_a_call_takes_the_one_line_whose_text_makes_it() -> None:
    """Backtraced syncs: a `.tolist()` whose short wait was sampled on the `torch.unique`
    before it, or on the step's loop, or not at all, takes the line that calls tolist;
    the unique keeps its own; two lines that make the same call stay apart; without text,
    a line found for two calls is the call's that most of its syncs make."""
    step, read, uniq = ("f.py", "step", 10), ("f.py", "read", 20), ("f.py", "uniq", 30)
    text = {10: "v = v * 0.5", 20: "s = x[:8].tolist()", 30: "u = torch.unique(y)"}
    said = lambda f, c: says(text[f[2]], c)                 # noqa: E731
    frames = [read, uniq, uniq, uniq, step, uniq, None, uniq]
    calls = ["Tensor.tolist", "torch.unique"] * 4
    assert by_call(frames, calls, said) == [read, uniq] * 4
    two = ("f.py", "again", 40)
    assert by_call([read, None, two], ["Tensor.item"] * 3, lambda f, c: True) == \
        [read, None, two]
    assert by_call([uniq, uniq, uniq, None], ["torch.unique", "Tensor.tolist",
                                              "torch.unique", "Tensor.tolist"],
                   lambda f, c: False) == [uniq, None, uniq, None]
    assert not says("y = x[i]", "Tensor.__getitem__") and says("torch.cuda.synchronize()",
                                                              "torch.cuda.synchronize")


def test_unreached_syncs_take_the_line_of_the_range_that_makes_their_call() -> None:
    """A `torch.cuda.synchronize()` a step whose waits no sample reached (each named by
    the line before it, or by none) beside the one that ends the range, which a sample
    did reach: the steps' syncs take the line the range's samples show making the call
    that no sync was found on, and the range's last keeps its own (seed 87 g36's sixteen
    went to the range's end line, and the step's line got no finding)."""
    rep, step_sync, end = ("c.py", "rep", 88), ("c.py", "sync", 123), ("p.py", "variant", 121)
    text = {88: "z = torch.repeat_interleave(x, r)", 123: "torch.cuda.synchronize()",
            121: "torch.cuda.synchronize()"}
    said = lambda f, c: says(text[f[2]], c)                 # noqa: E731
    frames = [rep, None, rep, rep, None, rep, end]
    calls = ["repeat_interleave", "torch.cuda.synchronize"] * 3 + ["torch.cuda.synchronize"]
    assert by_call(frames, calls, said) == [rep, end] * 3 + [end]
    assert by_call(frames, calls, said, heard=[rep, step_sync, end, step_sync]) == \
        [rep, step_sync] * 3 + [end]


def _two_repeats(k: int):
    """Step k (120 µs): two `repeat_interleave` calls, each a scan, its total read back
    (a sync ending at +30), a check kernel and a second read (ending at +50)."""
    t, calls, ops = k * 120, [], []
    for at, c in ((0, 1), (60, 7)):
        a = t + at
        calls += [(a, a + 5, c, LAUNCH), (a + 22, a + 24, c + 1, ASYNC),
                  (a + 27, a + 30, c + 2, SYNC), (a + 32, a + 35, c + 3, LAUNCH),
                  (a + 40, a + 42, c + 4, ASYNC), (a + 45, a + 50, c + 5, SYNC)]
        ops += [_kernel(a + 10, a + 20, c, "DeviceScanKernel"),
                (MEMCPY, a + 25, a + 26, c + 1, 4, 2, 0, ""), _kernel(a + 36, a + 38, c + 3),
                (MEMCPY, a + 43, a + 44, c + 4, 4, 2, 0, "")]
    return build(_step(calls, ops, syncs=[3, 6, 9, 12]), MAIN, t * U, (t + 120) * U)


def test_a_kind_only_one_call_makes_names_its_syncs_no_sample_reached() -> None:
    """Without backtraces, two `repeat_interleave` calls a step, the samples only in the
    first's segments: the second's syncs (a total after a scan, the kind only that call
    makes) take the first's line, one site of four syncs (before, a site of their own
    with no line)."""
    sites = sync_sites(_pricer([(k * 120 + 48, ("rep", 88)) for k in range(4)],
                               graphs=[_two_repeats(k) for k in range(4)]), "loop/step")
    assert [(s.line, s.kinds, s.calls) for s in sites] == \
        [(("rep", 88), ("size", "item") * 2, ("repeat_interleave",) * 4)]


def _indexing(kernel: str):
    """`x[idx]` with idx on the host: a kernel of the step's own (launched at 0), the
    index's copy to the GPU (a capture query at 50, the copy call 52-60, its copy 55-58,
    a synchronize 61-70), then the launch of `kernel` at 80 (it runs 90-95)."""
    return _step([(0, 5, 1, LAUNCH), (50, 51, 2, "cudaStreamIsCapturing_v10000"),
                  (52, 60, 3, ASYNC), (61, 70, 4, SYNC), (80, 85, 5, LAUNCH)],
                 [_kernel(10, 40, 1), (MEMCPY, 55, 58, 3, 8192, 1, 1, ""),
                  _kernel(90, 95, 5, kernel)], syncs=[4])


def test_an_upload_before_an_indexing_kernel_is_indexing_with_a_cpu_index() -> None:
    """The synchronize after a host-to-device copy is an upload's, not a readback's: the
    indexing op's when the next kernel indexes, a blocking `.to()`'s otherwise."""
    for kernel, said in (("index_elementwise_kernel", "index"), ("k", "upload")):
        g = build(_indexing(kernel), MAIN, 0, 100 * U)
        assert list(call_kinds(g).values()) == [said]
        assert bool(index_uploads(g)) == (said == "index")


def test_index_on_device_drops_the_upload_its_wait_and_its_dispatch() -> None:
    """The index kept on the GPU: the capture query, the copy call, the synchronize and
    the CPU time after each (1 + 8 + 1 + 9 + 10 = 29, and the query's 1) gone; the host's
    work before them (5 -> 50: the indexing op's own dispatch) stays: the launch moves
    from 80 to 50."""
    rows = _indexing("index_elementwise_kernel")
    assert saving(build(rows, MAIN, 0, 100 * U), Change("index_on_device")) / U == 30
    assert saving(build(_indexing("k"), MAIN, 0, 100 * U), Change("index_on_device")) == 0


def test_index_on_device_takes_only_the_uploads_of_its_site() -> None:
    """A site's change keeps the index uploads whose sync starts outside its scope: the
    upload of another line's indexing is that line's to remove (a scope: the site's
    segment, through to the call after its sync, as sync_sites gives it)."""
    g = build(_indexing("index_elementwise_kernel"), MAIN, 0, 100 * U)
    assert saving(g, Change("index_on_device", scope=((45 * U, 81 * U),))) / U == 30
    assert saving(g, Change("index_on_device", scope=((0, 45 * U),))) == 0


def test_a_count_is_known_by_its_launch_not_its_gpu_start() -> None:
    """A GPU-bound step: the GEMM launched at 0 runs 10-150, the mask's count kernel
    launched at 10 runs 150-152, after the count's read back was called (20); its copy
    and sync follow. The read is a count's (`nonzero`, fixed_shape's), as where the GPU
    keeps up: seed 62 g26's boolean mask was read as an `.item()` in 12 of its 16 steps
    when its kernels were ordered by their GPU starts."""
    rows = _step([(0, 5, 1, LAUNCH), (10, 15, 2, LAUNCH), (20, 22, 3, ASYNC),
                  (23, 160, 4, SYNC)],
                 [_kernel(10, 150, 1, "gemm"), _kernel(150, 152, 2, "cub::DeviceReduce::Sum"),
                  (MEMCPY, 153, 154, 3, 4, 2, 0, "")], syncs=[4])
    assert list(call_kinds(build(rows, MAIN, 0, 200 * U)).values()) == ["nonzero"]


def test_an_upload_then_the_next_ranges_indexing_is_an_upload() -> None:
    """An upload (a `.to()` or `torch.tensor(rows, device=...)`) whose next kernel indexes
    in a range the thread entered after it (at 75, open at the launch at 80): another
    statement's indexing with an index already on the GPU, not an index tensor uploaded
    for it. A range entered and left before the launch does not part them."""
    for entered, said in (((75, 99),), "upload"), (((62, 66),), "index"):
        g = build(_indexing("index_elementwise_kernel"), MAIN, 0, 100 * U)
        g.entered = np.array(entered, dtype=np.int64) * U
        assert list(call_kinds(g).values()) == [said]


def test_index_on_device_keeps_the_host_work_before_a_sync_that_ends_another_op() -> None:
    """An upload's synchronize (40-45) before the index's capture query (50): the host's
    work between them (45 -> 50) is the indexing op's own, not the index copy's dispatch,
    and stays; the query and what follows go as before (30)."""
    rows = _indexing("index_elementwise_kernel")
    rows.calls = pd.concat([rows.calls, rows.calls.iloc[[3]].assign(
        start_ns=40 * U, end_ns=45 * U, corr=9)], ignore_index=True)
    rows.calls = rows.calls.sort_values("start_ns", ignore_index=True)
    assert saving(build(rows, MAIN, 0, 100 * U), Change("index_on_device")) / U == 30


def _read_back(nbytes: int):
    """A read back: a kernel of the step's own (launched at 0, it runs 10-12), the copy
    call 52-60 of `nbytes` device to host (its copy 55-58), a synchronize 61-70, then the
    host's work until the next launch at 90 (its kernel 95-97)."""
    return _step([(0, 5, 1, LAUNCH), (52, 60, 3, ASYNC), (61, 70, 4, SYNC),
                  (90, 92, 5, LAUNCH)],
                 [_kernel(10, 12, 1), (MEMCPY, 55, 58, 3, nbytes, 2, 1, ""),
                  _kernel(95, 97, 5)], syncs=[4])


def test_a_vector_read_back_loses_its_conversion_a_scalar_does_not() -> None:
    """no_sync on a `.tolist()` (16 KiB back) takes the host's conversion after the sync
    too (70 -> 90: 20 µs more than a `.item()`'s 8 bytes, whose host work after the sync
    is the next statement's); bounded by the end of the range that holds the read (a
    range 50-80: 10 µs)."""
    def priced(nbytes: int, entered=()) -> float:
        g = build(_read_back(nbytes), MAIN, 0, 100 * U)
        g.entered = np.array(entered, dtype=np.int64).reshape(-1, 2) * U
        return saving(g, Change("no_sync")) / U
    assert priced(16384) - priced(8) == 20
    assert priced(16384, ((50, 80),)) - priced(8, ((50, 80),)) == 10


def test_a_sync_the_samples_missed_is_a_site_beside_a_named_one() -> None:
    """A `torch.cuda.synchronize()` the samples name and a 6 µs `if` on a tensor they did
    not reach are two sites (each priced alone: removing the first leaves the second
    waiting for the GPU); syncs of which none is named stay one finding for the loop."""
    from analysis.diagnosis.rules.sync_split import split

    named = SyncSite(("step", 123), ("sync",), ((0, 10),), "train.py")
    missed = SyncSite(None, ("item",), ((10, 20),))
    assert split([named, missed])
    assert not split([named]) and not split([missed, SyncSite(None, ("cpu",), ((0, 5),))])


def test_a_large_readback_leaves_the_loops_other_sync_its_own_finding() -> None:
    """A loop whose syncs are mostly a large readback's (readback_in_loop's: torch.save's
    copies every eighth step) and an `.item()` every step: sync_in_loop names the
    `.item()` site alone (its line, its segments), not the readback's copies."""
    from analysis.diagnosis.rules import REGISTRY, Context
    from analysis.diagnosis.rules.host_rules import sync_in_loop
    from analysis.documents.types import CopyStat, RangeEntry, SystemsDoc, SystemsSource

    e = RangeEntry(name="loop/step", domain=None, instances=16, kernel_count=0,
                   kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                   wall_ns=16_000_000, sync_instances=16, sync_calls=46,
                   copies=[CopyStat("[CUDA memcpy Device-to-Host]", "Device -> Pageable",
                                    30, 64 << 20, 1_000_000)])
    item = SyncSite(("_item", 49), ("item",), ((0, 10),), "train.py")
    ctx = Context(systems=SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e]),
                  syncs=lambda path: {"cpu": 30, "item": 16},
                  sync_sites=lambda path: [item], price=lambda f: 1_000_000.0)
    (f,) = sync_in_loop(REGISTRY["sync_in_loop"], ctx)
    assert f.evidence["site_windows"] == [[0, 10]] and f.evidence["syncs"] == {"item": 1}
    assert "train.py:49 in _item" in f.message
    ctx.sync_sites = lambda path: []
    assert sync_in_loop(REGISTRY["sync_in_loop"], ctx) == []


def test_a_sites_call_names_its_kind_before_the_cuda_pattern() -> None:
    """A capture without backtraces: an `.item()` whose read follows a boolean mask's
    backward reads as a count by its CUDA pattern (a counting kernel since the sync
    before); the line's text makes `.item()`, so the finding says so, gives the `.item()`
    remedy and stops the wait (no_sync), not a fixed-shape mask (the stranger
    program, no NVTX range, sampled as a user samples)."""
    from analysis.diagnosis.rules import REGISTRY, Context
    from analysis.diagnosis.rules.host_rules import sync_in_loop
    from analysis.documents.types import RangeEntry, SystemsDoc, SystemsSource

    e = RangeEntry(name="loop/step", domain=None, instances=16, kernel_count=0,
                   kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                   wall_ns=16_000_000, sync_instances=16, sync_calls=48)
    mask = SyncSite(("loss_of", 68), ("nonzero", "nonzero"), ((0, 10),), "./train.py")
    item = SyncSite(("main", 97), ("nonzero",), ((10, 20),), "./train.py", said="Tensor.item")
    ctx = Context(systems=SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e]),
                  syncs=lambda path: {"nonzero": 48}, sync_sites=lambda path: [mask, item],
                  price=lambda f: 1_000_000.0)
    by_line = {f.evidence["lines_named"][0]["line"]: f
               for f in sync_in_loop(REGISTRY["sync_in_loop"], ctx)}
    assert by_line[97].change == "no_sync" and by_line[97].evidence["syncs"] == {"item": 1}
    assert "train.py:97 in main in `Tensor.item`" in by_line[97].message
    assert "./train.py" not in by_line[97].message
    assert by_line[68].change == "fixed_shape" and "`nonzero`" in by_line[68].message


def test_a_checkpoints_copies_are_no_readback_and_leave_the_loops_syncs_alone() -> None:
    """The same loop where its step model says the copies fall in a few steps, outside
    torch.save in none (Pricer.readback_share: a checkpoint every eighth step, slow_step's):
    readback_in_loop names nothing and sync_in_loop judges the loop's syncs as it would
    without the copies; copies in every step stay a readback."""
    from analysis.diagnosis.rules import REGISTRY, Context
    from analysis.diagnosis.rules.host_rules import sync_in_loop
    from analysis.diagnosis.rules.step_rules import readback_in_loop
    from analysis.documents.types import CopyStat, RangeEntry, SystemsDoc, SystemsSource

    e = RangeEntry(name="loop/step", domain=None, instances=16, kernel_count=0,
                   kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                   wall_ns=16_000_000, sync_instances=16, sync_calls=46,
                   copies=[CopyStat("[CUDA memcpy Device-to-Host]", "Device -> Pageable",
                                    30, 64 << 20, 1_000_000)])
    asked: list[int] = []
    ctx = Context(systems=SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e]),
                  syncs=lambda path: {"cpu": 30, "item": 16}, sync_sites=lambda path: [],
                  price=lambda f: 1_000_000.0,
                  readback_share=lambda path, least: asked.append(least) or 2 / 16)
    assert readback_in_loop(REGISTRY["readback_in_loop"], ctx) == []
    assert asked and asked[0] == 1 << 20
    (f,) = sync_in_loop(REGISTRY["sync_in_loop"], ctx)
    assert f.rule == "sync_in_loop" and f.range == "loop/step"
    ctx.readback_share = lambda path, least: 1.0
    assert [x.rule for x in readback_in_loop(REGISTRY["readback_in_loop"], ctx)] == [
        "readback_in_loop"]
    assert sync_in_loop(REGISTRY["sync_in_loop"], ctx) == []


@pytest.mark.parametrize("change", ["no_sync", "readback_on_device", "size_given",
                                    "fixed_shape", "unique_mask", "index_on_device"])
def test_every_sync_change_leaves_a_checkpoint_on_the_loops_thread_alone(change) -> None:
    """Whatever change a sync site takes (sync_split.change_for), its scope leaves out
    torch.save's windows: the save's copies still wait for the GPU work queued before
    them (seed 53 g33: size_given took them too, 1.36 ms priced of 0.80 realized; 0.71
    with them kept)."""
    from types import SimpleNamespace

    from analysis.diagnosis.pricing import Pricer
    from analysis.documents.types import Finding

    models = SimpleNamespace(windows=lambda path, pid=None: ((0, 100), (200, 300)))
    pricer = Pricer(models, {"loop/step"})
    pricer.save_windows = lambda path, pid=None: ((240, 260),)
    f = Finding(rule="sync_in_loop", severity="warning", range="loop/step", kernel=None,
                message="", evidence={}, suggestion="", change=change)
    assert pricer.change_of(f, None).scope == ((0, 100), (200, 240), (260, 300))


def test_read_back_counts_the_device_to_host_bytes_launched_in_the_windows() -> None:
    """graph_reads.read_back: a step's device-to-host copies by the start of the call that
    launched each (a window of torch.save left out leaves its copies out)."""
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    from analysis.diagnosis.graph_reads import read_back
    from analysis.loops.graph import CALL

    calls = pd.DataFrame({"corr": [1, 2, 3]})
    ops = pd.DataFrame({"kind": [1, 1, 0], "copy_kind": [2, 2, 0], "bytes": [100, 4, 0],
                        "corr": [1, 2, 3]})
    g = SimpleNamespace(calls=calls, ops=ops, kind=np.array([CALL] * 3 + [9] * 3),
                        start=np.array([0, 50, 60, 10, 55, 70]),
                        end=np.array([5, 52, 62, 20, 58, 80]),
                        op_launched=lambda: np.array([0, 50, 60]))  # its call's start
    assert read_back(g, ()) == 104
    assert read_back(g, ((40, 100),)) == 4
    assert read_back(g, ((200, 300),)) == 0


def test_one_sync_a_step_is_a_site_whose_line_the_loops_finding_names() -> None:
    """A loop that syncs once a step (an `if` on a tensor: no call in its source text
    that syncs) gets one finding for the loop, which names the line sampled nearest the
    sync's end: the site's, found from the samples alone."""
    from analysis.diagnosis.rules import REGISTRY, Context
    from analysis.diagnosis.rules.host_rules import sync_in_loop
    from analysis.diagnosis.rules.lines import locate
    from analysis.documents.types import PyLine, RangeEntry, SystemsDoc, SystemsSource

    guard = PyLine(file="train.py", line=57, function="_guard", call="torch.isfinite",
                   pct=12.0, code="if not torch.isfinite(x).all():", samples=8)
    base = PyLine(file="train.py", line=80, function="step", call="", pct=88.0,
                  code="v = v * 0.5 + 1.0", samples=60)
    e = RangeEntry(name="loop/step", domain=None, instances=16, kernel_count=0,
                   kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                   wall_ns=16_000_000, sync_instances=16, sync_calls=16, lines=[base, guard],
                   py_samples=68)
    site = SyncSite(("_guard", 57), ("item",), ((0, 10),), "train.py")
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e])
    ctx = Context(systems=doc, syncs=lambda path: {"item": 16},
                  sync_sites=lambda path: [site], price=lambda f: 1_000_000.0)
    (f,) = sync_in_loop(REGISTRY["sync_in_loop"], ctx)
    assert "site_windows" not in f.evidence                 # the loop's finding, not a site's
    locate([f], doc, {e.name: e})
    assert "train.py:57 in _guard" in f.message and f.suggestion.startswith("at train.py:57")
    ctx.sync_sites = lambda path: [SyncSite(None, ("item",), ((0, 10),))]
    (f,) = sync_in_loop(REGISTRY["sync_in_loop"], ctx)
    locate([f], doc, {e.name: e})
    assert "train.py:" not in f.message


def test_a_range_no_sample_fell_in_says_so() -> None:
    """On a sampled capture, a finding on a range that no Python sample fell in (a short
    sync beside the step) says why it names no line and how to get one."""
    from analysis.diagnosis.rules.lines import locate
    from analysis.documents.types import Finding, PyLine, RangeEntry, SystemsDoc, SystemsSource

    def entry(name: str, samples: int, lines: list) -> RangeEntry:
        return RangeEntry(name=name, domain=None, instances=64, kernel_count=0,
                          kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=64,
                          wall_ns=1_878_412, lines=lines, py_samples=samples)

    step = entry("loop/step", 60, [PyLine(file="train.py", line=80, function="step",
                                          call="", pct=100.0, code="", samples=60)])
    sync = entry("loop/synchronize", 0, [])
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[step, sync])
    f = Finding(rule="sync_in_loop", severity="warning", range="loop/synchronize",
                kernel=None, message="waits.", evidence={}, suggestion="time with events")
    locate([f], doc, {e.name: e for e in (step, sync)})
    assert f.message == ("waits. No Python sample fell in its 64 instances (1.88 ms in all): "
                         "more steps, or a higher --python-sampling-frequency (2000 Hz: "
                         "`--sample cpu`'s), would name its line.")


def test_a_finding_whose_rule_fits_no_line_takes_its_backtraced_calls_line() -> None:
    """Where none of a range's lines makes a call its rule lists, the line of the call its
    CUDA backtraces name (`torch.tensor(rows, device=...)`: an upload, seed 81's g26); no
    backtrace, no line: a fill finding on a step range does not name the step's hottest
    line (seeds 17, 39, 41 and 60: it named base_step's and lost its cause)."""
    from collections import Counter

    from analysis.diagnosis.rules.lines import locate
    from analysis.documents.types import Finding, PyLine, RangeEntry, SystemsDoc, SystemsSource

    def line(n: int, fn: str, call: str, pct: float) -> PyLine:
        return PyLine(file="train.py", line=n, function=fn, call=call, pct=pct, code="",
                      samples=1)

    step = RangeEntry(name="loop/step", domain=None, instances=16, kernel_count=0,
                      kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                      wall_ns=1_000_000, py_samples=10,
                      lines=[line(80, "step", "", 60.0), line(220, "batch", "torch.tensor",
                                                              40.0)])
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[step])

    def finding(rule: str) -> Finding:
        return Finding(rule=rule, severity="warning", range="loop/step", kernel=None,
                       message="m.", evidence={}, suggestion="s")

    copy, fill = finding("pageable_copy"), finding("fill_overwritten")
    locate([copy, fill], doc, {step.name: step},
           backtraced=lambda path, kind: Counter({"torch.tensor": 16}))
    assert copy.evidence["lines_named"][0]["line"] == 220
    assert "lines_named" not in fill.evidence
    unbacked = finding("pageable_copy")
    locate([unbacked], doc, {step.name: step})
    assert "lines_named" not in unbacked.evidence


def test_a_copys_blocking_span_runs_to_the_end_of_the_synchronize_after_it() -> None:
    """Where no Python sample fell in a range's copies, Pricer.blocked reads the user's
    line inside each copy and the synchronize right after it on its thread (PyTorch's
    pageable upload and readback wait there): a CPU index's 0.04 ms upload is sampled in
    its wait, not its call (seed 75's g08, whose pageable_copy finding named no line). A
    copy followed by a launch keeps its own end; unsynced, every call its own."""
    from analysis.diagnosis.sampled_calls import _synced_ends

    g = SimpleNamespace(kind=np.zeros(4, dtype=np.int64), thread=np.full(4, 7), tid=7,
                        start=np.array([0, 10, 50, 60]), end=np.array([8, 40, 55, 90]),
                        label=["copy", "sync", "copy", "launch"])
    copies = np.array([0, 2])
    assert _synced_ends(g, copies, True).tolist() == [40, 55]
    assert _synced_ends(g, copies, False).tolist() == [8, 55]


def test_copy_calls_of_one_direction_are_those_that_launched_such_copies() -> None:
    """sampled_calls._calls_of: "h2d" and "d2h" keep the copy calls whose copy went that
    way (the export's copyKind: 1 to the device, 2 to the host), "copy" every one; a
    launch is never a copy call (seed 83's g14: an upload's finding named the readback's
    line, sampled in the readback's wait)."""
    from types import SimpleNamespace

    import numpy as np
    import pandas as pd

    from analysis.diagnosis.sampled_calls import _calls_of

    calls = pd.DataFrame({"name": ["cudaMemcpyAsync_v3020", "cudaLaunchKernel_v7000",
                                   "cudaMemcpyAsync_v3020"]})
    ops = pd.DataFrame({"kind": [1, 0, 1], "copy_kind": [2, 0, 1]})
    g = SimpleNamespace(calls=calls, ops=ops, op_calls=lambda: np.array([0, 1, 2]))
    assert _calls_of(g, "d2h").tolist() == [0]
    assert _calls_of(g, "h2d").tolist() == [2]
    assert _calls_of(g, "copy").tolist() == [0, 2]


def test_the_stranger_programs_findings_name_each_causes_line_and_call(data) -> None:
    """A script written for no tool, captured as a user captures it (no NVTX range, CPU
    and Python samples, no CUDA backtraces): its detected loop's findings name the line
    of each of its three causes, with the call: the `.item()` (not the boolean mask's
    count its CUDA pattern reads as), the mask's two syncs, the batch's `torch.tensor`."""
    import json

    from tests.conftest import systems_json

    run = data / "stranger" / "none"
    doc = systems_json(run / "trace.sqlite", json.loads((run / "meta.json").read_text()))
    named = {(x["line"], f["rule"]): (x.get("call"), f["evidence"].get("syncs"))
             for f in doc["findings"] for x in (f.get("evidence") or {}).get("lines_named") or []
             if x.get("file", "").endswith("stranger_train.py")}
    code = (data / "tools" / "stranger_train.py").read_text().splitlines()
    at = {text: max(i for i, x in enumerate(code, 1) if text in x)   # the code's, not the doc's
          for text in ("loss.item()", "logits[keep]", "torch.tensor(rows)")}
    assert named[(at["loss.item()"], "sync_in_loop")] == ("Tensor.item", {"item": 1})
    assert named[(at["logits[keep]"], "sync_in_loop")][1] == {"nonzero": 2}
    assert named[(at["torch.tensor(rows)"], "batch_in_python")][0] == "torch.tensor"
