"""Rows of an export's tables read a window at a time: each table in start order (as Nsight
Systems writes it) is searched by rowid, and rows come as integer arrays fetched in slices
(the Python tuples sqlite3 makes never pile up for a whole window)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Db:
    conn: sqlite3.Connection
    max_rowid: dict[str, int] = field(default_factory=dict)


def first_rowid(db: Db, table: str, t: int) -> int:
    """Smallest rowid whose start is >= t, by binary search (the table in start order)."""
    if table not in db.max_rowid:
        db.max_rowid[table] = db.conn.execute(
            f"SELECT ifnull(max(rowid), 0) FROM {table}").fetchone()[0]
    lo, hi = 1, db.max_rowid[table] + 1
    sql = f"SELECT start FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"
    while lo < hi:
        mid = (lo + hi) // 2
        row = db.conn.execute(sql, (mid,)).fetchone()
        if row is None or row[0] >= t:
            hi = mid
        else:
            lo = mid + 1
    return lo


FETCH_ROWS = 32_768


def fetch(conn: sqlite3.Connection, sql: str, params: tuple, ncols: int) -> np.ndarray:
    """Integer rows of a query as an (n, ncols) array, FETCH_ROWS at a time: the Python
    tuples sqlite3 makes (tens of bytes per value) never pile up for a whole window."""
    cur, parts = conn.execute(sql, params), []
    while rows := cur.fetchmany(FETCH_ROWS):
        parts.append(np.array(rows, dtype=np.int64).reshape(len(rows), ncols))
    return np.concatenate(parts) if parts else np.empty((0, ncols), dtype=np.int64)
