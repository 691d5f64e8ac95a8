"""The GPU's kernel sequence of an export, for finding steps where no range marks them
(analysis/loops/find.py) and for the exposed communication (loops/totals.py): per kernel
its process, device, stream, name id, start and end, in start order; the names of NCCL's
kernels (communication) marked. Read only where needed: the first DETECT_ROWS kernels
when a process has no step range of its own, every kernel (up to SEQUENCE_ROWS) when the
capture holds NCCL kernels."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .export import shared
from .nsys_meta import CALLS
from .nsys_sqlite import PID_MASK, fetch_ints, os_pid

SEQUENCE_ROWS = 4_000_000
"""Kernels read at most (the first by start: 160 MB of integers)."""
DETECT_ROWS = 200_000
"""Kernels the step detection reads (the first: thousands of steps of most loops; reading
a 5M-kernel export whole would cost seconds and 160 MB for no better period)."""
NCCL = re.compile(r"^nccl", re.I)
"""NCCL's kernels (communication), by name (analysis/trace/steps.py counts them apart too)."""
COLUMNS = ["pid", "device", "stream", "name_id", "start_ns", "end_ns", "nccl"]


def from_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The kernel sequence of an ops frame held in memory (nsys_sqlite.ops_frame's
    columns; an export built in memory has no file to read)."""
    k = ops[(ops["kind"] == "kernel").to_numpy()].sort_values("start_ns", kind="stable")
    names = k["name"].astype(str)

    def col(name: str) -> np.ndarray:              # a frame made by hand may lack it
        return k[name].to_numpy(dtype="int64") if name in k else np.zeros(len(k), "int64")
    return pd.DataFrame({
        "pid": os_pid(col("global_pid")), "device": col("device_id"),
        "stream": col("stream_id"),
        "name_id": pd.factorize(names)[0].astype("int64"),
        "start_ns": k["start_ns"].to_numpy(dtype="int64"),
        "end_ns": k["end_ns"].to_numpy(dtype="int64"),
        "nccl": names.str.match(NCCL.pattern, case=False).to_numpy(dtype=bool)})


def kernel_sequence(path: Path, limit: int = SEQUENCE_ROWS) -> pd.DataFrame:
    """Every kernel of the export (at most `limit`), by start: COLUMNS (`nccl`: a
    communication kernel). Read once per limit (steps are detected, then found, on the
    same first kernels); the frame is shared, so no caller changes it."""
    return shared(path).once(f"kernel_sequence/{int(limit)}",
                             lambda: _kernel_sequence(path, limit))


def _kernel_sequence(path: Path, limit: int) -> pd.DataFrame:
    conn = shared(path).conn
    cols = {r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    if not cols:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in COLUMNS})
    name = "shortName" if "shortName" in cols else "demangledName"
    raw = fetch_ints(conn, path, f"SELECT globalPid, deviceId, streamId, ifnull({name}, "
                      f"-1), start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start "
                      f"LIMIT {int(limit)}", 6)
    ids = np.unique(raw[:, 3])
    marks = ",".join(str(int(i)) for i in ids.tolist()) or "NULL"
    names = dict(conn.execute(f"SELECT id, value FROM StringIds WHERE id IN ({marks})"))
    nccl_ids = np.array([i for i in ids.tolist() if NCCL.search(names.get(i, ""))],
                        dtype="int64")
    return pd.DataFrame({"pid": os_pid(raw[:, 0]), "device": raw[:, 1], "stream": raw[:, 2],
                         "name_id": raw[:, 3], "start_ns": raw[:, 4], "end_ns": raw[:, 5],
                         "nccl": np.isin(raw[:, 3], nccl_ids)})


def launch_calls(path: Path, device: int, stream: int, starts: np.ndarray) -> pd.DataFrame:
    """The CUDA call that launched each kernel of one stream starting at `starts` (GPU
    ns): `start_ns` (the kernel's) -> global_tid, call_start_ns, call_end_ns; a kernel whose
    call was not traced is left out."""
    conn = shared(path).conn
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in
                          ("start_ns", "global_tid", "call_start_ns", "call_end_ns")})
    if not len(starts) or not {"CUPTI_ACTIVITY_KIND_KERNEL",
                               "CUPTI_ACTIVITY_KIND_RUNTIME"} <= have:
        return empty
    marks = ",".join(str(int(s)) for s in np.unique(starts).tolist())
    raw = fetch_ints(conn, path, "SELECT k.start, r.globalTid, r.start, r.end FROM "
                     "CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
                     f"r.correlationId = k.correlationId AND (r.globalTid & {int(PID_MASK)}) "
                     f"= k.globalPid AND r.{CALLS} WHERE k.deviceId = {int(device)} AND "
                     f"k.streamId = {int(stream)} AND k.start IN ({marks})", 4)
    if not len(raw):
        return empty
    out = pd.DataFrame(raw, columns=list(empty.columns))
    return out.drop_duplicates("start_ns").set_index("start_ns", drop=False)
