"""The ranks of a multi-GPU run: each rank's export analyzed window by window on worker
processes or a Dask cluster, its systems document, and the cross-rank comparison.
"""

from __future__ import annotations

from pathlib import Path

from ..diagnosis.ranks import compare, export_ranks, rank_of, rank_row, row_of
from ..documents.types import RankRow, RanksDoc, SystemsDoc
from ..load import nsys_sqlite
from ..trace.build import context
from ..trace.runners import Progress, attribute_files, dask_runner, local_runner
from ..trace.types import Trace
from . import systems


def _one_rank(trace: Trace, measured: systems.Measured, rank: int) -> RankRow:
    """The row of an export holding one rank: over its step range, else over the steps
    detected in its kernel sequence (loops/find.py)."""
    if len(trace.steps) or len(measured.detected) != 1:
        return rank_row(trace, rank)
    pid, (m, n, window) = next(iter(measured.detected.items()))
    return row_of(m, n, window, rank, str(trace.export.path), None)


def analyze_ranks(paths: list[Path], step: str | None, jobs: int, dask: str | None = None,
                  progress: Progress | None = None) -> tuple[list[SystemsDoc], RanksDoc]:
    """Every rank's export, read window by window: every window of every export is one
    task, on a Dask cluster (`dask`: dask_runner's address), else on `jobs` local worker
    processes (1: in this one; `progress(done, total)` after each window). The results
    are the same either way."""
    exports = [nsys_sqlite.load(p, ops=False) for p in paths]
    ctxs = [context(e, ranks=True, step=step) for e in exports]
    runner = dask_runner(dask) if dask else local_runner(jobs, progress)
    traces = attribute_files(paths, exports, ctxs, runner)
    docs, rows = [], []
    for i, (p, trace) in enumerate(zip(paths, traces, strict=True)):
        measured = systems.measure(trace.export, trace=trace, step=step)
        docs.append(systems.judge(measured))
        inside = export_ranks(trace)          # one export holding several ranks
        rows += [rank_row(trace, r, pid) for pid, r in inside] or systems.detected_rows(
            measured) or [_one_rank(trace, measured, rank_of(p, i))]
    return docs, compare(rows)
