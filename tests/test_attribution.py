"""Attribution and interval maths on tiny inline frames, plus property tests."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.load.nsys_sqlite import NsysExport
from analysis.trace import build as model
from analysis.trace import ranges as rng


def _ranges(rows: list[tuple]) -> pd.DataFrame:
    """rows: (name, tid, start, end[, style[, domain]])."""
    recs = []
    for i, r in enumerate(rows):
        name, tid, start, end = r[:4]
        style = r[4] if len(r) > 4 else "PushPop"
        domain = r[5] if len(r) > 5 else "d"
        recs.append({"range_id": i, "style": style, "name": name, "domain": domain,
                     "global_tid": tid, "start_ns": start, "end_ns": end})
    return pd.DataFrame(recs)


def _ops(rows: list[tuple]) -> pd.DataFrame:
    """rows: (name, tid, api_start, api_end, gpu_start, gpu_end[, kind])."""
    recs = [{"kind": r[6] if len(r) > 6 else "kernel", "name": r[0], "global_tid": r[1],
             "api_start_ns": r[2], "api_end_ns": r[3], "start_ns": r[4], "end_ns": r[5],
             "duration_ns": r[5] - r[4], "correlation_id": i} for i, r in enumerate(rows)]
    return pd.DataFrame(recs, columns=["kind", "name", "global_tid", "api_start_ns",
                                       "api_end_ns", "start_ns", "end_ns", "duration_ns",
                                       "correlation_id"])


NO_GRAPHS = pd.DataFrame(columns=["global_tid", "api_start_ns", "api_end_ns",
                                  "correlation_id"], dtype="int64")


def trace_of(ranges: pd.DataFrame, ops: pd.DataFrame) -> model.Trace:
    """The attributed trace of inline frames (as the loader would give them)."""
    ops = ops.assign(demangled_name=ops["name"], global_pid=0)
    export = NsysExport(path=Path("inline"), ranges=ranges, ops=ops, graph_launches=NO_GRAPHS,
                        gpus=[], export_schema_version=None, product_version=None)
    return model.attribute(export)


def test_paths_nest_per_thread_and_domain() -> None:
    r = _ranges([("a", 1, 0, 100), ("b", 1, 10, 50), ("c", 1, 20, 30), ("b", 1, 60, 90),
                 ("x", 1, 5, 95, "PushPop", "other"), ("s", 1, 15, 25, "StartEnd"),
                 ("a", 2, 0, 100)])
    assert list(rng.range_paths(r)) == ["a", "a/b", "a/b/c", "a/b", "x", "s", "a"]


def test_launch_inside_range_counts_gpu_time_does_not_matter() -> None:
    r = _ranges([("a", 1, 0, 100)])
    ops = _ops([("k1", 1, 10, 20, 500, 600),     # runs long after the range: still a's
                ("k2", 1, 90, 110, 95, 96),      # API call ends after the range: not a's
                ("k3", 2, 10, 20, 30, 40)])      # other thread: not a's
    pairs = rng.attribute(ops, r)
    assert pairs["call"].tolist() == [0]


def test_summary_span_idle_and_kernels() -> None:
    r = _ranges([("w", 1, 0, 1000), ("v", 1, 10, 500)])
    ops = _ops([("k", 1, 20, 30, 100, 200), ("k", 1, 40, 50, 300, 350),
                ("m", 1, 60, 70, 320, 400, "memcpy"), ("k", 1, 600, 610, 700, 800)])
    trace = trace_of(r, ops)
    summary = rng.summarize(trace)
    by = summary.set_index("path")
    assert by.loc["w/v", "kernel_count"] == 2 and by.loc["w", "kernel_count"] == 3
    assert by.loc["w/v", "gpu_span_ns"] == 300           # 100 -> 400 (memcpy included)
    assert by.loc["w/v", "gpu_idle_ns"] == 300 - (100 + 100)   # busy 100-200, 300-400
    assert by.loc["w", "kernel_time_ns"] == 100 + 50 + 100
    assert list(summary["path"]) == ["w", "w/v"]          # timeline order


def _timeline(ivs: list[tuple[int, int, int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(instances, gap summary) of one range holding ops (start, duration, api_start),
    every gap summarized (threshold 1 ns)."""
    ops = _ops([("k", 1, api, api + 1, s, s + d) for s, d, api in ivs])
    with patch.object(model, "GAP_NS", 1):
        trace = trace_of(_ranges([("w", 1, -1, 10**6)]), ops)
    return trace.instances, trace.gaps


def test_timeline_merges_overlapping_streams() -> None:
    inst, gap_rows = _timeline([(0, 10, 0), (5, 3, 1), (20, 10, 15), (21, 4, 25)])
    assert inst[["gpu_span_ns", "gpu_idle_ns"]].values.tolist() == [[30, 10]]
    assert gap_rows[["gaps", "gap_ns", "largest_gap_ns", "host_wait_ns"]].values.tolist() == [
        [1, 10, 10, 10]]


def test_timeline_host_wait_only_when_launch_came_late() -> None:
    _, gap_rows = _timeline([(0, 10, 0), (30, 5, 5)])     # launched early: other wait
    assert gap_rows[["gaps", "host_wait_ns"]].values.tolist() == [[1, 0]]


intervals = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 200),
                               st.integers(0, 1200)), min_size=1, max_size=30)


@given(intervals)
def test_timeline_matches_brute_force(ivs: list[tuple[int, int, int]]) -> None:
    covered = set()
    for s, d, _ in ivs:
        covered.update(range(s, s + d))
    inst, gap_rows = _timeline(ivs)
    span = max(s + d for s, d, _ in ivs) - min(s for s, _, _ in ivs)
    assert inst["gpu_span_ns"].tolist() == [span]
    assert inst["gpu_idle_ns"].tolist() == [span - len(covered)]
    assert int(gap_rows["gap_ns"].sum()) == span - len(covered)
    assert len(gap_rows) == (1 if span > len(covered) else 0)


calls = st.lists(st.tuples(st.integers(1, 2), st.integers(0, 1000), st.integers(0, 50)),
                 max_size=40)
spans = st.lists(st.tuples(st.integers(1, 2), st.integers(0, 1000), st.integers(0, 400)),
                 min_size=1, max_size=15)


@settings(max_examples=200)
@given(calls, spans)
def test_attribute_matches_brute_force(c: list[tuple], s: list[tuple]) -> None:
    """Every call is paired once with exactly the ranges that contain it on its thread."""
    ops = _ops([("k", t, a, a + d, 0, 1) for t, a, d in c])
    r = _ranges([(f"r{i}", t, a, a + d, "StartEnd") for i, (t, a, d) in enumerate(s)])
    got = set(map(tuple, rng.attribute(ops, r)[["range", "call"]].to_numpy().tolist()))
    want = {(ri, ci) for ri, (rt, ra, rd) in enumerate(s) for ci, (t, a, d) in enumerate(c)
            if t == rt and ra <= a and a + d <= ra + rd}
    assert got == want


def test_the_step_that_compiled_is_set_apart_not_the_whole_range() -> None:
    """A training loop whose first `step` compiled (a recompile logged while it was open):
    that instance and the ranges inside it become `step [compile]`, labelled warm-up; the
    other steps stay `step`, no warm-up, and nsys stats' view (by range name) still adds
    them up."""
    import datetime as dt

    from analysis.commands import systems
    from analysis.commands.nsys_stats import ours_proj
    from analysis.documents.types import to_dict

    ms = 1_000_000
    r = _ranges([("step", 1, 0, 500 * ms), ("fwd", 1, 10 * ms, 400 * ms),
                 ("step", 1, 600 * ms, 700 * ms), ("fwd", 1, 610 * ms, 650 * ms),
                 ("step", 1, 800 * ms, 900 * ms), ("fwd", 1, 810 * ms, 850 * ms)])
    ops = _ops([("k", 1, s + ms, s + 2 * ms, s + 3 * ms, s + 4 * ms)
                for s in (20 * ms, 620 * ms, 820 * ms)])
    start = int(dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone.utc).timestamp()) * 10**9
    export = NsysExport(path=Path("inline"), ranges=r,
                        ops=ops.assign(demangled_name=ops["name"], global_pid=0),
                        graph_launches=NO_GRAPHS, gpus=[], export_schema_version=None,
                        product_version=None, session_start_utc_ns=start)
    def doc_for(at: str):
        return systems.build(export, None, [{
            "kind": "recompile", "function": "forward", "file": "m.py", "line": 3,
            "reason": "size mismatch", "logged_at": f"1130 08:00:00.{at}"}])

    doc = doc_for("450000")               # in the first step, after its fwd
    by = {e.name: e for e in doc.ranges}
    assert set(by) == {"step", "step/fwd", "step [compile]", "step [compile]/fwd"}
    assert by["step [compile]"].warmup and not by["step"].warmup
    assert (by["step"].instances, by["step [compile]"].instances) == (2, 1)
    assert to_dict(doc)["run"]["torch_log_events"][0]["range"] == "step [compile]"
    proj = ours_proj(doc)
    assert proj.loc["d:step", "instances"] == 3 and proj.loc["d:fwd", "instances"] == 3
    by = {e.name: e for e in doc_for("200000").ranges}     # inside the first fwd
    assert set(by) == {"step", "step/fwd", "step/fwd [compile]"}
    assert by["step/fwd [compile]"].warmup and by["step"].instances == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "a/b", "c", "a [warm-up]", "a [warm-up]/b"]),
                min_size=1, max_size=30),
       st.lists(st.booleans(), min_size=30, max_size=30))
def test_path_codes_renumber_only_tagged_rows_as_a_full_numbering_would(plain, tag):
    """Tagged paths numbered from the plain ones (build._path_codes) equal their numbering
    from scratch, also where a tag makes a path some other row already had."""
    model.forget_ranges()
    ranges = pd.DataFrame({"x": range(len(plain))})
    before = pd.Series(plain, dtype=object)
    after = pd.Series([p.replace("a", "a [warm-up]", 1) if t and "[" not in p else p
                       for p, t in zip(plain, tag, strict=False)], dtype=object)
    assert model._path_codes(ranges, before, before).tolist() == \
        model._first_seen(plain).tolist()
    assert model._path_codes(ranges, before, after).tolist() == \
        model._first_seen(after.tolist()).tolist()
    model.forget_ranges()
