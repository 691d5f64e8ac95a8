"""Steps in any trace (step_find.py, step_period.py), their medians' intervals
(step_stats.py), the diff led by them (diff_steps.py), and libraries' ranges kept apart
(library.py), on committed H200 captures and synthetic sequences."""

from __future__ import annotations

import functools
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from analysis.commands import diff, systems
from analysis.common.names import is_library, library_mask
from analysis.documents.types import StepSet
from analysis.load import nsys_sqlite
from analysis.loops import period as step_period
from analysis.loops import stats as step_stats
from analysis.loops.find import find_steps
from analysis.render.markdown import ranges_section
from analysis.trace.steps import step_rows
from tests.conftest import DATA
from tests.shared_docs import analyzed


@functools.cache
def doc(scenario: str):
    return analyzed(f"{scenario}/trace")


def _log_median_ms(scenario: str) -> float:
    text = (DATA / scenario / "log.txt").read_text()
    return float(re.search(r"median ms per step: ([\d.]+)", text).group(1))


# --- libraries' ranges ------------------------------------------------------------------

def test_library_domains_match_without_case() -> None:
    assert is_library("CCCL") and is_library("nccl") and is_library("cuDNN")
    assert not is_library(None) and not is_library("my_lib")
    assert library_mask(["CCCL", None, "x"]).tolist() == [True, False, False]


def test_cub_ranges_get_no_finding_and_sit_under_their_parent() -> None:
    d = doc("twins/mask_sync")
    cub = [e for e in d.ranges if e.domain == "CCCL"]
    assert cub, "the capture holds CUB's ranges"
    assert not [f for f in d.findings if f.range and f.range.startswith("cub::")]
    steady = [e for e in cub if not e.warmup]
    assert {e.parent for e in steady} == {"planted/step"}        # nonzero() in planted only
    assert all(e.parent is None for e in d.ranges if e.domain is None)
    text = "\n".join(ranges_section(d))
    at = text.index("| planted/step |")
    assert text.index("↳ cub::DeviceSelect::Flagged") > at


def test_cub_ranges_have_no_diff_row() -> None:
    d = doc("twins/mask_sync")
    out = diff.compare(d, d, 5.0)
    assert not [r for r in out["variants"] if "cub::" in r["variant"]]
    assert out["variants"], "the user's ranges are compared"


def test_step_range_is_never_a_library_range_or_a_short_repeat() -> None:
    ms = 1_000_000
    frame = pd.DataFrame({
        "path": ["ncclAllReduce"] * 50 + ["tiny"] * 40 + ["outer"] * 4,
        "name": ["ncclAllReduce"] * 50 + ["tiny"] * 40 + ["outer"] * 4,
        "domain": ["NCCL"] * 50 + [None] * 44,
        "start_ns": np.arange(94) * 10 * ms,
        "end_ns": np.arange(94) * 10 * ms + np.r_[np.full(90, 11_000), np.full(4, 5 * ms)]})
    rows = step_rows(frame, None)
    assert set(frame["path"].to_numpy()[rows]) == {"outer"}     # not the 11 µs ranges


# --- finding the steps ---------------------------------------------------------------------

def test_steps_detected_in_an_emit_nvtx_capture_with_nccl_ranges() -> None:
    s = doc("steps/emit_nccl").steps
    assert len(s) == 1 and s[0].source == "detected"
    assert s[0].period_kernels == 40 and s[0].count == 28
    assert s[0].nccl_per_step == 8                 # one all-reduce per parameter
    program = _log_median_ms("steps/emit_nccl") * 1e6    # its own host clock, steps 4-30
    assert abs(s[0].median_ns - program) / program < 0.05
    assert s[0].median_low_ns <= s[0].median_ns <= s[0].median_high_ns


def test_detected_steps_match_the_hosts_cadence() -> None:
    """emit_only: the median detected step equals the median distance between the starts
    of an op range called once per step (an independent clock: the host's)."""
    s = doc("twins/emit_only").steps[0]
    assert s.source == "detected"
    with sqlite3.connect(DATA / "twins/emit_only/trace.sqlite") as conn:
        starts = [r[0] for r in conn.execute(
            "SELECT start FROM NVTX_EVENTS WHERE text LIKE 'aten::square%' ORDER BY start")]
    host = float(np.median(np.diff(starts)))
    assert abs(s.median_ns - host) / host < 0.05


def test_user_loop_median_equals_the_exports_own() -> None:
    """The user's range gives the steps; its median is the median of its instances read
    straight from the export, the warm-up instance left out."""
    s = doc("battery/input_starved_planted").steps[0]
    assert (s.source, s.name, s.warmup) == ("user range", "train_step", 1)
    with sqlite3.connect(DATA / "battery/input_starved_planted/trace.sqlite") as conn:
        walls = [r[0] for r in conn.execute(
            "SELECT n.end - n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE coalesce(n.text, s.value) = 'train_step' ORDER BY n.start")]
    assert s.count == len(walls) - 1 and s.median_ns == float(np.median(walls[1:]))


def _ranges(names: list[str], gap: int, length: int, domain=None) -> pd.DataFrame:
    n = len(names)
    return pd.DataFrame({"path": names, "name": names, "domain": [domain] * n,
                         "pid": [7] * n, "start_ns": np.arange(n) * gap,
                         "end_ns": np.arange(n) * gap + length})


def _no_kernels() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in
                         ["pid", "device", "stream", "name_id", "start_ns", "end_ns"]}
                        ).assign(nccl=pd.Series(dtype=bool))


def test_profiler_markers_and_a_named_step() -> None:
    r = _ranges([f"ProfilerStep#{i}" for i in range(6)], 3_000_000, 2_000_000)
    s = find_steps(r, lambda p: False, _no_kernels)[0][0]
    assert (s.source, s.count, s.median_ns) == ("profiler marker", 6, 2_000_000)
    r = _ranges(["iter"] * 5, 100_000, 50_000)           # sub-ms: named, so taken
    s = find_steps(r, lambda p: False, _no_kernels, step="iter")[0][0]
    assert (s.source, s.count) == ("named", 5)


def _sequence(template: list[int], steps: int, warm: list[int], gap: int, kernel: int
              ) -> pd.DataFrame:
    names = warm + template * steps
    start = np.cumsum([kernel + (gap if i >= len(warm) and (i - len(warm)) % len(template)
                                  == 0 else 10) for i in range(len(names))])
    return pd.DataFrame({"pid": 7, "device": 0, "stream": 7, "name_id": names,
                         "start_ns": start, "end_ns": start + kernel, "nccl": False})


def test_a_short_repeat_is_not_a_step() -> None:
    seq = _sequence([1, 2, 3, 4], 20, [9, 9], 2_000, 1_000)     # 6 µs steps
    r = _ranges(["aten::mm, op_id = 1"] * 3, 10, 5)
    s = find_steps(r, lambda p: "op_id" in p, lambda: seq)[0][0]
    assert s.source == "whole capture" and "shorter than a step" in s.note


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=2, max_size=40, unique=True),
       st.integers(4, 25), st.lists(st.integers(31, 40), max_size=30))
def test_period_steps_recover_the_planted_steps(template, steps, warm) -> None:
    """A template of distinct kernels repeated after a warm-up of other kernels (at most
    half as long as the repeats: the period is judged on the sequence's later two
    thirds): the period is the template's, and the steps found cover the repeats."""
    assume(2 * len(warm) <= steps * len(template))
    seq = _sequence(template, steps, warm, 500_000, 20_000)
    found = step_period.period_steps(seq["name_id"].to_numpy(), seq["start_ns"].to_numpy(),
                                     seq["end_ns"].to_numpy())
    assert found is not None
    lo, hi, period, lead = found
    assert period == len(template)
    assert len(lo) >= steps - 1 and lead >= len(warm)
    assert np.all(hi > lo)


# --- intervals -----------------------------------------------------------------------------

def test_median_interval_covers_the_median_as_often_as_it_says() -> None:
    rng = np.random.default_rng(1)
    hits = [lo <= 0.0 <= hi for lo, hi in
            (step_stats.median_interval(rng.standard_normal(31)) for _ in range(400))]
    assert 0.9 <= np.mean(hits) <= 1.0


def test_change_interval_is_seeded_and_brackets_no_change() -> None:
    a = np.random.default_rng(2).normal(100, 5, 30)
    assert step_stats.change_interval(a, a) == step_stats.change_interval(a, a)
    lo, hi = step_stats.change_interval(a, a.copy())
    assert lo <= 0 <= hi
    lo, hi = step_stats.change_interval(a, a * 0.5)
    assert -55 < lo <= hi < -45
    assert step_stats.change_interval(a[:1], a) == (-np.inf, np.inf)


def test_described_keeps_the_spread() -> None:
    s = step_stats.described(StepSet(source="x"), np.array([5, 1, 3, 2, 4]))
    assert (s.count, s.median_ns, s.mean_ns) == (5, 3.0, 3.0)
    assert (s.median_low_ns, s.median_high_ns) == (1.0, 5.0)


# --- the diff ------------------------------------------------------------------------------

def test_diff_of_a_program_and_its_faster_loader_twin() -> None:
    """battery input_starved: the step's median falls about 95%, a measured interval
    around it; the warm-up instances are no regression."""
    out = diff.compare(doc("battery/input_starved_planted"),
                       doc("battery/input_starved_fixed"), 5.0)
    c = out["step_changes"][0]
    assert c["verdict"] == "faster" and -96 < c["change_pct"] < -94
    assert c["change_low_pct"] <= c["change_pct"] <= c["change_high_pct"] < -90
    assert not out["regressions"]
    assert all(not r["regression"] for r in out["variants"] if r["warmup"])
    assert any(r["warmup"] for r in out["variants"])


def test_diff_of_emit_nvtx_only_captures_leads_with_the_steps(tmp_path: Path) -> None:
    base, new = doc("steps/emit_nccl"), doc("steps/emit_nccl_fast")
    out = diff.compare(base, new, 5.0)
    c = out["step_changes"][0]
    assert c["verdict"] == "slower" and c["change_low_pct"] > 5
    assert out["regressions"] == ["steps (detected)"]
    text = diff.render_diff(out, "a", "b")
    assert text.splitlines()[2].startswith("Steps (the median")
    assert "No range of the user's in both captures" in text
    assert "Comparability:" in text and "| GPU busy |" in text
    same = diff.compare(base, base, 5.0)["step_changes"][0]
    assert same["verdict"] == "within noise"
    assert same["change_low_pct"] <= 0 <= same["change_high_pct"]


def test_capture_totals_add_up() -> None:
    t = doc("battery/input_starved_planted").capture
    assert t.gpus == 1 and t.idle_ns == t.span_ns - t.busy_ns
    assert t.busy_ns <= t.compute_ns + t.communication_ns + t.memory_ns
    assert t.communication_ns == 0 and t.exposed_comm_ns == 0


@pytest.mark.parametrize("scenario", ["ddp_single"])
def test_exposed_communication_is_nccl_time_without_compute(scenario: str) -> None:
    t = doc(scenario).capture
    assert t.gpus == 2 and 0 < t.exposed_comm_ns <= t.communication_ns


def test_page_says_where_the_steps_came_from() -> None:
    from analysis.render.page import steps_lines

    text = " ".join(steps_lines(doc("steps/emit_nccl")))
    assert "28 steady step(s) from the repeating kernel sequence of GPU 0 (40 kernels" in text
    assert "8 NCCL calls each" in text and "1 warm-up step(s) left out" in text


def test_profiler_markers_in_an_emit_nvtx_capture() -> None:
    """ProfilerStep#N (emit_nvtx names it `ProfilerStep#3, op_id = 829`) gives the steps;
    the first, 100 times the others, is warm-up; the median is the export's own."""
    s = doc("steps/emit_markers").steps[0]
    assert (s.source, s.count, s.warmup) == ("profiler marker", 29, 1)
    with sqlite3.connect(DATA / "steps/emit_markers/trace.sqlite") as conn:
        walls = [r[0] for r in conn.execute(
            "SELECT end - start FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%' "
            "ORDER BY start")]
    assert s.median_ns == float(np.median(walls[1:]))
    program = _log_median_ms("steps/emit_markers") * 1e6
    assert abs(s.median_ns - program) / program < 0.05


def test_ranks_from_detected_steps_find_the_straggler() -> None:
    """ddp_single with the user's ranges taken out (NCCL's kept): each process's steps
    are detected from its kernels, confirmed by its NCCL kernels' cadence, their medians
    within 10% of the user's step range's, and the ranks built on them name rank 1, the
    planted straggler, as the user's ranges do."""
    path = DATA / "ddp_single" / "trace.sqlite"
    ex = nsys_sqlite.load(path)
    ex.ranges = ex.ranges[ex.ranges["domain"].notna()].reset_index(drop=True)
    bare = systems.build(ex)
    user = {s.pid: s for s in doc("ddp_single").steps}
    assert [s.source for s in bare.steps] == ["detected", "detected"]
    for s in bare.steps:
        assert s.nccl_per_step == 8 and s.median_ns >= 1_000_000
        assert abs(s.median_ns - user[s.pid].median_ns) / user[s.pid].median_ns < 0.10
    assert [r.rank for r in bare.ranks] == [0, 1]
    straggler = [f for f in bare.findings if f.rule == "straggler"]
    assert straggler and "rank 1" in straggler[0].message
