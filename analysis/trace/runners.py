"""Where the windows of the attribution pass run: in this process, on local worker
processes, or on a Dask cluster.

A runner is a function (contexts, tasks) -> partial aggregates, one per task; a task is
one window of one export file (analysis/load/nsys_chunks.py plans the windows). The
results are the same whichever runner computes them (analysis/trace/partial.py, merge.py):
only the time and the memory per process differ.

`attribute_file` is the attribution pass over one export file, `attribute_files` over
several (commands/ranks.py: one export per rank).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pandas as pd

from ..common.errors import ToolMissing
from ..common.settings import CHUNK_ROWS
from ..load.nsys_chunks import Layout, plan, read_window
from ..load.nsys_host import read_host
from ..load.nsys_sqlite import NsysExport, versioned
from .apart import PerInstance, with_warmup_apart
from .build import ATEN_EAGER, combine, context, forget_ranges
from .host import pageable_launchers
from .partial import ChunkContext, Partial, compute, instance_counts
from .types import Trace

Task = tuple  # (layout, context index, window index)
Runner = Callable[[list[ChunkContext], list[Task]], list[Partial]]
Progress = Callable[[int, int], object]

_WORKER: dict = {}
_LAST_READ: dict = {}
"""The last window read in this process, with its host calls: the attribution pass over a
one-window export reads nothing again after its warm-up counts (_counted)."""
_PLANS: dict[tuple[str, int], Layout] = {}
"""The windows planned for an export in this attribute_file call: the warm-up counts and
the pass share them (plan reads the tables' sizes and the threads with ranges)."""


def _planned(path: Path, chunk_rows: int | None, keep: bool = False) -> Layout:
    """plan(path, rows), or the one attribute_file's warm-up counts kept (`keep`)."""
    key = (str(path), chunk_rows or CHUNK_ROWS)
    layout = _PLANS.get(key) or plan(Path(path), key[1])
    if keep:
        _PLANS[key] = layout
    return layout


def window_task(layout, ctx: ChunkContext, index: int) -> Partial:
    """Read and reduce one window of one export (a top-level function: worker processes
    and Dask tasks run it)."""
    ops, calls = _read(layout, ctx, index)
    return compute(ctx, ops, layout.bounds[index], layout.bounds[index + 1], index,
                   ATEN_EAGER, calls, _LAST_READ.get("counted"))


def _read(layout, ctx: ChunkContext, index: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The window's operations and host calls, kept for the next read of the same window
    (the warm-up counts, then the attribution pass; or a second pass): one kept at most."""
    lo, hi = layout.bounds[index], layout.bounds[index + 1]
    key = (str(layout.path), layout.bounds, layout.scan, index, hash(ctx.spans.tobytes()))
    if _LAST_READ.get("key") != key:
        _LAST_READ.clear()
        ops = read_window(layout, index)
        calls = read_host(layout.host, lo, hi, ctx.spans, layout.scan,
                          pageable_launchers(ops, lo))
        _LAST_READ.update(key=key, ops=ops, calls=calls)
    return _LAST_READ["ops"], _LAST_READ["calls"]


def _init_worker(ctxs: list[ChunkContext]) -> None:
    _WORKER["ctxs"] = ctxs


def _local_task(layout, which: int, index: int) -> Partial:
    part = window_task(layout, _WORKER["ctxs"][which], index)
    _release_free_memory()
    return part


def _release_free_memory() -> None:
    """Give the window's freed heap back to the system (glibc keeps it otherwise, and a
    worker's resident memory would creep up window after window)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass                                   # not glibc: nothing to do


def local_runner(jobs: int, progress: Progress | None = None) -> Runner:
    """Run window tasks on `jobs` worker processes (the contexts shipped once to each),
    or in this process when jobs is 1; `progress(done, total)` after each window."""
    def run(ctxs: list[ChunkContext], tasks: list[Task]) -> list[Partial]:
        done: list[Partial] = []

        def tick() -> None:
            if progress:
                progress(len(done), len(tasks))

        tick()
        if jobs <= 1 or len(tasks) <= 1:
            _WORKER["ctxs"] = ctxs
            for t in tasks:
                done.append(_local_task(*t))
                tick()
            return done
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)),
                                 initializer=_init_worker, initargs=(ctxs,)) as pool:
            futures = {pool.submit(_local_task, *t): n for n, t in enumerate(tasks)}
            out: list[Partial | None] = [None] * len(tasks)
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                done.append(out[futures[f]])
                tick()
        return out
    return run


def dask_runner(address: str) -> Runner:
    """Run window tasks on a Dask cluster (`address`: a scheduler, or "local" for a
    cluster of this machine's cores): the windows' shared context is scattered once,
    each window is one task."""
    try:
        from distributed import Client, LocalCluster  # the optional `dask` extra
    except ImportError as exc:
        raise ToolMissing("--dask needs Dask distributed: pip install "
                          "'nsight-workflows[dask]'") from exc

    def run(ctxs: list[ChunkContext], tasks: list[Task]) -> list[Partial]:
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


def attribute_files(paths: list[Path], exports: list[NsysExport], ctxs: list[ChunkContext],
                    runner: Runner, chunk_rows: int | None = None) -> list[Trace]:
    """Attribute several export files: every window of every file is one task of
    `runner`; a file whose tables turn out not to be in start order is read again by
    scanning (see load/nsys_chunks.py)."""
    layouts = []
    for path, export in zip(paths, exports, strict=True):
        with _versioned([export]):
            layouts.append(_planned(path, chunk_rows))
    parts = _attribute(layouts, ctxs, exports, runner)
    redo = [i for i, ps in enumerate(parts) if not all(p.sorted_ok for p in ps)]
    if redo:
        again = _attribute([layouts[i].rescanned() for i in redo], [ctxs[i] for i in redo],
                           [exports[i] for i in redo], runner)
        for i, ps in zip(redo, again, strict=True):
            parts[i] = ps
    return [combine(e, c, ps) for e, c, ps in zip(exports, ctxs, parts, strict=True)]


def _attribute(layouts: list, ctxs: list[ChunkContext], exports: list[NsysExport],
               runner: Runner) -> list[list[Partial]]:
    tasks = [(lay, t, i) for t, lay in enumerate(layouts) for i in range(lay.windows)]
    with _versioned(exports):
        results = runner(ctxs, tasks)
    parts: list[list[Partial]] = [[] for _ in layouts]
    for (_, t, _), part in zip(tasks, results, strict=True):
        parts[t].append(part)
    return [sorted(ps, key=lambda p: p.index) for ps in parts]


def _versioned(exports: list[NsysExport]) -> AbstractContextManager:
    """For one export, unreadable windows name its export schema (nsys_sqlite.versioned)."""
    if len(exports) != 1:
        return nullcontext()
    return versioned(exports[0].export_schema_version, exports[0].product_version)


def attribute_file(path: Path, export: NsysExport, watch_paths: tuple[str, ...] = (),
                   chunk_rows: int | None = None, jobs: int | None = None,
                   progress: Progress | None = None,
                   events: list[dict] | None = None, ranks: bool = False) -> Trace:
    """The attribution pass over one export file, window by window on `jobs` processes
    (default: every core); `progress(done, total)` before the first window and after
    each one; `events` (TORCH_LOGS) as in `model.context`; `ranks`: the step range's
    measures per process too (ranks.export_ranks)."""
    runner = local_runner(jobs or os.cpu_count() or 1, progress)
    made: dict = {}

    def ctx_of(apart: dict[int, str]) -> ChunkContext:
        key = tuple(sorted(apart))
        if key not in made:
            made.clear()
            made[key] = context(export, watch_paths, ranks=ranks, events=events,
                                apart=apart)
        return made[key]
    try:
        return with_warmup_apart(
            lambda apart: attribute_files([path], [export], [ctx_of(apart)], runner,
                                          chunk_rows)[0],
            lambda: _counted(path, export, ctx_of({}), chunk_rows))
    finally:                       # what the second pass reused is not held after it
        _LAST_READ.clear()
        _PLANS.clear()
        forget_ranges()


def _counted(path: Path, export: NsysExport, ctx: ChunkContext, chunk_rows: int | None
             ) -> PerInstance | None:
    """A one-window export's kernels and host calls per range instance, from the read its
    attribution pass then reuses (_read): warm-up is found before that pass, which runs
    once. None for more windows, or a window out of start order (found after a pass)."""
    with _versioned([export]):
        layout = _planned(path, chunk_rows, keep=True)
        if layout.windows != 1:
            return None
        ops, calls = _read(layout, ctx, 0)
    if not ops.attrs.get("sorted_ok", True):
        return None
    counted = _LAST_READ["counted"] = instance_counts(ctx, ops, calls)   # the pass's own
    return PerInstance(ctx.ranges, counted.kernels, counted.host)
