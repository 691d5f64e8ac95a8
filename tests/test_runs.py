"""A loop as it runs (loops/runs.py): runs, an instance's cost as it runs, the steps and
their tail, on loops made by hand and on every loop of every committed capture, against
GPU operation ends read from the export by SQL."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from analysis.common.names import steady_path
from analysis.documents.entries import PyLine
from analysis.documents.findings import Finding
from analysis.loops.runs import TAIL_FACTOR, gpu_ends, key_context, key_runs, run_fields
from analysis.render.text import dur
from tests.conftest import DATA
from tests.shared_docs import analyzed, analyzed_trace, committed_exports

MAIN, OTHER = 1 << 24 | 1, 1 << 24 | 2


def _trace(ranges: list[tuple], own_end: dict[int, int] = (), other_end: dict[int, int] = ()):
    """A trace of (path, tid, start, end) range instances; `own_end`/`other_end`: range
    row -> the end of the last GPU operation its own thread / another thread launched."""
    r = pd.DataFrame(ranges, columns=["path", "global_tid", "start_ns", "end_ns"])
    paths = list(dict.fromkeys(r["path"]))
    r["key"] = [paths.index(p) for p in r["path"]]
    keys = pd.DataFrame({"path": paths}, index=pd.Index(range(len(paths)), name="key"))
    ends = [pd.DataFrame({"range": list(dict(e)), "last_ns": list(dict(e).values())},
                         dtype="int64") for e in (own_end, other_end)]
    host = pd.DataFrame({"range": range(len(r)), **{f"host_{p}_ns": 7 for p in (
        "sync", "memory", "launch", "os")}})
    return SimpleNamespace(ranges=r, keys=keys, instances=ends[0], other=ends[1], host=host,
                           instance_kernels=pd.DataFrame({"range": range(len(r)),
                                                          "kernel_count": 3}))


def _fields(trace, path: str) -> dict:
    key = int(trace.keys.index[trace.keys["path"] == path][0])
    return run_fields(trace, key, gpu_ends(trace), key_context(trace))


def test_a_slow_step_in_eight_is_the_tail() -> None:
    starts = [0, 10, 20, 30, 40, 50, 60, 70, 180, 190]        # the eighth takes 110
    t = _trace([("step", MAIN, s, s + 5) for s in starts])
    f = _fields(t, "step")
    assert (f["runs"], f["run_instances"]) == (1, 10)
    assert f["run_per_instance_ns"] == round(195 / 10)
    assert f["step_median_ns"] == 10 and f["tail_ns"] == round(19.5 - 10)
    assert f["step_mean_ns"] == pytest.approx(19.5)
    [tail] = f["tail_steps"]
    assert (tail.instance, tail.step_ns, tail.wall_ns, tail.kernels, tail.sync_ns) == \
        (7, 110, 5, 3, 7)
    assert tail.step_ns >= TAIL_FACTOR * f["step_median_ns"]


def test_the_gpu_backlog_of_the_last_step_ends_the_run() -> None:
    """The host ranges last 5 each; the GPU work the last one queued ends at 100, and
    another thread's launches inside the first end later still in that run."""
    t = _trace([("step", MAIN, s, s + 5) for s in (0, 10, 20)], own_end={2: 100})
    assert _fields(t, "step")["run_per_instance_ns"] == round(100 / 3)
    t = _trace([("step", MAIN, s, s + 5) for s in (0, 10, 20)], own_end={2: 100},
               other_end={0: 160})
    assert _fields(t, "step")["run_per_instance_ns"] == round(160 / 3)


def test_warm_up_and_the_enclosing_range_cut_runs() -> None:
    """A recompiled instance (set apart) between steps, and a new epoch (of two: a loop
    that repeats less often than its steps): three runs; the time between them is no
    step's."""
    t = _trace([("epoch", MAIN, 0, 100), ("epoch/step", MAIN, 0, 10),
                ("epoch/step", MAIN, 10, 20), ("epoch/step [compile]", MAIN, 20, 60),
                ("epoch/step", MAIN, 60, 70), ("epoch", MAIN, 1000, 1100),
                ("epoch/step", MAIN, 1000, 1010), ("epoch/step", MAIN, 1010, 1020)])
    key = int(t.keys.index[t.keys["path"] == "epoch/step"][0])
    runs = key_runs(t, key, gpu_ends(t), key_context(t))
    assert runs.run.tolist() == [0, 0, 1, 2, 2]
    assert runs.spans.tolist() == [20, 10, 20]
    assert runs.step_ns.tolist() == [10, 10, 10, 10, 10]
    assert _fields(t, "epoch/step")["run_per_instance_ns"] == 10


def test_threads_run_apart() -> None:
    t = _trace([("step", MAIN, 0, 5), ("step", OTHER, 2, 4), ("step", MAIN, 10, 15),
                ("step", OTHER, 40, 44)])
    f = _fields(t, "step")
    assert f["runs"] == 2 and f["run_per_instance_ns"] == round((15 + 42) / 4)


# --- every loop of every committed capture, against the export ------------------------

CAPTURES = committed_exports(reference=False)


def _op_ends(db) -> pd.DataFrame:
    """Every GPU operation's end with its launching call's thread and start (SQL)."""
    conn = sqlite3.connect(db)
    tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_master")}
    ops = " UNION ALL ".join(f"SELECT correlationId, globalPid, end FROM {t}" for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)
    if not ops or "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return pd.DataFrame(columns=["pid", "api", "end"], dtype="int64")
    q = (f"SELECT r.globalTid & -16777216 AS pid, r.start AS api, o.end AS end "
         f"FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN ({ops}) o "
         f"ON o.correlationId = r.correlationId AND o.globalPid = (r.globalTid & -16777216)")
    frame = pd.read_sql_query(q, conn)
    conn.close()
    return frame.sort_values("api", kind="stable")


def _truth(trace, ops: pd.DataFrame, key: int) -> tuple[int, float]:
    """(runs, their spans over their instances), by a loop over the instances: a run
    breaks at an instance of the same steady path, of an enclosing path with fewer
    instances, or, for a path holding one with more instances, of another such path with
    the same parent."""
    r = trace.ranges
    path = trace.keys.at[key, "path"]
    paths = r["path"].tolist()
    rows = sorted(np.flatnonzero(r["key"].to_numpy() == key).tolist(),
                  key=lambda i: (r["global_tid"].iat[i], r["start_ns"].iat[i]))
    api, end, pid = (ops[c].to_numpy(dtype="int64") for c in ("api", "end", "pid"))
    count = r["path"].value_counts()
    above = {"/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)}
    same = trace.keys["pid"] == trace.keys.at[key, "pid"] if "pid" in trace.keys else \
        np.ones(len(trace.keys), dtype=bool)
    mine = [steady_path(p) for p in trace.keys["path"][same]]

    def block(p: str) -> bool:                 # holds a path repeated more often
        return any(q.startswith(p + "/") and count.get(q, 0) > count.get(p, 0)
                   for q in mine)

    peers = {p for p in set(map(steady_path, paths)) if block(p)
             and p.rpartition("/")[0] == steady_path(path).rpartition("/")[0]} \
        if block(steady_path(path)) else set()
    cuts: dict[int, list[int]] = {}
    for j in range(len(r)):
        enclosing = paths[j] in above and count[paths[j]] < count[path]
        peer = steady_path(paths[j]) in peers and steady_path(paths[j]) != steady_path(path)
        if paths[j] != path and (enclosing or peer
                                 or steady_path(paths[j]) == steady_path(path)):
            cuts.setdefault(int(r["global_tid"].iat[j]), []).append(int(r["start_ns"].iat[j]))
    cuts = {t: np.sort(v) for t, v in cuts.items()}
    spans, n_runs, run_start, run_end, prev = 0, 0, None, 0, None
    for i in rows + [None]:
        tid = None if i is None else int(r["global_tid"].iat[i])
        start = None if i is None else r["start_ns"].iat[i]
        cut = cuts.get(tid, np.zeros(0, dtype="int64"))
        new = prev is None or i is None or tid != r["global_tid"].iat[prev] or bool(
            ((cut > r["start_ns"].iat[prev]) & (cut <= start)).any())
        if new and run_start is not None:
            spans, n_runs = spans + run_end - run_start, n_runs + 1
        if i is None:
            break
        if new:
            run_start, run_end = start, 0
        lo, hi = np.searchsorted(api, [start, r["end_ns"].iat[i]], side="left")
        mine = end[lo:hi][pid[lo:hi] == (tid & -16777216)]
        run_end = max(run_end, r["end_ns"].iat[i], int(mine.max()) if len(mine) else 0)
        prev = i
    return n_runs, spans / len(rows)


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_loop_costs_its_measured_run_span(capture: str) -> None:
    """run_per_instance_ns within 1% of the runs' spans measured from the export: the
    ranges' ends and the GPU operations their calls launched, any thread of the process;
    and no finding saves more than the outermost loop around its range costs as it runs
    over all its instances (those spans, measured here)."""
    doc = analyzed(capture)
    loops = [e for e in doc.ranges if e.runs]
    if not loops:
        return
    trace = analyzed_trace(capture)
    ops = _op_ends(DATA / f"{capture}.sqlite")
    spans: dict[str, float] = {}
    for e in loops:
        key = int(trace.keys.index[(trace.keys["path"] == e.name)
                                   & (trace.keys["pid"] == e.pid)][0])
        runs, per_instance = _truth(trace, ops, key)
        spans[e.name] = max(spans.get(e.name, 0.0),
                            per_instance * int((trace.ranges["key"] == key).sum()))
        assert e.runs == runs, e.name
        assert abs(e.run_per_instance_ns - per_instance) <= 0.01 * per_instance, e.name
        assert e.step_mean_ns == pytest.approx(per_instance, rel=0.01)
        assert e.step_p10_ns <= e.step_median_ns <= e.step_p90_ns
        assert e.step_low_ns <= e.step_median_ns <= e.step_high_ns
        assert all(s.step_ns >= TAIL_FACTOR * e.step_median_ns for s in e.tail_steps)
    for f in doc.findings:
        parts = (f.range or "").split("/")
        outer = next((p for p in ("/".join(parts[:i]) for i in range(1, len(parts) + 1))
                      if p in spans), None)
        if f.saving_ns and outer is not None:
            assert f.saving_ns <= 1.01 * spans[outer], (f.rule, f.range)


# --- a capture of our own: each cause beside its fix, the truth from the synchronizes --

def test_the_loops_cost_what_they_cost_as_they_ran() -> None:
    """loops_ab (tools/runs_ab.py on the H200): every loop's cost per instance as it runs
    within 1% of the time measured around it (before its first step to after the
    synchronize that closes it); the host ranges of the fill loop last a twentieth of
    that, its GPU backlog the rest."""
    truth = json.loads((DATA / "loops_ab" / "truth.json").read_text())
    doc = analyzed("loops_ab/trace")
    by = {e.name: e for e in doc.ranges}
    for name, walls in truth["per_instance_ns"].items():
        want = sum(walls) / len(walls)
        assert abs(by[name].run_per_instance_ns - want) <= 0.01 * want, name
        assert by[name].runs == len(walls)
    assert by["fill/step"].wall_median_ns < 0.1 * by["fill/step"].run_per_instance_ns
    last = max(by["fill/step"].tail_steps, key=lambda s: s.step_ns)   # a run's last step
    assert last.backlog_ns > 0.9 * last.step_ns and last.wall_ns < 0.01 * last.step_ns
    assert all(s.backlog_ns < 0.5 * s.step_ns for s in by["ckpt/step"].tail_steps)


def test_a_checkpoint_every_eighth_step_is_the_tail() -> None:
    """The median step moves little; the slow steps are exactly the checkpointing ones,
    and the tail is what they add: the difference from the twin without them."""
    doc = analyzed("loops_ab/trace")
    by = {e.name: e for e in doc.ranges}
    ckpt, plain = by["ckpt/step"], by["nockpt/step"]
    assert len(ckpt.tail_steps) == ckpt.run_instances // 8
    assert {s.instance % 40 % 8 for s in ckpt.tail_steps} == {7}
    assert not plain.tail_steps
    added = ckpt.run_per_instance_ns - plain.run_per_instance_ns
    assert abs(ckpt.tail_ns - added) <= 0.15 * added
    assert ckpt.step_median_ns < 1.5 * plain.step_median_ns
    # slow_step names it, priced by the replay of the slow steps with their host work off
    # the loop's thread (10.0 ms of the 15.7 ms the twin without a checkpoint saved: an
    # asynchronous checkpoint still copies the state off the GPU); the GPU backlog of the
    # fill loops makes slow steps the host cannot shorten: information, about nothing
    slow = {f.range: f for f in doc.findings if f.rule == "slow_step"}
    assert slow["ckpt/step"].severity == "warning" and not slow["ckpt/step"].not_priced
    assert 0.5 <= slow["ckpt/step"].saving_ns / ckpt.run_instances / added <= 1.15
    assert all(f.severity == "info" and f.saving_ns < 0.01 * by[p].run_per_instance_ns
               * by[p].run_instances for p, f in slow.items() if p != "ckpt/step")


def _with_loop(doc, name: str, run_ns: int, step: tuple[float, float, float]):
    """`doc` with one loop's cost as it runs and median step (low, high) set."""
    from analysis.documents.range_build import from_entries
    from analysis.documents.range_table import RangeEntries

    entries = list(doc.ranges)
    for e in entries:
        if e.name == name:
            e.run_per_instance_ns = run_ns
            e.step_median_ns, e.step_low_ns, e.step_high_ns = step
    doc.ranges = RangeEntries(from_entries(entries))
    return doc


def test_the_diff_gates_a_loop_on_its_cost_as_it_runs_with_the_interval() -> None:
    """A loop 20% costlier as it runs is `slower` where the median steps' intervals lie
    apart, `within noise` where they overlap; it leads the page."""
    from analysis.commands.diff import compare, render_diff

    base = analyzed("loops_ab/trace")
    e = next(x for x in base.ranges if x.name == "nockpt/step")
    run, (med, lo, hi) = e.run_per_instance_ns, (e.step_median_ns, e.step_low_ns,
                                                 e.step_high_ns)
    apart = _with_loop(analyzed("loops_ab/trace"), "nockpt/step", int(run * 1.2),
                       (med * 1.2, hi * 1.01, hi * 1.3))
    diff = compare(base, apart, 5.0)
    row = next(r for r in diff["variants"] if r["variant"] == "nockpt/step")
    assert row["loop"]["verdict"] == "slower" and "nockpt/step" in diff["regressions"]
    page = render_diff(diff, "a", "b")
    assert page.index("Loops as they run") < page.index("Ranges, mean per iteration")
    close = _with_loop(analyzed("loops_ab/trace"), "nockpt/step", int(run * 1.2),
                       (med * 1.2, lo, hi * 1.3))
    diff = compare(base, close, 5.0)
    row = next(r for r in diff["variants"] if r["variant"] == "nockpt/step")
    assert row["loop"]["verdict"] == "within noise"
    assert "nockpt/step" not in diff["regressions"]


def test_a_report_written_before_the_runs_reads_them_as_defaults(tmp_path) -> None:
    """A folder without the runs' columns and tail_steps table (written before them)
    reads, its loops with no runs; one without an older column still fails."""
    import shutil

    import pyarrow.parquet as pq

    from analysis.common.errors import InputError
    from analysis.documents.range_table import RangeEntries
    from analysis.documents.tables import LATER_SOURCES, read_range_table
    from analysis.documents.types import RangeEntry

    folder = tmp_path / "old"
    shutil.copytree(DATA.parent.parent / "reports" / "train_step", folder)
    (folder / "ranges_tail_steps.parquet").unlink()
    table = pq.read_table(folder / "ranges.parquet")
    later = [f.name for f in dataclasses.fields(RangeEntry)
             if f.metadata.get("source") in LATER_SOURCES and f.name in table.column_names]
    pq.write_table(table.drop_columns(later), folder / "ranges.parquet")
    entries = list(RangeEntries(read_range_table(folder)))
    assert entries and all(e.runs == 0 and e.tail_steps == [] for e in entries)
    pq.write_table(table.drop_columns(later + ["wall_ns"]), folder / "ranges.parquet")
    with pytest.raises(InputError, match="wall_ns"):
        read_range_table(folder)


def test_a_slow_steps_line_comes_from_its_threads_samples() -> None:
    """The user's line most samples of the step's thread fell on inside the step, with
    the library call below it; none outside the window or on other threads."""
    from analysis.load.nsys_pysamples import PySamples
    from analysis.trace.pylines import top_line

    save = (("/usr/lib/python3/site-packages/torch/serialization.py", "save", 10),
            ("/home/u/train.py", "main", 88))
    step = (("/usr/lib/python3/site-packages/torch/optim/adamw.py", "step", 5),
            ("/home/u/train.py", "main", 80))
    samples = pd.DataFrame({"global_tid": [MAIN, MAIN, MAIN, OTHER, MAIN],
                            "time_ns": [10, 20, 30, 25, 99], "stack": [0, 0, 1, 1, 1]})
    py = PySamples(samples=samples, stacks=[save, step])
    assert top_line(py, MAIN, 0, 50, "/home/u") == \
        "train.py:88 in main, torch.serialization.save"
    assert top_line(py, MAIN, 25, 50, "/home/u").startswith("train.py:80 in main")
    assert top_line(py, OTHER, 0, 20) == ""


@pytest.mark.parametrize("capture", ["steps/emit_nccl/trace", "ddp_single/trace",
                                     "twins/mask_sync/trace"])
def test_the_verdict_never_comes_from_a_librarys_range(capture: str) -> None:
    """NCCL's and CUB's own ranges (their NVTX domains) are top-level paths; the verdict
    weighs and names the user's ranges only."""
    from analysis.common.names import is_library
    from analysis.render.page import where_time_went

    doc = analyzed(capture)
    assert any(is_library(e.domain) and "/" not in e.name for e in doc.ranges)
    said = where_time_went(doc)[0]
    named = said.split(" in `", 1)[1].split("`", 1)[0]
    entry = next(e for e in doc.ranges if e.name == named)
    assert not is_library(entry.domain)
    users = [e for e in doc.ranges if "/" not in e.name and not e.warmup
             and not is_library(e.domain)]
    total = sum(e.time_ns for e in users)
    assert f"of {dur(total)}:" in said


def test_a_fill_the_next_op_overwrites_is_priced_as_removed() -> None:
    """`torch.zeros` of 512 MiB that the next op overwrites (fill/step) against its twin
    with `torch.empty` (nofill/step), in one process: fill_overwritten names the fill (a
    FillFunctor kernel, from the demangled names) and prices its removal within 15% of
    what the twin saved; the twin gets no such finding."""
    doc = analyzed("loops_ab/trace")
    truth = json.loads((DATA / "loops_ab" / "truth.json").read_text())["per_instance_ns"]
    saved = float(np.mean(truth["fill/step"]) - np.mean(truth["nofill/step"]))
    fills = {f.range: f for f in doc.findings if f.rule == "fill_overwritten"}
    assert set(fills) == {"fill/step"}
    e = {x.name: x for x in doc.ranges}["fill/step"]
    assert abs(fills["fill/step"].saving_ns / e.run_instances - saved) <= 0.15 * saved


@pytest.mark.parametrize(("longest_ns", "fires"), [(3_000, True), (1_200, False)])
def test_a_tensor_grown_by_cat_is_found_from_its_growing_kernels(longest_ns: int,
                                                                  fires: bool) -> None:
    """Forty concatenation kernels a step that grow (the longest 3x the shortest) are a
    tensor grown by torch.cat; as many of one size (per-layer cats) are not."""
    from analysis.diagnosis.rules import kernel_rules
    from analysis.diagnosis.rules.registry import REGISTRY, Context
    from analysis.documents.entries import KernelStat

    doc = analyzed("loops_ab/trace")
    n = {e.name: e for e in doc.ranges}["nofill/step"].wall_instances
    cat = KernelStat("CatArrayBatchedCopy_vectorized", 40 * n, 40 * n * 2_000, 2_000.0, 1_000,
                     longest_ns)
    entries = [dataclasses.replace(e, kernels=[cat]) if e.name == "nofill/step" else e
               for e in doc.ranges]
    ctx = Context(systems=dataclasses.replace(doc, ranges=entries))
    found = kernel_rules.cat_in_loop(REGISTRY["cat_in_loop"], ctx)
    assert [f.range for f in found] == (["nofill/step"] if fires else [])
    if fires:
        assert found[0].evidence["kernels"] == [cat.name] and "40 torch.cat" in found[0].message


@pytest.mark.parametrize(("call", "change"), [("Tensor.tolist", "readback_on_device"),
                                              ("Tensor.item", "no_sync"),
                                              ("torch.cuda.synchronize", "no_sync")])
def test_a_sync_is_removed_as_the_users_call_says(call: str, change: str) -> None:
    """A loop's syncs priced by the change its Python samples' call names: a readback the
    host converts (`.tolist()`) kept on the device, a scalar read or a synchronize only
    stops waiting."""
    from analysis.diagnosis.rules.host_rules import sync_change
    from analysis.documents.entries import PyLine

    e = analyzed("loops_ab/trace").ranges[0]
    hot = PyLine("train.py", 12, "step", "", "x = y * 2", 30, 60.0)
    line = PyLine("train.py", 14, "step", call, "v = x.f()", 20, 40.0)
    assert sync_change(dataclasses.replace(e, lines=[hot, line])) == change
    assert sync_change(dataclasses.replace(e, lines=[])) == "no_sync"


def _found_with_lines(rule: str, name: str, lines: list) -> list:
    """The rule's findings on loops_ab's document with `lines` as the range `name`'s
    sampled lines."""
    from analysis.diagnosis.rules import run_rules
    from analysis.diagnosis.rules.registry import REGISTRY, Context

    doc = analyzed("loops_ab/trace")
    entries = [dataclasses.replace(x, lines=lines) if x.name == name else x
               for x in doc.ranges]
    ctx = Context(systems=dataclasses.replace(doc, ranges=entries))
    return getattr(run_rules, rule)(REGISTRY[rule], ctx)


def _batch_lines(same_function_op: bool):
    from analysis.documents.entries import PyLine

    fn = "make" if same_function_op else "step"
    return [PyLine("train.py", 20, "make", "torch.tensor", "b = torch.tensor(rows)", 45, 45.0),
            PyLine("train.py", 30, fn, "torch.relu", "y = torch.relu(x @ w)", 35, 35.0),
            PyLine("train.py", 19, "make", "r.random", "rows = [[r.random() ...]]", 20, 20.0)]


@pytest.mark.parametrize("same_function_op", [False, True])
def test_a_batch_built_in_python_is_named_by_its_lines(same_function_op: bool) -> None:
    """A loop whose samples fall on `torch.tensor` of a list and on the line of the same
    function that makes the values is named by those lines (the forward's `torch.relu`
    is never one, even in that function); a loop without such a call gets no finding."""
    from analysis.diagnosis.rules.registry import REGISTRY

    name = "nofill/step"
    e = {x.name: x for x in analyzed("loops_ab/trace").ranges}[name]
    for lines, fires in ((_batch_lines(same_function_op), True), (_batch_lines(False)[1:], False)):
        found = _found_with_lines("batch_in_python", name, lines)
        assert [f.range for f in found] == ([name] if fires else [])
        if fires:
            ev = found[0].evidence
            assert [x["line"] for x in ev["lines_named"]] == [20, 19] and ev["build_pct"] == 65
            assert "train.py:20" in found[0].suggestion
            assert REGISTRY["batch_in_python"].change == "batch_on_device"
            assert found[0].iterations == (e.run_instances or e.wall_instances)


def test_sampled_line_windows_centre_one_interval_on_each_sample() -> None:
    """Where the loop's thread ran the named lines, as sampling sees it: one sampling
    interval centred on each of its samples on them; other lines and threads left out."""
    from analysis.load.nsys_pysamples import PySamples
    from analysis.trace.pylines import line_windows

    make = (("/usr/lib/python3/site-packages/torch/_tensor.py", "tensor", 3),
            ("/home/u/train.py", "make", 20))
    step = (("/home/u/train.py", "step", 30),)
    samples = pd.DataFrame({"global_tid": [MAIN, MAIN, MAIN, OTHER, MAIN],
                            "time_ns": [1_000, 2_000, 3_000, 2_500, 4_000],
                            "stack": [0, 1, 0, 0, 0]})
    py = PySamples(samples=samples, stacks=[make, step])
    assert line_windows(py, {MAIN}, {("make", 20)}) == ((500, 1_500), (2_500, 3_500),
                                                         (3_500, 4_500))
    assert line_windows(py, {MAIN}, {("step", 20)}) == ()
    assert line_windows(py, set(), {("make", 20)}) == ()


@pytest.mark.parametrize(("short", "demangled_share", "fires"),
                         [("ampere_sgemm_128x64_nn", 0.0, True), ("Kernel2", 0.9, True),
                          ("Kernel2", 0.05, False)])
def test_fp32_gemms_are_found_by_short_or_demangled_name(short: str, demangled_share: float,
                                                         fires: bool) -> None:
    """cuBLAS's fp32 GEMMs carry their type in the short name; CUTLASS's SIMT sgemm is
    `Kernel2` there and `cutlass::Kernel2<cutlass_80_simt_sgemm_...>` demangled: the rule
    asks the modeled steps' demangled names where the short name says nothing."""
    from analysis.diagnosis.rules import run_rules
    from analysis.diagnosis.rules.registry import REGISTRY, Context
    from analysis.documents.entries import KernelStat

    doc = analyzed("loops_ab/trace")
    name = "nofill/step"
    e = {x.name: x for x in doc.ranges}[name]
    n = e.wall_instances
    gemm = KernelStat(short, n, n * 900_000, 900_000.0, 900_000, 900_000)
    other = KernelStat("vectorized_elementwise_kernel", n, n * 100_000, 100_000.0, 1, 1)
    entries = [dataclasses.replace(x, kernels=[gemm, other], kernel_time_ns=n * 1_000_000)
               if x.name == name else x for x in doc.ranges]
    asked = []

    def kernels(path: str, pattern: str) -> tuple[float, float, float]:
        asked.append((path, pattern))
        return 1.0, demangled_share * 1e6, 1e6
    ctx = Context(systems=dataclasses.replace(doc, ranges=entries), kernels=kernels)
    found = [f for f in run_rules.fp32_gemm(REGISTRY["fp32_gemm"], ctx) if f.range == name]
    assert len(found) == int(fires)
    assert bool(asked) == (short == "Kernel2")
    if fires:
        assert found[0].kernel == short and "fp32 GEMMs" in found[0].message


def test_a_blocking_calls_line_is_the_one_sampled_inside_it() -> None:
    """The user's lines the thread was sampled on inside its blocking calls, whatever the
    call below them (a boolean mask names none), counted per line; samples outside the
    calls or on other threads left out; locate names the line most sampled inside."""
    from analysis.diagnosis.rules.lines import inside
    from analysis.documents.entries import PyLine
    from analysis.load.nsys_pysamples import PySamples
    from analysis.trace.pylines import lines_inside

    mask = (("/home/u/train.py", "step", 74),)
    fwd = (("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", "forward", 9),
           ("/home/u/train.py", "step", 71))
    samples = pd.DataFrame({"global_tid": [MAIN, MAIN, MAIN, OTHER, MAIN],
                            "time_ns": [100, 250, 400, 260, 900], "stack": [1, 0, 0, 0, 1]})
    py = PySamples(samples=samples, stacks=[mask, fwd])
    spans = np.array([[200, 300], [380, 420]], dtype=np.int64)
    got = lines_inside(py, {MAIN}, spans)
    assert got == Counter({("step", 74): 2})
    kept = [PyLine("train.py", 71, "step", "torch.nn.modules.linear.forward", "", 6, 60.0),
            PyLine("train.py", 74, "step", "", "z = x[x > 0]", 4, 40.0)]
    assert inside(kept, got).line == 74 and inside(kept, Counter()) is None


def test_tensors_updated_one_by_one_are_named_by_their_line() -> None:
    """`p.mul_(0.999)` in a loop over tensors (an in-place method call on the user's line)
    holding a tenth of the loop's samples is per_tensor_ops, priced by foreach and named
    by its line; the base's `v = v * 0.5 + 1.0` (no method call) is not."""
    from analysis.diagnosis.rules.registry import REGISTRY
    from analysis.documents.entries import PyLine

    name = "nofill/step"
    mul = PyLine("train.py", 248, "ema", "p.mul_", "p.mul_(0.999)", 35, 35.0)
    base = PyLine("train.py", 76, "step", "", "v = v * 0.5 + 1.0", 65, 65.0)
    for lines, fires in (([base, mul], True), ([base], False)):
        found = _found_with_lines("per_tensor_ops", name, lines)
        assert [f.range for f in found] == ([name] if fires else [])
        if fires:
            assert [x["line"] for x in found[0].evidence["lines_named"]] == [248]
            assert found[0].suggestion.startswith("at train.py:248: ")
    assert REGISTRY["per_tensor_ops"].change == "foreach"


def test_an_optimizer_stepping_parameter_by_parameter_is_per_tensor_ops() -> None:
    """`opt.step()` sampled in torch.optim.adam._single_tensor_adam (foreach=False): one
    op and one launch per parameter, per_tensor_ops with the optimizer's remedy; the fused
    path (_fused_adam) is not."""
    from analysis.documents.entries import PyLine

    name = "nofill/step"
    for call, fires in (("torch.optim.adam._single_tensor_adam", True),
                        ("torch.optim.adam._fused_adam", False)):
        line = PyLine("train.py", 266, "update", call, "opt.step()", 40, 40.0)
        found = _found_with_lines("per_tensor_ops", name, [line])
        assert [f.range for f in found] == ([name] if fires else [])
        if fires:
            assert "fused=True" in found[0].suggestion


def test_each_line_updating_tensors_one_by_one_is_a_finding_of_its_own() -> None:
    """A per-parameter optimizer step (80% of the samples) and a loop of `p.mul_` (6%) in
    one step: two findings, each naming its own line and call, with its own remedy and
    share (each priced on its own line's windows: seed 60 g17's `p.mul_` had been priced
    with the optimizer's, 4.11 ms of 0.31)."""
    from analysis.documents.entries import PyLine

    adam = PyLine("train.py", 266, "update", "torch.optim.adam._single_tensor_adam",
                  "opt.step()", 80, 80.0)
    mul = PyLine("train.py", 248, "ema", "p.mul_", "p.mul_(0.999)", 6, 6.0)
    found = _found_with_lines("per_tensor_ops", "nofill/step", [adam, mul])
    assert [[x["line"] for x in f.evidence["lines_named"]] for f in found] == [[266], [248]]
    assert [f.evidence["line_pct"] for f in found] == [80.0, 6.0]
    assert found[1].suggestion.startswith("at train.py:248: ") and "p.mul_" in found[1].message


def test_a_decode_programs_warm_up_calls_are_shown_but_never_gated() -> None:
    """The decode program (plan/decode_train): the decode range's first calls, set apart
    as `decode [warm-up]`, twice as slow in the new capture are a row of their own, shown
    as warm-up and no regression; the steady decode loop, unchanged, is within noise."""
    from analysis.commands.diff import compare
    from analysis.documents.range_build import from_entries
    from analysis.documents.range_table import RangeEntries

    base, new = analyzed("plan/decode_train/trace"), analyzed("plan/decode_train/trace")
    entries = list(new.ranges)
    for e in entries:
        if e.name == "decode [warm-up]":
            for f in ("wall_ns", "gpu_span_ns", "kernel_time_ns", "busy_ns"):
                setattr(e, f, 2 * getattr(e, f))
    new.ranges = RangeEntries(from_entries(entries))
    out = compare(base, new, 5.0)
    rows = {r["variant"]: r for r in out["variants"]}
    warm = rows["decode [warm-up]"]
    assert warm["warmup"] and not warm["regression"]
    assert max(warm["change_pct"].values()) > 90               # shown: twice as slow
    assert rows["decode"]["loop"]["verdict"] == "within noise"
    assert not out["regressions"]


def _locate_on(name: str, lines: list, found: list, blocked=None, sampled_in=None,
               py_samples: int = 50) -> None:
    """lines.locate on the loops_ab capture's document, the range `name` sampled on
    `lines` (`py_samples` Python samples)."""
    from analysis.diagnosis.rules.lines import locate

    doc = analyzed("loops_ab/trace")
    entries = [dataclasses.replace(x, lines=lines, py_samples=py_samples) if x.name == name
               else x for x in doc.ranges]
    locate(found, dataclasses.replace(doc, ranges=entries), {x.name: x for x in entries},
           blocked, None, sampled_in)


def _recorder(answer):
    """A stand-in for one of the Pricer's reads: `answer`, and the arguments it was asked
    with (a list, in order)."""
    asked = []

    def read(*args):
        asked.append(args)
        return answer
    return asked, read


def test_a_host_side_finding_names_its_line_in_its_evidence() -> None:
    """locate puts the line it names in the finding's evidence (`lines_named`: file, line,
    function, call), not in its message alone, so a reader of systems.json, or the
    battery's score, can tell which of a loop's causes it is about; a finding that named
    its line already (a sync site's) keeps it."""
    name = "nofill/step"
    read = PyLine("train.py", 42, "step", "Tensor.cpu", "a = (x + 1).cpu()", 30, 60.0)
    base = PyLine("train.py", 40, "step", "", "v = v * 0.5", 20, 40.0)
    own = {"file": "train.py", "line": 40, "function": "step", "call": "", "pct": 40.0}
    found = [Finding("readback_in_loop", "warning", name, None, "m.", {}, "s"),
             Finding("sync_in_loop", "warning", name, None, "m.", {"lines_named": [own]}, "s")]
    _locate_on(name, [read, base], found)
    assert [(x["line"], x["call"]) for x in found[0].evidence["lines_named"]] == \
        [(42, "Tensor.cpu")]
    assert found[1].evidence["lines_named"] == [own]


def test_a_call_none_of_its_ranges_samples_caught_is_named_from_its_function() -> None:
    """A fill's `torch.zeros` runs a few µs a step: where none of its range's samples fell
    in it (the one sample caught the overwriting op on the next line), the line of the
    range's function that makes the call, sampled elsewhere in the capture, is named, and
    said to be; a call no sampled line of those functions makes names none."""
    name = "nofill/step"
    add = PyLine("train.py", 51, "fill", "torch.add", "torch.add(a, 1.0, out=out)", 1, 100.0)
    zeros = PyLine("train.py", 50, "fill", "torch.zeros", "out = torch.zeros(n)", 2, 0.0)
    asked, sampled_in = _recorder([add, zeros])
    found = [Finding("fill_overwritten", "warning", name, None, "m.", {}, "use empty"),
             Finding("cat_in_loop", "warning", name, None, "m.", {}, "cat once")]
    _locate_on(name, [add], found, sampled_in=sampled_in)
    assert asked == [(name, {("train.py", "fill")})] * 2
    assert [(x["line"], x["call"]) for x in found[0].evidence["lines_named"]] == \
        [(50, "torch.zeros")]
    assert "on train.py:50 in fill (`out = torch.zeros(n)`), in torch.zeros. None of its " \
        "50 Python samples fell in that call; 2 did elsewhere" in found[0].message
    assert found[0].suggestion.startswith("at train.py:50")
    assert "lines_named" not in found[1].evidence


def test_a_sync_site_no_sample_reached_names_no_other_sites_line() -> None:
    """A sync site whose syncs no Python sample reached (its finding's lines_named empty):
    locate names no line for it, not the range's first line that syncs, which is another
    site's."""
    name = "nofill/step"
    other = PyLine("train.py", 100, "uniq", "torch.unique", "s = torch.unique(y)", 30, 60.0)
    ev = {"site_windows": [[0, 10]], "lines_named": []}
    found = [Finding("sync_in_loop", "warning", name, None,
                     "waits at a line the Python samples did not reach.", ev, "s")]
    _locate_on(name, [other], found, sampled_in=lambda path, functions: [other])
    assert found[0].evidence["lines_named"] == [] and "In your code" not in found[0].message


def test_an_allocation_finding_without_its_call_names_the_line_inside_its_mallocs() -> None:
    """alloc_in_loop on a range none of whose lines calls the allocator by name (the
    tensors a range asks for again after `empty_cache` beside it): its line is the one
    sampled inside the range's cudaMalloc and cudaFree calls (`blocked`, kind "memory");
    a range whose line makes the call names that one and asks for nothing."""
    gelu = [PyLine("train.py", 61, "gelu", "torch.mul", "z = y * x", 1, 25.0),
            PyLine("train.py", 60, "gelu", "torch.tanh", "y = torch.tanh(x)", 3, 75.0)]
    cache = PyLine("train.py", 70, "step", "torch.cuda.memory.empty_cache", "", 1, 5.0)
    for lines, kinds, where in ((gelu, ["memory"], "train.py:60 in gelu"),
                                (gelu + [cache], [], "train.py:70 in step")):
        asked, blocked = _recorder(Counter({("gelu", 60): 2}))
        found = [Finding("alloc_in_loop", "warning", "nofill/step", None, "m.", {}, "s")]
        _locate_on("nofill/step", lines, found, blocked)
        assert [k for _, k in asked] == kinds and where in found[0].message


def test_copies_on_the_compute_stream_name_the_line_sampled_inside_them() -> None:
    """copy_on_compute_stream is about the calls the thread blocks in, as pageable_copy
    is: its line is the one sampled inside the copy calls (`blocked`), not the range's
    hottest one, so a loop's index copy and its upload are told apart."""
    name = "nofill/step"
    hot = PyLine("train.py", 40, "step", "", "v = v * 0.5", 40, 80.0)
    up = PyLine("train.py", 44, "load", "Tensor.to", "b = host.to(dev)", 10, 20.0)
    asked, blocked = _recorder(Counter({("load", 44): 3}))
    found = [Finding("copy_on_compute_stream", "warning", name, None, "m.", {}, "prefetch")]
    _locate_on(name, [hot, up], found, blocked)
    assert asked == [(name, "h2d")]
    assert [(x["line"], x["call"]) for x in found[0].evidence["lines_named"]] == \
        [(44, "Tensor.to")]
    assert "train.py:44 in load" in found[0].message
    assert found[0].suggestion.startswith("at train.py:44")
