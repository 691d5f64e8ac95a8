"""The analysis stays linear in what it reads: one attribution pass, no range-by-range loops."""

from __future__ import annotations

import cProfile
import pstats
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from analysis.__main__ import main
from analysis.commands import systems
from analysis.common import settings
from analysis.load.nsys_sqlite import NsysExport
from analysis.trace import build as model
from tests.conftest import DATA


def test_attribution_runs_once_per_window(monkeypatch, tmp_path: Path) -> None:
    """GPU operations are attributed once per window of the timeline (each window once),
    CUDA graph launches once per export; nothing is attributed again downstream."""
    from analysis.load.nsys_chunks import plan
    from analysis.trace import partial

    calls = {"window": 0, "graph": 0}

    def counting(module, what):
        real = module.attribute_calls

        def count(*args, **kwargs):
            calls[what] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, "attribute_calls", count)

    counting(partial, "window")
    counting(model, "graph")
    cap = DATA / "graph_break"
    for rows, out in ((None, "a"), (200, "b")):
        calls.update(window=0, graph=0)
        argv = ["systems", str(cap / "trace.sqlite"), "--meta", str(cap / "meta.json"),
                "--torch-logs", str(cap / "torch_logs.txt"), "-o", str(tmp_path / out),
                "--jobs", "1"] + (["--chunk-rows", str(rows)] if rows else [])
        assert main(argv) == 0
        windows = plan(cap / "trace.sqlite", rows or settings.CHUNK_ROWS).windows
        assert calls == {"window": windows, "graph": 1}
        assert (windows == 1) if rows is None else (windows > 5)


def synthetic(n_ranges: int) -> NsysExport:
    """An emit_nvtx-like trace: `step` ranges, each holding 4 op ranges of unique names
    (as PyTorch's `seq = N` makes them), one kernel launched in each op range."""
    steps = n_ranges // 5
    t = np.arange(steps, dtype="int64") * 1000
    rows = [("step", t, t + 900)] + [(None, t + 10 + 200 * j, t + 150 + 200 * j)
                                     for j in range(4)]
    ranges = pd.concat([pd.DataFrame({
        "name": [f"aten::op{j}, seq = {i}" for i in range(steps)] if name is None
        else [name] * steps, "start_ns": s, "end_ns": e})
        for j, (name, s, e) in enumerate(rows)], ignore_index=True)
    ranges = ranges.assign(range_id=np.arange(len(ranges)), style="PushPop", domain=None,
                           global_tid=1)
    op_start = np.sort(np.concatenate([t + 20 + 200 * j for j in range(4)]))
    ops = pd.DataFrame({"kind": pd.Categorical(["kernel"] * len(op_start)),
                        "name": pd.Categorical(["k"] * len(op_start)),
                        "demangled_name": pd.Categorical(["k"] * len(op_start)),
                        "start_ns": op_start + 50, "end_ns": op_start + 90,
                        "duration_ns": 40, "correlation_id": np.arange(len(op_start)),
                        "global_pid": 0, "global_tid": 1, "api_start_ns": op_start,
                        "api_end_ns": op_start + 5})
    graphs = pd.DataFrame(columns=["global_tid", "api_start_ns", "api_end_ns",
                                   "correlation_id"], dtype="int64")
    return NsysExport(path=Path("synthetic"), ranges=ranges, ops=ops, graph_launches=graphs,
                      gpus=[], export_schema_version=None, product_version=None)


def _python_calls(n: int) -> int:
    """Python function calls made to build the document of an n-range trace (cProfile's
    count: the same on any machine, at any load)."""
    export = synthetic(n)
    profile = cProfile.Profile()
    doc = profile.runcall(systems.build, export)
    assert len(doc.ranges) == n // 5 * 4 + 1            # every op range and `step`
    return pstats.Stats(profile).total_calls


def test_four_times_the_ranges_costs_about_four_times_not_sixteen() -> None:
    """A loop over ranges that compares them pairwise, or filters a frame per range, makes
    the calls grow with the square of the ranges; a grouped, vectorized pass does not."""
    small, large = _python_calls(2_000), _python_calls(8_000)
    assert large < 5 * small, (small, large)
    # each added range costs a few calls (its entry), not a frame operation's hundreds
    assert (large - small) / (8_000 - 2_000) < 100, (small, large)


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2**40), st.integers(0, 4)),
                max_size=40))
def test_rows_numbered_in_order_of_first_appearance(rows: list[tuple[int, int, int]]) -> None:
    from analysis.common.frames import row_codes

    seen: dict[tuple[int, int, int], int] = {}
    want = [seen.setdefault(r, len(seen)) for r in rows]
    got = row_codes(np.array(rows, dtype="int64").reshape(len(rows), 3))
    assert got.tolist() == want


def _explained_calls(n: int) -> int:
    """Python calls `host_rules.explained` makes asking about n repeated ranges that all
    synchronize every iteration (n found paths: a pairwise check makes n² calls)."""
    from analysis.diagnosis.rules import Context
    from analysis.diagnosis.rules.host_rules import explained
    from analysis.documents.types import RangeEntry, SystemsDoc, SystemsSource
    entries = [RangeEntry(name=f"loop/op_{i}/inner", domain=None, instances=5,
                          kernel_count=1, kernel_time_ns=10, gpu_span_ns=10, gpu_idle_ns=0,
                          wall_instances=5, wall_ns=1000, sync_instances=5, host_sync_ns=900,
                          busy_ns=500)
               for i in range(n)]
    doc = SystemsDoc(source=SystemsSource(path="synthetic", export_schema_version=None,
                                         nsys_version=None, gpus=[]), ranges=entries)
    ctx = Context(systems=doc)
    profile = cProfile.Profile()
    found = profile.runcall(lambda: [explained(ctx, f"loop/op_{i}") for i in range(n)])
    assert all(found)
    return pstats.Stats(profile).total_calls


def test_host_rules_ask_about_many_repeated_ranges_in_linear_time() -> None:
    """An emit_nvtx capture replayed 3x repeats every op range: tens of thousands of
    loops found by the host rules; asking whether each is explained must not compare it
    with every found one (that took minutes)."""
    small, large = _explained_calls(500), _explained_calls(2_000)
    assert large < 5 * small, (small, large)


@given(st.lists(st.sampled_from(["a", "a/b", "a/b/c", "a/bc", "ab", "x/a", "x"]),
                max_size=5), st.sampled_from(["a", "a/b", "a/b/c", "a/bc", "ab", "x/a", "x"]))
def test_related_paths_as_the_pairwise_definition(found: list[str], path: str) -> None:
    """The set lookups answer as the pairwise definition: the path is a found one, or
    encloses or is nested in one."""
    from analysis.diagnosis.rules.host_rules import _related, relatives
    naive = any(path == o or path.startswith(o + "/") or o.startswith(path + "/")
                for o in found)
    assert _related(path, relatives(set(found))) == naive
