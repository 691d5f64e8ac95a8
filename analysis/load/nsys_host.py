"""The CPU side of an export: the CUDA API calls (CUPTI_ACTIVITY_KIND_RUNTIME, every
runtime and driver call, not only launches) and the OS runtime calls (OSRT_API, with
`--trace=osrt`) of every thread, read a time window at a time.

`plan_host(path) -> HostLayout` reads what every window needs (which call names fall in
which part, the longest API call, whether the tables are in start order);
`read_host(layout, lo, hi) -> frame` gives the calls that start in [lo, hi) (owned) and,
of the API calls, those that started up to the longest call earlier (not owned: they only
tell which OS calls ran inside a CUDA call). Columns: global_tid, start_ns, end_ns,
part (index into HOST_PARTS), owned (bool). OS calls are the outermost ones (nesting
level 0). `load_host(path)` is the whole file as one window.
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
from .nsys_sqlite import _columns, connect
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
    api_sorted: bool
    osrt: bool
    osrt_nesting: bool


def plan_host(path: Path) -> HostLayout:
    """Read the names, the longest API call and the tables' order once per file."""
    conn = connect(path)
    try:
        db = sqlite_utils.Database(conn)
        api = _columns(db, API)
        ids = conn.execute(f"SELECT DISTINCT nameId FROM {API}").fetchall() \
            if "nameId" in api else []
        names = dict(conn.execute("SELECT id, value FROM StringIds").fetchall())
        longest, disorder = conn.execute(
            f"SELECT ifnull(max(end - start), 0), (SELECT count(*) FROM (SELECT start - "
            f"lag(start) OVER (ORDER BY rowid) AS d FROM {API}) WHERE d < 0) FROM {API}"
        ).fetchone()
        osrt = _columns(db, OSRT)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    finally:
        conn.close()
    parts = tuple((int(i), api_part(str(names.get(i, "")))) for (i,) in ids)
    return HostLayout(path=path, api_parts=parts, longest_api_ns=int(longest),
                      api_sorted=disorder == 0,
                      osrt={"start", "end", "globalTid"} <= osrt,
                      osrt_nesting="nestingLevel" in osrt)


def read_host(layout: HostLayout, lo: int, hi: int) -> pd.DataFrame:
    """The host calls of [lo, hi) (see the module doc)."""
    db = Db(connect(layout.path))
    try:
        api = _api_rows(db, layout, lo, hi)
        osrt = _osrt_rows(db, layout, lo, hi)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{layout.path}: cannot read export ({exc})") from exc
    finally:
        db.conn.close()
    lookup = dict(layout.api_parts)
    parts = np.array([lookup.get(int(n), PART["other_cuda"]) for n in api[:, 3]],
                     dtype="int64") if len(api) else np.zeros(0, dtype="int64")
    frame = pd.DataFrame({
        "global_tid": np.r_[api[:, 0], osrt[:, 0]], "start_ns": np.r_[api[:, 1], osrt[:, 1]],
        "end_ns": np.r_[api[:, 2], osrt[:, 2]],
        "part": np.r_[parts, np.full(len(osrt), PART["os"])].astype("int8"),
        "owned": np.r_[api[:, 1] >= lo, np.ones(len(osrt), bool)]})
    return frame.sort_values(["global_tid", "start_ns", "end_ns"], kind="stable",
                             ignore_index=True)


def _api_rows(db: Db, layout: HostLayout, lo: int, hi: int) -> np.ndarray:
    """globalTid, start, end, nameId of the API calls from lo - longest to hi."""
    sql = f"SELECT globalTid, start, end, nameId FROM {API} o"
    first = lo - layout.longest_api_ns if lo > -(1 << 61) else lo
    if not layout.api_sorted:
        return fetch(db.conn, f"{sql} WHERE o.start >= ? AND o.start < ?", (first, hi), 4)
    r0 = first_rowid(db, API, first)
    r1 = first_rowid(db, API, hi) if hi < (1 << 61) else (1 << 62)
    return fetch(db.conn, f"{sql} WHERE o.rowid >= ? AND o.rowid < ?", (r0, r1), 4)


def _osrt_rows(db: Db, layout: HostLayout, lo: int, hi: int) -> np.ndarray:
    """globalTid, start, end of the outermost OS runtime calls that start in [lo, hi)."""
    if not layout.osrt:
        return np.empty((0, 3), dtype=np.int64)
    outer = " AND nestingLevel = 0" if layout.osrt_nesting else ""
    return fetch(db.conn, f"SELECT globalTid, start, end FROM {OSRT} WHERE start >= ? "
                 f"AND start < ?{outer}", (lo, hi), 3)


def load_host(path: Path) -> pd.DataFrame:
    """Every host call of the file (one window over the whole timeline); none for an
    export that is not a file (made in memory)."""
    if not Path(path).is_file():
        return pd.DataFrame({c: pd.Series(dtype=bool if c == "owned" else "int64")
                             for c in COLUMNS})
    return read_host(plan_host(path), -(1 << 62), 1 << 62)
