"""Report folders: analyze one input and write its files. The command line and `make demo`
both call these functions (neither runs the other's `main`).

A report folder holds one analysis. Each kind of report owns a set of files:

    systems  systems.json, systems.md, ranges.parquet and ranges_*.parquet, ops.parquet,
             time_per_iter.png, timeline.png, critical_path.svg (ranges.csv,
             kernel_summary.csv, ops.csv with --csv); with several ranks ranks.json,
             ranks.md and one rank<k>/ folder per rank
    compute  compute.json, compute.md, roofline.png, launches.csv
    page     README.md (drawn from the documents: any new document makes it stale)

A run writes its files into a staging folder inside DIR, then, holding a lock on DIR,
moves them in and removes the files of its kind that it did not write this time (and the
page). Two runs into one folder, one after the other or at the same time, leave the files
of one of them, never a mix; an interrupted run leaves the folder as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from ..common.errors import InputError
from ..common.forks import Beside, beside
from ..common.names import user_path
from ..common.progress import progress_bar
from ..common.settings import NCU_INSTANCES, NCU_MAX_RUNS
from ..diagnosis import compute_wall, rules
from ..diagnosis.ranks import rank_of
from ..documents import tables
from ..documents.files import (
    load_systems,
    write_csv,
    write_systems,
    write_table_data,
)
from ..documents.io import (
    load_json_doc,
    load_meta,
    ncu_rep_to_csv,
    nsys_rep_to_sqlite,
    write_atomic,
    write_json_atomic,
    write_png,
)
from ..documents.range_table import RangeTable
from ..documents.types import ComputeDoc, SystemsDoc, entry_column
from ..load import ncu_csv, nsys_launches, nsys_sqlite, torch_logs
from ..load.export import shared
from ..loops.detected import with_detected_steps
from ..loops.model import StepModels
from ..render import plots
from ..render.compute_md import render_compute
from ..render.markdown import render_systems
from ..render.page import render_page
from ..render.ranks_md import render_ranks
from ..render.svg import critical_path_svg
from ..trace import launch_ranges, runners
from . import compute, picks, systems
from .ranks import analyze_ranks

PAGE = "README.md"
KINDS: dict[str, tuple[str, ...]] = {
    "systems": ("systems.json", "systems.md", *tables.files(), tables.OPS, "ranges.csv",
                "kernel_summary.csv", "ops.csv", "time_per_iter.png", "timeline.png",
                "critical_path.svg", "critical_path.png",
                "ranks.json", "ranks.md"),
    "compute": ("compute.json", "compute.md", "roofline.png", "launches.csv"),
    "page": (PAGE,)}
RANK_FOLDER = re.compile(r"^rank\d+$")
"""Folders a systems run over several ranks writes (a systems run owns them)."""


def owned(kind: str, name: str, is_dir: bool) -> bool:
    """Whether a file (or folder) of a report folder belongs to reports of `kind`."""
    if is_dir:
        return kind == "systems" and bool(RANK_FOLDER.match(name))
    return name in KINDS[kind] or name == PAGE


@contextlib.contextmanager
def report_folder(out: Path, kind: str) -> Iterator[Path]:
    """Yield a staging folder inside `out` to write a report of `kind` into; on success
    its files replace those of the kind in `out` (see the module doc), on failure it is
    removed and `out` is left as it was."""
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{kind}-staging-", dir=out))
    try:
        yield stage
        _commit(stage, out, kind)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if made and not any(out.iterdir()):
            out.rmdir()                       # a failed first run leaves no folder


def _commit(stage: Path, out: Path, kind: str) -> None:
    """Move the staged files into `out` and remove the kind's files not written, holding
    an exclusive lock on the folder (runs into one folder commit one at a time)."""
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        written = {p.name for p in stage.iterdir()}
        for old in out.iterdir():
            if old.name not in written and owned(kind, old.name, old.is_dir()):
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        for new in list(stage.iterdir()):
            target = out / new.name
            if new.is_dir() and target.is_dir():
                shutil.rmtree(target)
            os.replace(new, target)
    finally:
        os.close(fd)                          # closing releases the lock


def measure_systems(trace: Path, meta_path: Path | None, logs: Path | None,
                    opts: argparse.Namespace | None = None,
                    tables_made: systems.TablesMade | None = None) -> systems.Measured:
    """Analyze one Nsight Systems export (SQLite, or .nsys-rep through nsys), its GPU
    operations read window by window on `opts.jobs` processes (runners.attribute_file):
    the measured document, before the rules (`tables_made`: as in systems.measure)."""
    meta = load_meta(meta_path)
    events = systems.event_list(torch_logs.load(logs)) if logs else None
    opts = opts or argparse.Namespace()
    with tempfile.TemporaryDirectory() as tmp:
        db = nsys_rep_to_sqlite(trace, Path(tmp)) if trace.suffix == ".nsys-rep" else trace
        export = with_detected_steps(nsys_sqlite.load(db, ops=False))
        with progress_bar(f"analysis: {trace.name}", getattr(opts, "progress", None)) as bar:
            tr = runners.attribute_file(db, export, systems.watch_paths(meta),
                                        chunk_rows=getattr(opts, "chunk_rows", None),
                                        jobs=getattr(opts, "jobs", None), progress=bar,
                                        events=events, ranks=_several_processes(export))
        export.path = trace
        return systems.measure(export, meta, events, trace=tr,
                               step=getattr(opts, "step", None), tables_made=tables_made)


def _several_processes(export: nsys_sqlite.NsysExport) -> bool:
    """Whether NVTX ranges come from more than one process (torchrun under one nsys):
    their step ranges are then compared as ranks (ranks.export_ranks)."""
    tids = export.ranges["global_tid"].dropna().to_numpy(dtype="int64") \
        if len(export.ranges) else np.zeros(0, dtype="int64")
    return len(np.unique(nsys_sqlite.os_pid(tids[tids >= 0]))) > 1


def systems_doc(trace: Path, meta_path: Path | None, logs: Path | None,
                opts: argparse.Namespace | None = None) -> SystemsDoc:
    """The systems/2 document of one export, findings included."""
    return systems.judge(measure_systems(trace, meta_path, logs, opts))


def systems_report(out: Path, trace: Path, meta_path: Path | None, logs: Path | None,
                   opts: argparse.Namespace | None = None) -> SystemsDoc:
    """DIR's systems report of one export: the Parquet tables, systems.json, systems.md
    and its plots (CSV tables with `opts.csv`). The whole document is returned. The
    tables hold what `measure` made (findings change none of them): they are converted
    and written on another core (forks.beside) from the moment they are final, while the
    rest is measured and the document judged."""
    with report_folder(out, "systems") as stage, contextlib.ExitStack() as jobs:
        stage.mkdir(parents=True, exist_ok=True)
        started: list[Beside[dict[str, int]]] = []

        def tables_made(table: RangeTable, ops: list) -> None:
            started.append(jobs.enter_context(
                beside(lambda: write_table_data(stage, table, ops))))
        measured = measure_systems(trace, meta_path, logs, opts, tables_made)
        (written,) = started                   # measure() tells it once, on every path
        doc = systems.judge(measured)
        _systems_files(stage, doc, getattr(opts, "csv", False), written.result)
    _said(out, "systems", f"{len(doc.ranges)} ranges")
    return doc


def ranks_report(out: Path, paths: list[Path], opts: argparse.Namespace) -> None:
    """Several exports, one per rank: each rank's report in DIR/rank<k>/, and ranks.md."""
    for p in paths:
        shared(p)                             # fail early, naming the file
    jobs = opts.jobs or os.cpu_count() or 1
    with progress_bar(f"analysis: {len(paths)} ranks", opts.progress) as bar:
        docs, ranks = analyze_ranks(paths, opts.step, jobs, opts.dask, bar)
    folders = {row.rank: f"rank{row.rank}" for row in ranks.ranks}
    with report_folder(out, "systems") as stage:
        for doc, row in zip(docs, [rank_of(p, i) for i, p in enumerate(paths)],
                            strict=True):
            _systems_files(stage / folders[row], doc, getattr(opts, "csv", False))
            write_atomic(stage / folders[row] / PAGE,
                         render_page(doc, None, {}, f"rank {row}"))
        write_json_atomic(stage / "ranks.json", ranks)
        write_atomic(stage / "ranks.md", render_ranks(ranks, folders))
    _said(out, "ranks", f"{len(paths)} ranks")


def _systems_files(out: Path, doc: SystemsDoc, csv: bool = False,
                   counts: Callable[[], dict[str, int]] | None = None) -> None:
    """systems.md and its plots, then the tables (unless `counts()` gives them written:
    file -> rows) and systems.json (documents.files.write_systems)."""
    out.mkdir(parents=True, exist_ok=True)
    images = {k: name for k, name, draw in (
        ("time", "time_per_iter.png", plots.time_bars_png),
        ("timeline", "timeline.png", plots.timeline_png))
        if write_png(out, name, lambda p, d=draw: d(doc, p))}
    critical = critical_path_svg(doc)
    if critical is not None:
        write_atomic(out / "critical_path.svg", critical)
        images["critical"] = "critical_path.svg"
    write_atomic(out / "systems.md", render_systems(doc, images))
    write_systems(out, doc, csv, counts() if counts else None)


def compute_report(out: Path, source: Path, meta_path: Path | None) -> ComputeDoc:
    """DIR's compute report of an Nsight Compute raw CSV (or .ncu-rep through ncu)."""
    meta = load_meta(meta_path)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = ncu_rep_to_csv(source, Path(tmp)) if source.suffix == ".ncu-rep" else source
        data = ncu_csv.load(csv_path)
        data.path = source
        plan_path = source.parent / "plan.json"
        planned = plan_path.is_file()         # a plan's launches: their Systems ranges
        if planned:
            data.kernels = launch_ranges.fill(data.kernels, json.loads(plan_path.read_text()))
        doc = compute.build(data, meta)
        if planned:
            _wall_savings(doc, out)
    with report_folder(out, "compute") as stage:
        png = write_png(stage, "roofline.png", lambda p: plots.roofline_png(doc, p))
        write_json_atomic(stage / "compute.json", doc)
        if doc.kernels:
            write_csv(stage / "launches.csv", pd.DataFrame(
                [dataclasses.astuple(k) for k in doc.kernels],
                columns=[f.name for f in dataclasses.fields(doc.kernels[0])]))
        write_atomic(stage / "compute.md", render_compute(doc, png))
    _said(out, "compute", f"{len(doc.kernels)} kernel launches")
    return doc


def page_report(folder: Path, workload: str | None = None) -> Path:
    """DIR/README.md from the documents DIR holds (systems.json, compute.json if any)."""
    sysdoc = load_systems(folder)
    comp = folder / "compute.json"
    compdoc = load_json_doc(comp, ComputeDoc) if comp.exists() else None
    images = {kind: name for kind, name in (("time", "time_per_iter.png"),
                                            ("timeline", "timeline.png"),
                                            ("critical", "critical_path.svg"),
                                            ("roofline", "roofline.png"))
              if (folder / name).exists()}
    name = workload or (sysdoc.run or {}).get("workload") or folder.name
    write_atomic(folder / PAGE, render_page(sysdoc, compdoc, images, name))
    print(f"wrote {folder / PAGE}")
    return folder / PAGE


def _said(out: Path, stem: str, what: str) -> None:
    print(f"wrote {out / (stem + '.md')} and {out / (stem + '.json')} ({what})")


def run_doc(path: Path) -> SystemsDoc:
    """A systems document from a systems.json (its tables beside it), a report folder or
    a run folder."""
    if path.is_file() or (path / "systems.json").is_file():
        return load_systems(path)
    if (path / "trace.sqlite").is_file():
        meta, logs = path / "meta.json", path / "torch_logs.txt"
        return systems_doc(path / "trace.sqlite", meta if meta.exists() else None,
                           logs if logs.exists() else None)
    raise InputError(f"{path}: neither a systems.json nor a folder with systems.json or "
                     "trace.sqlite")


def _wall_savings(doc: ComputeDoc, out: Path) -> None:
    """The Compute findings' wall-time savings replayed on the Systems step models
    (compute_wall.py), where DIR holds the Systems report of the same program and its
    export is still there: the export attributed again (the loops' graphs need its
    calls), the document's measures and rules not made again; a note says how many were
    priced."""
    systems_json = out / "systems.json"
    if not systems_json.is_file():
        return
    sysdoc = load_systems(systems_json)
    export = Path(sysdoc.source.path)
    loops = {n for n, k in zip(entry_column(sysdoc.ranges, "name"),
                               entry_column(sysdoc.ranges, "modeled_instances"), strict=True)
             if k}
    if export.suffix != ".sqlite" or not export.is_file() or not loops:
        return
    trace = runners.attribute_file(export, with_detected_steps(nsys_sqlite.load(export,
                                                                                ops=False)))
    priced = compute_wall.wall_savings(doc, StepModels(trace, export), loops,
                                       rules.Context(systems=sysdoc).analyzed_ns())
    doc.notes.append(f"{priced} finding(s) replayed on the Systems step model of the range "
                     f"that launched their kernels ({export}): their saving is that wall "
                     "time (evidence: wall_saving_ns; the kernels' own, kernel_saving_ns)")


def compute_plan(path: Path, trace: Path | None = None, instances: int = NCU_INSTANCES,
                 max_runs: int = NCU_MAX_RUNS) -> tuple[picks.Plan, Path]:
    """The Nsight Compute plan of a Systems run (a systems.json, report or run folder)
    and the export its launches were read from: `trace`, else the export the document
    names, else the run folder's trace.sqlite."""
    doc = run_doc(path)
    folder = path if path.is_dir() else path.parent
    found = [p for p in (trace, Path(doc.source.path), folder / "trace.sqlite")
             if p is not None and p.suffix == ".sqlite" and p.is_file()]
    if not found:
        raise InputError(f"{path}: the export it was made from ({doc.source.path}) is not "
                         "here; name it with --trace EXPORT.sqlite")
    rows = nsys_launches.launches(found[0], picks.candidates(doc))
    plan = picks.plan(doc, rows, instances, max_runs=max_runs)
    held_by(plan, rows, nsys_sqlite.load(found[0], ops=False).ranges)
    targets = rows.set_index(["name", "invocation"]).index.isin(
        [(t.name, t.invocation) for t in plan.targets])
    pids = set((rows["tid"].to_numpy()[targets] & nsys_sqlite.PID_MASK).tolist())
    alone = picks.own_process(_command_of(found[0]), pids)
    for r in plan.runs:
        r.own_process = alone
    return plan, found[0]


def _command_of(export: Path) -> list[str]:
    """The command of the run an export was made by (meta.json beside it), or []."""
    meta = export.with_name("meta.json")
    try:
        return list(json.loads(meta.read_text()).get("command") or [])
    except (OSError, ValueError):
        return []


def held_by(plan: picks.Plan, rows: pd.DataFrame, ranges: pd.DataFrame) -> None:
    """Each profiled launch's range and thread (launch_ranges.holders), in the plan."""
    if not plan.targets:
        return
    at = rows.drop_duplicates(["name", "invocation"]).set_index(["name", "invocation"])
    calls = at.loc[[(t.name, t.invocation) for t in plan.targets], ["tid", "call_ns"]]
    for t, (path, thread), call in zip(plan.targets, launch_ranges.holders(
            ranges, calls, user_path), calls["call_ns"].tolist(), strict=True):
        t.range, t.thread, t.call_ns = path, thread, int(call)
