"""GPU busy and idle time inside each range instance, and its idle gaps.

Pure, vectorized functions on loader frames. Within one range instance, GPU operations
sorted by start are merged into busy blocks (overlapping streams count once): a gap is
the time between the latest end so far and the next start. The instance's idle time is
the sum of its gaps, its span first start -> last end.

Each gap is classified the way HolisticTraceAnalysis does: "host wait" when the CUDA API
call that launched the next operation began after the GPU went idle (the GPU waited for
the CPU to launch), else "other" (a dependency, sync or copy wait).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

GAP_COLUMNS = ["range", "gap_start_ns", "gap_ns", "host_wait"]


def timeline(ops: pd.DataFrame, pairs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per instance: range, gpu_span_ns, gpu_idle_ns; per gap: GAP_COLUMNS).

    `pairs` holds (range, call) with `call` the row position of the op in `ops`.
    """
    call = pairs["call"].to_numpy(dtype="int64")
    rng = pairs["range"].to_numpy(dtype="int64")
    start = ops["start_ns"].to_numpy(dtype="int64")[call]
    end = ops["end_ns"].to_numpy(dtype="int64")[call]
    api = ops["api_start_ns"].to_numpy(dtype="int64")[call]
    order = np.lexsort((start, rng))
    rng, start, end, api = rng[order], start[order], end[order], api[order]
    if len(rng) == 0:
        return (pd.DataFrame(columns=["range", "gpu_span_ns", "gpu_idle_ns"]),
                pd.DataFrame(columns=GAP_COLUMNS))
    first = np.r_[True, rng[1:] != rng[:-1]]
    run_end = pd.Series(end).groupby(rng).cummax().to_numpy()
    prev_end = np.r_[0, run_end[:-1]]
    gap = np.where(first, 0, np.maximum(start - prev_end, 0))
    heads = np.flatnonzero(first)
    tails = np.r_[heads[1:], len(rng)] - 1
    instances = pd.DataFrame({"range": rng[heads],
                              "gpu_span_ns": run_end[tails] - start[heads],
                              "gpu_idle_ns": np.add.reduceat(gap, heads)})
    at = np.flatnonzero(gap > 0)
    gaps = pd.DataFrame({"range": rng[at], "gap_start_ns": prev_end[at], "gap_ns": gap[at],
                         "host_wait": api[at] > prev_end[at]})
    return instances, gaps


def summarize_gaps(gaps: pd.DataFrame, keyed: pd.DataFrame, min_gap_ns: int) -> pd.DataFrame:
    """Per range key: gaps whose truly idle part (`idle_ns`: no GPU operation of the
    process ran; the whole gap where that column is absent) is at least `min_gap_ns`,
    their idle total, largest, host-wait share."""
    idle = gaps["idle_ns"] if "idle_ns" in gaps else gaps["gap_ns"]
    g = gaps.assign(idle=idle)
    g = g[g["idle"] >= min_gap_ns].join(keyed["key"], on="range")
    if g.empty:
        return pd.DataFrame(columns=["key", "gaps", "gap_ns", "largest_gap_ns",
                                     "host_wait_ns"])
    g["host_wait_ns"] = g["idle"].where(g["host_wait"], 0)
    out = g.groupby("key").agg(gaps=("idle", "size"), gap_ns=("idle", "sum"),
                               largest_gap_ns=("idle", "max"),
                               host_wait_ns=("host_wait_ns", "sum"))
    return out.reset_index()


def first_iteration(ops: pd.DataFrame, pairs: pd.DataFrame, range_index: int,
                    kernels: int) -> list[dict]:
    """The GPU operations of one iteration: the first `kernels` kernels of an instance.

    Times are relative to the first operation, so a strip of boxes shows the kernels and
    the idle gaps between them. Copies and sets that start among them are kept.
    """
    call = pairs.loc[pairs["range"] == range_index, "call"].to_numpy(dtype="int64")
    sub = ops.iloc[call].sort_values("start_ns")
    is_kernel = (sub["kind"] == "kernel").to_numpy()
    upto = int(np.searchsorted(np.cumsum(is_kernel), max(kernels, 1))) + 1
    sub = sub.iloc[:upto]
    if sub.empty:
        return []
    t0 = int(sub["start_ns"].iloc[0])
    return [{"name": str(n), "kind": str(k), "start_ns": int(s) - t0, "end_ns": int(e) - t0}
            for n, k, s, e in zip(sub["name"], sub["kind"], sub["start_ns"], sub["end_ns"],
                                  strict=True)]
