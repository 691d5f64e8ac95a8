"""The windowed attribution gives the same documents as one window, on every committed
export and on random synthetic ones, whatever the window size, order or worker count."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.commands import systems
from analysis.documents.io import load_meta
from analysis.documents.types import to_json
from analysis.load import nsys_sqlite, torch_logs
from analysis.load.nsys_chunks import _member, plan
from analysis.load.rows import int_rows
from analysis.trace import build as model
from analysis.trace import runners
from tests.shared_docs import committed_exports

DATA = Path(__file__).parent / "data"
def _layouts(names: list[str]) -> list[str]:
    """The committed exports, one per program: a battery program's fixed twin and a
    twin's unsampled capture are left out (the same program, the same layout of tables,
    a subset of the rows), which halves the time of the check below."""
    kept = set(names)
    return [n for n in names if not n.endswith("_fixed/trace")
            and n.replace("/trace", "_sampled/trace") not in kept]


EXPORTS = [name + ".sqlite" for name in _layouts(committed_exports())]


def _trace(path: Path, chunk_rows: int | None, jobs: int = 1, meta=None,
           events=None) -> model.Trace:
    export = nsys_sqlite.load(path, ops=False)
    return runners.attribute_file(path, export, systems.watch_paths(meta),
                                chunk_rows=chunk_rows, jobs=jobs,
                                events=systems.event_list(events))


def _doc(path: Path, chunk_rows: int | None, jobs: int = 1, meta=None, events=None) -> str:
    return _doc_of(_trace(path, chunk_rows, jobs, meta, events), meta, events)


def _doc_of(trace: model.Trace, meta=None, events=None) -> str:
    return to_json(systems.build(trace.export, meta, events, trace=trace))


def _whole_trace_equal(a: model.Trace, b: model.Trace) -> None:
    """Every field of the two traces equal, tables by value: the document is built from
    the trace, its export and meta.json alone, so the two give the same document."""
    for f in dataclasses.fields(model.Trace):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if f.name == "export":
            assert type(va) is type(vb) and va.path == vb.path
        elif isinstance(va, pd.DataFrame):
            if len(va) or len(vb):
                pd.testing.assert_frame_equal(va.reset_index(drop=True),
                                              vb.reset_index(drop=True),
                                              check_dtype=False, obj=f.name)
        elif isinstance(va, np.ndarray):
            assert np.array_equal(va, vb), f.name
        else:
            assert va == vb, f.name


def _inputs(name: str) -> tuple[Path, object, object]:
    """An export (name: its path under tests/data) with the meta.json and TORCH_LOGS
    beside it when it is a run's trace.sqlite."""
    path = DATA / name
    folder = path.parent
    own = path.name == "trace.sqlite"
    meta = load_meta(folder / "meta.json") if own and (folder / "meta.json").exists() \
        else None
    logs = folder / "torch_logs.txt"
    return path, meta, torch_logs.load(logs) if own and logs.exists() else None


WINDOWS = 4
"""Windows each committed export is cut into: every window edge falls inside its loops
(the random synthetic exports below try every window size from one row up)."""


@pytest.mark.parametrize("name", EXPORTS)
def test_small_windows_give_the_same_trace(name: str) -> None:
    """Every field of the trace, hence the document, whatever the windows (documents
    are compared whole on the synthetic exports and on train_step below)."""
    path, meta, events = _inputs(name)
    one = _trace(path, 10**9, meta=meta, events=events)
    rows = plan(path, 10**9).total_rows
    assert plan(path, max(rows // WINDOWS, 1)).windows > 1
    _whole_trace_equal(_trace(path, max(rows // WINDOWS, 1), meta=meta, events=events), one)


def test_worker_processes_and_the_in_memory_path_agree() -> None:
    path, meta, events = _inputs("train_step/trace.sqlite")
    whole = _doc(path, 10**9, meta=meta, events=events)
    assert _doc(path, 997, jobs=2, meta=meta, events=events) == whole
    export = nsys_sqlite.load(path)
    doc = systems.build(export, meta, events)
    assert to_json(doc) == whole


# --- synthetic exports --------------------------------------------------------------

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT,
    correlationId INT, globalPid INT, shortName INT, demangledName INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT,
    correlationId INT, globalPid INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT,
    correlationId INT, nameId INT, eventClass INT NOT NULL DEFAULT 0);
CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, globalTid INT,
    domainId INT, endGlobalTid INT);
"""
PID = 7 << 24
TIDS = (PID | 7, PID | 8)
NAMES = ["ampere_sgemm_128x64_tn", "triton_poi_fused_relu_0", "void at::native::k<4>",
         "elementwise", "nccl_all_reduce"]


def _write(path: Path, ops: list[tuple], ranges: list[tuple], shuffle: bool) -> None:
    """An export: `ops` (kind, start, dur, stream, tid, lag, name) and `ranges`
    (style, name, tid, start, end), tables in start order unless `shuffle`."""
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)",
                     [(i + 1, n) for i, n in enumerate([*NAMES, "cudaLaunchKernel"])])
    kern, copy, api = [], [], []
    for corr, (kind, start, dur, stream, tid, lag, name) in enumerate(ops, start=1):
        api.append((start - lag, start - lag + 3, TIDS[tid], corr, len(NAMES) + 1))
        row = (start, start + dur, 0, stream, corr, PID)
        (kern if kind == "kernel" else copy).append(row + ((name + 1, name + 1)
                                                           if kind == "kernel" else ()))
    def order(rows: list) -> list:
        if shuffle == "swap":              # in order but for two neighbours
            rows = sorted(rows)
            return rows[:1] + rows[2:3] + rows[1:2] + rows[3:]
        return rows[::-1] if shuffle else sorted(rows)

    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?)",
                     order(kern))
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?)", order(copy))
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, "
                     "correlationId, nameId) VALUES (?,?,?,?,?)", order(api))
    conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,NULL,NULL)",
                     [(s, e, 59 if style else 60, name, TIDS[tid])
                      for style, name, tid, s, e in ranges])
    conn.commit()
    conn.close()


op = st.tuples(st.sampled_from(["kernel", "kernel", "kernel", "memcpy"]),
               st.integers(1_000, 200_000), st.integers(1, 40_000), st.integers(1, 2),
               st.integers(0, 1), st.integers(1, 30_000), st.integers(0, len(NAMES) - 1))
rng = st.tuples(st.booleans(), st.sampled_from(["step", "fwd", "bwd"]), st.integers(0, 1),
                st.integers(0, 150_000), st.integers(1, 120_000)).map(
    lambda r: (r[0], r[1], r[2], r[3], r[3] + r[4]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=40), ranges=st.lists(rng, min_size=1, max_size=8),
       chunk=st.integers(1, 12), shuffle=st.booleans())
def test_random_windows_give_the_same_document(tmp_path: Path, ops, ranges, chunk,
                                               shuffle) -> None:
    path = tmp_path / f"t{chunk}{int(shuffle)}.sqlite"
    path.unlink(missing_ok=True)
    _write(path, ops, ranges, shuffle)
    whole, small = _trace(path, 10**9), _trace(path, chunk)
    _whole_trace_equal(small, whole)
    assert _doc_of(whole) == _doc_of(small)


def test_rows_out_of_order_inside_a_window_are_caught(tmp_path: Path) -> None:
    """Window bounds in order but two rows swapped: the check sees it, the file is read
    again by scanning, and the answer is the one-window answer."""
    ops = [("kernel", 10_000 * i, 500 + 37 * i, 1 + i % 2, i % 2, 2_000, i % len(NAMES))
           for i in range(1, 41)]
    ranges = [(True, "step", 0, 0, 250_000), (False, "fwd", 1, 40_000, 90_000)]
    path = tmp_path / "swap.sqlite"
    _write(path, ops, ranges, "swap")
    from analysis.load.nsys_chunks import read_window

    layout = plan(path, 10)
    assert not layout.scan and not all(read_window(layout, i).attrs["sorted_ok"]
                                       for i in range(layout.windows))
    _whole_trace_equal(_trace(path, 10), _trace(path, 10**9))


def test_compiled_instance_set_apart_through_the_file_path(tmp_path: Path) -> None:
    """A loop of `step` ranges read from a file, a recompile logged in the second step:
    that step becomes `step [compile]` (warm-up) whatever the window size."""
    import datetime as dt

    ms = 1_000_000
    ops = [("kernel", s + 5 * ms, 2 * ms, 1, 0, 1 * ms, 0) for s in range(0, 400 * ms, 100 * ms)]
    ranges = [(True, "step", 0, s, s + 90 * ms) for s in range(0, 400 * ms, 100 * ms)]
    path = tmp_path / "loop.sqlite"
    _write(path, ops, ranges, False)
    start = int(dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone.utc).timestamp()) * 10**9
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INT)")
        conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?)", (start,))
    events = [{"kind": "recompile", "function": "f", "file": "m.py", "line": 1,
               "reason": "shape", "logged_at": "1130 08:00:00.150000"}]
    docs = [_doc(path, rows, events=events) for rows in (10**9, 2)]
    assert docs[0] == docs[1]
    doc = json.loads(docs[0])
    by = {e["name"]: e for e in doc["ranges"]}
    assert by["step"]["instances"] == 3 and not by["step"].get("warmup")
    assert by["step [compile]"]["instances"] == 1 and by["step [compile]"]["warmup"]


@given(st.lists(st.integers(-2**40, 2**40), max_size=40),
       st.lists(st.integers(-2**40, 2**40), max_size=40), st.randoms())
def test_member_is_isin(values: list[int], pool: list[int], rnd) -> None:
    """Which correlation ids a window's calls hold: np.isin's answer, duplicates and
    ids spread far apart too."""
    pool = pool + rnd.sample(values, k=len(values) // 2)
    a, b = np.array(values, dtype=np.int64), np.array(pool, dtype=np.int64)
    assert (_member(a, b) == np.isin(a, b)).tolist() == [True] * len(values)


@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(0, 2**40)),
                min_size=1, max_size=30))
def test_int_rows_are_np_array(rows: list[tuple[int, int]]) -> None:
    """Integer rows read value by value equal np.array's; NULLs raise as it does."""
    assert (int_rows(rows, 2) == np.array(rows, dtype=np.int64)).all()
    with pytest.raises(TypeError):
        int_rows([*rows, (None, 1)], 2)
    with pytest.raises(ValueError):
        int_rows(rows, 3)


def test_one_systems_run_opens_the_export_once(monkeypatch, tmp_path: Path) -> None:
    """Ranges, operations, the host split, CPU and Python samples, the step graphs and the
    kernel sequence all read one connection (load/export.py)."""
    import shutil
    import sqlite3

    from analysis.__main__ import main
    from analysis.load import export

    path = tmp_path / "trace.sqlite"
    shutil.copy(DATA / "twins" / "input_starved_sampled" / "trace.sqlite", path)
    export.close_all()
    opened, real = [], sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    assert main(["systems", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    assert len(opened) == 1, opened
    doc = json.loads((tmp_path / "out" / "systems.json").read_text())
    assert doc["steps"] and any(e.get("py_samples") for e in doc["ranges"])


def test_the_warm_up_counts_and_the_pass_plan_the_windows_once(monkeypatch) -> None:
    """A one-window export's warm-up counts and its attribution pass share one plan (its
    table sizes and threads read once), and none is kept after the call."""
    calls: list[Path] = []
    real = runners.plan
    monkeypatch.setattr(runners, "plan", lambda p, rows: calls.append(p) or real(p, rows))
    trace = _trace(DATA / "autotune" / "trace.sqlite", None)
    assert trace.warmup and len(calls) == 1
    assert not runners._PLANS
    _trace(DATA / "autotune" / "trace.sqlite", None)
    assert len(calls) == 2
