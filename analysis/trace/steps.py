"""The step range of a rank and its per-window measures (part of the attribution pass).

Per rank, over the instances of its step range (`--step NAME`, by default the user's loop
range loop_path picks: never a library's range, an emit_nvtx op or a repeat
shorter than STEP_MIN_NS unless named a step), each
window of the timeline (analysis/trace/partial.py) sums: compute and NCCL kernel time of the
kernels of the process that started inside the step (`nccl*` names are communication), and
the unions of NCCL kernels, of compute beside NCCL, and of every operation inside the
steps. analysis/diagnosis/ranks.py turns the summed measures into the cross-rank document.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ..common.intervals import clipped_union, covered, union
from ..common.names import is_op_path, library_mask, matching, tagged_paths
from ..common.settings import STEP_MIN_COUNT, STEP_MIN_NS
from ..load.nsys_sequence import NCCL


def step_rows(ranges: pd.DataFrame, step: str | None) -> np.ndarray:
    """Rows of the keyed ranges that are the step's instances (see the module doc)."""
    names = ranges["path"].to_numpy(dtype=object)
    if step is not None:
        return np.flatnonzero((names == step) | (ranges["name"].to_numpy(dtype=object) == step))
    pick = loop_path(ranges, is_op_path)
    return np.flatnonzero(names == pick) if pick is not None else np.zeros(0, dtype=int)


def rank_measures(ops: pd.DataFrame, steps_lo: np.ndarray, steps_hi: np.ndarray, lo: int,
                  hi: int) -> dict[str, int]:
    """One window's share of a rank's numbers (sums over windows give the whole): kernel
    time of compute and NCCL kernels started inside a step (owned operations), and the
    unions (NCCL, compute beside NCCL, all operations inside the steps) clipped to the
    window [lo, hi)."""
    names = ops["name"].astype("category")
    hit = np.array([bool(NCCL.search(str(c))) for c in names.cat.categories], dtype=bool)
    kern = (ops["kind"] == "kernel").to_numpy()
    nccl = (hit[names.cat.codes.to_numpy()] if len(ops) else np.zeros(0, bool)) & kern
    compute = kern & ~nccl
    s, e = ops["start_ns"].to_numpy(dtype="int64"), ops["end_ns"].to_numpy(dtype="int64")
    ws, we = union(steps_lo, steps_hi)
    at = np.searchsorted(ws, s, side="right") - 1
    inside = (at >= 0) & (s < we[np.maximum(at, 0)]) if len(ws) else np.zeros(len(s), bool)
    owned, dur = ~ops["halo"].to_numpy(dtype=bool), e - s
    c_blocks = clipped_union(s[compute & inside], e[compute & inside], lo, hi)
    n_s, n_e = clipped_union(s[nccl & inside], e[nccl & inside], lo, hi)
    every = clipped_union(s, e, lo, hi)
    return {"compute_ns": int(dur[compute & inside & owned].sum()),
            "nccl_ns": int(dur[nccl & inside & owned].sum()),
            "nccl_total_ns": int(dur[nccl & owned].sum()), "nccl_union_ns": int((n_e - n_s).sum()),
            "overlap_ns": int(covered(*c_blocks, n_s, n_e).sum()) if len(n_s) else 0,
            "busy_ns": int(covered(*every, steps_lo, steps_hi).sum()) if len(steps_lo) else 0}


def user_ranges(r: pd.DataFrame, is_op: Callable[[str], bool]) -> pd.DataFrame:
    """The user's own range instances: not a library's, not an emit_nvtx op, not set
    apart as warm-up."""
    own = own_ranges(r, is_op)
    return own[~tagged(own["path"])]


def own_ranges(r: pd.DataFrame, is_op: Callable[[str], bool]) -> pd.DataFrame:
    """The user's range instances, those set apart as warm-up included."""
    return r[~library_mask(r["domain"]) & ~matching(is_op, r["path"].tolist())]


def tagged(paths: pd.Series) -> np.ndarray:
    """Whether each path is set apart as warm-up (a tag anywhere in it)."""
    return tagged_paths(paths.tolist())


def loop_path(r: pd.DataFrame, is_op: Callable[[str], bool]) -> str | None:
    """The user's loop range that gives the steps (the ranks' step range too)."""
    return loop_of(user_ranges(r, is_op))


def loop_of(user: pd.DataFrame) -> str | None:
    """The user's loop range that gives the steps (see the module doc), or None."""
    wall = (user["end_ns"] - user["start_ns"]).groupby(user["path"])
    stats = pd.DataFrame({"n": wall.size(), "total": wall.sum(), "median": wall.median()})
    stats = stats[stats["n"] >= STEP_MIN_COUNT]
    if stats.empty:
        return None
    named = stats[[p.rsplit("/", 1)[-1].lower().endswith("step") for p in stats.index]]
    if len(named):                       # the most instances (a warm-up call of the
        return str(named.sort_values(["n", "total"]).index[-1])   # step outside the loop)
    long = stats[(stats["median"] >= STEP_MIN_NS) & ~with_twin(stats["n"])]
    return str(long["total"].idxmax()) if len(long) else None


def with_twin(n: pd.Series) -> np.ndarray:
    """Loops with a sibling repeated as often (`fwd`, `bwd`, `opt` under one parent): each
    is a phase of an iteration no range marks, not the step."""
    parent = pd.Series([p.rpartition("/")[0] for p in n.index], index=n.index)
    return pd.DataFrame({"parent": parent, "n": n}).duplicated(
        ["parent", "n"], keep=False).to_numpy()
