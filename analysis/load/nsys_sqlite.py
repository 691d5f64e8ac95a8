"""Loader for Nsight Systems SQLite exports (`nsys export --type=sqlite`).

`load(path) -> NsysExport` opens the file read-only, checks the tables it needs and
returns typed frames. Columns (units in names):

ranges  one row per NVTX range instance, push/pop and start/end alike, as `nsys stats`
        takes them (ranges ended on another thread are left out, as there):
        range_id (NVTX_EVENTS rowid), style ("PushPop"|"StartEnd"), name, domain (str or
        None), global_tid, start_ns, end_ns (an unclosed range ends at the last NVTX
        timestamp, as in `nsys stats`)
ops     one row per GPU operation (RangeIndex = row position): kind ("kernel"|"memcpy"|
        "memset", categorical), name (kernel base name, "[CUDA memcpy Host-to-Device]" and
        the like as nsys stats names copies, or "[CUDA memset]", categorical),
        demangled_name (categorical; for a copy its memory kinds, "Pageable -> Device"),
        start_ns, end_ns, duration_ns, correlation_id, global_pid, device_id, stream_id
        (-1 where the export has none), bytes (copies and sets; 0 for kernels),
        and from the CUDA API call that launched it (joined
        by correlationId within the process): global_tid, api_start_ns, api_end_ns
        (all -1 when no API call was traced)
graph_launches  one row per cudaGraphLaunch / cuGraphLaunch call: global_tid,
        api_start_ns, api_end_ns, correlation_id
thread_names    global_tid -> name (ThreadNames), e.g. PyTorch's `pt_autograd_0`
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import sqlite_utils

from ..common.errors import InputError
from . import prefetch
from .export import shared
from .nsys_meta import (
    CALLS,
    export_meta,
    load_gpus,
    load_session_start,
    load_thread_names,
    load_working_dir,
    table_columns,
    versioned,
)
from .prefetch import OPS_TEXTS, PUSHPOP, concat_query, ops_query, ranges_query
from .rows import columns, int_rows

DOMAIN_CREATE = 75
PID_MASK = np.int64(-0x1000000)  # 0xFFFFFFFFFF000000: globalTid -> globalPid, as nsys stats
OP_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
             "CUPTI_ACTIVITY_KIND_MEMSET")
OP_KINDS = ("kernel", "memcpy", "memset")
COPY_KINDS = ("Unknown", "Host-to-Device", "Device-to-Host", "Host-to-Array",
              "Array-to-Host", "Array-to-Array", "Array-to-Device", "Device-to-Array",
              "Device-to-Device", "Host-to-Host", "Peer-to-Peer", "Unified Host-to-Device",
              "Unified Device-to-Host", "Unified Device-to-Device")
"""ENUM_CUDA_MEMCPY_OPER's labels by copyKind: a copy's name is `[CUDA memcpy <label>]`,
as `nsys stats` names it (cuda_gpu_mem_time_sum)."""
MEMORY_KINDS = ("Pageable", "Pinned", "Device", "Array", "Managed", "Device Static",
                "Managed Static", "Unknown")
"""ENUM_CUDA_MEM_KIND's labels by srcKind / dstKind: a copy's demangled name is
`<source> -> <destination>` (pageable host memory makes a copy block its caller)."""
SENTINEL_NAMES = {-1: "[CUDA memcpy]", -2: "[CUDA memset]", -3: "<unnamed kernel>",
                  **{-(100 + i): f"[CUDA memcpy {k}]" for i, k in enumerate(COPY_KINDS)},
                  **{-(200 + 10 * s + d): f"{a} -> {b}" for s, a in enumerate(MEMORY_KINDS)
                     for d, b in enumerate(MEMORY_KINDS)}}
FETCH_ROWS = 200_000
FILTER_API_RATIO = 3   # filter API rows in SQLite when they outnumber GPU ops 3 to 1
REQUIRED = {
    "StringIds": "has no StringIds table (not an Nsight Systems export?)",
    "CUPTI_ACTIVITY_KIND_KERNEL": "does not contain CUDA kernel data (trace with --trace=cuda)",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "does not contain CUDA API data (trace with --trace=cuda)",
}
CALL_COLUMNS = ["global_tid", "api_start_ns", "api_end_ns"]
"""The launching call's columns of an op (-1 where no call was traced)."""


@dataclass
class NsysExport:
    """Everything the systems analysis reads from one export."""

    path: Path
    ranges: pd.DataFrame
    ops: pd.DataFrame
    graph_launches: pd.DataFrame
    gpus: list[dict]
    export_schema_version: str | None
    product_version: str | None
    notes: list[str] = field(default_factory=list)
    thread_names: dict[int, str] = field(default_factory=dict)
    session_start_utc_ns: int | None = None   # wall clock (UTC) of timestamp 0
    working_dir: str | None = None            # the profiled program's working directory
    sqlite: Path | None = None                # the SQLite file read (path: what the user
                                              # named, a .nsys-rep exported to it)
    op_names: pd.DataFrame | None = None      # per range row: its emit_nvtx op and seq
                                              # (-2: no op range), read in SQL; None: not
                                              # read (trace/ops.py reads the names then)

    @property
    def db(self) -> Path:
        """The SQLite file to read more rows from."""
        return self.sqlite or self.path


def os_pid(global_ids: np.ndarray) -> np.ndarray:
    """The OS process id held in Nsight Systems' global thread or process ids."""
    return (np.asarray(global_ids, dtype="int64") >> 24) & 0xFFFFFF


def _check_tables(db: sqlite_utils.Database, path: Path) -> None:
    names = set(db.table_names())
    for table, why in REQUIRED.items():
        if table not in names:
            raise InputError(f"{path}: {why}")


def _query(conn: sqlite3.Connection, path: Path, sql: str, params: tuple = ()) -> pd.DataFrame:
    try:
        return pd.read_sql_query(sql, conn, params=params)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc


def _query_texts(conn: sqlite3.Connection, path: Path, sql: str, params: tuple,
                 texts: tuple[str, ...]) -> pd.DataFrame:
    """A query as a frame whose `texts` columns stay Python strings (object dtype); other
    columns as read_sql_query types them (int64, or float64 where NULLs occur). pandas 3
    would store 100k NVTX names as Arrow strings, and every later take or conversion of
    them cost more than the rest of the frame."""
    try:
        cur = conn.execute(f"SELECT * FROM ({sql}) LIMIT 0", params)
        names = [d[0] for d in cur.description]
        cols = columns(conn, sql, params, len(names),
                       frozenset(i for i, n in enumerate(names) if n in texts))
        if cols is None:                         # a value that is not an integer or text
            rows = conn.execute(sql, params).fetchall()
            cols = list(zip(*rows, strict=True))
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    cols = cols or [()] * len(names)
    return pd.DataFrame({n: pd.Series(c, dtype=object) if n in texts else
                         c if isinstance(c, np.ndarray) else _numbers(c)
                         for n, c in zip(names, cols, strict=True)})


def _numbers(values: tuple) -> np.ndarray | pd.Series:
    """A column of SQLite numbers: int64, or as pandas reads it when NULLs or floats
    occur (float64 with NaN)."""
    ints = np.array(values)
    if ints.dtype.kind == "i" or not len(values):
        return ints.astype(np.int64)
    return pd.to_numeric(pd.Series(values, dtype=object))


def load_ranges(conn: sqlite3.Connection, db: sqlite_utils.Database, path: Path) -> pd.DataFrame:
    """NVTX range instances with names resolved and domains attached (see module doc)."""
    return ranges_and_ops(conn, db, path)[0]


def ranges_and_ops(conn: sqlite3.Connection, db: sqlite_utils.Database, path: Path
                   ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """load_ranges' frame and, row for row, the emit_nvtx op each range's name starts with
    and its seq (-1 where none; -2: the range is no op range), where prefetch read them
    (NsysExport.op_names; else None)."""
    cols = table_columns(db, "NVTX_EVENTS")
    empty = pd.DataFrame(columns=["range_id", "style", "name", "domain", "global_tid",
                                  "start_ns", "end_ns"])
    if not cols:
        return empty, None
    sql, params = ranges_query(cols)
    df = _query_texts(conn, path, sql, params, texts=("name",))
    if df.empty:
        return empty, None
    last = int(pd.concat([df["start_ns"], df["end_ns"]]).max())
    df["end_ns"] = df["end_ns"].fillna(last).astype("int64")
    df["style"] = pd.Series(np.where(df["event_type"].isin(PUSHPOP), "PushPop", "StartEnd"),
                            dtype=object)
    df["domain"] = _domains(conn, path, df)
    return df[empty.columns].reset_index(drop=True), _op_names(conn, path, sql, params, df)


def _op_names(conn: sqlite3.Connection, path: Path, sql: str, params: tuple,
              ranges: pd.DataFrame) -> pd.DataFrame | None:
    """Per range row, its emit_nvtx op and seq (-2: no op range), where prefetch read them
    on its thread (ops_query); else None."""
    query = ops_query(sql)
    if not prefetch.holds(conn, concat_query(query, 3, OPS_TEXTS), params):
        return None
    found = _query_texts(conn, path, query, params, texts=("op",))
    at = pd.Index(ranges["range_id"]).get_indexer(found["range_id"])
    op, seq = np.full(len(ranges), "", dtype=object), np.full(len(ranges), -2, dtype="int64")
    op[at], seq[at] = found["op"].to_numpy(dtype=object), found["seq"].to_numpy(dtype="int64")
    return pd.DataFrame({"op": op, "seq": seq})


def _domains(conn: sqlite3.Connection, path: Path, ranges: pd.DataFrame) -> pd.Series:
    """Domain name of each range: the DomainCreate event of its domainId in its process."""
    created = _query(conn, path, """
        SELECT domainId AS domain_id, globalTid AS global_tid, text AS domain
        FROM NVTX_EVENTS WHERE eventType = ? ORDER BY start""", (DOMAIN_CREATE,))
    created["pid_key"] = created["global_tid"].astype("int64") // (1 << 24)
    created = created.drop_duplicates(["domain_id", "pid_key"])
    keys = pd.DataFrame({"domain_id": ranges["domain_id"],
                         "pid_key": ranges["global_tid"].astype("int64") // (1 << 24)})
    merged = keys.merge(created[["domain_id", "pid_key", "domain"]],
                        on=["domain_id", "pid_key"], how="left")
    return merged["domain"].where(merged["domain"].notna(), None)


def fetch_ints(conn: sqlite3.Connection, path: Path, sql: str, ncols: int) -> np.ndarray:
    """Integer columns of a query as an (n, ncols) int64 array, fetched in chunks.

    Chunking keeps the Python tuples sqlite3 makes to FETCH_ROWS at a time, so a trace of
    millions of rows does not hold them all at once.
    """
    try:
        cur = conn.execute(sql)
        chunks = []
        while rows := cur.fetchmany(FETCH_ROWS):
            chunks.append(int_rows(rows, ncols))
    except (sqlite3.DatabaseError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    return np.concatenate(chunks) if chunks else np.empty((0, ncols), dtype=np.int64)


def op_columns(kind: int, cols: set[str] | frozenset) -> tuple[str, str, str, str]:
    """SQL for one GPU-operation table's name id, demangled name id (sentinels for copies
    and sets, and for unnamed kernels), device and stream (-1 where the table has none)."""
    if kind == 0:
        short = "shortName" if "shortName" in cols else "demangledName"
        name, demangled = f"ifnull(o.{short}, -3)", "ifnull(o.demangledName, -3)"
    elif kind == 1 and {"copyKind", "srcKind", "dstKind"} <= cols:
        name = "-(100 + ifnull(o.copyKind, 0))"
        demangled = "-(200 + 10 * ifnull(o.srcKind, 7) + ifnull(o.dstKind, 7))"
    else:
        name = demangled = str(-kind)
    return (name, demangled, "o.deviceId" if "deviceId" in cols else "-1",
            "o.streamId" if "streamId" in cols else "-1")


def _op_sql(table: str, kind: int, cols: set[str]) -> str:
    """Integer columns of one GPU-operation table (name ids; sentinels for copies/sets)."""
    name, demangled, device, stream = op_columns(kind, cols)
    return (f"SELECT {kind}, {name}, {demangled}, o.start, o.end, o.correlationId, "
            f"o.globalPid, {device}, {stream}, {op_bytes(kind, cols)} FROM {table} o")


def op_bytes(kind: int, cols: set[str] | frozenset) -> str:
    """SQL for an operation's bytes: a copy's or a set's, 0 for a kernel."""
    return "ifnull(o.bytes, 0)" if kind and "bytes" in cols else "0"


def _categorical(ids: np.ndarray, strings: dict[int, str]) -> pd.Categorical:
    """Names of string ids as a categorical (one copy of each distinct name)."""
    inverse, uniq = pd.factorize(ids)          # hashing: a sort of 200k ids cost more
    text = [SENTINEL_NAMES.get(int(i)) or strings.get(int(i), f"<string {i}>") for i in uniq]
    cats, code_of = np.unique(np.array(text, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(code_of[inverse], categories=list(cats))


def _launch_calls_sql(conn: sqlite3.Connection, path: Path) -> str:
    """SQL for the API calls whose correlation id a GPU operation carries.

    Most CUDA API rows launch nothing (syncs, queries, allocations): the correlation ids
    of the GPU operations go into an indexed temporary table (the export itself stays
    read-only), and only matching calls cross into Python.
    """
    everything = ("SELECT correlationId, globalTid, start, end "
                  f"FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {CALLS}")
    tables = [t for t in OP_TABLES if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()]
    sizes = [conn.execute(f"SELECT ifnull(max(rowid), 0) FROM {t}").fetchone()[0]
             for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", *tables)]
    if sizes[0] < FILTER_API_RATIO * sum(sizes[1:]):
        return everything           # most calls launched something: no filter pays off
    ids = " UNION ALL ".join(f"SELECT correlationId AS id FROM {t}" for t in tables)
    try:
        # Measured on 5.9M API rows: a plain index here answers the IN in 2.9 s, an
        # INTEGER PRIMARY KEY table in 8 s, fetching every row into Python in 6.2 s.
        conn.execute("DROP TABLE IF EXISTS temp.op_correlation")
        conn.execute(f"CREATE TEMP TABLE op_correlation AS {ids}")
        conn.execute("CREATE INDEX temp.op_correlation_id ON op_correlation (id)")
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read export ({exc})") from exc
    return f"{everything} AND correlationId IN (SELECT id FROM temp.op_correlation)"


def _launching_calls(conn: sqlite3.Connection, path: Path, ops: pd.DataFrame) -> pd.DataFrame:
    """API call (thread, start, end) of each op, joined by correlationId within the process.

    Done in pandas: a hash join on two integer columns is far faster than SQLite's
    join over an unindexed CUPTI_ACTIVITY_KIND_RUNTIME.
    """
    api = pd.DataFrame(fetch_ints(conn, path, _launch_calls_sql(conn, path), 4),
                       columns=["correlation_id", "global_tid", "api_start_ns", "api_end_ns"])
    api["global_pid"] = api["global_tid"] & PID_MASK
    api = api.drop_duplicates(["correlation_id", "global_pid"])
    out = ops[["correlation_id", "global_pid"]].merge(api, how="left",
                                                      on=["correlation_id", "global_pid"])
    return out[CALL_COLUMNS].fillna(-1).astype("int64")


def ops_frame(raw: np.ndarray, strings: dict[int, str]) -> pd.DataFrame:
    """The GPU-side columns of the ops frame from the integer columns of `_op_sql`."""
    return pd.DataFrame({
        "kind": pd.Categorical.from_codes(raw[:, 0], categories=list(OP_KINDS)),
        "name": _categorical(raw[:, 1], strings),
        "demangled_name": _categorical(raw[:, 2], strings),
        "start_ns": raw[:, 3], "end_ns": raw[:, 4], "duration_ns": raw[:, 4] - raw[:, 3],
        "correlation_id": raw[:, 5], "global_pid": raw[:, 6], "device_id": raw[:, 7],
        "stream_id": raw[:, 8], "bytes": raw[:, 9]})


def load_ops(conn: sqlite3.Connection, db: sqlite_utils.Database, path: Path) -> pd.DataFrame:
    """GPU operations joined to the CUDA API call that launched each (see module doc)."""
    parts = [_op_sql(t, kind, cols) for kind, t in enumerate(OP_TABLES)
             if (cols := table_columns(db, t))]
    raw = fetch_ints(conn, path, " UNION ALL ".join(parts), 10)
    df = ops_frame(raw, shared(path).strings())
    calls = _launching_calls(conn, path, df)
    return pd.concat([df, calls], axis=1)


def empty_ops() -> pd.DataFrame:
    """An ops frame with no rows, with the columns and types of load_ops."""
    ints = np.empty((0, 10), dtype=np.int64)
    df = pd.DataFrame({
        "kind": pd.Categorical.from_codes(ints[:, 0], categories=list(OP_KINDS)),
        "name": pd.Categorical([]), "demangled_name": pd.Categorical([]),
        **{c: ints[:, 0] for c in ("start_ns", "end_ns", "duration_ns", "correlation_id",
                                   "global_pid", "device_id", "stream_id", "bytes", "global_tid",
                                   "api_start_ns", "api_end_ns")}})
    return df


def load_graph_launches(conn: sqlite3.Connection, path: Path) -> pd.DataFrame:
    """CUDA API calls that replay a CUDA graph (their kernels show only with node tracing).

    The API names are looked up first (StringIds is small), so a trace that never
    launched a graph costs no scan of CUPTI_ACTIVITY_KIND_RUNTIME.
    """
    ids = [i for (i,) in conn.execute(
        "SELECT id FROM StringIds WHERE value LIKE 'cudaGraphLaunch%' "
        "OR value LIKE 'cuGraphLaunch%'")]
    if not ids:
        return pd.DataFrame(columns=["global_tid", "api_start_ns", "api_end_ns",
                                     "correlation_id"], dtype="int64")
    marks = ",".join("?" * len(ids))
    return _query(conn, path, f"""
        SELECT globalTid AS global_tid, start AS api_start_ns, end AS api_end_ns,
               correlationId AS correlation_id
        FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN ({marks}) AND {CALLS}""", tuple(ids))


def load(path: str | Path, ops: bool = True) -> NsysExport:
    """Read one export; InputError (one line, names the file) when it is not usable.
    `ops=False` leaves the GPU operations out (an empty frame): runners.attribute_file reads
    them window by window."""
    path = Path(path)
    reader = shared(path)
    conn, db = reader.conn, reader.db
    _check_tables(db, path)
    meta = export_meta(db)
    with versioned(meta.get("EXPORT_SCHEMA_VERSION"), meta.get("EXPORT_PRODUCT_VERSION")):
        ranges, op_names = ranges_and_ops(conn, db, path)
        frame = load_ops(conn, db, path) if ops else empty_ops()
        launches = load_graph_launches(conn, path)
    notes = [] if len(ranges) else ["the export holds no NVTX ranges "
                                    "(trace with --trace=nvtx and annotate the code)"]
    return NsysExport(path=path, sqlite=path, ranges=ranges, ops=frame, graph_launches=launches,
                      gpus=load_gpus(db),
                      export_schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
                      product_version=meta.get("EXPORT_PRODUCT_VERSION"), notes=notes,
                      thread_names=load_thread_names(conn, db),
                      session_start_utc_ns=load_session_start(conn, db),
                      working_dir=load_working_dir(conn, db), op_names=op_names)
