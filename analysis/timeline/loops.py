"""Which steps are modeled, and what each loop's model says.

A loop range is a user range (not an emit_nvtx op range, not a library's domain, not
warm-up) repeated at least LOOP_MIN_INSTANCES times in its process; its steady instances
are those not set apart and not first calls (apart.first_calls). All of them are
modeled, or, where a loop has more, the SAMPLE_INSTANCES around its median wall time
(said in `modeled_instances`). Each instance is one window of the export read once
(load/nsys_steps.py), built into a graph (graph.py), replayed unchanged and walked back
(replay.py).

Per loop: `critical_path_ns` (category -> ns: the modeled instances' paths, scaled by the
loop's wall time over theirs, so that it sums to the loop's wall time as closely as the
replay reproduces it), `replayed_wall_ns` (the loop's wall time times replayed over
measured) and `modeled_instances`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..apart import first_calls
from ..load.nsys_sqlite import PID_MASK
from ..load.nsys_steps import read_steps
from ..settings import LOOP_MIN_INSTANCES
from .graph import build
from .replay import CATEGORIES, CycleError, critical_path, replay

SAMPLE_INSTANCES = 16
"""Steady instances modeled per loop at most (those around its median wall time)."""
MAX_LOOPS = 32
"""Loop ranges modeled per export at most (those with most wall time)."""
LIBRARY_DOMAINS = ("NCCL", "CCCL")


@dataclass
class LoopModel:
    """One loop's model: per modeled instance its measured and replayed wall time and its
    critical path."""

    row: int
    walls: list[int] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)
    paths: list[Counter[str]] = field(default_factory=list)
    skipped: int = 0                   # instances not modeled (a dependency cycle)

    def scaled(self, wall_ns: int) -> tuple[dict[str, int], int]:
        """(critical_path_ns, replayed_wall_ns) for a loop of `wall_ns` in all."""
        measured = sum(self.walls)
        if not measured:
            return {}, 0
        k = wall_ns / measured
        path = sum(self.paths, Counter())
        return ({c: round(path[c] * k) for c in CATEGORIES if path.get(c)},
                round(sum(self.replayed) * k))


def loop_rows(table_cols: dict[str, list], is_op: object) -> list[int]:
    """The rows of the range table that are loops (see the module doc), most wall time
    first, at most MAX_LOOPS."""
    rows = [i for i, (n, k, w, d) in enumerate(zip(
        table_cols["name"], table_cols["wall_instances"], table_cols["warmup"],
        table_cols["domain"], strict=True))
        if k >= LOOP_MIN_INSTANCES and not w and d not in LIBRARY_DOMAINS and not is_op(n)]
    walls = table_cols["wall_ns"]
    return sorted(rows, key=lambda i: -walls[i])[:MAX_LOOPS]


def steady_instances(trace, keys: np.ndarray, rows: list[int]) -> dict[int, np.ndarray]:
    """Per loop row, the trace.ranges rows of its steady instances to model."""
    r = trace.ranges
    key_of_row = {int(keys[i]): i for i in rows}
    first = set(first_calls(trace))
    inst = r[r["key"].isin(list(key_of_row)).to_numpy()]
    out = {}
    for key, grp in inst.groupby("key").groups.items():
        at = np.array([i for i in grp if i not in first], dtype=np.int64)
        wall = (r["end_ns"].to_numpy()[at] - r["start_ns"].to_numpy()[at])
        if len(at) > SAMPLE_INSTANCES:
            order = np.argsort(wall, kind="stable")
            mid = len(at) // 2 - SAMPLE_INSTANCES // 2
            at = np.sort(at[order[mid:mid + SAMPLE_INSTANCES]])
        out[key_of_row[int(key)]] = at
    return out


def model_loops(trace, path: Path, keys: np.ndarray, table_cols: dict[str, list],
                is_op: object) -> list[LoopModel]:
    """Each loop's model (see the module doc); none where the export has no CUDA calls."""
    rows = loop_rows(table_cols, is_op)
    if not rows:
        return []
    picked = steady_instances(trace, keys, rows)
    r = trace.ranges
    tid = r["global_tid"].to_numpy(dtype="int64")
    lo, hi = r["start_ns"].to_numpy(dtype="int64"), r["end_ns"].to_numpy(dtype="int64")
    windows = [(row, int(i)) for row in rows for i in picked.get(row, [])]
    read = read_steps(path, [(int(tid[i] & PID_MASK), int(lo[i]), int(hi[i]))
                             for _, i in windows])
    models = {row: LoopModel(row) for row in rows}
    for (row, i), step in zip(windows, read, strict=False):
        m = models[row]
        try:
            g = build(step, int(tid[i]), int(lo[i]), int(hi[i]))
            rep = replay(g)
        except CycleError:
            m.skipped += 1
            continue
        m.walls.append(int(hi[i] - lo[i]))
        m.replayed.append(rep.wall(g))
        m.paths.append(critical_path(g, rep))
    return [m for m in models.values() if m.walls]


def model_columns(models: list[LoopModel], wall_ns: list[int]) -> pd.DataFrame:
    """The loops' fields by table row: critical_path_ns, replayed_wall_ns,
    modeled_instances."""
    rows, paths, replayed, n = [], [], [], []
    for m in models:
        path, again = m.scaled(wall_ns[m.row])
        rows.append(m.row)
        paths.append(path)
        replayed.append(again)
        n.append(len(m.walls))
    return pd.DataFrame({"critical_path_ns": pd.Series(paths, index=rows, dtype=object),
                         "replayed_wall_ns": np.array(replayed, dtype="int64"),
                         "modeled_instances": np.array(n, dtype="int64")},
                        index=pd.Index(rows, dtype="int64"))
