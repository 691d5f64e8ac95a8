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

from .busy import covered, union
from .documents import RankRow, RanksDoc, SystemsDoc
from .model import Trace

NCCL = re.compile(r"^nccl", re.I)
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


def rank_of(path: Path, position: int) -> int:
    """The rank a file's name says (`rank3.sqlite`), else its position on the command line."""
    m = RANK_IN_NAME.search(path.stem)
    return int(m.group(1)) if m else position


def step_rows(trace: Trace, step: str | None) -> np.ndarray:
    """Rows of trace.ranges that are the step's instances (see the module doc)."""
    r = trace.ranges
    names = r["path"].to_numpy(dtype=object)
    if step is not None:
        rows = np.flatnonzero((names == step) | (r["name"].to_numpy(dtype=object) == step))
        return rows
    counts = r.groupby("path").size()
    steps = counts[[p.split("/")[-1].lower().endswith("step") for p in counts.index]]
    pick = (steps if len(steps) else counts).idxmax() if len(counts) else None
    return np.flatnonzero(names == pick) if pick is not None else np.zeros(0, dtype=int)


def _blocks(s: np.ndarray, e: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return union(s[mask], e[mask])


def rank_row(trace: Trace, rank: int, step: str | None) -> RankRow:
    """One rank's numbers per step (means over the step's instances)."""
    rows = step_rows(trace, step)
    ops = trace.export.ops
    kern = (ops["kind"] == "kernel").to_numpy()
    s, e = ops["start_ns"].to_numpy(dtype="int64"), ops["end_ns"].to_numpy(dtype="int64")
    nccl = np.array([bool(NCCL.search(str(n))) for n in ops["name"]], dtype=bool) & kern
    compute = kern & ~nccl
    lo = trace.ranges["start_ns"].to_numpy(dtype="int64")[rows]
    hi = trace.ranges["end_ns"].to_numpy(dtype="int64")[rows]
    n = max(len(rows), 1)
    inside = np.zeros(len(ops), dtype=bool)
    for a, b in zip(lo, hi, strict=True):
        inside |= (s >= a) & (s < b)
    c_blocks = _blocks(s, e, compute & inside)
    n_blocks = _blocks(s, e, nccl & inside)
    overlap = covered(*c_blocks, n_blocks[0], n_blocks[1]).sum() if len(n_blocks[0]) else 0
    every = _blocks(s, e, np.ones(len(ops), dtype=bool))
    busy = covered(*every, lo, hi).sum() if len(rows) else 0
    window = int((hi - lo).sum())
    return RankRow(
        rank=rank, steps=len(rows), path=str(trace.export.path),
        step_ns=window / n, compute_kernel_ns=float((e - s)[compute & inside].sum()) / n,
        nccl_kernel_ns=float((e - s)[nccl & inside].sum()) / n,
        nccl_kernel_total_ns=int((e - s)[nccl].sum()),
        exposed_comm_ns=float((n_blocks[1] - n_blocks[0]).sum() - overlap) / n,
        busy_pct=float(100.0 * busy / window) if window else 0.0)


def compare(rows: list[RankRow]) -> RanksDoc:
    """The cross-rank document: rows, skew, and the rules of source "ranks"."""
    from . import rules

    rows = sorted(rows, key=lambda r: r.rank)
    steps = [r.step_ns for r in rows if r.steps]
    doc = RanksDoc(ranks=rows, skew_ns=(max(steps) - min(steps)) if steps else 0.0)
    doc.findings = rules.run("ranks", rules.Context(ranks=rows))
    return doc


def analyze_rank(path: str, rank: int, step: str | None) -> tuple[SystemsDoc, RankRow]:
    """One rank's export: its systems document and its row, from one attribution pass
    (a top-level function: worker processes run it)."""
    from . import model, systems
    from .load import nsys_sqlite

    export = nsys_sqlite.load(path)
    trace = model.attribute(export)
    return systems.build(export, trace=trace), rank_row(trace, rank, step)


def analyze_ranks(paths: list[Path], step: str | None, jobs: int, dask: str | None = None
                  ) -> tuple[list[SystemsDoc], RanksDoc]:
    """Every rank's export, one task each: on a Dask cluster (`dask`: a scheduler address,
    or "local" for a cluster of this machine's cores; the `dask` extra), else on `jobs`
    local worker processes (1: in this one). The results are the same either way."""
    args = [(str(p), rank_of(p, i), step) for i, p in enumerate(paths)]
    if dask:
        results = _on_dask(dask, args)
    elif jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(analyze_rank, *zip(*args, strict=True)))
    else:
        results = [analyze_rank(*a) for a in args]
    return [d for d, _ in results], compare([r for _, r in results])


def _on_dask(address: str, args: list[tuple]) -> list[tuple[SystemsDoc, RankRow]]:
    """Run analyze_rank over `args` on a Dask cluster, one task per export."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        from .errors import ToolMissing

        raise ToolMissing("--dask needs Dask distributed: pip install "
                          "'nsight-workflows[dask]'") from exc
    cluster = LocalCluster(processes=True, dashboard_address=None) \
        if address == "local" else None
    with Client(cluster or address) as client:
        futures = client.map(analyze_rank, *zip(*args, strict=True), pure=False)
        results = client.gather(futures)
    if cluster is not None:
        cluster.close()
    return results
