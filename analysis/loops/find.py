"""The steps of each process, in any trace (the document's `steps`).

Per process, the first source that gives at least STEP_MIN_COUNT steps:
1. `named`: the range `--step NAME` names;
2. `user range`: the user's loop range (repeated, not an emit_nvtx op range, not a
   library's, not warm-up): the one whose name ends in "step" with the most instances
   first, else the loop with the most wall time whose median instance lasts STEP_MIN_NS
   or more and that no sibling repeats as often (`fwd`, `bwd`, `opt`: phases of a step
   no range marks);
3. `profiler marker`: PyTorch profiler's `ProfilerStep#N` ranges;
4. `detected`: the period of the repeating kernel sequence of the process's busiest
   stream (loops/period.py), each step from the kernel that follows the longest gap of the
   period to the same kernel one period later, in GPU time; NCCL's cadence (its kernels,
   else its ranges, as many in every step) said beside it; at least STEP_MIN_NS;
5. `whole capture`: the process's GPU work, first to last kernel, as one step.
A step shorter than STEP_MIN_NS is never taken unless the user named it, or named it a
step: a repeat that short is an op or a collective, not the step of a training run.
Steady steps only: a range's warm-up instances are set apart already (apart.py), and a
leading marked or detected step WARMUP_WALL_FACTOR times the median is warm-up too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..common.names import is_detected, matching, steady_path
from ..common.settings import STEP_MIN_COUNT, STEP_MIN_NS, WARMUP_WALL_FACTOR
from ..documents.types import StepSet
from ..load.nsys_sequence import DETECT_ROWS
from ..trace.ranges import plain_names
from ..trace.steps import loop_of, own_ranges, tagged
from .period import nccl_cadence, period_steps
from .stats import described

MARKER = re.compile(r"^ProfilerStep#\d+")


Windows = dict[int | None, tuple[np.ndarray, np.ndarray]]


def find_steps(ranges: pd.DataFrame, is_op: Callable[[str], bool],
               sequence: Callable[[], pd.DataFrame], step: str | None = None
               ) -> tuple[list[StepSet], Windows]:
    """One StepSet per process of the trace's ranges and kernels (see the module doc),
    and the detected steps' windows per process (GPU time: the ranks' measures);
    `sequence` reads the kernel sequence (load/nsys_sequence.py) when a process needs it."""
    seq: pd.DataFrame | None = None
    pids = set(ranges["pid"].dropna().astype("int64").tolist()) if len(ranges) else set()
    out, windows = [], {}
    for pid in sorted(pids) or [None]:
        mine = ranges[ranges["pid"] == pid] if pid is not None else ranges
        found = _from_ranges(mine, is_op, step)
        if found is None:
            seq = sequence() if seq is None else seq
            found, windows[pid] = from_kernels(seq, mine, pid)
        found.pid = pid
        out.append(found)
    return out, {p: w for p, w in windows.items() if len(w[0])}


def _from_ranges(r: pd.DataFrame, is_op: Callable[[str], bool], step: str | None
                 ) -> StepSet | None:
    """Steps from a range: named, the user's loop, or the profiler's markers."""
    if step is not None:
        rows = r[(r["path"] == step) | (r["name"] == step)]
        if len(rows) >= STEP_MIN_COUNT:
            return _of_rows(rows, "named", step, _warm(r, step))
    own = own_ranges(r, is_op)
    user = own[~tagged(own["path"]) & ~matching(is_detected, own["path"].tolist())]
    pick = loop_of(user)
    if pick is not None:
        return _of_rows(user[user["path"] == pick], "user range", pick, _warm(own, pick))
    marks = r[markers(plain_names(r["name"]))]
    if len(marks) >= STEP_MIN_COUNT:
        s = _of_rows(marks, "profiler marker", "ProfilerStep#N", 0)
        warm = leading_warmup(np.array(s.durations_ns))
        return described(dataclasses.replace(s, warmup=warm), s.durations_ns[warm:])
    return None


def markers(names: list[str]) -> np.ndarray:
    """Whether each range name is a profiler step marker (MARKER; a regex only on names
    that start like one)."""
    return np.array([n.startswith("ProfilerStep#") and MARKER.match(n) is not None
                     for n in names], dtype=bool)


def leading_warmup(d: np.ndarray) -> int:
    """How many leading steps took WARMUP_WALL_FACTOR times the median or more (the first
    steps of a loop nothing set apart: compilation, first calls, allocation)."""
    if len(d) < 2:
        return 0
    slow = d >= WARMUP_WALL_FACTOR * np.median(d)
    return int(np.argmin(slow)) if not slow.all() else 0


def _warm(r: pd.DataFrame, path: str) -> int:
    """Instances of `path` set apart as warm-up (a tag anywhere in their path) among the
    range instances `r`."""
    paths = r["path"]
    apart = paths[tagged(paths)]
    return int(sum(n for p, n in apart.value_counts().items() if steady_path(p) == path))


def _of_rows(rows: pd.DataFrame, source: str, name: str, warm: int) -> StepSet:
    rows = rows.sort_values("start_ns", kind="stable")
    d = (rows["end_ns"] - rows["start_ns"]).to_numpy(dtype="int64")
    return described(StepSet(source=source, name=name, warmup=warm), d)


def busiest_lane(seq: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the (device, stream) that ran the most of them."""
    busiest = seq.groupby(["device", "stream"]).size().idxmax()
    return seq[(seq["device"] == busiest[0]) & (seq["stream"] == busiest[1])]


def from_kernels(seq: pd.DataFrame, r: pd.DataFrame, pid: int | None
                 ) -> tuple[StepSet, tuple[np.ndarray, np.ndarray]]:
    """Steps detected in the process's kernel sequence (its busiest_lane), else the whole
    capture; with the detected steps' windows (none for the whole capture)."""
    none = (np.zeros(0, dtype="int64"), np.zeros(0, dtype="int64"))
    mine = seq[seq["pid"] == pid] if pid is not None else seq
    if mine.empty:
        return StepSet(source="whole capture", note="no kernel in the capture"), none
    lane = busiest_lane(mine)
    busiest = (int(lane["device"].iloc[0]), int(lane["stream"].iloc[0]))
    found = period_steps(lane["name_id"].to_numpy(), lane["start_ns"].to_numpy(),
                         lane["end_ns"].to_numpy())
    note = "no step range (a *step range, a loop of 1 ms or more), no profiler marker" + (
        f"; read: the capture's first {DETECT_ROWS:,} kernels" if len(seq) >= DETECT_ROWS
        else "")
    if found is not None:
        lo, hi, period, lead = found
        d = hi - lo
        warm = leading_warmup(d)
        lo, hi, d = lo[warm:], hi[warm:], d[warm:]
        if len(d) >= STEP_MIN_COUNT and np.median(d) >= STEP_MIN_NS:
            note += f"; {lead:,} kernels ran before the sequence repeated"
            s = described(StepSet(source="detected", device=int(busiest[0]),
                                  period_kernels=period, warmup=warm, note=note), d)
            s.nccl_per_step = nccl_cadence(mine, r, lo, hi)
            return s, (lo, hi)
        note += (f"; the kernel sequence repeats every {period} kernels "
                 f"({np.median(d) / 1e3:,.1f} µs): shorter than a step")
    else:
        note += "; no repeating kernel sequence"
    s = described(StepSet(source="whole capture", note=note),
                  np.array([int(mine["end_ns"].max() - mine["start_ns"].min())]))
    return s, none
