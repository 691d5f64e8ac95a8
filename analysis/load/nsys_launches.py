"""Every launch of some kernel names, with its launch configuration and the invocation
number Nsight Compute gives it (the plan of analysis/commands/picks.py).

Nsight Compute's `--kernel-id ::NAME:N` profiles the N-th invocation of the function NAME
(its base name, as Nsight Systems' `shortName`); invocations are counted per process in
launch order, which CUPTI's correlation ids follow on every thread. A launch
configuration is the grid, the block and the shared memory (static + dynamic), as
`--filter-mode per-launch-config` tells them apart; `call_ns` is when its launch call
started (-1 where not traced). Read from the export directly: the report folder keeps
per-name totals, not launches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .export import shared
from .nsys_meta import CALLS
from .nsys_sqlite import fetch_ints, os_pid

COLUMNS = ["pid", "tid", "name", "config", "invocation", "start_ns", "duration_ns",
           "call_ns"]


def launches(path: Path, names: list[str]) -> pd.DataFrame:
    """The launches of `names` (kernel short names), COLUMNS: `config` is
    "grid x,y,z block x,y,z shared N", `invocation` 1-based per (process, name) in launch
    order, `tid` the launching thread (global id; -1 where the call was not traced)."""
    conn = shared(path).conn
    ids = dict(conn.execute(
        f"SELECT value, id FROM StringIds WHERE value IN ({','.join('?' * len(names))})",
        names).fetchall()) if names else {}
    if not ids:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    marks = ",".join(str(int(i)) for i in ids.values())
    raw = fetch_ints(conn, path, (
        "SELECT k.globalPid, ifnull(r.globalTid, -1), k.shortName, k.gridX, k.gridY, "
        "k.gridZ, k.blockX, k.blockY, k.blockZ, ifnull(k.staticSharedMemory, 0) + "
        "ifnull(k.dynamicSharedMemory, 0), k.correlationId, k.start, k.end - k.start, "
        "ifnull(r.start, -1) "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
        f"r.correlationId = k.correlationId AND r.globalTid / 16777216 = k.globalPid / "
        f"16777216 AND r.{CALLS} WHERE k.shortName IN ({marks}) "
        "ORDER BY k.correlationId, k.start"), 14)
    return _frame(raw, {v: k for k, v in ids.items()})


def _frame(raw: np.ndarray, name_of: dict[int, str]) -> pd.DataFrame:
    """The launches frame from the query's integer columns."""
    g = raw[:, 3:10]
    config = pd.Series([f"grid {a},{b},{c} block {d},{e},{f} shared {s}"
                        for a, b, c, d, e, f, s in g.tolist()], dtype=object)
    out = pd.DataFrame({"pid": os_pid(raw[:, 0]), "tid": raw[:, 1],
                        "name": pd.Series([name_of[int(i)] for i in raw[:, 2]], dtype=object),
                        "config": config, "start_ns": raw[:, 11], "duration_ns": raw[:, 12],
                        "call_ns": raw[:, 13]})
    out["invocation"] = out.groupby(["pid", "name"], sort=False).cumcount() + 1
    return out[COLUMNS]
