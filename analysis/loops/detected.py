"""A loop for a script with no range: its detected steps made ranges of their own.

Most scripts mark nothing. Where a process has no range of its own (every NVTX range it
has is a library domain's or an emit_nvtx op range), its steps are detected in its busiest
stream's kernel sequence (find.py, period.py) and each becomes one instance of a range
named DETECTED on the host thread that launched it: from the CUDA call that launched the
step's first kernel to the call that launched the next step's first kernel (the last, to
the end of the call that launched its last kernel). The export then goes through the
analysis as if the user had written `nvtx.range_push(DETECTED)` there, so a script with
no range gets the same loop model, critical path, findings, prices and page as one with
ranges (the host time between steps, the wait for the next batch among it, falls in the
step that precedes it). The rows are added to the export's ranges (a copy), marked with
their own `range_id`s past the export's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ..common.names import DETECTED, library_mask, op_paths
from ..load.nsys_sequence import DETECT_ROWS, kernel_sequence, launch_calls
from ..load.nsys_sqlite import NsysExport, os_pid
from ..trace.ranges import plain_names
from .find import busiest_lane, from_kernels, markers


def unmarked_pids(export: NsysExport, seq: pd.DataFrame) -> list[int]:
    """The processes with kernels and no range of their own (see the module doc; the
    profiler's ProfilerStep markers are steps of their own)."""
    r = export.ranges
    own = set()
    if len(r):
        names = plain_names(r["name"])
        mine = ~(library_mask(r["domain"]) | op_paths(names)) | markers(names)
        tids = r["global_tid"].to_numpy()[mine]
        own = set(os_pid(tids[pd.notna(tids)].astype("int64")).tolist())
    return sorted(int(p) for p in seq["pid"].unique().tolist() if int(p) not in own)


def with_detected_steps(export: NsysExport) -> NsysExport:
    """The export with a DETECTED range per detected step of each process that has no
    range of its own; the export itself where none is (or it has no file to read)."""
    if not export.db.is_file():
        return export
    seq = kernel_sequence(export.db, DETECT_ROWS)
    rows = [_ranges_of(export, seq, pid) for pid in unmarked_pids(export, seq)]
    rows = [r for r in rows if len(r)]
    if not rows:
        return export
    added = pd.concat(rows, ignore_index=True)
    first = int(export.ranges["range_id"].max()) + 1 if len(export.ranges) else 1
    added["range_id"] = np.arange(first, first + len(added), dtype="int64")
    ranges = pd.concat([export.ranges, added[export.ranges.columns]], ignore_index=True) \
        if len(export.ranges) else added
    notes = export.notes + [f"no range of the program's own: its {len(added)} detected "
                            f"steps are the loop '{DETECTED}' (loops/detected.py)"]
    return dataclasses.replace(export, ranges=ranges, notes=notes)


def _ranges_of(export: NsysExport, seq: pd.DataFrame, pid: int) -> pd.DataFrame:
    """One process's DETECTED range instances (none where no step is detected): each
    from the call that launched its first kernel to the next step's, or, where the next
    step does not follow at once (and for the last), to the end of the call that launched
    its last kernel."""
    found, (lo, hi) = from_kernels(seq, export.ranges.iloc[0:0], pid)
    if found.source != "detected" or not len(lo):
        return pd.DataFrame()
    lane = busiest_lane(seq[seq["pid"] == pid])
    starts = lane["start_ns"].to_numpy(dtype="int64")
    last = starts[np.maximum(np.searchsorted(starts, hi, side="left") - 1, 0)]
    calls = launch_calls(export.db, int(lane["device"].iloc[0]),
                         int(lane["stream"].iloc[0]), np.r_[lo, last])
    known = np.isin(lo, calls.index) & np.isin(last, calls.index)
    lo, hi, last = lo[known], hi[known], last[known]
    if not len(lo):
        return pd.DataFrame()
    begin = calls.loc[lo, "call_start_ns"].to_numpy(dtype="int64")
    end = calls.loc[last, "call_end_ns"].to_numpy(dtype="int64")
    follows = np.r_[hi[:-1] >= lo[1:], False]
    end = np.where(follows, np.r_[begin[1:], 0], end)
    keep = end > begin
    return pd.DataFrame({"range_id": 0, "style": "PushPop", "name": DETECTED,
                         "domain": None,
                         "global_tid": calls.loc[lo, "global_tid"].to_numpy(dtype="int64")[keep],
                         "start_ns": begin[keep], "end_ns": end[keep]})
