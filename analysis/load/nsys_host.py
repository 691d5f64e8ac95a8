"""The CPU side of an export: the CUDA API calls (CUPTI_ACTIVITY_KIND_RUNTIME, every
runtime and driver call, not only launches) and the OS runtime calls (OSRT_API, with
`--trace=osrt`) of every thread, read a time window at a time.

`plan_host(path) -> HostLayout` reads what every window needs (which call names fall in
which part, the longest API call: one pass over the API table);
`read_host(layout, lo, hi) -> frame` gives the calls that start in [lo, hi) (owned) and,
of the API calls, those that started up to the longest call earlier (not owned: they only
tell which OS calls ran inside a CUDA call). Columns: global_tid, start_ns, end_ns,
part (index into HOST_PARTS), owned (bool). OS calls are the outermost ones (nesting
level 0). `load_host(path)` is the whole file as one window. The API table is read by
rowid, trusting the start order Nsight Systems writes it in; a window whose rows leave its
time bounds is read again by start time (a full scan).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import sqlite_utils

from ..errors import InputError
from .nsys_sqlite import PUSHPOP, STARTEND, _columns, connect
from .rows import Db, fetch, first_rowid

API = "CUPTI_ACTIVITY_KIND_RUNTIME"
OSRT = "OSRT_API"
HOST_PARTS = ("launch", "sync", "memory", "module", "other_cuda", "os")
"""Where a thread's time in traced calls goes: kernel and graph launches; waiting for the
GPU (stream, device and event synchronize, blocking copies and sets); memory management;
loading modules and libraries (lazy loading, JIT, a new plan per shape); other CUDA
calls; OS runtime calls outside CUDA calls (sleep, I/O, poll, locks)."""
PART = {p: i for i, p in enumerate(HOST_PARTS)}
COLUMNS = ["global_tid", "start_ns", "end_ns", "part", "owned"]
_SYNC = re.compile(r"Synchronize|^cu(da)?Memcpy(?!.*Async)|^cu(da)?Memset(?!.*Async)")
_MODULE = re.compile(r"ModuleLoad|LibraryLoad|ModuleGetFunction|LibraryGetKernel")
_MEMORY = re.compile(r"Malloc|Free|HostAlloc|HostRegister|HostUnregister|MemAlloc|MemFree|"
                     r"MemCreate|MemMap|MemUnmap|MemRelease|MemPool|MemAddress")


def api_part(name: str) -> int:
    """The part of HOST_PARTS a CUDA API call of this name belongs to."""
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
    api_parts: tuple[tuple[int, int], ...]      # (StringIds id, part) of the API names
    longest_api_ns: int
    tids: tuple[int, ...]                       # threads that opened NVTX ranges
    osrt: bool
    osrt_nesting: bool

    @property
    def tid_list(self) -> str:
        """The range threads as an SQL list, `(t1,t2)`."""
        return f"({','.join(map(str, self.tids))})"


def plan_host(path: Path) -> HostLayout:
    """Read the names, the longest API call and the tables' order once per file."""
    conn = connect(path)
    try:
        db = sqlite_utils.Database(conn)
        per_name = conn.execute(f"SELECT nameId, max(end - start) FROM {API} "
                                "GROUP BY nameId").fetchall()      # one pass: names, longest
        names = dict(conn.execute("SELECT id, value FROM StringIds").fetchall())
        osrt = _columns(db, OSRT)
        kinds = ",".join(map(str, PUSHPOP + STARTEND))
        tids = tuple(int(t) for (t,) in conn.execute(
            f"SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE eventType IN ({kinds})")
        ) if "globalTid" in _columns(db, "NVTX_EVENTS") else ()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    finally:
        conn.close()
    parts = tuple((int(i), api_part(str(names.get(i, "")))) for i, _ in per_name
                  if i is not None)
    return HostLayout(path=path, api_parts=parts, tids=tids,
                      longest_api_ns=int(max((d or 0 for _, d in per_name), default=0)),
                      osrt={"start", "end", "globalTid"} <= osrt,
                      osrt_nesting="nestingLevel" in osrt)


def read_host(layout: HostLayout, lo: int, hi: int, scan: bool = False) -> pd.DataFrame:
    """The host calls of [lo, hi) (see the module doc); `scan`: select them by start time
    (the export's tables are not in start order: nsys_chunks.Layout.scan)."""
    db = Db(connect(layout.path))
    try:
        api = _api_rows(db, layout, lo, hi, scan)
        osrt = _osrt_rows(db, layout, lo, hi)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{layout.path}: cannot read export ({exc})") from exc
    finally:
        db.conn.close()
    parts = _parts(layout, api[:, 3])
    frame = pd.DataFrame({
        "global_tid": np.r_[api[:, 0], osrt[:, 0]], "start_ns": np.r_[api[:, 1], osrt[:, 1]],
        "end_ns": np.r_[api[:, 2], osrt[:, 2]],
        "part": np.r_[parts, np.full(len(osrt), PART["os"])].astype("int8"),
        "owned": np.r_[api[:, 1] >= lo, np.ones(len(osrt), bool)]})
    if not len(osrt):
        return frame        # API rows come in start order; no OS call to place among them
    order = np.lexsort((frame["end_ns"].to_numpy(), frame["start_ns"].to_numpy(),
                        frame["global_tid"].to_numpy()))
    return frame.iloc[order].reset_index(drop=True)


def _parts(layout: HostLayout, name_ids: np.ndarray) -> np.ndarray:
    """The part of each API call from its name id (a sorted lookup, no loop per row)."""
    if not len(name_ids) or not layout.api_parts:
        return np.full(len(name_ids), PART["other_cuda"], dtype="int64")
    ids = np.array([i for i, _ in layout.api_parts], dtype="int64")
    parts = np.array([p for _, p in layout.api_parts], dtype="int64")
    order = np.argsort(ids)
    ids, parts = ids[order], parts[order]
    at = np.clip(np.searchsorted(ids, name_ids), 0, len(ids) - 1)
    return np.where(ids[at] == name_ids, parts[at], PART["other_cuda"])


def _api_rows(db: Db, layout: HostLayout, lo: int, hi: int, scan: bool) -> np.ndarray:
    """globalTid, start, end, nameId of the API calls from lo - longest to hi, on the
    threads that opened ranges (a range's host split is its own thread's)."""
    if not layout.tids:
        return np.empty((0, 4), dtype=np.int64)
    mine = f"o.globalTid IN {layout.tid_list}"
    sql = f"SELECT globalTid, start, end, nameId FROM {API} o WHERE {mine}"
    first = lo - layout.longest_api_ns if lo > -(1 << 61) else lo
    if lo <= -(1 << 61) and hi >= (1 << 61):                 # the whole table: no search
        return fetch(db.conn, sql, (), 4)
    if scan:
        return fetch(db.conn, f"{sql} AND o.start >= ? AND o.start < ?", (first, hi), 4)
    r0 = first_rowid(db, API, first)
    r1 = first_rowid(db, API, hi) if hi < (1 << 61) else (1 << 62)
    rows = fetch(db.conn, f"{sql} AND o.rowid >= ? AND o.rowid < ?", (r0, r1), 4)
    s = rows[:, 1]
    if len(s) and (((s < first) | (s >= hi)).any() or (np.diff(s) < 0).any()):
        # not in start order after all: rows of the window may lie elsewhere in the table
        return fetch(db.conn, f"{sql} AND o.start >= ? AND o.start < ?", (first, hi), 4)
    return rows


def _osrt_rows(db: Db, layout: HostLayout, lo: int, hi: int) -> np.ndarray:
    """globalTid, start, end of the outermost OS runtime calls that start in [lo, hi)."""
    if not (layout.osrt and layout.tids):
        return np.empty((0, 3), dtype=np.int64)
    outer = " AND nestingLevel = 0" if layout.osrt_nesting else ""
    mine = f" AND globalTid IN {layout.tid_list}"
    return fetch(db.conn, f"SELECT globalTid, start, end FROM {OSRT} WHERE start >= ? "
                 f"AND start < ?{outer}{mine}", (lo, hi), 3)


def load_host(path: Path) -> pd.DataFrame:
    """Every host call of the file (one window over the whole timeline); none for an
    export that is not a file (made in memory)."""
    if not Path(path).is_file():
        return pd.DataFrame({c: pd.Series(dtype=bool if c == "owned" else "int64")
                             for c in COLUMNS})
    return read_host(plan_host(path), -(1 << 62), 1 << 62)
