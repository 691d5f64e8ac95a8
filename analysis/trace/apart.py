"""Range instances set apart from their range: where torch.compile compiled (TORCH_LOGS
placed a graph break or recompile there) and where far more kernels ran than in the
range's other instances (autotuning, first calls). Such an instance, with the ranges
nested in it, gets a path of its own (`step [compile]`, `step [warm-up]`) and is labelled
warm-up; the range's other instances stay as they are. `nsys stats`, which knows only
range names, is compared with the set-apart entries added up (nsys_stats.label).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.names import WARMUP_TAG, apart_prefix, named_warmup
from ..common.settings import WARMUP_EXTRA, WARMUP_FACTOR, WARMUP_MIN_INSTANCES, WARMUP_WALL_FACTOR
from .compile_events import place_on

if TYPE_CHECKING:
    from .types import Trace


def compiled_rows(r: pd.DataFrame, events: list[dict], session_start: int | None
                  ) -> set[int]:
    """Range rows in which TORCH_LOGS placed a compile event (the innermost range open)."""
    return {ev["range_row"] for ev in place_on(r, session_start, events)
            if ev.get("range_row") is not None}


def set_apart(r: pd.DataFrame, rows: set[int], part: str) -> pd.Series:
    """Paths with `part` given to each of `rows` that is an instance of a range repeated
    in its process, and to the ranges nested in that instance; outer rows first, and a
    row already inside a part is left as it is."""
    path = r["path"].to_numpy(dtype=object).copy()
    repeats = _repeats(path, r["pid"].to_numpy(dtype="int64"), rows)
    tid, dom = r["global_tid"].to_numpy(), r["domain"].fillna("").to_numpy()
    lo, hi = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    for row in sorted(rows, key=lambda x: len(path[x])):
        if repeats[row] < 2 or apart_prefix(path[row]):
            continue
        old = path[row]
        inner = np.flatnonzero((tid == tid[row]) & (dom == dom[row]) & (lo >= lo[row])
                               & (hi <= hi[row]))
        for q in inner:
            if path[q] == old or path[q].startswith(old + "/"):
                path[q] = old + part + path[q][len(old):]
    return pd.Series(path, index=r.index, dtype=object)


@dataclass
class PerInstance:
    """What warm-up instances are found from: the keyed ranges, and per instance its
    kernels (range, kernel_count) and host calls (range, module_loads, ...): a Trace has
    them, and so has a one-window export before its attribution pass (runners)."""

    ranges: pd.DataFrame
    instance_kernels: pd.DataFrame
    host: pd.DataFrame


def _repeats(path: np.ndarray, pid: np.ndarray, rows: set[int]) -> dict[int, int]:
    """Row -> instances of its range (path) in its process, for `rows` (few of the
    ranges: a count over the paths they hold, not a numbering of every path)."""
    held = {path[row] for row in rows}
    counts: Counter = Counter()
    if len(held) <= FEW_PATHS:                  # each compared in C with every path
        for p in held:
            counts.update((d, p) for d in pid[np.flatnonzero(path == p)].tolist())
    else:                                       # one pass in Python over them all
        counts.update((d, p) for d, p in zip(pid.tolist(), path.tolist(), strict=True)
                      if p in held)
    return {row: counts[(int(pid[row]), path[row])] for row in rows}


FEW_PATHS = 16
"""Up to this many paths, _repeats finds each by a numpy comparison (a millisecond per
path over 66k ranges, against 20 ms for the pass in Python)."""


def warmup_instances(trace: Trace | PerInstance) -> dict[int, str]:
    """Instances (rows of trace.ranges) of ranges repeated at least WARMUP_MIN_INSTANCES
    times in their process that launched at least WARMUP_FACTOR times the median
    instance's kernels and WARMUP_EXTRA more: what autotuning leaves (Inductor's
    max-autotune and `@triton.autotune` benchmark every candidate, with an L2-flush
    fill between runs, inside the first call's range), and first calls that initialise.
    Row -> why. Rows already set apart, or named as warm-up, are not candidates."""
    r, ik = trace.ranges, trace.instance_kernels
    n = np.zeros(len(r), dtype="int64")
    n[ik["range"].to_numpy(dtype="int64")] = ik["kernel_count"].to_numpy(dtype="int64")
    g = pd.Series(n).groupby(r["key"].to_numpy())
    size, med = g.transform("size").to_numpy(), g.transform("median").to_numpy()
    hit = np.flatnonzero((size >= WARMUP_MIN_INSTANCES) & (n >= WARMUP_FACTOR * med)
                         & (n >= med + WARMUP_EXTRA))
    paths = r["path"].to_numpy(dtype=object)
    out = {int(i): f"launched {n[i]:,} kernels where the range's {size[i]} instances "
           f"launched a median of {med[i]:g} (autotuning or first-call work)" for i in hit
           if not apart_prefix(paths[i])}
    for i, why in first_calls(trace).items():
        out.setdefault(i, why)
    return {i: why for i, why in out.items() if not named_warmup(paths[i])}


def first_calls(trace: Trace | PerInstance) -> dict[int, str]:
    """The leading instances of a range repeated at least WARMUP_MIN_INSTANCES times in
    its process that each took at least WARMUP_WALL_FACTOR times the median instance's
    wall time and loaded modules (lazy loading, library initialisation, compilation,
    CUDA-graph recording): first calls, not the steady state; of a range run twice, the
    first where it took that many times the second. Row -> why."""
    r = trace.ranges
    wall = (r["end_ns"] - r["start_ns"]).to_numpy(dtype="int64")
    loads = np.zeros(len(r), dtype="int64")
    if len(trace.host):
        loads[trace.host["range"].to_numpy(dtype="int64")] = trace.host[
            "module_loads"].to_numpy(dtype="int64")
    order = np.lexsort((r["start_ns"].to_numpy(), r["key"].to_numpy()))
    key = r["key"].to_numpy()[order]
    g = pd.Series(wall[order]).groupby(key)
    size, med = g.transform("size").to_numpy(), g.transform("median").to_numpy()
    med = np.where(size == 2, g.transform("min").to_numpy(), med)   # twice: the other one
    slow = ((size >= WARMUP_MIN_INSTANCES) | (size == 2)) \
        & (wall[order] >= WARMUP_WALL_FACTOR * med) & (loads[order] > 0)
    leading = pd.Series(slow).groupby(key).cummin().to_numpy().astype(bool)
    paths = r["path"].to_numpy(dtype=object)
    return {int(i): f"took {wall[i] / 1e6:,.1f} ms with {loads[i]} module load(s), the "
            f"median instance {m / 1e6:,.2f} ms (a first call: lazy loading, library "
            "initialisation, compilation or CUDA-graph recording)"
            for i, m in zip(order[leading], med[leading], strict=True)
            if not apart_prefix(paths[i])}


def with_warmup_apart(run: Callable[[dict[int, str]], Trace],
                      counted: Callable[[], PerInstance | None] = lambda: None) -> Trace:
    """`run(apart)` with the warm-up instances (warmup_instances) set apart, the reasons
    kept in Trace.warmup. They are found from `counted()` where it gives the counts
    before any pass (one attribution pass); otherwise from `run({})`, and `run` again
    only when that trace has some."""
    found = counted()
    if found is not None:
        apart = warmup_instances(found)
        trace = run(apart)
    else:
        trace = run({})
        apart = warmup_instances(trace)
        if not apart:
            return trace
        trace = run(apart)
    paths = trace.ranges["path"].to_numpy(dtype=object)
    for row, why in apart.items():
        if paths[row].endswith(WARMUP_TAG):
            trace.warmup.setdefault(paths[row], why)
    return trace
