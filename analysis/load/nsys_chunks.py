"""Reading an export's GPU operations window by window: bounded memory on any trace size.

`plan(path, chunk_rows) -> Layout` cuts the GPU timeline into windows [lo, hi) of about
`chunk_rows` operations each (boundaries taken from the kernel table's start times);
`read_window(layout, i) -> frame` reads window i: the operations that start in it (owned)
plus those that started earlier and still run at `lo` (halo, `halo` True: they count only
in interval unions, never in counts or sums), each with the CUDA API call that launched
it. Columns are those of `nsys_sqlite.load_ops` plus `halo`, `table` (0 kernel, 1 memcpy,
2 memset) and `rowid`; rows come in (table, rowid) order, the order of the whole load.

Nsight Systems writes every activity table in start order, so a window is a rowid range
found by binary search and read through the table's own B-tree. That order is trusted
and checked: the window bounds sampled from the kernel table must come in order (else
`layout.scan` is set from the start), and a window whose rows are not sorted or leave its
time bounds says so (`frame.attrs["sorted_ok"]` False): the caller then reads again with
`layout.scan` set, which selects by start time with a full scan per window (right for
any order, slower).

Launching calls: the correlation ids of the window's operations go into an indexed
temporary table and only matching CUDA API rows are read, first from the API rows that
started up to LOOKBACK_NS before the window's earliest operation, then further back, and
for ids still missing (calls never traced, or an unsorted API table) with a full scan:
every operation gets its call exactly as the whole-trace join gives it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..common.errors import InputError
from .export import shared, view
from .nsys_host import HostLayout, plan_host
from .nsys_meta import CALLS, table_columns
from .nsys_sqlite import (
    CALL_COLUMNS,
    OP_TABLES,
    PID_MASK,
    op_bytes,
    op_columns,
    ops_frame,
)
from .rows import Db, fetch, first_rowid

API = "CUPTI_ACTIVITY_KIND_RUNTIME"
NEG, POS = -(1 << 62), 1 << 62
LOOKBACK_NS = (250_000_000, 2_000_000_000)   # a launch queued this long before its op ran


@dataclass(frozen=True)
class Layout:
    """Where each window's rows are: op tables present (table index -> (name, columns)),
    window bounds, each table's longest operation (bounds the halo), rowid bounds."""

    path: Path
    tables: dict[int, tuple[str, frozenset]]
    bounds: tuple[int, ...]                    # lo of window i is bounds[i], hi bounds[i+1]
    longest_ns: dict[int, int]
    total_rows: int
    scan: bool = False
    launch_names: tuple[int, ...] = ()        # StringIds of API calls that launch GPU work
    host: HostLayout | None = None            # how to read the host calls (nsys_host)

    @property
    def windows(self) -> int:
        return len(self.bounds) - 1

    def rescanned(self) -> Layout:
        return replace(self, scan=True)


def _tables(conn: sqlite3.Connection) -> dict[int, tuple[str, frozenset]]:
    """The op tables the export has: table index -> (name, its columns)."""
    db = view(conn)
    return {i: (t, frozenset(table_columns(db, t))) for i, t in enumerate(OP_TABLES)
            if db[t].exists()}


def _cuts(conn: sqlite3.Connection, n_kern: int, k: int) -> list[int]:
    """Start times at k-1 evenly spaced rowids of the kernel table: the window bounds."""
    cuts = []
    for r in (int(n_kern * j / k) for j in range(1, k)):
        row = conn.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid >= ? "
                           "ORDER BY rowid LIMIT 1", (max(r, 1),)).fetchone()
        if row is not None:
            cuts.append(int(row[0]))
    return cuts


def _launch_names(conn: sqlite3.Connection) -> tuple[int, ...]:
    """StringIds of the CUDA API calls that can launch GPU work (kernel launches, graph
    launches, copies, sets): the first read of a window's calls takes only these."""
    if "nameId" not in table_columns(view(conn), API):
        return ()
    return tuple(i for (i,) in conn.execute(
        "SELECT id FROM StringIds WHERE value LIKE '%Launch%' OR value LIKE '%Memcpy%' "
        "OR value LIKE '%Memset%'"))


def plan(path: Path, chunk_rows: int) -> Layout:
    """Windows of about `chunk_rows` GPU operations each (at least one window)."""
    conn = shared(path).conn
    try:
        tables = _tables(conn)
        sizes = {i: conn.execute(f"SELECT count(*), ifnull(max(end - start), 0) FROM {t}")
                 .fetchone() for i, (t, _) in tables.items()}
        total = sum(n for n, _ in sizes.values())
        k = max(1, -(-total // max(chunk_rows, 1)))
        cuts = _cuts(conn, sizes.get(0, (0, 0))[0], k) if k > 1 else []
        launch = _launch_names(conn)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    return Layout(path=path, tables=tables, bounds=(NEG, *sorted(set(cuts)), POS),
                  longest_ns={i: int(d) for i, (_, d) in sizes.items()}, total_rows=total,
                  scan=cuts != sorted(cuts),          # bounds out of order: scan
                  launch_names=launch, host=plan_host(path))


SLOT = 1 << 34          # two small integers travel as one: (a + 8) * SLOT + (b + 8)
SHIFT = 512             # names: sentinel ids down to -(200 + 77) travel as non-negatives


def _window_sql(table: str, kind: int, cols: frozenset) -> str:
    """The columns of `nsys_sqlite._op_sql` with fewer values per row (each value costs a
    Python object): rowid, names (short and demangled, packed), start, end, correlation
    id, global pid, device and stream (packed); `_unpack` restores them."""
    name, demangled, device, stream = op_columns(kind, cols)
    return (f"SELECT o.rowid, ({name} + {SHIFT}) * {SLOT} + {demangled} + {SHIFT}, o.start, "
            f"o.end, o.correlationId, o.globalPid, ({device} + 8) * {SLOT} + {stream} + 8, "
            f"{op_bytes(kind, cols)} FROM {table} o")


def _unpack(rows: np.ndarray, kind: int) -> np.ndarray:
    """rowid, kind, name id, demangled id, start, end, correlation id, global pid, device,
    stream, bytes: the rows of `_window_sql` unpacked."""
    names, devs = np.divmod(rows[:, 1], SLOT), np.divmod(rows[:, 6], SLOT)
    return np.column_stack([rows[:, 0], np.full(len(rows), kind), names[0] - SHIFT,
                            names[1] - SHIFT, rows[:, 2:6], devs[0] - 8, devs[1] - 8,
                            rows[:, 7]])


def _table_rows(db: Db, layout: Layout, i: int, lo: int, hi: int) -> tuple[np.ndarray, bool]:
    """Owned and halo rows of one op table in [lo, hi) in rowid order (see `_unpack`, plus
    a halo flag) and whether the start order held."""
    name, cols = layout.tables[i]
    base = _window_sql(name, i, cols)
    if layout.scan:
        owned = fetch(db.conn, f"{base} WHERE o.start >= ? AND o.start < ?", (lo, hi), 8)
        halo = fetch(db.conn, f"{base} WHERE o.start < ? AND o.end > ?", (lo, lo), 8)
        ok = True
    else:
        r0 = first_rowid(db, name, lo) if lo > NEG else 1
        r1 = first_rowid(db, name, hi) if hi < POS else (1 << 62)
        owned = fetch(db.conn, f"{base} WHERE o.rowid >= ? AND o.rowid < ?", (r0, r1), 8)
        h0 = first_rowid(db, name, lo - layout.longest_ns[i]) if lo > NEG else r0
        halo = fetch(db.conn, f"{base} WHERE o.rowid >= ? AND o.rowid < ? AND o.end > ?",
                      (h0, r0, lo), 8)
        s = owned[:, 2]
        ok = bool(((s >= lo) & (s < hi)).all() and (np.diff(s) >= 0).all()
                  and (halo[:, 2] < lo).all())
    rows = np.concatenate([halo, owned])
    flag = np.r_[np.ones(len(halo), bool), np.zeros(len(owned), bool)]
    if layout.scan:                     # halo rows may follow owned ones in the table
        order = np.argsort(rows[:, 0], kind="stable")
        rows, flag = rows[order], flag[order]
    return np.column_stack([_unpack(rows, i), flag]), ok


def _launch_rows(db: Db, layout: Layout, earliest: int, hi_row: int) -> np.ndarray:
    """API rows of launching calls (by name) that started from `earliest` to the window's
    end: most of the window's calls, read without a list of ids."""
    if not layout.launch_names or layout.scan:
        return np.empty((0, 5), dtype=np.int64)
    marks = ",".join("?" * len(layout.launch_names))
    return fetch(db.conn, f"SELECT correlationId, globalTid, start, end, rowid FROM {API} "
                  f"WHERE rowid >= ? AND rowid < ? AND nameId IN ({marks}) AND {CALLS}",
                  (first_rowid(db, API, earliest), hi_row, *layout.launch_names), 5)


def _matched(want: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Which wanted (correlation id, process) pairs `rows` (API rows) hold."""
    corr, pid = want["correlation_id"].to_numpy(), want["global_pid"].to_numpy()
    got_pid = rows[:, 1] & PID_MASK
    out = np.zeros(len(want), dtype=bool)
    for p in np.unique(got_pid):                     # a few processes at most
        mine = pid == p
        out[mine] = _member(corr[mine], rows[got_pid == p, 0])
    return out


def _member(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """np.isin(values, pool) by one sort of `pool` and a binary search (np.isin sorted
    both together, 0.09 s for two windows' 200k correlation ids spread too wide for its
    lookup table)."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    s = np.sort(pool)
    return s[np.minimum(np.searchsorted(s, values), len(s) - 1)] == values


def _calls(db: Db, layout: Layout, ops: pd.DataFrame) -> pd.DataFrame:
    """The launching call (global_tid, api_start_ns, api_end_ns) of each op, -1 if none."""
    want = pd.DataFrame({"correlation_id": ops["correlation_id"].to_numpy(),
                         "global_pid": ops["global_pid"].to_numpy()})
    conn = db.conn
    hi_row = first_rowid(db, API, int(ops["start_ns"].max()) + 1) if len(ops) else 1
    earliest = int(ops["start_ns"].min()) if len(ops) else 0
    found = [_launch_rows(db, layout, earliest, hi_row)]
    matched = _matched(want, found[0])
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS want_ids (id INTEGER)")
    conn.execute("CREATE INDEX IF NOT EXISTS temp.want_ids_id ON want_ids (id)")
    sql = (f"SELECT correlationId, globalTid, start, end, rowid FROM {API} "
           f"WHERE correlationId IN (SELECT id FROM temp.want_ids) AND {CALLS}")
    for step in (*LOOKBACK_NS, None):
        missing = np.unique(want["correlation_id"].to_numpy()[~matched])
        if not len(missing):
            break
        conn.execute("DELETE FROM temp.want_ids")
        conn.executemany("INSERT INTO temp.want_ids VALUES (?)", ((int(c),) for c in missing))
        if step is None or layout.scan:
            rows = fetch(conn, sql, (), 5)
        else:
            lo_row = first_rowid(db, API, earliest - step)
            rows = fetch(conn, f"{sql} AND rowid >= ? AND rowid < ?", (lo_row, hi_row), 5)
            hi_row = lo_row
        found.append(rows)
        matched |= _matched(want, rows)
        if step is None or layout.scan:
            break
    api = pd.DataFrame(np.concatenate(found), columns=[
        "correlation_id", "global_tid", "api_start_ns", "api_end_ns", "rowid"]).sort_values(
        "rowid", kind="stable")
    api["global_pid"] = api["global_tid"] & PID_MASK
    api = api.drop_duplicates(["correlation_id", "global_pid"])
    out = want.merge(api, how="left", on=["correlation_id", "global_pid"])
    return out[CALL_COLUMNS].fillna(-1).astype("int64")


def read_window(layout: Layout, index: int) -> pd.DataFrame:
    """Window `index`'s operations (owned and halo) with their launching calls; the frame's
    attrs["sorted_ok"] says whether the tables' start order held (see the module doc)."""
    lo, hi = layout.bounds[index], layout.bounds[index + 1]
    reader = shared(layout.path)
    db = reader.rows
    try:
        parts, ok = [], True
        for i in sorted(layout.tables):
            rows, good = _table_rows(db, layout, i, lo, hi)
            parts.append(rows)
            ok &= good
        raw = np.concatenate(parts) if parts else np.empty((0, 12), dtype=np.int64)
        df = ops_frame(raw[:, 1:11], reader.strings())      # once per process and file
        df["halo"] = raw[:, 11].astype(bool)
        df["table"], df["rowid"] = raw[:, 1], raw[:, 0]
        calls = _calls(db, layout, df)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{layout.path}: cannot read export ({exc})") from exc
    out = pd.concat([df, calls], axis=1)
    out.attrs["sorted_ok"] = ok
    return out

