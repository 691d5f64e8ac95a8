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
The measures themselves are summed in the attribution pass (analysis/steps.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from . import rules
from .documents import RankRow, RanksDoc
from .model import Trace

RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


def rank_of(path: Path, position: int) -> int:
    """The rank a file's name says (`rank3.sqlite`), else its position on the command line."""
    m = RANK_IN_NAME.search(path.stem)
    return int(m.group(1)) if m else position


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
    rows = sorted(rows, key=lambda r: r.rank)
    steps = [r.step_ns for r in rows if r.steps]
    doc = RanksDoc(ranks=rows, skew_ns=(max(steps) - min(steps)) if steps else 0.0)
    doc.findings = rules.run("ranks", rules.Context(ranks=rows))
    return doc
