"""CPU samples of an export captured with `nsys profile --sample=process-tree`
(`make systems SAMPLE=cpu`): one row per sample with its leaf native frame.

`load_samples(path) -> frame`: global_tid, time_ns, module (the leaf frame's library, file
name only), symbol (the innermost function of that library nsys resolved on the stack, or
""). An export without
samples gives an empty frame. COMPOSITE_EVENTS holds one row per sample (time, thread);
SAMPLING_CALLCHAINS its frames, stackDepth 0 the leaf.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from ..common.errors import InputError
from .export import shared, view
from .nsys_meta import table_columns

COLUMNS = ["global_tid", "time_ns", "module", "symbol"]
SQL = ("SELECT e.globalTid, e.start, m.value, (SELECT s.value FROM SAMPLING_CALLCHAINS f "
       "JOIN StringIds s ON s.id = f.symbol WHERE f.id = e.id AND f.module = c.module "
       "AND s.value NOT LIKE '0x%' ORDER BY f.stackDepth LIMIT 1) "
       "FROM COMPOSITE_EVENTS e JOIN SAMPLING_CALLCHAINS c ON c.id = e.id "
       "AND c.stackDepth = 0 LEFT JOIN StringIds m ON m.id = c.module")
"""Per sample: thread, time, the leaf frame's module and the innermost resolved symbol of
that module on the stack (a library's exported entry point when its own frames are not
resolved: nvrtcCompileProgram above NVRTC's internals)."""


def load_samples(path: Path) -> pd.DataFrame:
    """The export's CPU samples with their leaf frames (see the module doc)."""
    if not Path(path).is_file():
        return pd.DataFrame(columns=COLUMNS)
    conn = shared(Path(path)).conn
    try:
        db = view(conn)
        if not ({"id", "start", "globalTid"} <= table_columns(db, "COMPOSITE_EVENTS")
                and {"id", "module", "symbol", "stackDepth"}
                <= table_columns(db, "SAMPLING_CALLCHAINS")):
            return pd.DataFrame(columns=COLUMNS)
        rows = conn.execute(SQL).fetchall()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read CPU samples ({exc})") from exc
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["module"] = [str(m).rsplit("/", 1)[-1] if m else "?" for m in frame["module"]]
    frame["symbol"] = [s if isinstance(s, str) else "" for s in frame["symbol"]]
    return frame
