"""What an Nsight Systems SQLite export says of itself and of the capture, beside the
timeline: the export's schema and nsys versions, the GPUs, the thread names, the session's
wall-clock start; `versioned` names the export schema in a loader's errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import sqlite_utils

from ..common.errors import InputError

CALLS = "eventClass NOT IN (67, 68, 69)"
"""The CUPTI_ACTIVITY_KIND_RUNTIME rows that are CUDA calls (an SQL condition). A capture
with `--cudabacktrace` adds a row for each backtrace it took (ENUM_NSYS_EVENT_CLASS 67-69,
TRACE_PROCESS_EVENT_CUDABACKTRACE*; seen on Nsight Systems 2025.3): the call's thread and
correlation id, its name without the version suffix, from 0.1-0.3 us before the call to as
long after it, and the callchainId of its native frames in CUDA_CALLCHAINS. Read as calls,
they count every sync that has a backtrace twice (`nsys stats`' cuda_api_sum does, 2023.4
and 2025.3 alike: two cudaDeviceSynchronize lines) and give a launch's kernel two calls in
a join on the correlation id."""


def table_columns(db: sqlite_utils.Database, table: str) -> set[str]:
    """The column names of `table` (none when the export lacks it)."""
    return set(db[table].columns_dict) if db[table].exists() else set()


def load_gpus(db: sqlite_utils.Database) -> list[dict]:
    """GPUs of the capture: name, sm_count, memory_bandwidth_Bps (TARGET_INFO_GPU)."""
    cols = table_columns(db, "TARGET_INFO_GPU")
    if not {"name"} <= cols:
        return []
    rows = db.execute("SELECT * FROM TARGET_INFO_GPU").fetchall()
    names = [d[0] for d in db.execute("SELECT * FROM TARGET_INFO_GPU LIMIT 0").description]
    out = []
    for row in rows:
        rec = dict(zip(names, row, strict=True))
        out.append({"name": rec.get("name"), "sm_count": rec.get("smCount"),
                    "memory_bandwidth_Bps": rec.get("memoryBandwidth")})
    return out


def load_thread_names(conn: sqlite3.Connection, db: sqlite_utils.Database) -> dict[int, str]:
    """global_tid -> thread name (ThreadNames; the highest-priority name where several)."""
    if not {"nameId", "globalTid"} <= table_columns(db, "ThreadNames"):
        return {}
    rows = conn.execute("SELECT t.globalTid, s.value FROM ThreadNames t "
                        "JOIN StringIds s ON s.id = t.nameId ORDER BY t.priority").fetchall()
    return {int(tid): str(name) for tid, name in rows}


def load_session_start(conn: sqlite3.Connection, db: sqlite_utils.Database) -> int | None:
    """UTC wall clock, in ns since the epoch, of the trace's timestamp 0
    (TARGET_INFO_SESSION_START_TIME), or None."""
    if "utcEpochNs" not in table_columns(db, "TARGET_INFO_SESSION_START_TIME"):
        return None
    row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def load_working_dir(conn: sqlite3.Connection, db: sqlite_utils.Database) -> str | None:
    """The profiled program's working directory (META_DATA_CAPTURE's first process's
    WORKING_DIR), or None: messages name the user's files relative to it."""
    if not {"name", "value"} <= table_columns(db, "META_DATA_CAPTURE"):
        return None
    row = conn.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%WORKING_DIR' "
                       "ORDER BY name LIMIT 1").fetchone()
    return str(row[0]) if row and row[0] else None


def export_meta(db: sqlite_utils.Database) -> dict[str, str]:
    """META_DATA_EXPORT's name -> value (the export schema and nsys versions)."""
    if not db["META_DATA_EXPORT"].exists():
        return {}
    return dict(db.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())


@contextmanager
def versioned(schema: str | None, product: str | None) -> Iterator[None]:
    """An InputError raised inside also says which export schema (and nsys) wrote the
    file: an unreadable export is most often one of a layout this loader does not know."""
    try:
        yield
    except InputError as exc:
        raise InputError(f"{exc}; export schema version {schema or 'not recorded'} "
                         f"({product or 'unknown nsys'}) is not one this loader reads") from exc
