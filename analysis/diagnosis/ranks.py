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
(analysis/diagnosis/rules/rank_rules.py).
The measures themselves are summed in the attribution pass (analysis/trace/steps.py), per
process: one export may also hold every rank (`nsys profile torchrun ...`, the common
way); its processes with step instances are then the ranks (`export_ranks`), each rank
the CUDA device its process used (torchrun's LOCAL_RANK on one node; the environment
blocks an export keeps are not linked to their processes), else its order by pid.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..documents.types import RankRow, RanksDoc
from ..trace.steps import rank_measures
from ..trace.types import Trace
from . import rules

RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


def rank_of(path: Path, position: int) -> int:
    """The rank a file's name says (`rank3.sqlite`), else its position on the command line."""
    m = RANK_IN_NAME.search(path.stem)
    return int(m.group(1)) if m else position


def rank_row(trace: Trace, rank: int, pid: int | None = None) -> RankRow:
    """One rank's numbers per step (means over the step's instances), from the measures
    the attribution pass summed over its windows: those of process `pid`, or of every
    process of the export (one rank per export)."""
    rows = trace.steps
    if pid is not None:
        rows = rows[trace.ranges["pid"].to_numpy(dtype="int64")[rows] == pid]
    lo = trace.ranges["start_ns"].to_numpy(dtype="int64")[rows]
    hi = trace.ranges["end_ns"].to_numpy(dtype="int64")[rows]
    m: dict[str, int] = {}
    for p, measures in trace.rank.items():
        if pid is None or p == pid:
            m = {k: m.get(k, 0) + v for k, v in measures.items()}
    return row_of(m, len(rows), int((hi - lo).sum()), rank, str(trace.export.path), pid)


def row_of(m: dict[str, int], steps: int, window: int, rank: int, path: str,
           pid: int | None) -> RankRow:
    """A rank's row from its summed measures (steps.rank_measures) over `steps` steps
    that lasted `window` ns together."""
    n = max(steps, 1)
    return RankRow(
        rank=rank, steps=steps, path=path, step_ns=window / n,
        compute_kernel_ns=float(m.get("compute_ns", 0)) / n,
        nccl_kernel_ns=float(m.get("nccl_ns", 0)) / n,
        nccl_kernel_total_ns=int(m.get("nccl_total_ns", 0)),
        exposed_comm_ns=float(m.get("nccl_union_ns", 0) - m.get("overlap_ns", 0)) / n,
        busy_pct=float(100.0 * m.get("busy_ns", 0) / window) if window else 0.0, pid=pid)


def detected_measures(seq: pd.DataFrame, windows: dict) -> dict[int | None, tuple]:
    """Per process whose steps were detected (loops/find.py): its rank measures over its
    kernels in those steps' windows (GPU time), the steps and their summed length."""
    out = {}
    for pid, (lo, hi) in windows.items():
        k = seq[seq["pid"] == pid] if pid is not None else seq
        ops = pd.DataFrame({"name": np.where(k["nccl"].to_numpy(), "nccl", "kernel"),
                            "kind": "kernel", "start_ns": k["start_ns"].to_numpy(),
                            "end_ns": k["end_ns"].to_numpy(), "halo": False})
        whole = (int(k["start_ns"].min()), int(k["end_ns"].max()) + 1)
        out[pid] = (rank_measures(ops, lo, hi, *whole), len(lo), int((hi - lo).sum()))
    return out


def detected_ranks(measures: dict[int | None, tuple], devices: dict[int | None, int],
                   path: str) -> list[RankRow]:
    """Rows of the processes whose steps were detected: rank = the device their steps
    ran on where those are distinct, else the order by pid."""
    pids = sorted(measures, key=lambda p: -1 if p is None else p)
    ranks = [devices.get(p) for p in pids]
    if None in ranks or len(set(ranks)) < len(ranks):
        ranks = list(range(len(pids)))
    return [row_of(measures[p][0], measures[p][1], measures[p][2], r, path, p)
            for p, r in zip(pids, ranks, strict=True)]


def export_ranks(trace: Trace) -> list[tuple[int, int]]:
    """(pid, rank) of the processes of one export that ran step instances, when there are
    several (else []): the rank is the lowest CUDA device a process's ranges launched on
    when those are distinct, else the process's order by pid."""
    pids = sorted(set(trace.ranges["pid"].to_numpy(dtype="int64")[trace.steps].tolist()))
    if len(pids) < 2:
        return []
    keys = trace.keys
    device: dict[int, int] = {}
    for key, devs in trace.key_devices.items():
        pid = int(keys.loc[key, "pid"])
        if devs:
            device[pid] = min(device.get(pid, min(devs)), min(devs))
    ranks = [device.get(p) for p in pids]
    if None in ranks or len(set(ranks)) < len(ranks):
        ranks = list(range(len(pids)))
    return list(zip(pids, ranks, strict=True))


def compare(rows: list[RankRow]) -> RanksDoc:
    """The cross-rank document: rows, skew, and the rules of source "ranks"."""
    rows = sorted(rows, key=lambda r: r.rank)
    steps = [r.step_ns for r in rows if r.steps]
    doc = RanksDoc(ranks=rows, skew_ns=(max(steps) - min(steps)) if steps else 0.0)
    doc.findings = rules.run("ranks", rules.Context(ranks=rows))
    return doc
