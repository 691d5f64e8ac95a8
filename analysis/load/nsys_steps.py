"""What one step of a loop holds, for the timeline model (analysis/timeline/): every CUDA
call and OS runtime call of the step's process in the step's time window, on any thread,
the GPU operations running in it, and the synchronization records of its blocking calls.

`read_steps(path, windows) -> [StepRows]`, one per window (global pid, lo, hi): a handful
of windows per loop (analysis/loops/model.py picks them), each read by rowid ranges
found by binary search (the tables are in start order, as Nsight Systems writes them;
a read whose rows leave its bounds is done again by start time, a full scan).

Frames (times in ns, on the trace's clock):
    calls  tid, start_ns, end_ns, corr, name, part (index into nsys_host.HOST_PARTS);
           binding where the capture took CUDA backtraces (nsys_backtraces)
    ops    kind (0 kernel, 1 copy, 2 set), start_ns, end_ns, corr, device, stream, bytes,
           copy_kind (CUDA_MEMCPY_KIND: 1 host to device, 2 device to host, ...),
           pageable (from or to pageable host memory), name (kernels)
    syncs  corr, stream, event, type (CUPTI's sync type: 1 event, 2 stream wait or
           stream, 3 stream, 4 context), start_ns, end_ns
    osrt   tid, start_ns, end_ns, name (the outermost OS calls running in the window)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..common.errors import InputError
from .export import shared, view
from .nsys_backtraces import bindings
from .nsys_host import api_part
from .nsys_meta import CALLS, table_columns
from .nsys_sqlite import OP_TABLES, PID_MASK
from .rows import Db, fetch, first_rowid

API = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
OSRT = "OSRT_API"
LOOKBACK_NS = 50_000_000
"""GPU operations that started up to this long before a window and still run in it are
read too (a sync at the step's start waits for them)."""


@dataclass
class StepRows:
    """One window's rows (see the module doc)."""

    pid: int
    lo: int
    hi: int
    calls: pd.DataFrame
    ops: pd.DataFrame
    syncs: pd.DataFrame
    osrt: pd.DataFrame


def _rows(db: Db, table: str, select: str, lo: int, hi: int, ncols: int,
          where: str = "", params: tuple = ()) -> np.ndarray:
    """Rows of `table` (aliased t; its start selected first) that start in [lo, hi) and
    meet `where`, by rowid range; by start time when the rows read leave the bounds."""
    cond = f" AND {where}" if where else ""
    r0, r1 = first_rowid(db, table, lo), first_rowid(db, table, hi)
    rows = fetch(db.conn, f"{select} WHERE t.rowid >= ? AND t.rowid < ?{cond}",
                 (r0, r1, *params), ncols)
    s = rows[:, 0]
    if len(s) and not ((s >= lo) & (s < hi)).all():
        rows = fetch(db.conn, f"{select} WHERE t.start >= ? AND t.start < ?{cond}",
                     (lo, hi, *params), ncols)
    return rows


def _names(conn: sqlite3.Connection, ids: np.ndarray) -> dict[int, str]:
    uniq = np.unique(ids).tolist()
    if not uniq:
        return {}
    return dict(conn.execute(f"SELECT id, value FROM StringIds WHERE id IN "
                             f"({','.join(map(str, uniq))})").fetchall())


def _calls(db: Db, pid: int, lo: int, hi: int,
           frames: dict[tuple[int, int], str]) -> pd.DataFrame:
    """The window's calls; with `frames` (nsys_backtraces.bindings), each call's Python
    binding too ("" where its backtrace was not taken)."""
    rows = _rows(db, API, f"SELECT t.start, t.end, t.globalTid, t.correlationId, t.nameId "
                 f"FROM {API} t", lo, hi, 5, f"(t.globalTid & ?) = ? AND t.{CALLS}",
                 (int(PID_MASK), pid))
    names = _names(db.conn, rows[:, 4])
    name = [names.get(i, "") for i in rows[:, 4].tolist()]
    out = pd.DataFrame({"tid": rows[:, 2], "start_ns": rows[:, 0], "end_ns": rows[:, 1],
                        "corr": rows[:, 3], "name": pd.Series(name, dtype=object),
                        "part": np.array([api_part(n) for n in name], dtype="int64")})
    if frames:
        out["binding"] = pd.Series([frames.get((pid, c), "") for c in rows[:, 3].tolist()],
                                   dtype=object)
    return out


OP_COLUMNS = ["kind", "start_ns", "end_ns", "corr", "device", "stream", "bytes", "copy_kind",
              "pageable", "grid", "name_id", "demangled_id"]


def _op_select(kind: int, cols: set[str]) -> str:
    """The columns of one operation table, in OP_COLUMNS order after `kind` (bytes, copy
    kind, pageable, name id: -1 where the table has none; grid: a kernel's launch
    configuration as one number, its blocks x 1024 + threads per block, 0 for the rest)."""
    size = "ifnull(t.bytes, 0)" if "bytes" in cols else "0"
    copy = "ifnull(t.copyKind, 0)" if "copyKind" in cols else "0"
    pageable = ("(ifnull(t.srcKind, 7) = 0 OR ifnull(t.dstKind, 7) = 0)"
                if {"srcKind", "dstKind"} <= cols else "0")
    name = ("ifnull(t.shortName, -1)" if "shortName" in cols else
            "ifnull(t.demangledName, -1)" if "demangledName" in cols else "-1")
    demangled = "ifnull(t.demangledName, -1)" if "demangledName" in cols else "-1"
    grid = ("(t.gridX * t.gridY * t.gridZ) * 1024 + t.blockX * t.blockY * t.blockZ"
            if {"gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"} <= cols else "0")
    return (f"SELECT t.start, t.end, t.correlationId, t.deviceId, t.streamId, {size}, {copy}, "
            f"{pageable}, ifnull({grid}, 0), {name}, {demangled} FROM {OP_TABLES[kind]} t")


def _ops(db: Db, tables: dict[str, set[str]], pid: int, lo: int, hi: int) -> pd.DataFrame:
    parts = []
    for kind, table in enumerate(OP_TABLES):
        if table not in tables:
            continue
        rows = _rows(db, table, _op_select(kind, tables[table]), lo - LOOKBACK_NS, hi, 11,
                     "t.globalPid = ? AND t.end > ?", (pid, lo))
        parts.append(np.column_stack([np.full(len(rows), kind), rows]))
    raw = np.concatenate(parts) if parts else np.empty((0, len(OP_COLUMNS)), dtype=np.int64)
    raw = raw[np.lexsort((raw[:, 1], raw[:, 2]))] if len(raw) else raw
    frame = pd.DataFrame(raw, columns=OP_COLUMNS)
    kernel = raw[:, 0] == 0
    names = _names(db.conn, raw[kernel][:, -2:].ravel())
    for col, at in (("name", -2), ("demangled", -1)):   # kernels' names, "" for the rest
        frame[col] = pd.Series([names.get(i, "") if k == 0 else "" for k, i in
                                zip(raw[:, 0].tolist(), raw[:, at].tolist(), strict=True)],
                               dtype=object)
    return frame.drop(columns=["name_id", "demangled_id"])


def _syncs(db: Db, cols: set[str], pid: int, lo: int, hi: int) -> pd.DataFrame:
    names = ["corr", "stream", "event", "type", "start_ns", "end_ns"]
    if not {"correlationId", "streamId", "syncType", "globalPid"} <= cols:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in names})
    event = "t.eventId" if "eventId" in cols else "-1"
    rows = _rows(db, SYNC, f"SELECT t.start, t.end, t.correlationId, t.streamId, "
                 f"ifnull({event}, -1), ifnull(t.syncType, 0) FROM {SYNC} t", lo, hi, 6,
                 "t.globalPid = ?", (pid,))
    return pd.DataFrame({"corr": rows[:, 2], "stream": rows[:, 3], "event": rows[:, 4],
                         "type": rows[:, 5], "start_ns": rows[:, 0], "end_ns": rows[:, 1]})


OSRT_NAMES = ["tid", "start_ns", "end_ns", "name"]


def _osrt_all(db: Db, cols: set[str], windows: list[tuple[int, int, int]]) -> pd.DataFrame:
    """The outermost OS calls of the windows' processes that run in any window, read in
    one pass by start time (Nsight Systems appends calls still running when the capture
    ended, out of start order: no rowid range holds them), sorted by start."""
    if not windows or not {"start", "end", "globalTid", "nameId"} <= cols:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "int64")
                             for c in [*OSRT_NAMES, "pid"]})
    level = " AND t.nestingLevel = 0" if "nestingLevel" in cols else ""
    pids = sorted({w[0] for w in windows})
    lo = min(w[1] - _lookback(w) for w in windows)
    hi = max(w[2] for w in windows)
    rows = fetch(db.conn, f"SELECT t.start, t.end, t.globalTid, t.nameId FROM {OSRT} t "
                 f"WHERE t.start < ? AND t.end > ?{level} AND (t.globalTid & ?) IN "
                 f"({','.join(map(str, pids))})", (hi, lo, int(PID_MASK)), 4)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    ids = _names(db.conn, rows[:, 3])
    return pd.DataFrame({"tid": rows[:, 2], "start_ns": rows[:, 0], "end_ns": rows[:, 1],
                         "name": pd.Series([ids.get(i, "") for i in rows[:, 3].tolist()],
                                           dtype=object),
                         "pid": rows[:, 2] & PID_MASK})


def _lookback(window: tuple[int, int, int]) -> int:
    """How long before a window an OS call running in it may have started (a thread that
    waited since the step before)."""
    return 2 * (window[2] - window[1]) + LOOKBACK_NS


def _osrt(every: pd.DataFrame, pid: int, lo: int, hi: int) -> pd.DataFrame:
    """The OS calls of a process running in [lo, hi) (from _osrt_all)."""
    a, b = np.searchsorted(every["start_ns"].to_numpy(), [lo - _lookback((pid, lo, hi)), hi])
    keep = a + np.flatnonzero((every["pid"].to_numpy()[a:b] == pid)
                              & (every["end_ns"].to_numpy()[a:b] > lo))
    return every.take(keep).drop(columns="pid").reset_index(drop=True)


def read_steps(path: Path, windows: list[tuple[int, int, int]],
               ops_until: list[int] | None = None, groups: list[int] | None = None,
               budget: int | None = None) -> list[StepRows | None]:
    """The rows of each window (global pid, lo, hi) of an export; `ops_until`: per window,
    how late the GPU operations it launched may start (a step queued ahead of the GPU:
    its own work runs after its end), else its end. A window inside another (a step's
    forward inside the step) is cut from the other's rows, not read again. With `groups`
    (a label per window, each group's windows in the order they are wanted) and `budget`:
    a group's windows are read while the CUDA calls they hold (counted by rowid, all
    threads) stay within it, the first one too only if it fits; the rest are None."""
    ops_until = ops_until or [w[2] for w in windows]
    conn = shared(path).conn
    try:
        meta = view(conn)
        tables = {t: cols for t in (*OP_TABLES, API, SYNC, OSRT)
                  if (cols := table_columns(meta, t))}
        if API not in tables:
            return []
        sync_cols, osrt_cols = tables.get(SYNC, set()), tables.get(OSRT, set())
        db = Db(conn)
        frames = bindings(path)
        wanted = _within_budget(db, windows, groups, budget)
        every = _osrt_all(db, osrt_cols, [w for w, ok in zip(windows, wanted, strict=True)
                                          if ok])
        out: list[StepRows | None] = [None] * len(windows)
        for i, host in _hosts(windows, ops_until, wanted):
            pid, lo, hi = windows[i]
            until = max(hi, ops_until[i])
            if host is None:
                out[i] = StepRows(pid, lo, hi, _calls(db, pid, lo, hi, frames),
                                  _ops(db, tables, pid, lo, until),
                                  _syncs(db, sync_cols, pid, lo, hi), _osrt(every, pid, lo, hi))
            else:
                out[i] = _cut(out[host], lo, hi, until, _osrt(every, pid, lo, hi))
        return out
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc


def _within_budget(db: Db, windows: list[tuple[int, int, int]], groups: list[int] | None,
                   budget: int | None) -> list[bool]:
    """Which windows are read: each group's, in order, while its calls fit `budget`. A
    window inside a kept window of another group is cut from its rows: it costs nothing
    and is not counted (no search)."""
    if groups is None or budget is None:
        return [True] * len(windows)
    inside = _container(windows)
    spent: dict[int, int] = {}
    out = [False] * len(windows)
    for i in sorted(range(len(windows)), key=lambda i: inside[i] is not None):
        (_, lo, hi), group = windows[i], groups[i]
        host = inside[i]
        calls = 0 if host is not None and out[host] and groups[host] != group else \
            first_rowid(db, API, hi) - first_rowid(db, API, lo)
        out[i] = spent.get(group, 0) + calls <= budget
        spent[group] = spent.get(group, 0) + (calls if out[i] else budget)   # then no more
    return out


def _container(windows: list[tuple[int, int, int]]) -> list[int | None]:
    """Each window's outermost window that holds it (same process), else None."""
    out: list[int | None] = [None] * len(windows)
    for i, host in _holders(windows, range(len(windows))):
        out[i] = host
    return out


def _hosts(windows: list[tuple[int, int, int]], ops_until: list[int], wanted: list[bool]
           ) -> list[tuple[int, int | None]]:
    """Each wanted window with the earlier-read window that holds all it reads (same
    process, its time span and GPU operations' reach inside), or None: outer first."""
    reach = [max(w[2], u) for w, u in zip(windows, ops_until, strict=True)]
    return _holders(windows, [i for i in range(len(windows)) if wanted[i]], reach)


def _holders(windows: list[tuple[int, int, int]], among: Iterable[int],
             reach: list[int] | None = None) -> list[tuple[int, int | None]]:
    """The windows `among`, outer first (by process, start, longest), each with the
    outermost earlier one that holds it (same process, ending no later and, with `reach`,
    reaching no further), else None."""
    order = sorted(among, key=lambda i: (windows[i][0], windows[i][1], -windows[i][2]))
    out: list[tuple[int, int | None]] = []
    host: int | None = None
    for i in order:
        pid, _, hi = windows[i]
        fits = host is not None and windows[host][0] == pid and hi <= windows[host][2] \
            and (reach is None or reach[i] <= reach[host])
        out.append((i, host if fits else None))
        if not fits:
            host = i
    return out


def _cut(rows: StepRows, lo: int, hi: int, until: int, osrt: pd.DataFrame) -> StepRows:
    """The rows of window [lo, hi) (operations starting before `until`) from a window
    that holds it, as read_steps would read them."""
    def starting(frame: pd.DataFrame, a: int, b: int) -> pd.DataFrame:
        t = frame["start_ns"].to_numpy()
        return frame[(t >= a) & (t < b)].reset_index(drop=True)

    ops = starting(rows.ops, lo - LOOKBACK_NS, until)
    return StepRows(rows.pid, lo, hi, starting(rows.calls, lo, hi),
                    ops[ops["end_ns"].to_numpy() > lo].reset_index(drop=True),
                    starting(rows.syncs, lo, hi), osrt)
