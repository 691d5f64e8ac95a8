"""The export's ranges read on a thread before the imports (load/prefetch.py): the same
frame, the run's one connection, nothing prefetched for what is not an export."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.load import export, prefetch
from analysis.load.nsys_sqlite import load

DATA = Path(__file__).parent / "data"
TRACE = DATA / "twins" / "input_starved_sampled" / "trace.sqlite"


@pytest.fixture(autouse=True)
def fresh():
    export.close_all()
    yield
    export.close_all()


def test_prefetched_ranges_equal_the_loaders_own(tmp_path: Path) -> None:
    """The ranges frame read through the prefetch equals the one read without it, and the
    prefetched row is taken (not read again)."""
    plain = load(TRACE).ranges
    export.close_all()
    path = tmp_path / "trace.sqlite"
    shutil.copy(TRACE, path)
    assert prefetch.start(path)
    early = prefetch._EARLY[0]
    assert export.shared(path).conn is early.conn
    assert len(early.results) == 2             # read on the thread, not yet taken
    export_ = load(path)
    assert not early.results                   # taken by the loader
    assert export_.ranges.equals(plain)
    assert load(TRACE).op_names is None        # not prefetched: trace/ops.py reads names


def test_one_connection_with_the_prefetch(monkeypatch, tmp_path: Path) -> None:
    """`python -m analysis systems` as run from the shell: the connection opened before
    the imports is the run's only one."""
    from analysis.__main__ import main, prefetch_export

    path = tmp_path / "trace.sqlite"
    shutil.copy(TRACE, path)
    opened, real = [], sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    prefetch_export(["systems", str(path), "-o", str(tmp_path / "out"), "--quiet"])
    assert main(["systems", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    assert len(opened) == 1, opened
    assert json.loads((tmp_path / "out" / "systems.json").read_text())["ranges"]


def test_another_file_closes_the_early_connection(tmp_path: Path) -> None:
    """An early connection to a file the run does not read is closed, not kept beside."""
    other = tmp_path / "other.sqlite"
    shutil.copy(TRACE, other)
    assert prefetch.start(other)
    conn = prefetch._EARLY[0].conn
    assert prefetch.adopt(TRACE) is None
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")


@pytest.mark.parametrize("content", [b"", b"not an export at all"])
def test_not_an_export_prefetches_nothing(tmp_path: Path, content: bytes) -> None:
    """A file that is not SQLite, a missing one or a folder: nothing started, and the
    loader's own error stays the one the user sees."""
    bad = tmp_path / "x.sqlite"
    bad.write_bytes(content)
    assert not prefetch.start(bad)
    assert not prefetch.start(tmp_path / "missing.sqlite")
    assert not prefetch.start(tmp_path)
    assert prefetch.adopt(bad) is None


def test_a_failing_query_leaves_nothing(tmp_path: Path) -> None:
    """An export without NVTX_EVENTS: the thread reads nothing and the loader goes on."""
    path = tmp_path / "bare.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    assert prefetch.start(path)
    assert prefetch.adopt(path) is not None
    assert not prefetch._EARLY[0].results


NAMES = ["aten::linear, seq = 474, op_id = 11, sizes = [[2, 3]]", "aten::add, op_id = 3",
         "AddmmBackward0, seq = 506, op_id = 9, sizes = []",
         "autograd::engine::evaluate_function: AddmmBackward0, op_id = 8",
         "aten::mul, seq = x12, op_id = 4", "step", ", op_id = 1", None, "ünï, seq = 7, op_id = 2"]


def test_ops_read_in_sql_are_the_names_read_in_python() -> None:
    """The op and seq the ranges query reads with SQLite's string functions equal what
    trace/ops.py reads from the names in Python, edge cases included (no seq, a seq that
    is no number, a wrapper, a name with no op before its comma, no name, non-ASCII)."""
    from analysis.load.prefetch import ops_query, ranges_query
    from analysis.trace.ops import _read_names

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE NVTX_EVENTS (eventType INTEGER, text TEXT, domainId INTEGER,"
                 " globalTid INTEGER, start INTEGER, end INTEGER)")
    conn.executemany("INSERT INTO NVTX_EVENTS VALUES (59, ?, 0, 1, ?, ?)",
                     [(n, i, i + 1) for i, n in enumerate(NAMES)])
    sql, params = ranges_query({"text", "eventType", "domainId", "globalTid"})
    got = conn.execute(ops_query(sql), params).fetchall()
    rows, ops, seqs = _read_names([n if isinstance(n, str) else "" for n in NAMES])
    assert [r - 1 for r, _, _ in got] == rows               # range_id: the rowid, from 1
    assert [op for _, op, _ in got] == ops and [s for _, _, s in got] == seqs
    assert seqs == [474, -1, 506, -1, -1, 7]


@pytest.mark.parametrize("name", ["emit_shapes/trace.sqlite", "emit_nvtx_200/trace.sqlite"])
def test_op_ranges_from_the_prefetch_equal_the_names_read_here(tmp_path: Path,
                                                                name: str) -> None:
    """On the committed emit_nvtx captures the op ranges built from the ops the prefetch
    read in SQL equal those read from the names."""
    from analysis.trace.build import keyed
    from analysis.trace.ops import op_ranges

    path = tmp_path / "trace.sqlite"
    shutil.copy(DATA / name, path)
    assert prefetch.start(path)
    export_ = load(path, ops=False)
    assert export_.op_names is not None and len(export_.op_names) == len(export_.ranges)
    ranges, _ = keyed(export_.ranges)
    got = op_ranges(ranges, export_.op_names)
    assert len(got) > 50_000 and got.equals(op_ranges(ranges))
