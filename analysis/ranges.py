"""NVTX range attribution and per-range summaries: pure functions on loader frames.

Attribution is by launch, exactly as `nsys stats` (nvtx_kern_sum, nvtx_gpu_proj_sum) does
it: a GPU operation belongs to a range instance when the CUDA API call that launched it
(joined by correlationId) starts and ends inside the range, on the same thread. A
kernel therefore counts in every enclosing range; kernels launched by another thread
count only in that thread's ranges. GPU timestamps are never compared with CPU ranges.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.gaps import timeline

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
    valid = valid[valid["global_tid"] >= 0]                  # -1: no API call was traced
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


def instance_spans(ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per range instance with GPU work: first op start -> last op end, and idle time."""
    return timeline(ops, pairs)[0]


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
    agg = kern.groupby(["key", "name"], sort=False, observed=True)["duration_ns"].agg(
        count="count", total_ns="sum", avg_ns="mean", min_ns="min", max_ns="max")
    return agg.reset_index().sort_values(["key", "total_ns"], ascending=[True, False])


def summarize(ranges: pd.DataFrame, ops: pd.DataFrame, graph_launches: pd.DataFrame,
              keyed: pd.DataFrame | None = None, pairs: pd.DataFrame | None = None,
              instances: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per range key (domain, path) with GPU work: the systems/1 numbers, in timeline order.

    Returns (summary with SUMMARY_COLUMNS, kernel_table). `gpu_span_ns` sums, per
    instance, first GPU op start -> last GPU op end over kernels, copies and sets, as
    nvtx_gpu_proj_sum's "Total Proj Time"; `gpu_idle_ns` is that span minus the time
    covered by the ops. `keyed`, `pairs` and `instances` (keyed_ranges, attribute,
    gaps.timeline) may be passed when the caller already has them.
    """
    if ranges.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS), kernel_table(
            ops, attribute(ops, ranges), keyed_ranges(ranges))
    keyed = keyed_ranges(ranges) if keyed is None else keyed
    pairs = attribute(ops, keyed) if pairs is None else pairs
    instances = instance_spans(ops, pairs) if instances is None else instances
    spans = instances.join(keyed[["key", "start_ns"]], on="range")
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


def kernel_facts(ops: pd.DataFrame, pairs: pd.DataFrame, keyed: pd.DataFrame,
                 is_gemm: Callable[[str], bool], is_pointwise: Callable[[str], bool]
                 ) -> dict[str, dict]:
    """Per range path, what the findings need of its kernels, without listing them all.

    names: distinct (name, demangled name) pairs; median_ns: median kernel duration;
    gemm_then_pointwise: the first (GEMM, pointwise) kernel names launched back to back
    in that range (predicates applied once per distinct name), or None.
    """
    kern = pairs.join(keyed["path"], on="range").join(
        ops[["kind", "name", "demangled_name", "duration_ns", "api_start_ns"]], on="call")
    kern = kern[kern["kind"] == "kernel"].drop_duplicates(["path", "call"])
    kern = kern.sort_values(["path", "api_start_ns"], kind="stable")
    names = kern["name"].astype("category")
    cats = names.cat.categories
    gemm = np.array([is_gemm(c) for c in cats], dtype=bool)[names.cat.codes.to_numpy()]
    point = np.array([is_pointwise(c) for c in cats], dtype=bool)[names.cat.codes.to_numpy()]
    path = kern["path"].to_numpy()
    hit = np.flatnonzero(gemm[:-1] & point[1:] & (path[:-1] == path[1:]))
    first_hit: dict[str, tuple[str, str]] = {}
    for i in hit:
        first_hit.setdefault(path[i], (str(kern["name"].iat[i]), str(kern["name"].iat[i + 1])))
    medians = kern.groupby("path")["duration_ns"].median()
    distinct = kern.drop_duplicates(["path", "name", "demangled_name"])
    return {p: {"names": list(zip(g["name"].astype(str), g["demangled_name"].astype(str),
                                  strict=True)),
                "median_ns": float(medians[p]), "gemm_then_pointwise": first_hit.get(p)}
            for p, g in distinct.groupby("path", sort=False)}
