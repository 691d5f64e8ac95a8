"""Rows of an export's tables read a window at a time: each table in start order (as Nsight
Systems writes it) is searched by rowid, and rows come as integer arrays: each column as
one text SQLite joins and numpy parses (no Python object per value), else fetched in
slices (the Python tuples sqlite3 makes never pile up for a whole window)."""

from __future__ import annotations

import bisect
import sqlite3
import warnings
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from . import prefetch
from .prefetch import SEP, concat_query


@dataclass
class Db:
    conn: sqlite3.Connection
    max_rowid: dict[str, int] = field(default_factory=dict)
    probes: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)


def first_rowid(db: Db, table: str, t: int) -> int:
    """Smallest rowid whose start is >= t, by binary search (the table in start order).
    Every probe is remembered: later searches on the same connection start from the
    closest probes around t (a window searches hundreds of nearby times)."""
    if table not in db.max_rowid:
        db.max_rowid[table] = db.conn.execute(
            f"SELECT ifnull(max(rowid), 0) FROM {table}").fetchone()[0]
    rowids, starts = db.probes.setdefault(table, ([], []))
    at = bisect.bisect_left(starts, t)        # probes: rowids and starts, both ascending
    lo = rowids[at - 1] + 1 if at > 0 else 1
    hi = rowids[at] if at < len(rowids) else db.max_rowid[table] + 1
    sql = f"SELECT rowid, start FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"
    while lo < hi:
        mid = (lo + hi) // 2
        row = db.conn.execute(sql, (mid,)).fetchone()
        if row is None or row[1] >= t:
            hi = mid if row is None else min(mid, row[0])
            if row is not None:
                _remember(rowids, starts, row[0], row[1])
        else:
            lo = row[0] + 1
            _remember(rowids, starts, row[0], row[1])
    return lo


def _remember(rowids: list[int], starts: list[int], rowid: int, start: int) -> None:
    """Keep a probe if it keeps both lists ascending (a table not in start order: no)."""
    i = bisect.bisect_left(rowids, rowid)
    if i < len(rowids) and rowids[i] == rowid:
        return
    if (i == 0 or starts[i - 1] <= start) and (i == len(rowids) or start <= starts[i]):
        rowids.insert(i, rowid)
        starts.insert(i, start)


FETCH_ROWS = 32_768


def fetch(conn: sqlite3.Connection, sql: str, params: tuple, ncols: int) -> np.ndarray:
    """Integer rows of a query as an (n, ncols) array: read as columns of text
    (`columns`), else FETCH_ROWS tuples at a time (the Python tuples sqlite3 makes, tens
    of bytes per value, never pile up for a whole window)."""
    got = columns(conn, sql, params, ncols, nulls=False)
    if got is not None:
        return np.column_stack(got) if got else np.empty((0, ncols), dtype=np.int64)
    cur, parts = conn.execute(sql, params), []
    while rows := cur.fetchmany(FETCH_ROWS):
        parts.append(int_rows(rows, ncols))
    return np.concatenate(parts) if parts else np.empty((0, ncols), dtype=np.int64)


def int_rows(rows: list[tuple], ncols: int) -> np.ndarray:
    """Rows of `ncols` integers as an int64 array, read value by value from one flat
    iterator (twice np.array's speed on tuples); NULLs and text raise as np.array does."""
    if len(rows[0]) != ncols:
        raise ValueError(f"rows of {len(rows[0])} values, {ncols} expected")
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=len(rows) * ncols)
    return flat.reshape(len(rows), ncols)


def columns(conn: sqlite3.Connection, sql: str, params: tuple, ncols: int,
            texts: frozenset[int] = frozenset(), nulls: bool = True
            ) -> list[np.ndarray | list] | None:
    """The columns of `sql` (its rows in scan order: no ORDER BY), each read as one text
    that SQLite's group_concat joins in C: integer columns parsed by numpy into int64
    (float64 with NaN where NULLs occur, as pandas reads them), the columns at `texts`
    split into lists of str (None where NULL). On 110k NVTX rows this takes half the time
    of the rows as tuples. [] when there is no row; None when a value does not fit (a
    real or text in an integer column, a number or a text holding SEP in a text column; a
    NULL, unless `nulls`): the caller reads rows."""
    cols = [f"c{i}" for i in range(ncols)]
    query = concat_query(sql, ncols, texts)
    got = prefetch.take(conn, query, params)
    try:
        got = got or conn.execute(query, params).fetchone()
    except (sqlite3.DataError, sqlite3.OperationalError):     # a string too long
        return None
    n, got = got[0], got[1:]
    if got[0]:                                   # a number in a text column
        return None
    if not n:
        return []
    out: list[np.ndarray | list] = []
    if not nulls and any(filled < n for filled in got[1::2]):
        return None
    for i, (filled, text) in enumerate(zip(got[1::2], got[2::2], strict=True)):
        values = text.split(SEP) if i in texts else parse_ints(text)
        if values is None or len(values) != n:
            return None
        if filled < n:
            values = _nulls(conn, sql, params, cols, i, values)
        out.append(values)
    return out


def parse_ints(text: str) -> np.ndarray | None:
    """Comma-separated integers as int64 (numpy's text parser); None when the text is
    not read to its end (numpy warns there, and will raise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning):
            return None


def _nulls(conn: sqlite3.Connection, sql: str, params: tuple, cols: list[str], i: int,
           values: np.ndarray | list) -> np.ndarray | list:
    """Column `i` with its NULLs put back: None in a text list, NaN in a float64 copy of
    an integer column."""
    flags = conn.execute(f"WITH q({','.join(cols)}) AS ({sql}) SELECT group_concat("
                         f"{cols[i]} IS NULL, '') FROM q", params).fetchone()[0]
    null = np.frombuffer(flags.encode(), dtype=np.uint8) == ord("1")
    if isinstance(values, list):
        return [None if x else v for v, x in zip(values, null.tolist(), strict=True)]
    out = values.astype(np.float64)
    out[null] = np.nan
    return out
