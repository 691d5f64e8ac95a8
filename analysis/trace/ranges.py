"""NVTX range attribution and per-range summaries: pure functions on frames.

Attribution is by launch, exactly as `nsys stats` (nvtx_kern_sum, nvtx_gpu_proj_sum) does
it: a GPU operation belongs to a range instance when the CUDA API call that launched it
(joined by correlationId) starts and ends inside the range, on the same thread. A
kernel therefore counts in every enclosing range; kernels launched by another thread
count only in that thread's ranges. GPU timestamps are never compared with CPU ranges.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.frames import aggregate

if TYPE_CHECKING:
    from .types import Trace

SUMMARY_COLUMNS = ["key", "pid", "domain", "path", "instances", "kernel_count",
                   "kernel_time_ns", "gpu_span_ns", "gpu_idle_ns", "wall_instances",
                   "wall_ns", "wall_median_ns"]


def range_paths(ranges: pd.DataFrame) -> pd.Series:
    """Path of each range: enclosing push/pop names outer->inner joined by "/".

    Push/pop ranges nest per thread and per domain (NVTX keeps one stack for each), so
    the path is built from ranges of the same (global_tid, domain); a start/end range's
    path is its own name. One sort, then one pass with a stack: linear after the sort.
    """
    names = plain_names(ranges["name"])  # lists: indexing numpy object arrays row by row,
    paths = names.copy()                 # 100k times, cost more than the rest of the pass
    pushpop = np.flatnonzero((ranges["style"] == "PushPop").to_numpy())
    if len(pushpop):
        tid = ranges["global_tid"].to_numpy(dtype="int64")[pushpop]
        dom = pd.factorize(ranges["domain"].fillna("").to_numpy()[pushpop])[0]
        start = ranges["start_ns"].to_numpy(dtype="int64")[pushpop]
        end = ranges["end_ns"].to_numpy(dtype="int64")[pushpop]
        order = np.lexsort((-end, start, dom, tid))
        rows, tid, dom = pushpop[order], tid[order], dom[order]
        new_stack = np.r_[True, (tid[1:] != tid[:-1]) | (dom[1:] != dom[:-1])]
        ends: list[int] = []             # end_ns and path of each open enclosing range
        stack: list[str] = []
        for row, s, e, fresh in zip(rows.tolist(), start[order].tolist(), end[order].tolist(),
                                    new_stack.tolist(), strict=True):
            if fresh:
                ends, stack = [], []
            while ends and not (s <= ends[-1] and e <= ends[-1]):
                ends.pop()
                stack.pop()
            path = stack[-1] + "/" + names[row] if stack else names[row]
            paths[row] = path
            ends.append(e)
            stack.append(path)
    return pd.Series(paths, index=ranges.index, dtype=object)


def plain_names(names: pd.Series) -> list[str]:
    """Range names as Python strings, "" where missing (without converting the column:
    with pandas 3 an `astype(str)` builds an Arrow array of 100k long names first)."""
    return [n if isinstance(n, str) else "" for n in names.tolist()]


def expand(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every position of the slices [starts[i], starts[i] + counts[i]) with its slice i,
    slice after slice: (i, position) as two arrays (no loop per slice)."""
    owner = np.repeat(np.arange(len(counts)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, np.repeat(starts, counts) + offsets


def attribute(calls: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Pairs (range index, call index) where the API call lies inside the range.

    `calls` needs global_tid, api_start_ns, api_end_ns (rows with NA never match).
    Per thread, calls sorted by start give each range a contiguous slice of candidates
    (binary search), filtered by end: cost is the number of matches, not ranges x calls.
    """
    valid = calls.dropna(subset=["global_tid", "api_start_ns", "api_end_ns"])
    valid = valid[valid["global_tid"] >= 0]                  # -1: no API call was traced
    c_tid = valid["global_tid"].to_numpy(dtype="int64")
    c_start = valid["api_start_ns"].to_numpy(dtype="int64")
    order = np.lexsort((c_start, c_tid))                     # by thread, then start
    c_tid, c_start = c_tid[order], c_start[order]
    c_end = valid["api_end_ns"].to_numpy(dtype="int64")[order]
    c_index = valid.index.to_numpy()[order]
    r_tid = ranges["global_tid"].to_numpy()
    known = np.flatnonzero(pd.notna(r_tid))
    r_tid = r_tid[known].astype("int64")
    r_start = ranges["start_ns"].to_numpy(dtype="int64")[known]
    r_end = ranges["end_ns"].to_numpy(dtype="int64")[known]
    r_index = ranges.index.to_numpy()[known]
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for tid in np.unique(r_tid).tolist():          # arrays, not sub-frames: 110k ranges
        a, b = np.searchsorted(c_tid, [tid, tid + 1])          # carry every column
        if a == b:
            continue
        rows = np.flatnonzero(r_tid == tid)
        starts = c_start[a:b]
        lo = np.searchsorted(starts, r_start[rows], side="left")
        hi = np.searchsorted(starts, r_end[rows], side="right")
        counts = hi - lo
        if counts.sum() == 0:
            continue
        range_pos, call_pos = expand(lo, counts)
        keep = c_end[a:b][call_pos] <= r_end[rows][range_pos]
        pairs.append((r_index[rows][range_pos[keep]], c_index[a:b][call_pos[keep]]))
    if not pairs:
        return pd.DataFrame({"range": pd.Series(dtype="int64"),
                             "call": pd.Series(dtype="int64")})
    return pd.DataFrame({"range": np.concatenate([p[0] for p in pairs]),
                         "call": np.concatenate([p[1] for p in pairs])})


def summarize(trace: Trace) -> pd.DataFrame:
    """Per range key, every key of the trace: the systems numbers (SUMMARY_COLUMNS), in
    timeline order. `wall_instances`, `wall_ns` count and sum every instance's end - start
    (nvtx_sum's Instances and Total Time), `wall_median_ns` is their median; `instances`
    counts the instances with GPU work and `gpu_span_ns` sums, per such instance, first
    GPU op start -> last GPU op end over kernels, copies and sets (nvtx_gpu_proj_sum's
    "Range Instances" and "Total Proj Time"); `gpu_idle_ns` is that span minus the time
    covered by the ops; kernel counts and times from trace.kernels. A range that launched
    no GPU work has them all 0.
    """
    r = trace.ranges
    wall = pd.DataFrame({"key": r["key"].to_numpy(),
                         "wall": (r["end_ns"] - r["start_ns"]).to_numpy(dtype="int64")})
    per_key = aggregate(wall.groupby("key", sort=False), wall_instances=("wall", "count"),
                        wall_ns=("wall", "sum"), wall_median_ns=("wall", "median"))
    keys = r["key"].to_numpy()
    spans = trace.instances.assign(key=keys[trace.instances["range"].to_numpy(dtype="int64")])
    gpu = aggregate(spans.groupby("key", sort=False), instances=("range", "nunique"),
                    gpu_span_ns=("gpu_span_ns", "sum"), gpu_idle_ns=("gpu_idle_ns", "sum"))
    counts = aggregate(trace.kernels.groupby("key"), kernel_count=("count", "sum"),
                       kernel_time_ns=("total_ns", "sum"))
    per_key = per_key.join(gpu).join(counts).fillna(0)
    out = per_key.join(trace.keys).sort_values("first_ns", kind="stable").reset_index()
    for col in ("instances", "kernel_count", "kernel_time_ns", "gpu_span_ns", "gpu_idle_ns",
                "wall_instances", "wall_ns"):
        out[col] = out[col].astype("int64")
    out["wall_median_ns"] = out["wall_median_ns"].astype(float)
    return out[SUMMARY_COLUMNS]


def leaf_paths(paths: list[str]) -> set[str]:
    """Paths that no other path extends (`a/b` is not a leaf when `a/b/c` is there).

    O(n log n) comparisons: in sorted order the paths that extend `p` (start with
    `p + "/"`) come first among those not less than `p + "/"`, so one binary search per
    path decides. (Cutting every path at each "/" copied each long emit_nvtx path once
    per level.)"""
    ordered = sorted(set(paths))
    out = set()
    for p in ordered:
        probe = p + "/"
        i = bisect.bisect_left(ordered, probe)
        if i == len(ordered) or not ordered[i].startswith(probe):
            out.add(p)
    return out
