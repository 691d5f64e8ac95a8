"""Reading an export's rows as columns of text (load/rows.py: `columns`, `fetch`): the
same values, types and order as the rows read one tuple at a time, and the row path
where a value does not fit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.load import nsys_sqlite
from analysis.load.export import connect
from analysis.load.rows import SEP, columns, fetch, int_rows

DATA = Path(__file__).parent / "data"

ints = st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1))
texts = st.one_of(st.none(), st.text(alphabet=st.characters(codec="utf-8"), max_size=12))


def _table(rows: list[tuple]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT, c INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return conn


def _by_rows(conn: sqlite3.Connection, sql: str) -> list[list]:
    return [list(c) for c in zip(*conn.execute(sql).fetchall(), strict=True)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(ints, texts, ints), max_size=30))
def test_columns_are_the_rows_read_by_tuple(rows: list[tuple]) -> None:
    conn = _table(rows)
    sql = "SELECT a, b, c FROM t WHERE rowid >= 0"
    got = columns(conn, sql, (), 3, frozenset({1}))
    if any(b is not None and SEP in b for _, b, _ in rows):
        assert got is None                       # read row by row instead
        return
    assert got is not None
    if not rows:
        assert got == []
        return
    want = _by_rows(conn, sql)
    assert got[1] == want[1]                     # text, None where NULL
    for i in (0, 2):
        if None in want[i]:                      # as pandas reads it: float64, NaN
            expect = pd.to_numeric(pd.Series(want[i], dtype=object)).to_numpy()
            assert got[i].dtype == np.float64
            np.testing.assert_array_equal(got[i], expect)
        else:
            assert got[i].dtype == np.int64 and got[i].tolist() == want[i]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(ints, ints), max_size=30))
def test_fetch_is_int_rows_and_raises_on_null_as_they_do(rows: list[tuple]) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
    sql = "SELECT a, b FROM t WHERE a IS NULL OR a > ?"
    picked = [r for r in rows if r[0] is None or r[0] > -5]
    if any(v is None for r in picked for v in r):
        with pytest.raises(TypeError):
            fetch(conn, sql, (-5,), 2)
        return
    got = fetch(conn, sql, (-5,), 2)
    assert got.dtype == np.int64 and got.shape == (len(picked), 2)
    if picked:
        assert (got == int_rows(picked, 2)).all()


def test_values_that_are_not_integers_go_the_row_way() -> None:
    conn = _table([(1, "x", 2), (3, "y", 4)])
    conn.execute("INSERT INTO t VALUES (1.5, 'z', 5)")
    assert columns(conn, "SELECT a, b, c FROM t", (), 3, frozenset({1})) is None
    conn = sqlite3.connect(":memory:")               # a number in the text column
    conn.execute("CREATE TABLE t (a INTEGER, b, c INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, "x", 2), (3, 7, 4)])
    assert columns(conn, "SELECT a, b, c FROM t", (), 3, frozenset({1})) is None


def test_nvtx_ranges_equal_the_tuple_read() -> None:
    """The whole range frame of a 110k-range capture, read both ways."""
    path = DATA / "emit_nvtx_200" / "trace.sqlite"
    conn = connect(path)
    import sqlite_utils
    fast = nsys_sqlite.load_ranges(conn, sqlite_utils.Database(conn), path)
    sql = ("SELECT e.rowid, e.eventType, e.text, e.globalTid, e.start, e.end "
           "FROM NVTX_EVENTS e WHERE e.eventType IN (59, 60, 70, 71)")
    want = _by_rows(conn, sql)
    assert fast["range_id"].tolist() == want[0]
    assert fast["name"].tolist() == want[2]
    assert fast["start_ns"].tolist() == want[4] and fast["end_ns"].tolist() == want[5]
    assert fast["name"].dtype == object and fast["start_ns"].dtype == np.int64
