"""The host split per range instance, checked against a brute-force reference computed
here straight from the export with SQL (every range instance against every call of its
thread), on real captures: the windowed reader reads only the calls inside ranges, by
rowid ranges, and must lose or double none."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis.load import nsys_host, nsys_sqlite
from analysis.load.nsys_chunks import plan
from analysis.load.nsys_host import HOST_PARTS, PART, api_part
from analysis.trace import runners
from analysis.trace.host import PART_COLUMNS

DATA = Path(__file__).parent / "data"
CASES = ["battery/item_sync_planted/trace.sqlite", "battery/pageable_copy_planted/trace.sqlite",
         "battery/input_starved_planted/trace.sqlite", "gelu/trace.sqlite",
         "train_step_user/trace.sqlite"]
API = "CUPTI_ACTIVITY_KIND_RUNTIME"


_REFERENCE: dict[str, tuple[np.ndarray, np.ndarray]] = {}
"""_reference per export, made once: its parametrizations (windows, reads) share it, the
range rows being the export's own in every one."""


def _reference(path: Path, ranges) -> tuple[np.ndarray, np.ndarray]:
    """Per range instance: CUDA time by part (no blocking-copy move) and OS time outside
    the CUDA call of its thread that started last before it; from plain SQL."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(conn.execute("SELECT id, value FROM StringIds"))
    api = np.array(conn.execute(f"SELECT globalTid, start, end, nameId FROM {API}").fetchall(),
                   dtype="int64").reshape(-1, 4)
    osrt = np.array(conn.execute("SELECT globalTid, start, end FROM OSRT_API WHERE "
                                 "nestingLevel = 0").fetchall(), dtype="int64").reshape(-1, 3)
    conn.close()
    part = np.array([api_part(names.get(int(i), "")) for i in api[:, 3]], dtype="int64")
    cuda = np.zeros((len(ranges), len(HOST_PARTS)), dtype="int64")
    os_ns = np.zeros(len(ranges), dtype="int64")
    for row, (tid, s, e) in enumerate(ranges[["global_tid", "start_ns", "end_ns"]]
                                      .to_numpy(dtype="int64").tolist()):
        mine = (api[:, 0] == tid) & (api[:, 1] >= s) & (api[:, 2] <= e)
        np.add.at(cuda[row], part[mine], api[mine, 2] - api[mine, 1])
        ours = api[(api[:, 0] == tid) & (api[:, 1] >= s)]
        order = np.lexsort((ours[:, 2], ours[:, 1]))
        ours = ours[order]
        for _, os0, os1 in osrt[(osrt[:, 0] == tid) & (osrt[:, 1] >= s) & (osrt[:, 2] <= e)
                                ].tolist():
            before = np.flatnonzero((ours[:, 1] < os0) | ((ours[:, 1] == os0)
                                                          & (ours[:, 2] <= os1)))
            inside = 0
            if len(before):
                c = ours[before[-1]]
                inside = max(min(os1, int(c[2])) - os0, 0)
            os_ns[row] += os1 - os0 - inside
    return cuda, os_ns


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("windows", [1, 5])
@pytest.mark.parametrize("read_rows", [0, nsys_host.READ_ROWS])
def test_host_split_equals_a_brute_force_reference(name: str, windows: int, read_rows: int,
                                                   monkeypatch) -> None:
    """Read span by span (READ_ROWS 0) or, where cheaper, a window at once: the same."""
    monkeypatch.setattr(nsys_host, "READ_ROWS", read_rows)
    path = DATA / name
    export = nsys_sqlite.load(path, ops=False)
    rows = plan(path, 10**9).total_rows
    trace = runners.attribute_file(path, export, (), chunk_rows=max(rows // windows, 1),
                                   jobs=1)
    if str(path) not in _REFERENCE:
        _REFERENCE[str(path)] = _reference(path, trace.ranges)
    cuda, os_ns = _REFERENCE[str(path)]
    assert len(cuda) == len(trace.ranges)
    got = trace.host.set_index("range").reindex(range(len(trace.ranges)), fill_value=0)
    cuda_parts = [c for c in PART_COLUMNS if c != "host_os_ns"]
    # blocking copies move time between parts only: the CUDA total is the same
    assert got[cuda_parts].sum(axis=1).tolist() == cuda[:, :PART["os"]].sum(axis=1).tolist()
    assert got["host_launch_ns"].tolist() == cuda[:, PART["launch"]].tolist()
    assert got["host_module_ns"].tolist() == cuda[:, PART["module"]].tolist()
    assert got["host_os_ns"].tolist() == os_ns.tolist()
    assert cuda.sum() > 0


def _tiny(path: Path) -> None:
    """Thread 1 in a range [0, 1000]: a sync call [100, 600] with a poll [300, 400]
    inside it, a poll [700, 800] outside any CUDA call; thread 2's calls lie outside its
    range [2000, 3000]."""
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT,
            correlationId INT, nameId INT, eventClass INT NOT NULL DEFAULT 0);
        CREATE TABLE OSRT_API (start INT, end INT, globalTid INT, nestingLevel INT);
        CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT,
            globalTid INT, domainId INT, endGlobalTid INT);
        INSERT INTO StringIds VALUES (1, 'cudaStreamSynchronize_v3020'),
            (2, 'cudaLaunchKernel_v7000');
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId,
            nameId) VALUES (100, 600, 1, 1, 1),
            (650, 660, 1, 2, 2), (1500, 1600, 2, 3, 2), (3500, 3600, 2, 4, 2);
        INSERT INTO OSRT_API VALUES (300, 400, 1, 0), (700, 800, 1, 0), (1700, 1800, 2, 0);
        INSERT INTO NVTX_EVENTS VALUES (0, 1000, 59, 'step', 1, NULL, NULL),
            (2000, 3000, 59, 'step', 2, NULL, NULL);
    """)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("cuts", [[], [200], [200, 350], [650, 700]])
def test_an_os_call_inside_a_cuda_call_of_an_earlier_window(tmp_path: Path, cuts) -> None:
    """Whatever the window edges, the poll inside the sync counts as sync time, the one
    after it as OS time; calls outside the ranges are never read."""
    import pandas as pd

    from analysis.load.nsys_host import plan_host, range_spans, read_host
    from analysis.trace.host import instance_calls
    path = tmp_path / "tiny.sqlite"
    _tiny(path)
    ranges = pd.DataFrame({"global_tid": [1, 2], "start_ns": [0, 2000],
                           "end_ns": [1000, 3000]})
    layout, spans = plan_host(path), range_spans(ranges)
    ops = pd.DataFrame({c: pd.Series(dtype="int64") for c in (
        "global_tid", "api_start_ns")}).assign(kind=pd.Series(dtype=object),
                                                halo=pd.Series(dtype=bool),
                                                demangled_name=pd.Series(dtype=object))
    bounds = [-(1 << 62), *cuts, 1 << 62]
    parts = [instance_calls(ranges, read_host(layout, lo, hi, spans), ops)
             for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    total = pd.concat(parts).groupby("range").sum()
    assert total.loc[0, "host_sync_ns"] == 500 and total.loc[0, "host_launch_ns"] == 10
    assert total.loc[0, "host_os_ns"] == 100 and total.loc[0, "sync_calls"] == 1
    assert 1 not in total.index or total.loc[1, PART_COLUMNS].sum() == 0
