"""Windows' partial aggregates (analysis/trace/partial.py) merged into the whole trace's.

Counts and sums add, minima and maxima combine; the order-sensitive parts are made
order-free before they meet here: kernel-table rows carry the ordering columns of their
first launch pair (so ties keep the whole trace's appearance order), back-to-back kernel
pairs come with each window's first and last kernel per path (joined at window edges),
and per range instance the idle gap that crosses window edges is closed here from the
first operation of the later window and the running end of the earlier ones, its truly
idle part from the edge pieces and the whole windows between (process busy per window).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..common.frames import aggregate
from ..load.nsys_sqlite import PID_MASK
from .partial import FIRST_COLUMNS, FIRST_OPS_CAP, GAP_COLUMNS, Partial, gap_summary


def _cat(parts: list[Partial], attr: str) -> pd.DataFrame:
    frames = [getattr(p, attr).assign(window=p.index) for p in parts
              if len(getattr(p, attr))]
    if not frames:
        return getattr(parts[0], attr).assign(window=pd.Series(dtype="int64"))
    return pd.concat(frames, ignore_index=True)


def kernels(parts: list[Partial]) -> pd.DataFrame:
    """Trace.kernels: per (key, name) count, total/min/max/avg ns; by key, then total time
    (largest first), ties in the order the whole trace's pairs first showed them. A kernel
    counts once per key even when two overlapping instances of the range hold it (`nsys
    stats` would add its time twice there; its counts agree)."""
    k = _cat(parts, "kernels")
    k["name"] = k["name"].astype(str)
    k = k.sort_values(FIRST_COLUMNS, kind="stable")
    agg = aggregate(k.groupby(["key", "name"], sort=False),
                    count=("count", "sum"), total_ns=("total_ns", "sum"),
                    min_ns=("min_ns", "min"), max_ns=("max_ns", "max")).reset_index()
    agg["avg_ns"] = agg["total_ns"] / agg["count"]
    for c in ("key", "count", "total_ns", "min_ns", "max_ns"):
        agg[c] = agg[c].astype("int64")
    return agg.sort_values(["key", "total_ns"], ascending=[True, False], kind="stable")


def _window_busy(parts: list[Partial], gpids: np.ndarray, n: int) -> dict[int, np.ndarray]:
    """Per process (global pid): cumulative GPU busy time over windows 0..n-1 (for gaps
    across them)."""
    out = {}
    for g in np.unique(gpids):
        per = np.zeros(n + 1, dtype="int64")
        for p in parts:
            per[p.index + 1] += p.process_busy.get(int(g), 0)
        out[int(g)] = np.cumsum(per)
    return out


def instances(parts: list[Partial], ranges: pd.DataFrame, gap_ns: int
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per range instance: range, gpu_span_ns, gpu_idle_ns, last_ns (the end of its last
    GPU operation); per key: the idle gaps at least gap_ns long, window-internal ones and
    those across window edges)."""
    inst = _cat(parts, "instances").sort_values(["range", "window"], kind="stable")
    rng = inst["range"].to_numpy(dtype="int64")
    g = inst.groupby("range", sort=True)
    out = pd.DataFrame({"gpu_span_ns": g["last_ns"].max() - g["first_ns"].min(),
                        "covered": g["covered"].sum(), "last_ns": g["last_ns"].max()})
    out["gpu_idle_ns"] = out["gpu_span_ns"] - out["covered"]
    out = out.reset_index()[["range", "gpu_span_ns", "gpu_idle_ns", "last_ns"]].astype(
        "int64")
    run = inst["run_end"].to_numpy(dtype="int64")
    prev_max = pd.Series(run).groupby(rng).cummax().groupby(rng).shift(1).to_numpy()
    head = inst["head_ns"].to_numpy(dtype="int64")
    cross = np.flatnonzero(~np.isnan(prev_max) & inst["head_owned"].to_numpy(dtype=bool)
                           & (head > np.nan_to_num(prev_max, nan=0)))
    gaps = [p.gaps for p in parts if len(p.gaps)]
    if len(cross):
        before = prev_max[cross].astype("int64")
        gpids = ranges["global_tid"].to_numpy(dtype="int64")[rng[cross]] & PID_MASK
        win = inst["window"].to_numpy(dtype="int64")
        cum = _window_busy(parts, gpids, max(p.index for p in parts) + 1)
        middle = np.array([cum[int(g)][b] - cum[int(g)][a + 1] for g, a, b in
                           zip(gpids, win[cross - 1], win[cross], strict=True)], dtype="int64")
        busy = (inst["right_cov"].to_numpy(dtype="int64")[cross - 1] + middle
                + inst["left_cov"].to_numpy(dtype="int64")[cross])
        frame = pd.DataFrame({"key": ranges["key"].to_numpy()[rng[cross]],
                              "idle": head[cross] - before - busy,
                              "host_wait": inst["head_api"].to_numpy()[cross] > before})
        gaps.append(gap_summary(frame, gap_ns))
    return out, _sum_gaps(gaps)


def _sum_gaps(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=GAP_COLUMNS)
    g = pd.concat(frames, ignore_index=True).groupby("key")
    out = pd.DataFrame({"gaps": g["gaps"].sum(), "gap_ns": g["gap_ns"].sum(),
                        "largest_gap_ns": g["largest_gap_ns"].max(),
                        "host_wait_ns": g["host_wait_ns"].sum()})
    return out.reset_index().astype("int64")


def busy(parts: list[Partial], ranges: pd.DataFrame) -> pd.DataFrame:
    """Per range instance: range, wall_ns, busy_ns (its process's GPU busy inside it)."""
    lo, hi = ranges["start_ns"].to_numpy(dtype="int64"), ranges["end_ns"].to_numpy(dtype="int64")
    total = np.zeros(len(ranges), dtype="int64")
    for p in parts:
        np.add.at(total, p.busy["range"].to_numpy(dtype="int64"),
                  p.busy["busy_ns"].to_numpy(dtype="int64"))
    return pd.DataFrame({"range": np.arange(len(ranges)), "wall_ns": hi - lo,
                         "busy_ns": total})


def summed(parts: list[Partial], attr: str, by: list[str], how: dict[str, str]
           ) -> pd.DataFrame:
    """Concatenate one aggregate of every window and combine it per `by` (a window's
    aggregate holds each `by` once: one window's only needs the order of the groups)."""
    frame = _cat(parts, attr).drop(columns="window")
    if frame.empty:
        return frame
    if len(parts) == 1:
        return (frame.dropna(subset=by)[by + list(how)].sort_values(by, kind="stable")
                .reset_index(drop=True))
    return aggregate(frame.groupby(by, sort=True),
                     **{c: (c, f) for c, f in how.items()}).reset_index()


def pair_order(parts: list[Partial]) -> pd.DataFrame:
    """Distinct back-to-back kernel name pairs per pathid in order of first occurrence
    over the whole trace (window edges joined through each window's first/last kernel)."""
    last: dict[int, str] = {}
    frames = []
    ordered = sorted(parts, key=lambda p: p.index)
    for i, p in enumerate(ordered):
        ends = p.seq_ends
        ids = ends["pathid"].tolist()
        if last:
            edge = [(k, last[k], first) for k, first in zip(ids, ends["first"].tolist(),
                                                            strict=True) if k in last]
            frames.append(pd.DataFrame(edge, columns=["pathid", "a", "b"]))
        if i + 1 < len(ordered):             # the last window's ends join nothing
            last.update(zip(ids, ends["last"].tolist(), strict=True))
        frames.append(p.seq_pairs)
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["pathid", "a", "b"])
    pairs = pd.concat(frames, ignore_index=True).drop_duplicates()
    return pairs.sort_values("pathid", kind="stable").reset_index(drop=True)


def with_paths(frame: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """`pathid` replaced by the (pid, path) it stands for (the Trace's keys)."""
    if frame.empty:
        return pd.DataFrame(columns=["pid", "path", *[c for c in frame if c != "pathid"]])
    pathid = keys["pathid"].to_numpy(dtype="int64")     # 0..n-1 (model.keyed)
    first = np.unique(pathid, return_index=True)[1]      # a key row of each pathid
    ids = frame["pathid"].to_numpy(dtype="int64")
    out = frame.drop(columns="pathid")
    out.insert(0, "path", pd.Series(keys["path"].to_numpy(dtype=object)[first][ids],
                                    dtype=object, index=out.index))
    out.insert(0, "pid", keys["pid"].to_numpy(dtype="int64")[first][ids])
    return out.reset_index(drop=True)


def first_ops(parts: list[Partial]) -> pd.DataFrame:
    """The watched instances' operations in start order (at most FIRST_OPS_CAP each)."""
    ops = _cat(parts, "first_ops").sort_values(["range", "start_ns", "table", "rowid"],
                                               kind="stable")
    ops = ops.drop(columns="window")
    return ops.groupby("range", sort=False).head(FIRST_OPS_CAP).reset_index(drop=True)


def rank(parts: list[Partial]) -> dict[int, dict[str, int]]:
    """steps.rank_measures per process summed over the windows (empty when not asked)."""
    out: dict[int, dict[str, int]] = {}
    for p in parts:
        for pid, measures in (p.rank or {}).items():
            mine = out.setdefault(pid, {})
            for k, v in measures.items():
                mine[k] = mine.get(k, 0) + v
    return out
