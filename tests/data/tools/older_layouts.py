"""Derive exports in older Nsight Systems SQLite layouts from a current (2025.3) one.

NVIDIA says the export schema "can and will change". These committed transformations
reproduce layouts of earlier versions, as their export documentation describes them, so
the loader is tested on them with real data:

- `inline_nvtx_text`: NVTX range names stored inline in NVTX_EVENTS.text and no textId
  column (older exports before registered-string ids were split out);
- `no_short_names`: CUPTI_ACTIVITY_KIND_KERNEL without shortName / mangledName (names
  only through demangledName, as in the oldest exports);
- `no_end_global_tid`: NVTX_EVENTS without endGlobalTid (before ranges ended on another
  thread were recorded);
- `no_gpu_info`: no TARGET_INFO_GPU table, no META_DATA_EXPORT (exports that lack them).

and one that is not a version but a harder capture:

- `second_process`: every kernel, copy, set, CUDA API and NVTX row repeated as if a
  second process had done the same work at the same times with the same correlation
  ids (only the process bits of globalTid / globalPid differ), as two ranks of a job do.

Each takes (source, destination) and writes a new file; the source is not touched.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path


def _drop_column(conn: sqlite3.Connection, table: str, columns: set[str]) -> None:
    """Rebuild `table` without `columns` (keeps rowids, so NVTX range ids stay the same)."""
    info = conn.execute(f"PRAGMA table_info({table})").fetchall()
    keep = [r[1] for r in info if r[1] not in columns]
    cols = ", ".join(keep)
    conn.execute(f"CREATE TABLE {table}_new AS SELECT rowid AS rid, {cols} FROM {table}")
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"CREATE TABLE {table} ({cols})")
    conn.execute(f"INSERT INTO {table} (rowid, {cols}) SELECT rid, {cols} FROM {table}_new")
    conn.execute(f"DROP TABLE {table}_new")


def inline_nvtx_text(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds "
                 "WHERE id = NVTX_EVENTS.textId) WHERE textId IS NOT NULL")
    _drop_column(conn, "NVTX_EVENTS", {"textId"})


def no_short_names(conn: sqlite3.Connection) -> None:
    _drop_column(conn, "CUPTI_ACTIVITY_KIND_KERNEL", {"shortName", "mangledName"})


def no_end_global_tid(conn: sqlite3.Connection) -> None:
    _drop_column(conn, "NVTX_EVENTS", {"endGlobalTid"})


def no_gpu_info(conn: sqlite3.Connection) -> None:
    conn.execute("DROP TABLE TARGET_INFO_GPU")
    conn.execute("DROP TABLE META_DATA_EXPORT")


PID_STEP = 1 << 24          # globalTid = (vm << 56) | (pid << 24) | tid; add 1 to the pid


def second_process(conn: sqlite3.Connection) -> None:
    for table, col in (("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
                       ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
                       ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"),
                       ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                       ("NVTX_EVENTS", "globalTid")):
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        shifted = [f"{c} + {PID_STEP}" if c == col else c for c in cols]
        conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) "
                     f"SELECT {', '.join(shifted)} FROM {table}")


LAYOUTS: dict[str, Callable[[sqlite3.Connection], None]] = {
    "inline_nvtx_text": inline_nvtx_text, "no_short_names": no_short_names,
    "no_end_global_tid": no_end_global_tid, "no_gpu_info": no_gpu_info}
HARDER = {"second_process": second_process}


def derive(source: Path, destination: Path, layout: str) -> Path:
    shutil.copyfile(source, destination)
    conn = sqlite3.connect(destination)
    with conn:
        {**LAYOUTS, **HARDER}[layout](conn)
    conn.close()
    return destination
