"""An export's NVTX ranges read on a thread while the command still imports its libraries.

`python -m analysis systems X.sqlite` spends its first second importing pandas, numpy and
pyarrow with the GIL held, and a 2-core machine's other core idles meanwhile. SQLite lets
the GIL go while it steps a query, so `start(path)`, called before those imports, opens
the run's one connection and runs the ranges query on a thread (the largest single read
of an NVTX-heavy export: a quarter second of SQLite on 66k ranges). `export.shared(path)`
adopts that connection (joining the thread first: nothing else touches it meanwhile), and
`rows.columns` takes the prefetched result when it asks for the same query on it. The
emit_nvtx ops of those ranges are read next (their names parsed by SQLite, off the main
thread); the loader takes them where they were read, and trace/ops.py parses the names
itself otherwise.

Standard library only: this module runs before numpy is imported. Anything unexpected
(not a file, not an export, a failing query) leaves nothing prefetched and the loaders
read, and fail, as they would without it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..common.emit_nvtx import OP_ID, SEQ, WRAPPER

SEP = "\x1f"
"""Between the text values of a column read whole (the ASCII unit separator: no name
holds it; a column that does is read row by row)."""

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite file."""

PUSHPOP = (59, 70)     # NvtxPushPopRange, NvtxtPushPopRange
STARTEND = (60, 71)    # NvtxStartEndRange, NvtxtStartEndRange
RANGE_KINDS = PUSHPOP + STARTEND


def concat_query(sql: str, ncols: int, texts: frozenset[int]) -> str:
    """The query reading `sql`'s columns as one text each (joined by SQLite in C): per
    column its count of non-NULL values and the joined text, after the row count and the
    number of non-text values in the `texts` columns (see rows.columns)."""
    cols = [f"c{i}" for i in range(ncols)]
    parts = [f"count({c}), group_concat(ifnull({c}, ''), '{SEP}')" if i in texts else
             f"count({c}), group_concat(ifnull({c}, 0), ',')" for i, c in enumerate(cols)]
    odd = " + ".join([f"(typeof({cols[i]}) NOT IN ('text', 'null'))" for i in texts] or ["0"])
    return (f"WITH q({','.join(cols)}) AS ({sql}) SELECT count(*), "
            f"total({odd}), {', '.join(parts)} FROM q")


def ranges_query(nvtx_columns: set[str]) -> tuple[str, tuple[int, ...]]:
    """The NVTX range instances' query and its parameters, for an NVTX_EVENTS table of
    these columns: names resolved through StringIds where the export interns them, ranges
    ended on another thread left out (as `nsys stats` does)."""
    interned = "textId" in nvtx_columns
    name = "coalesce(s.value, e.text)" if interned else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if interned else ""
    same_thread = "AND e.endGlobalTid IS NULL" if "endGlobalTid" in nvtx_columns else ""
    marks = ",".join("?" * len(RANGE_KINDS))
    sql = (f"SELECT e.rowid AS range_id, e.eventType AS event_type, {name} AS name, "
           f"e.domainId AS domain_id, e.globalTid AS global_tid, e.start AS start_ns, "
           f"e.end AS end_ns FROM NVTX_EVENTS e {join} "
           f"WHERE e.eventType IN ({marks}) {same_thread}")
    return sql, RANGE_KINDS


RANGE_TEXTS = frozenset({2})
"""The text columns of ranges_query (the name)."""


def ops_query(ranges_sql: str) -> str:
    """The emit_nvtx op ranges among those of `ranges_sql` (same parameters): range_id,
    the op the name starts with (up to its first comma) and its seq (-1 where none),
    read by SQLite's string functions instead of Python's (trace/ops.py reads the same
    from the names where this was not read); a backward node's wrapper is none."""
    at = f"instr(name, '{SEQ}') + {len(SEQ)}"
    return (f"SELECT range_id, substr(name, 1, instr(name, ',') - 1) AS op, "
            f"CASE WHEN instr(name, '{SEQ}') > 0 AND substr(name, {at}, 1) BETWEEN '0' "
            f"AND '9' THEN CAST(substr(name, {at}) AS INTEGER) ELSE -1 END AS seq "
            f"FROM ({ranges_sql}) WHERE instr(name, '{OP_ID}') > 0 "
            f"AND substr(name, 1, {len(WRAPPER)}) != '{WRAPPER}'")


OPS_TEXTS = frozenset({1})
"""The text columns of ops_query (the op)."""


@dataclass
class Early:
    """The connection opened early, its reading thread and what it read."""

    path: str
    pid: int
    conn: sqlite3.Connection
    thread: threading.Thread | None = None
    results: dict[tuple[str, tuple], tuple] = field(default_factory=dict)


_EARLY: list[Early] = []


def start(path: str | Path) -> bool:
    """Open `path` read-only and read its ranges on a thread; False (nothing started)
    when it is not a readable SQLite file."""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        with p.open("rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        resolved = str(p.resolve())
        conn = sqlite3.connect(f"file:{resolved}?mode=ro", uri=True, check_same_thread=False)
    except (OSError, sqlite3.Error):
        return False
    early = Early(resolved, os.getpid(), conn)
    early.thread = threading.Thread(target=_read_ranges, args=(early,), daemon=True,
                                    name="analysis-prefetch")
    _EARLY[:] = [early]
    early.thread.start()
    return True


def _read_ranges(early: Early) -> None:
    """The thread: the ranges query's columns as concat_query reads them."""
    try:
        cols = {row[1] for row in early.conn.execute("PRAGMA table_info(NVTX_EVENTS)")}
        if not cols:
            return
        sql, params = ranges_query(cols)
        for query in (concat_query(sql, 7, RANGE_TEXTS),          # the ranges, then their
                      concat_query(ops_query(sql), 3, OPS_TEXTS)):   # emit_nvtx ops
            early.results[(query, params)] = early.conn.execute(query, params).fetchone()
    except sqlite3.Error:                  # the loader reads it again, and says what failed
        early.results.clear()


def adopt(path: str | Path) -> sqlite3.Connection | None:
    """The connection `start` opened on `path` in this process, its thread finished;
    None when none was (an early connection to another file is closed: one per run)."""
    if not _EARLY or _EARLY[0].pid != os.getpid():
        return None
    early = _EARLY[0]
    if early.thread is not None:
        early.thread.join()
        early.thread = None
    if early.path == str(Path(path).resolve()):
        return early.conn
    early.conn.close()
    _EARLY.clear()
    return None


def take(conn: sqlite3.Connection, query: str, params: tuple) -> tuple | None:
    """The prefetched row of `query` on `conn` (once), else None."""
    if not holds(conn, query, params):
        return None
    return _EARLY[0].results.pop((query, tuple(params)))


def holds(conn: sqlite3.Connection, query: str, params: tuple) -> bool:
    """Whether the row of `query` on `conn` was prefetched (and not yet taken)."""
    return bool(_EARLY) and _EARLY[0].conn is conn and _EARLY[0].thread is None \
        and (query, tuple(params)) in _EARLY[0].results


def forget() -> None:
    """Drop the early reader (tests); the connection stays with whoever adopted it."""
    _EARLY.clear()
