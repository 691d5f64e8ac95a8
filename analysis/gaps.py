"""Idle gaps inside a range's GPU span, classified the way HolisticTraceAnalysis does.

Pure functions on loader frames. Within one range instance, GPU operations are merged
into busy blocks (overlapping streams count once); a gap is the time between a block's
end and the next block's start. A gap is "host wait" when the CUDA API call that
launched the next operation began after the previous block ended: the GPU waited for
the CPU to launch. Any other gap ("other") is a dependency, sync or copy wait.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

GAP_COLUMNS = ["range", "gap_start_ns", "gap_ns", "host_wait"]


def instance_gaps(ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per idle gap (> 0 ns) inside each range instance's GPU span."""
    joined = pairs.join(ops[["start_ns", "end_ns", "api_start_ns"]], on="call")
    rows = []
    for rng, grp in joined.groupby("range", sort=False):
        g = grp.sort_values("start_ns")
        starts = g["start_ns"].to_numpy(dtype="int64")
        ends = np.maximum.accumulate(g["end_ns"].to_numpy(dtype="int64"))
        api = g["api_start_ns"].to_numpy(dtype="float64")
        gap = starts[1:] - ends[:-1]
        for i in np.nonzero(gap > 0)[0]:
            rows.append((rng, int(ends[i]), int(gap[i]), bool(api[i + 1] > ends[i])))
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def summarize_gaps(gaps: pd.DataFrame, keyed: pd.DataFrame, min_gap_ns: int) -> pd.DataFrame:
    """Per range key: gaps at least `min_gap_ns` long, their total, largest, host-wait share."""
    g = gaps[gaps["gap_ns"] >= min_gap_ns].join(keyed["key"], on="range")
    if g.empty:
        return pd.DataFrame(columns=["key", "gaps", "gap_ns", "largest_gap_ns",
                                     "host_wait_ns"])
    g["host_wait_ns"] = g["gap_ns"].where(g["host_wait"], 0)
    out = g.groupby("key").agg(gaps=("gap_ns", "size"), gap_ns=("gap_ns", "sum"),
                               largest_gap_ns=("gap_ns", "max"),
                               host_wait_ns=("host_wait_ns", "sum"))
    return out.reset_index()
