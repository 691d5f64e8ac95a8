"""Rows of an export's tables read a window at a time: each table in start order (as Nsight
Systems writes it) is searched by rowid, and rows come as integer arrays fetched in slices
(the Python tuples sqlite3 makes never pile up for a whole window)."""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass, field
from itertools import chain

import numpy as np


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
    """Integer rows of a query as an (n, ncols) array, FETCH_ROWS at a time: the Python
    tuples sqlite3 makes (tens of bytes per value) never pile up for a whole window."""
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
