"""Several ranks side by side: one export per rank (`nsys profile -o rank%q{RANK}` under
torchrun), one report that says which rank held the others back.

Per rank, over the instances of its step range (`--step NAME`, by default the range whose
name ends in "step" with the most instances, else the range with the most instances):
step wall time, compute and NCCL kernel time (kernels of the process that started inside
the step; `nccl*` names are communication), GPU busy share, and exposed communication:
NCCL kernel time during which no compute kernel ran on the same device. Across ranks: the
skew of step time; `straggler` when one rank's compute per step exceeds the median's by
a threshold of the step (the others then wait for it inside their collectives: their
extra NCCL time per step is the wait it causes); `comm_not_overlapped` when a rank's
exposed communication exceeds a threshold of its step. Both are rules of the registry
(analysis/rules/rank_rules.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .busy import clipped_union, covered, union
from .documents import RankRow, RanksDoc, SystemsDoc
from .model import Trace

NCCL = re.compile(r"^nccl", re.I)
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


def rank_of(path: Path, position: int) -> int:
    """The rank a file's name says (`rank3.sqlite`), else its position on the command line."""
    m = RANK_IN_NAME.search(path.stem)
    return int(m.group(1)) if m else position


def step_rows(ranges: pd.DataFrame, step: str | None) -> np.ndarray:
    """Rows of the keyed ranges that are the step's instances (see the module doc)."""
    names = ranges["path"].to_numpy(dtype=object)
    if step is not None:
        return np.flatnonzero((names == step) | (ranges["name"].to_numpy(dtype=object) == step))
    counts = ranges.groupby("path").size()
    steps = counts[[p.split("/")[-1].lower().endswith("step") for p in counts.index]]
    pick = (steps if len(steps) else counts).idxmax() if len(counts) else None
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


def rank_row(trace: Trace, rank: int) -> RankRow:
    """One rank's numbers per step (means over the step's instances), from the measures
    the attribution pass summed over its windows."""
    rows = trace.steps
    lo = trace.ranges["start_ns"].to_numpy(dtype="int64")[rows]
    hi = trace.ranges["end_ns"].to_numpy(dtype="int64")[rows]
    n, m = max(len(rows), 1), trace.rank
    window = int((hi - lo).sum())
    return RankRow(
        rank=rank, steps=len(rows), path=str(trace.export.path), step_ns=window / n,
        compute_kernel_ns=float(m["compute_ns"]) / n, nccl_kernel_ns=float(m["nccl_ns"]) / n,
        nccl_kernel_total_ns=int(m["nccl_total_ns"]),
        exposed_comm_ns=float(m["nccl_union_ns"] - m["overlap_ns"]) / n,
        busy_pct=float(100.0 * m["busy_ns"] / window) if window else 0.0)


def compare(rows: list[RankRow]) -> RanksDoc:
    """The cross-rank document: rows, skew, and the rules of source "ranks"."""
    from . import rules

    rows = sorted(rows, key=lambda r: r.rank)
    steps = [r.step_ns for r in rows if r.steps]
    doc = RanksDoc(ranks=rows, skew_ns=(max(steps) - min(steps)) if steps else 0.0)
    doc.findings = rules.run("ranks", rules.Context(ranks=rows))
    return doc


def analyze_ranks(paths: list[Path], step: str | None, jobs: int, dask: str | None = None,
                  progress=None) -> tuple[list[SystemsDoc], RanksDoc]:
    """Every rank's export, read window by window: every window of every export is one
    task, on a Dask cluster (`dask`: a scheduler address, or "local" for a cluster of
    this machine's cores; the `dask` extra), else on `jobs` local worker processes (1: in
    this one; `progress(done, total)` after each window). The results are the same
    either way."""
    from . import model, systems
    from .load import nsys_sqlite

    exports = [nsys_sqlite.load(p, ops=False) for p in paths]
    ctxs = [model.context(e, ranks=True, step=step) for e in exports]
    runner = _on_dask(dask) if dask else model.local_runner(jobs, progress)
    traces = model.attribute_files(paths, exports, ctxs, runner)
    docs, rows = [], []
    for i, (p, trace) in enumerate(zip(paths, traces, strict=True)):
        docs.append(systems.build(trace.export, trace=trace))
        rows.append(rank_row(trace, rank_of(p, i)))
    return docs, compare(rows)


def _on_dask(address: str):
    """A runner (function, argument lists) -> results on a Dask cluster: the windows'
    shared context is scattered once, each window is one task."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        from .errors import ToolMissing

        raise ToolMissing("--dask needs Dask distributed: pip install "
                          "'nsight-workflows[dask]'") from exc

    from .model import window_task

    def run(ctxs: list, tasks: list[tuple]) -> list:
        cluster = LocalCluster(processes=True, dashboard_address=None) \
            if address == "local" else None
        with Client(cluster or address) as client:
            shared = client.scatter(ctxs, broadcast=True)
            futures = [client.submit(window_task, layout, shared[t], i, pure=False)
                       for layout, t, i in tasks]
            results = client.gather(futures)
        if cluster is not None:
            cluster.close()
        return results
    return run
