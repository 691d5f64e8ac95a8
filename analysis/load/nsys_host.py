"""The CPU side of an export: the CUDA API calls (CUPTI_ACTIVITY_KIND_RUNTIME, every
runtime and driver call, not only launches) and the OS runtime calls (OSRT_API, with
`--trace=osrt`) of the threads that opened NVTX ranges, read a time window at a time.

Host facts are per range instance on the range's own thread, so only calls inside a range
of their thread matter: `range_spans(ranges)` gives each thread's *spans* (its range
instances merged where they overlap), and a window reads the API calls that start in the
spans by rowid ranges (at most MAX_READS per window: the spans closest together are read
as one), never the calls between them. On a replayed benchmark trace 9 API rows in 10 lie
outside every range; on a training loop run under ranges nearly all lie inside.

`read_host(layout, lo, hi, spans, ...) -> frame`: the calls that start in [lo, hi) inside
a span (owned), plus, not owned, the calls that only give context: the API call of each
thread that started last before `lo` in the span open at `lo` (an OS call after `lo` may
run inside it), and the calls before `lo` that launched given copies (a blocking copy is
found in the window that owns the copy). Columns: global_tid, start_ns, end_ns, part
(index into HOST_PARTS), owned, span (row of `spans`). OS calls are the outermost ones
(nesting level 0). The API table is read by rowid, trusting the start order Nsight
Systems writes it in; a read whose rows leave its time bounds is done again by start
time (a full scan), as is every read of a file whose tables are not in start order.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..common.errors import InputError
from ..common.intervals import union
from .export import shared, view
from .nsys_meta import CALLS, table_columns
from .prefetch import PUSHPOP, STARTEND
from .rows import Db, fetch, first_rowid

API = "CUPTI_ACTIVITY_KIND_RUNTIME"
OSRT = "OSRT_API"
HOST_PARTS = ("launch", "sync", "memory", "module", "other_cuda", "os")
"""Where a thread's time in traced calls goes: kernel and graph launches; waiting for the
GPU (stream, device and event synchronize, blocking copies and sets); memory management;
loading modules and libraries (lazy loading, JIT, a new plan per shape); other CUDA
calls; OS runtime calls outside CUDA calls (sleep, I/O, poll, locks)."""
PART = {p: i for i, p in enumerate(HOST_PARTS)}
COLUMNS = ["global_tid", "start_ns", "end_ns", "part", "owned", "span"]
MAX_READS = 1024
"""Rowid-range reads of the API table per window (each costs two binary searches, about
as much as reading READ_ROWS rows): more spans are read in groups (the closest first), the
rows between them dropped after reading."""
READ_ROWS = 200
"""API rows read in the time of one rowid-range read's two binary searches: a window
with fewer rows than READ_ROWS per group is read as one range (the 66k-range
record_shapes capture made 1,024 reads of its 22k API rows: 0.1 s, one read 0.01 s)."""
NEAR_ROWS = 4096        # the context call is looked for among this many rows first
NEG, POS = -(1 << 62), 1 << 62
_SYNC = re.compile(r"Synchronize|^cu(da)?Memcpy(?!.*Async)|^cu(da)?Memset(?!.*Async)")
_MODULE = re.compile(r"ModuleLoad|LibraryLoad|ModuleGetFunction|LibraryGetKernel")
_MEMORY = re.compile(r"Malloc|Free|HostAlloc|HostRegister|HostUnregister|MemAlloc|MemFree|"
                     r"MemCreate|MemMap|MemUnmap|MemRelease|MemPool|MemAddress")
_NAME_PARTS: dict[tuple[str, int], dict[int, int]] = {}


@functools.cache
def api_part(name: str) -> int:
    """The part of HOST_PARTS a CUDA API call of this name belongs to (a few dozen names:
    each one's regex searches run once)."""
    base = name.split("_v")[0]
    if "Launch" in base:
        return PART["launch"]
    if _SYNC.search(base):
        return PART["sync"]
    if _MODULE.search(base):
        return PART["module"]
    if _MEMORY.search(base):
        return PART["memory"]
    return PART["other_cuda"]


@dataclass(frozen=True)
class HostLayout:
    """What every window of one file needs to read its host calls."""

    path: Path
    tids: tuple[int, ...]                       # threads that opened NVTX ranges
    osrt: bool
    osrt_nesting: bool
    api_sorted: bool = True                     # API starts sampled in rowid order

    @property
    def tid_list(self) -> str:
        """The range threads as an SQL list, `(t1,t2)`."""
        return f"({','.join(map(str, self.tids))})"


def plan_host(path: Path) -> HostLayout:
    """The range threads and the OS table's columns (no pass over the call tables)."""
    conn = shared(path).conn
    try:
        db = view(conn)
        osrt = table_columns(db, OSRT)
        kinds = ",".join(map(str, PUSHPOP + STARTEND))
        tids = tuple(int(t) for (t,) in conn.execute(
            f"SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE eventType IN ({kinds})")
        ) if "globalTid" in table_columns(db, "NVTX_EVENTS") else ()
        in_order = _sampled_in_order(conn)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    return HostLayout(path=path, tids=tids, osrt={"start", "end", "globalTid"} <= osrt,
                      osrt_nesting="nestingLevel" in osrt, api_sorted=in_order)


SAMPLES = 1024


def _sampled_in_order(conn: sqlite3.Connection) -> bool:
    """Whether SAMPLES rows spread over the API table come in start order (a file whose
    table is not, such as one with another process's calls appended, is read by start
    time: rowid ranges would miss rows)."""
    last = conn.execute(f"SELECT ifnull(max(rowid), 0) FROM {API}").fetchone()[0]
    picks = sorted({1 + i * last // SAMPLES for i in range(SAMPLES)} | {last})
    starts = [s for (s,) in conn.execute(
        f"SELECT start FROM {API} WHERE rowid IN ({','.join(map(str, picks))}) "
        "ORDER BY rowid")]
    return all(a <= b for a, b in zip(starts, starts[1:], strict=False))


def range_spans(ranges: pd.DataFrame) -> np.ndarray:
    """(n, 3) rows (global_tid, lo, hi): per thread, its range instances merged where they
    overlap or touch; sorted by thread, then time. A call lies in a range of its thread
    only if its start lies in one of these."""
    if not len(ranges):
        return np.empty((0, 3), dtype="int64")
    r = ranges.dropna(subset=["global_tid", "start_ns", "end_ns"])
    tid = r["global_tid"].to_numpy(dtype="int64")
    s, e = r["start_ns"].to_numpy(dtype="int64"), r["end_ns"].to_numpy(dtype="int64")
    out = []
    for t in np.unique(tid[tid >= 0]):
        lo, hi = union(s[tid == t], e[tid == t])
        out.append(np.column_stack([np.full(len(lo), t), lo, hi]))
    return np.concatenate(out) if out else np.empty((0, 3), dtype="int64")


def span_of(spans: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The row of `spans` holding time t on thread tid (its lo <= t <= hi), else -1."""
    out = np.full(len(t), -1, dtype="int64")
    if not (len(spans) and len(t)):
        return out
    for th in np.unique(tid):
        mine = np.flatnonzero(tid == th)
        rows = slice(np.searchsorted(spans[:, 0], th, side="left"),
                     np.searchsorted(spans[:, 0], th, side="right"))
        lo, hi = spans[rows, 1], spans[rows, 2]
        i = np.searchsorted(lo, t[mine], side="right") - 1
        ok = (i >= 0) & (t[mine] <= hi[np.maximum(i, 0)])
        out[mine[ok]] = rows.start + i[ok]
    return out


def read_host(layout: HostLayout, lo: int, hi: int, spans: np.ndarray,
              scan: bool = False, launchers: np.ndarray | None = None) -> pd.DataFrame:
    """The host calls of [lo, hi) inside `spans` and their context (see the module doc);
    `scan`: select them by start time (the export's tables are not in start order:
    nsys_chunks.Layout.scan); `launchers`: (global_tid, start) of calls before `lo` that
    launched copies this window owns."""
    if not (layout.tids and len(spans)):
        return _frame(np.empty((0, 4), "int64"), np.empty((0, 3), "int64"),
                      np.empty(0, "int64"), 0, layout, None)
    db = shared(layout.path).rows
    scan = scan or not layout.api_sorted
    try:
        api = _api_rows(db, layout, spans, lo, hi, scan)
        osrt = _osrt_rows(db, layout, lo, hi, spans)
        extra = _context_rows(db, spans, lo, osrt, scan)
        if launchers is not None and len(launchers):
            extra = np.r_[extra, _launcher_rows(db, spans, launchers, scan)]
        rows = np.r_[api, np.unique(extra, axis=0)] if len(extra) else api
        return _frame(rows, osrt, spans, len(api), layout, db)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{layout.path}: cannot read export ({exc})") from exc


def _frame(api: np.ndarray, osrt: np.ndarray, spans: np.ndarray, owned: int,
           layout: HostLayout, db: Db | None) -> pd.DataFrame:
    """The frame of read_host: API rows (the first `owned` owned) and OS rows, sorted by
    (thread, start, end) when OS or context rows are there to place among them."""
    parts = _parts(db, layout.path, api[:, 3]) if db is not None else api[:, 3]
    tid = np.r_[api[:, 0], osrt[:, 0]]
    start = np.r_[api[:, 1], osrt[:, 1]]
    frame = pd.DataFrame({
        "global_tid": tid, "start_ns": start, "end_ns": np.r_[api[:, 2], osrt[:, 2]],
        "part": np.r_[parts, np.full(len(osrt), PART["os"])].astype("int8"),
        "owned": np.r_[np.arange(len(api)) < owned, np.ones(len(osrt), bool)],
        "span": span_of(spans, tid, start) if len(spans) else np.zeros(0, "int64")})
    if len(osrt) or len(api) > owned:
        order = np.lexsort((frame["end_ns"].to_numpy(), frame["start_ns"].to_numpy(),
                            frame["global_tid"].to_numpy()))
        frame = frame.iloc[order].reset_index(drop=True)
    return frame


def _parts(db: Db, path: Path, name_ids: np.ndarray) -> np.ndarray:
    """The part of each API call from its name id: the names this process has not seen
    yet are read from StringIds (a few dozen per file), then one sorted lookup."""
    key = (str(path), Path(path).stat().st_mtime_ns)
    known = _NAME_PARTS.get(key)
    if known is None:
        _NAME_PARTS.clear()                   # the last file's only: memory stays bounded
        known = _NAME_PARTS[key] = {}
    ids = np.unique(name_ids)
    new = [int(i) for i in ids.tolist() if int(i) not in known]
    if new:
        names = dict(db.conn.execute(
            f"SELECT id, value FROM StringIds WHERE id IN ({','.join(map(str, new))})"))
        known.update({i: api_part(str(names.get(i, ""))) for i in new})
    if not len(name_ids):
        return np.zeros(0, dtype="int64")
    table = np.array([known[int(i)] for i in ids.tolist()], dtype="int64")
    return table[np.searchsorted(ids, name_ids)]


def _groups(c0: np.ndarray, c1: np.ndarray) -> list[tuple[int, int]]:
    """[c0, c1) intervals merged where they overlap, then the closest merged until at most
    MAX_READS are left."""
    g0, g1 = union(c0, c1)
    if len(g0) > MAX_READS:
        gaps = g0[1:] - g1[:-1]
        join = np.zeros(len(g0), bool)
        join[1 + np.argpartition(gaps, len(g0) - MAX_READS - 1)[:len(g0) - MAX_READS]] = True
        g0, g1 = g0[~join], g1[np.r_[np.flatnonzero(~join)[1:] - 1, len(g1) - 1]]
    return list(zip(g0.tolist(), g1.tolist(), strict=True))


def _api_rows(db: Db, layout: HostLayout, spans: np.ndarray, lo: int, hi: int,
              scan: bool) -> np.ndarray:
    """globalTid, start, end, nameId of the calls of the range threads that start in
    [lo, hi) inside a span."""
    sql = (f"SELECT globalTid, start, end, nameId FROM {API} WHERE {CALLS} "
           f"AND globalTid IN {layout.tid_list}")
    if scan:
        rows = fetch(db.conn, f"{sql} AND start >= ? AND start < ?", (lo, hi), 4)
    else:
        near = (spans[:, 2] >= lo) & (spans[:, 1] < hi)
        c0 = np.maximum(spans[near, 1], lo)
        c1 = np.minimum(spans[near, 2] + 1, hi)
        rows = np.concatenate([np.empty((0, 4), "int64"), *(
            _rowid_read(db, sql, g0, g1) for g0, g1 in _fewer(db, _groups(c0, c1)))])
    return rows[span_of(spans, rows[:, 0], rows[:, 1]) >= 0]


def _fewer(db: Db, groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`groups`, or the one read from the first's start to the last's end where its rows
    cost less to read than the groups' binary searches (READ_ROWS)."""
    if len(groups) < 2:
        return groups
    t0, t1 = groups[0][0], groups[-1][1]
    r0, r1 = first_rowid(db, API, t0), first_rowid(db, API, t1)
    return [(t0, t1)] if r1 - r0 <= READ_ROWS * len(groups) else groups


def _rowid_read(db: Db, sql: str, t0: int, t1: int) -> np.ndarray:
    """The rows of `sql` (on the API table) that start in [t0, t1): a rowid range, read
    again by start time if the rows are not in start order there."""
    r0 = first_rowid(db, API, t0) if t0 > NEG else 1
    r1 = first_rowid(db, API, t1) if t1 < POS else POS
    rows = fetch(db.conn, f"{sql} AND rowid >= ? AND rowid < ?", (r0, r1), 4)
    s = rows[:, 1]
    if len(s) and (((s < t0) | (s >= t1)).any() or (np.diff(s) < 0).any()):
        return fetch(db.conn, f"{sql} AND start >= ? AND start < ?", (t0, t1), 4)
    return rows


def _osrt_rows(db: Db, layout: HostLayout, lo: int, hi: int,
               spans: np.ndarray) -> np.ndarray:
    """globalTid, start, end of the outermost OS runtime calls that start in [lo, hi)
    inside a span."""
    if not layout.osrt:
        return np.empty((0, 3), dtype=np.int64)
    outer = " AND nestingLevel = 0" if layout.osrt_nesting else ""
    rows = fetch(db.conn, f"SELECT globalTid, start, end FROM {OSRT} WHERE start >= ? "
                 f"AND start < ?{outer} AND globalTid IN {layout.tid_list}", (lo, hi), 3)
    return rows[span_of(spans, rows[:, 0], rows[:, 1]) >= 0]


def _context_rows(db: Db, spans: np.ndarray, lo: int, osrt: np.ndarray,
                  scan: bool) -> np.ndarray:
    """Per thread with OS calls in the span open at `lo`: its API call that started last
    (latest start, then end) in that span before `lo`."""
    out = []
    for tid in np.unique(osrt[:, 0]).tolist() if lo > NEG else []:
        s = span_of(spans, np.array([tid]), np.array([lo - 1]))[0]
        if s < 0 or not (osrt[osrt[:, 0] == tid, 1] <= spans[s, 2]).any():
            continue
        if scan:
            row = db.conn.execute(
                f"SELECT globalTid, start, end, nameId FROM {API} WHERE {CALLS} AND "
                "globalTid = ? AND start >= ? AND start < ? ORDER BY start DESC, end DESC LIMIT 1",
                (tid, int(spans[s, 1]), lo)).fetchone()
        else:
            row = _last_call(db, tid, int(spans[s, 1]), lo)
        if row is not None:
            out.append(row)
    return np.array(out, dtype="int64").reshape(len(out), 4)


def _last_call(db: Db, tid: int, t0: int, t1: int) -> tuple | None:
    """The call of thread tid with the latest (start, end) among those starting in
    [t0, t1), looked for in the NEAR_ROWS rows before t1 first (a table in start order)."""
    r0, r1 = first_rowid(db, API, t0), first_rowid(db, API, t1)
    sql = (f"SELECT globalTid, start, end, nameId FROM {API} WHERE rowid >= ? AND "
           f"rowid < ? AND globalTid = ? AND start >= ? AND {CALLS} "
           "ORDER BY start DESC, end DESC LIMIT 1")
    near = max(r0, r1 - NEAR_ROWS)
    row = db.conn.execute(sql, (near, r1, tid, t0)).fetchone()
    if row is None and near > r0:
        row = db.conn.execute(sql, (r0, near, tid, t0)).fetchone()
    return row


def _launcher_rows(db: Db, spans: np.ndarray, launchers: np.ndarray,
                   scan: bool) -> np.ndarray:
    """The API rows of the given (global_tid, start) calls that lie in a span."""
    inside = launchers[span_of(spans, launchers[:, 0], launchers[:, 1]) >= 0]
    out = []
    for tid, start in inside.tolist():
        sql = (f"SELECT globalTid, start, end, nameId FROM {API} WHERE globalTid = ? "
               f"AND start = ? AND {CALLS}")
        if scan:
            row = db.conn.execute(f"{sql} LIMIT 1", (tid, start)).fetchone()
        else:
            row = db.conn.execute(f"{sql} AND rowid >= ? AND rowid < ? LIMIT 1", (
                tid, start, first_rowid(db, API, start), first_rowid(db, API, start + 1))
            ).fetchone()
        if row is not None:
            out.append(row)
    return np.array(out, dtype="int64").reshape(len(out), 4)


def load_host(path: Path, ranges: pd.DataFrame) -> pd.DataFrame:
    """Every host call of the file inside its ranges (one window over the whole timeline);
    none for an export that is not a file (made in memory)."""
    if not Path(path).is_file():
        return pd.DataFrame({c: pd.Series(dtype=bool if c == "owned" else "int64")
                             for c in COLUMNS})
    return read_host(plan_host(path), NEG, POS, range_spans(ranges))
