"""A loop as it runs: its runs of instances, an instance's cost as it runs, the steps'
start-to-start intervals and their tail.

A *run* of a loop range (one key) is a maximal sequence of its instances on one thread
with no instance set apart from it (warm-up: another key of the same steady path), of an
enclosing range that repeats less often (a loop of a program that runs several, each
twice), or, for a block of steps (a range holding a loop of its own), of another block
beside it (an A/B program's `planted` and `fixed` arms taking turns, `train` and `eval`)
starting between two of them: the phases of an iteration (`fwd`, `bwd`, or a `step`
inside a `train_step` repeated as often) run as long as the iteration does. A run ends at the
later of its last instance's end and the end of the last GPU operation its instances
launched, on their own thread (`Trace.instances.last_ns`) or on another thread of the
process while they were open (`Trace.other.last_ns`): the GPU backlog of the last step is
part of the run, as the synchronize after a loop waits for it.

Per loop: `run_per_instance_ns`, the runs' spans summed over their instances; the steps as
they run, each from its instance's start to the next one's (the last of a run: to the
run's end), so that their mean is `run_per_instance_ns`; their median with its interval,
p10 and p90; `tail_ns`, the mean less the median where positive; and the tail steps
(TAIL_FACTOR times the median or more) with what their instance did (host parts, kernels
launched).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..common.names import steady_path, tagged_paths
from ..documents.types import TailStep
from ..load.nsys_pysamples import PySamples
from ..load.nsys_sqlite import PID_MASK
from ..trace.pylines import top_line
from ..trace.types import Trace
from .stats import median_interval

TAIL_FACTOR = 3.0
"""A step this many times the median or longer is a tail step."""
TAIL_KEEP = 10
"""Tail steps listed per loop at most (the longest)."""
RUN_COLUMNS = ("runs", "run_instances", "run_per_instance_ns", "step_median_ns",
               "step_low_ns", "step_high_ns", "step_p10_ns", "step_p90_ns", "step_mean_ns",
               "tail_ns", "tail_steps")


@dataclass
class Runs:
    """One key's runs: per instance (range rows in start order) its run and its step."""

    rows: np.ndarray          # range rows, in start order
    run: np.ndarray           # run number of each
    step_ns: np.ndarray       # start to the next start (the last of a run: to its end)
    spans: np.ndarray         # per run: first start to its end


def gpu_ends(trace: Trace) -> np.ndarray:
    """Per range row: the end of the last GPU operation it launched, on its own thread or
    another of its process while it was open (0: none)."""
    end = np.zeros(len(trace.ranges), dtype="int64")
    for frame in (trace.instances, trace.other):
        if len(frame):
            np.maximum.at(end, frame["range"].to_numpy(dtype="int64"),
                          frame["last_ns"].to_numpy(dtype="int64"))
    return end


def gpu_reach(trace: Trace, ends: np.ndarray, windows: list[tuple[int, int, int]]
              ) -> list[int]:
    """Per step window (global pid, lo, hi): how late the GPU operations its calls launched
    may end, at least hi: the latest `ends` (gpu_ends) of the process's ranges that start
    in it. A step as it runs holds more than its own range (the iteration's other ranges
    beside it: a `step` range after a `load` one), and where the GPU runs behind, what
    they launched runs after the window; read only up to the range's own work, the step
    misses it and is priced alone, as if the host held it."""
    r = trace.ranges
    pid = r["global_tid"].to_numpy(dtype="int64") & PID_MASK
    start = r["start_ns"].to_numpy(dtype="int64")
    by: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for p in {w[0] for w in windows}:
        rows = np.flatnonzero(pid == p)
        rows = rows[np.argsort(start[rows], kind="stable")]
        by[p] = (start[rows], ends[rows])
    out = []
    for p, lo, hi in windows:
        at, end = by[p]
        a, b = np.searchsorted(at, [lo, hi])
        out.append(max(hi, int(end[a:b].max())) if b > a else hi)
    return out


def key_context(trace: Trace) -> dict[str, Any]:
    """Per key (Trace.keys' order): key, path, steady path (warm-up tags taken off),
    instance count, parent path and whether it is a block of steps, made once for every
    loop; and `positions`, each path's positions among the keys (a loop's enclosing ranges
    are looked up by path, not found by testing every key's path: 110k keys on the
    emit_nvtx capture, 25 ms a loop)."""
    kind, paths = trace.keys.index.to_numpy(dtype="int64"), trace.keys["path"]
    tagged = tagged_paths(paths.tolist())
    steady = paths.to_numpy(dtype=object).copy()     # few paths hold a tag
    steady[tagged] = [steady_path(p) for p in steady[tagged]]
    count = trace.ranges["key"].value_counts().reindex(kind, fill_value=0).to_numpy()
    path = paths.to_numpy(dtype=object)
    parent = np.array([p.rpartition("/")[0] for p in steady.tolist()], dtype=object)
    positions: dict[str, list[int]] = {}
    for i, p in enumerate(path.tolist()):
        positions.setdefault(p, []).append(i)
    return {"key": kind, "path": path, "steady": steady, "count": count, "parent": parent,
            "positions": positions, "block": _blocks(steady, count, trace.keys["pid"].to_numpy()
                             if "pid" in trace.keys else np.zeros(len(kind), dtype=np.int64))}


def _blocks(steady: np.ndarray, count: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Per key: whether it holds a loop of its own (a range under it, same process,
    repeats more often than it)."""
    most: dict[tuple, int] = {}
    many = np.flatnonzero(count > 1)          # a range run once makes no range above a block
    for p, c, d in zip(steady[many].tolist(), count[many].tolist(), pid[many].tolist(),
                       strict=True):
        parts = p.split("/")
        for i in range(1, len(parts)):
            at = (d, "/".join(parts[:i]))
            most[at] = max(most.get(at, 0), c)
    out = np.zeros(len(steady), dtype=bool)
    if most:
        out[:] = [most.get((d, p), 0) > c for p, c, d in
                  zip(steady.tolist(), count.tolist(), pid.tolist(), strict=True)]
    return out


def _breaks(trace: Trace, key: int, ctx: dict[str, Any]) -> dict[int, np.ndarray]:
    """The starts of the instances that end a run of `key`, sorted, by thread: its
    set-apart siblings' (the same steady path), those of an enclosing range that repeats
    less often (one loop of several in a program; not the step a phase is one of, which
    repeats as often), and, for a block of steps (a range holding a loop of its own: an
    epoch, one arm of an A/B program), those of the other blocks beside it (same parent:
    `train` then `eval`, `planted` then `fixed`)."""
    kind, paths, me = ctx["key"], ctx["path"], ctx["key"] == key
    parts = str(paths[me][0]).split("/")
    above = {"/".join(parts[:i]) for i in range(1, len(parts))}
    enclosing = np.zeros(len(paths), dtype=bool)
    enclosing[[i for p in above for i in ctx["positions"].get(p, ())]] = True
    enclosing &= ctx["count"] < ctx["count"][me][0]
    peers = ctx["block"] & ctx["block"][me][0] & (ctx["parent"] == ctx["parent"][me][0])
    cut = kind[((ctx["steady"] == ctx["steady"][me][0]) | enclosing | peers) & ~me]
    r = trace.ranges
    at = np.isin(r["key"].to_numpy(), cut)
    tid, start = r["global_tid"].to_numpy(dtype="int64")[at], r["start_ns"].to_numpy(
        dtype="int64")[at]
    return {int(t): np.sort(start[tid == t]) for t in np.unique(tid)}


def key_runs(trace: Trace, key: int, ends: np.ndarray, ctx: dict[str, Any]
             ) -> Runs:
    """The runs of one key (see the module doc); `ends`: gpu_ends(trace); `ctx`:
    key_context(trace)."""
    r = trace.ranges
    rows = np.flatnonzero(r["key"].to_numpy() == key)
    start = r["start_ns"].to_numpy(dtype="int64")[rows]
    tid = r["global_tid"].to_numpy(dtype="int64")[rows]
    order = np.lexsort((start, tid))
    rows, start, tid = rows[order], start[order], tid[order]
    new = np.r_[True, tid[1:] != tid[:-1]]
    breaks = _breaks(trace, key, ctx)
    for t in np.unique(tid):
        if int(t) not in breaks:
            continue
        at, cut = np.flatnonzero(tid == t), breaks[int(t)]
        between = np.searchsorted(cut, start[at][1:], side="right") > \
            np.searchsorted(cut, start[at][:-1], side="right")
        new[at[1:]] |= between
    run = np.cumsum(new) - 1
    finish = np.maximum(r["end_ns"].to_numpy(dtype="int64")[rows], ends[rows])
    run_end = pd.Series(finish).groupby(run).max().to_numpy()
    first = pd.Series(start).groupby(run).min().to_numpy()
    nxt = np.r_[start[1:], 0]
    last = np.r_[new[1:], True]
    step = np.where(last, run_end[run] - start, nxt - start)
    return Runs(rows, run, step, run_end - first)


def run_fields(trace: Trace, key: int, ends: np.ndarray, ctx: dict[str, Any],
               py: PySamples | None = None, cwd: str | None = None) -> dict:
    """The RUN_COLUMNS of one loop key (`ctx`: key_context(trace); `py`, `cwd`: the
    Python samples and the program's directory, for the tail steps' lines)."""
    runs = key_runs(trace, key, ends, ctx)
    step = runs.step_ns.astype("float64")
    median = float(np.median(step))
    low, high = median_interval(step)
    p10, p90 = (float(v) for v in np.percentile(step, [10, 90]))
    mean = float(runs.spans.sum()) / len(step)
    return {"runs": len(runs.spans), "run_instances": len(step),
            "run_per_instance_ns": round(mean), "step_median_ns": median,
            "step_low_ns": low, "step_high_ns": high, "step_p10_ns": p10,
            "step_p90_ns": p90, "step_mean_ns": mean, "tail_ns": max(round(mean - median), 0),
            "tail_steps": tail_steps(trace, runs, median, ends, py, cwd)}


def tail_steps(trace: Trace, runs: Runs, median: float, ends: np.ndarray,
               py: PySamples | None = None, cwd: str | None = None) -> list[TailStep]:
    """The steps TAIL_FACTOR times the median or longer, the longest first (at most
    TAIL_KEEP), each with what its instance did: host time by kind, kernels, and the
    user's line its thread's Python samples fell on most during the step (`py`), and the
    part of the step after its range that its GPU work still ran (`ends`: gpu_ends)."""
    at = np.flatnonzero(runs.step_ns >= TAIL_FACTOR * median) if median > 0 else []
    at = sorted(at, key=lambda i: -runs.step_ns[i])[:TAIL_KEEP]
    if not at:
        return []
    r, host = trace.ranges, trace.host.set_index("range")
    kernels = trace.instance_kernels.set_index("range")["kernel_count"]
    out = []
    for i in at:
        row = int(runs.rows[i])
        parts = host.loc[row] if row in host.index else None
        spent = {p: int(parts[f"host_{p}_ns"]) if parts is not None else 0
                 for p in ("sync", "memory", "launch", "os")}
        start, step = int(r["start_ns"].iat[row]), int(runs.step_ns[i])
        end = int(r["end_ns"].iat[row])
        backlog = max(min(int(ends[row]), start + step) - end, 0)
        line = top_line(py, int(r["global_tid"].iat[row]), start, start + step, cwd) \
            if py is not None and len(py) else ""
        out.append(TailStep(
            instance=int(i), start_ns=start, step_ns=step,
            wall_ns=end - start, kernels=int(kernels.get(row, 0)),
            **{f"{p}_ns": v for p, v in spent.items()}, backlog_ns=backlog, line=line))
    return out


def run_columns(trace: Trace, keys: np.ndarray, rows: list[int],
                made: Callable[[], tuple[np.ndarray, dict[str, Any]]],
                py: PySamples | None = None, cwd: str | None = None) -> pd.DataFrame:
    """RUN_COLUMNS by range-table row, for the loop rows `rows` (`keys`: the key of each
    table row; `made()`: the trace's gpu_ends and key_context, as the step models hold them
    (StepModels.run_context), asked for only where there are loop rows: on the 66k-range
    record_shapes capture, which has none, they cost 0.05 s; `py`, `cwd`: as run_fields)."""
    fields: list[dict] = []
    if rows:
        ends, ctx = made()
        fields = [run_fields(trace, int(keys[row]), ends, ctx, py, cwd) for row in rows]
    frame = pd.DataFrame({c: pd.Series([f[c] for f in fields], dtype=object)
                          for c in RUN_COLUMNS})
    frame.index = pd.Index(rows, dtype="int64")
    for c in RUN_COLUMNS:
        if c != "tail_steps":
            frame[c] = frame[c].astype("float64" if c.startswith("step_") else "int64")
    return frame
