"""Other threads' launches and real GPU busy time, against brute force on a real training
step (backward on PyTorch's autograd thread) and on random intervals."""

from __future__ import annotations

import sqlite3
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.commands import systems
from analysis.common import intervals as blocks
from analysis.load import nsys_sqlite
from tests.conftest import DATA

TRACE = DATA / "train_step_user" / "trace.sqlite"
PID = -0x1000000


@pytest.fixture(scope="session")
def doc():
    return systems.build(nsys_sqlite.load(TRACE))


def _raw() -> tuple[np.ndarray, list[tuple]]:
    """Straight from SQLite: kernels with their launching call, and every GPU operation."""
    conn = sqlite3.connect(TRACE)
    kernels = np.array(conn.execute("""
        SELECT r.globalTid, r.start, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
             AND (r.globalTid & -16777216) = k.globalPid""").fetchall(), dtype="int64")
    ops = conn.execute("SELECT globalPid, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                       "SELECT globalPid, start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
                       "SELECT globalPid, start, end FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchall()
    return kernels, ops


def test_other_threads_equal_brute_force(doc) -> None:
    export = nsys_sqlite.load(TRACE)
    from analysis.trace import build as model
    trace = model.attribute(export)
    kernels, _ = _raw()
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in trace.ranges.itertuples():
        tid, lo, hi = int(row.global_tid), int(row.start_ns), int(row.end_ns)
        other = ((kernels[:, 0] & PID) == (tid & PID)) & (kernels[:, 0] != tid) & \
                (kernels[:, 1] >= lo) & (kernels[:, 1] < hi)
        want[row.path][0] += int(other.sum())
        want[row.path][1] += int(kernels[other, 2].sum())
    checked = 0
    for e in doc.ranges:
        assert [e.other_threads_kernel_count, e.other_threads_kernel_time_ns] == want[e.name]
        checked += e.other_threads_kernel_count > 0
    assert checked >= 5
    bwd = next(e for e in doc.ranges if e.name == "train/step/bwd")
    assert bwd.other_threads_kernel_count > 40 * bwd.instances > bwd.kernel_count
    assert bwd.other_threads[0].name == "pt_autograd_0"
    assert sum(t.kernel_count for t in bwd.other_threads) == bwd.other_threads_kernel_count
    assert "autograd" in bwd.other_threads[0].role          # a fact, shown, not raised
    assert not [f for f in doc.findings if f.rule == "other_thread_kernels"]


def _busy_brute(ops: list[tuple], pid: int, lo: int, hi: int) -> int:
    spans = sorted((max(s, lo), min(e, hi)) for p, s, e in ops
                   if p == pid and s < hi and e > lo)
    total, end = 0, lo
    for s, e in spans:
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def test_busy_and_window_equal_brute_force(doc) -> None:
    from analysis.trace import build as model
    trace = model.attribute(nsys_sqlite.load(TRACE))
    _, ops = _raw()
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in trace.ranges.itertuples():
        lo, hi, pid = int(row.start_ns), int(row.end_ns), int(row.global_tid) & PID
        want[row.path][0] += hi - lo
        want[row.path][1] += _busy_brute(ops, pid, lo, hi)
    for e in doc.ranges:
        assert [e.wall_ns, e.busy_ns] == want[e.name], e.name
        assert 0 <= e.busy_ns <= e.wall_ns


intervals = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300)), max_size=40)
windows = st.lists(st.tuples(st.integers(-50, 1300), st.integers(0, 600)), min_size=1,
                   max_size=10)


@given(intervals, windows)
def test_union_and_coverage_match_brute_force(ivs, wins) -> None:
    s = np.array([a for a, _ in ivs], dtype="int64")
    e = np.array([a + d for a, d in ivs], dtype="int64")
    bs, be = blocks.union(s, e)
    assert np.all(bs[1:] > be[:-1]) and np.all(be >= bs)        # disjoint, sorted
    points = {t for a, d in ivs for t in range(a, a + d)}
    assert int((be - bs).sum()) == len(points)
    lo = np.array([a for a, _ in wins], dtype="int64")
    hi = lo + np.array([d for _, d in wins], dtype="int64")
    got = blocks.covered(bs, be, lo, hi)
    assert got.tolist() == [len([t for t in points if a <= t < b]) for a, b in zip(lo, hi, strict=True)]


def test_train_step_workload_backward_on_the_autograd_thread() -> None:
    """The toolkit's own train_step capture (H200): each variant's bwd range launches a
    handful of kernels itself, the autograd thread the backward pass."""
    doc = systems.build(nsys_sqlite.load(DATA / "train_step" / "trace.sqlite"),
                        __import__("json").loads((DATA / "train_step" / "meta.json").read_text()))
    by = {e.name: e for e in doc.ranges}
    for variant in ("eager", "compiled", "cudagraphs"):
        bwd = by[f"train_step/{variant}/bwd"]
        assert bwd.other_threads_kernel_time_ns > 100 * bwd.kernel_time_ns
        assert bwd.other_threads[0].name == "pt_autograd_0"
    rows = {v.variant: v for v in doc.variants}
    assert rows["eager"].speedup_vs_baseline == 1.0 and rows["cudagraphs"].speedup_vs_baseline > 1.2
    assert all(v.other_thread_kernels_per_iter > 0 for v in rows.values())
