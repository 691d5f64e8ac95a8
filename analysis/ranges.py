"""NVTX range attribution and per-range summaries: pure functions on loader frames.

Attribution is by launch, exactly as `nsys stats` (nvtx_kern_sum, nvtx_gpu_proj_sum) does
it: a GPU operation belongs to a range instance when the CUDA API call that launched it
(joined by correlationId) starts and ends inside the range, on the same thread. A
kernel therefore counts in every enclosing range; kernels launched by another thread
count only in that thread's ranges. GPU timestamps are never compared with CPU ranges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SUMMARY_COLUMNS = ["key", "domain", "path", "instances", "kernel_count", "kernel_time_ns",
                   "gpu_span_ns", "gpu_idle_ns", "graph_launches"]


def range_paths(ranges: pd.DataFrame) -> pd.Series:
    """Path of each range: enclosing push/pop names outer->inner joined by "/".

    Push/pop ranges nest per thread and per domain (NVTX keeps one stack for each), so
    the path is built from ranges of the same (global_tid, domain); a start/end range's
    path is its own name.
    """
    paths = pd.Series(ranges["name"].fillna("").astype(str).values, index=ranges.index)
    pushpop = ranges[ranges["style"] == "PushPop"]
    domain_key = pushpop["domain"].fillna("")
    for _, grp in pushpop.groupby([pushpop["global_tid"], domain_key], sort=False):
        order = grp.sort_values(["start_ns", "end_ns"], ascending=[True, False])
        stack: list[tuple[int, str]] = []  # (end_ns, path) of open enclosing ranges
        for idx, start, end, name in zip(order.index, order["start_ns"], order["end_ns"],
                                         paths[order.index], strict=True):
            while stack and not (start <= stack[-1][0] and end <= stack[-1][0]):
                stack.pop()
            path = f"{stack[-1][1]}/{name}" if stack else name
            paths[idx] = path
            stack.append((end, path))
    return paths


def attribute(calls: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Pairs (range index, call index) where the API call lies inside the range.

    `calls` needs global_tid, api_start_ns, api_end_ns (rows with NA never match).
    Per thread, calls sorted by start give each range a contiguous slice of candidates
    (binary search), filtered by end: cost is the number of matches, not ranges x calls.
    """
    pairs = []
    valid = calls.dropna(subset=["global_tid", "api_start_ns", "api_end_ns"])
    by_tid = {tid: grp.sort_values("api_start_ns") for tid, grp in valid.groupby("global_tid")}
    for tid, rgrp in ranges.groupby("global_tid"):
        cgrp = by_tid.get(tid)
        if cgrp is None or cgrp.empty:
            continue
        starts = cgrp["api_start_ns"].to_numpy(dtype="int64")
        ends = cgrp["api_end_ns"].to_numpy(dtype="int64")
        lo = np.searchsorted(starts, rgrp["start_ns"].to_numpy(dtype="int64"), side="left")
        hi = np.searchsorted(starts, rgrp["end_ns"].to_numpy(dtype="int64"), side="right")
        counts = hi - lo
        if counts.sum() == 0:
            continue
        range_pos = np.repeat(np.arange(len(rgrp)), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        call_pos = np.repeat(lo, counts) + offsets
        keep = ends[call_pos] <= rgrp["end_ns"].to_numpy(dtype="int64")[range_pos]
        pairs.append(pd.DataFrame({"range": rgrp.index.to_numpy()[range_pos[keep]],
                                   "call": cgrp.index.to_numpy()[call_pos[keep]]}))
    if not pairs:
        return pd.DataFrame({"range": pd.Series(dtype="int64"),
                             "call": pd.Series(dtype="int64")})
    return pd.concat(pairs, ignore_index=True)


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of intervals [start, end) (overlapping streams count once)."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # a new block begins where a start lies beyond every earlier end
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > run_end[:-1]
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_id[-1] + 1, dtype="int64")
    np.maximum.at(block_end, block_id, e)
    return int((block_end - block_start).sum())


def instance_spans(ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per range instance with GPU work: first op start -> last op end, and busy time."""
    joined = pairs.join(ops[["start_ns", "end_ns"]], on="call")
    rows = []
    for rng, grp in joined.groupby("range", sort=False):
        starts = grp["start_ns"].to_numpy(dtype="int64")
        ends = grp["end_ns"].to_numpy(dtype="int64")
        span = int(ends.max() - starts.min())
        rows.append((rng, span, span - union_ns(starts, ends)))
    return pd.DataFrame(rows, columns=["range", "gpu_span_ns", "gpu_idle_ns"])


def keyed_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """Ranges with their path and the key that groups instances: (domain, path)."""
    out = ranges.assign(path=range_paths(ranges))
    out["key"] = out["domain"].fillna("") + "\x00" + out["path"]
    return out


def kernel_table(ops: pd.DataFrame, pairs: pd.DataFrame, keyed: pd.DataFrame) -> pd.DataFrame:
    """Per (range key, kernel name): count, total/avg/min/max duration in ns.

    A kernel is counted once per range key even if two overlapping instances of the same
    range hold it (`nsys stats` would add its time twice there; its counts agree).
    """
    kern = pairs.join(keyed["key"], on="range").join(ops[["kind", "name", "duration_ns"]],
                                                     on="call")
    kern = kern[kern["kind"] == "kernel"].drop_duplicates(["key", "call"])
    agg = kern.groupby(["key", "name"], sort=False)["duration_ns"].agg(
        count="count", total_ns="sum", avg_ns="mean", min_ns="min", max_ns="max")
    return agg.reset_index().sort_values(["key", "total_ns"], ascending=[True, False])


def summarize(ranges: pd.DataFrame, ops: pd.DataFrame, graph_launches: pd.DataFrame,
              keyed: pd.DataFrame | None = None,
              pairs: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per range key (domain, path) with GPU work: the systems/1 numbers, in timeline order.

    Returns (summary with SUMMARY_COLUMNS, kernel_table). `gpu_span_ns` sums, per
    instance, first GPU op start -> last GPU op end over kernels, copies and sets, as
    nvtx_gpu_proj_sum's "Total Proj Time"; `gpu_idle_ns` is that span minus the time
    covered by the ops. `keyed` and `pairs` (from keyed_ranges / attribute) may be passed
    when the caller already has them.
    """
    if ranges.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS), kernel_table(
            ops, attribute(ops, ranges), keyed_ranges(ranges))
    keyed = keyed_ranges(ranges) if keyed is None else keyed
    pairs = attribute(ops, keyed) if pairs is None else pairs
    spans = instance_spans(ops, pairs).join(keyed[["key", "start_ns"]], on="range")
    kernels = kernel_table(ops, pairs, keyed)
    per_key = spans.groupby("key", sort=False).agg(
        instances=("range", "nunique"), gpu_span_ns=("gpu_span_ns", "sum"),
        gpu_idle_ns=("gpu_idle_ns", "sum"), first_ns=("start_ns", "min"))
    counts = kernels.groupby("key").agg(kernel_count=("count", "sum"),
                                        kernel_time_ns=("total_ns", "sum"))
    graph_pairs = attribute(graph_launches, keyed).join(keyed["key"], on="range")
    per_key = per_key.join(counts).join(graph_pairs.groupby("key").size().rename(
        "graph_launches"))
    per_key = per_key.fillna({"kernel_count": 0, "kernel_time_ns": 0, "graph_launches": 0})
    names = keyed.drop_duplicates("key").set_index("key")[["domain", "path"]]
    out = per_key.join(names).sort_values("first_ns").reset_index()
    for col in ("instances", "kernel_count", "kernel_time_ns", "gpu_span_ns", "gpu_idle_ns",
                "graph_launches"):
        out[col] = out[col].astype("int64")
    return out[SUMMARY_COLUMNS], kernels


def kernel_sequences(ops: pd.DataFrame, pairs: pd.DataFrame,
                     keyed: pd.DataFrame) -> dict[str, list[tuple[str, str, int]]]:
    """Per range path: its kernels (name, demangled name, duration_ns) in launch order."""
    kern = pairs.join(keyed["path"], on="range").join(
        ops[["kind", "name", "demangled_name", "duration_ns", "api_start_ns"]], on="call")
    kern = kern[kern["kind"] == "kernel"].drop_duplicates(["path", "call"])
    kern = kern.sort_values(["path", "api_start_ns"])
    return {path: list(zip(g["name"], g["demangled_name"].fillna(""),
                           g["duration_ns"].astype("int64"), strict=True))
            for path, g in kern.groupby("path", sort=False)}
