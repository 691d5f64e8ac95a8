"""The analyses as a small Python API, for notebooks and scripts.

    from nsight_workflows.analysis import api     # installed (in a checkout: analysis.api)
    doc = api.systems_report("trace.sqlite", meta="meta.json")
    api.ranges_frame(doc).sort_values("kernel_time_ns", ascending=False).head()
    api.kernels_frame(doc)          # one row per (range, kernel), as nsys stats' nvtx_kern_sum
    api.findings_frame(doc)
    trace = api.open_trace("trace.sqlite")   # the attributed trace: ranges, kernels, gaps...

Documents are the typed SystemsDoc / ComputeDoc of analysis/documents.py (the same the
command line writes as JSON); the *_frame functions turn their tables into DataFrames.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from pathlib import Path
from typing import Any

import pandas as pd

from . import compute, model, runners, systems
from .documents import ComputeDoc, Finding, SystemsDoc
from .io import read_json_object
from .load import ncu_csv, nsys_sqlite, torch_logs
from .range_table import scalars

__all__ = ["open_trace", "systems_report", "compute_report", "ranges_frame",
           "kernels_frame", "kernel_summary_frame", "ops_frame", "findings_frame",
           "launches_frame"]


def _meta(meta: str | Path | dict[str, Any] | None) -> dict[str, Any] | None:
    if meta is None or isinstance(meta, dict):
        return meta
    return read_json_object(Path(meta), "meta.json")


def open_trace(path: str | Path, meta: dict[str, Any] | None = None,
               jobs: int | None = None, events: list[dict] | None = None) -> model.Trace:
    """An Nsight Systems SQLite export, attributed window by window (analysis/runners.py)
    on `jobs` processes (default: every core); `meta` names the ranges whose first
    iteration is kept, TORCH_LOGS `events` the range instances that compiled."""
    export = nsys_sqlite.load(path, ops=False)
    return runners.attribute_file(Path(path), export, systems.watch_paths(meta), jobs=jobs,
                                events=events)


def systems_report(path: str | Path, meta: str | Path | dict[str, Any] | None = None,
                   torch_logs_path: str | Path | None = None,
                   jobs: int | None = None) -> SystemsDoc:
    """The systems/1 document of an export (what `analysis systems` writes as JSON)."""
    events = systems.event_list(torch_logs.load(torch_logs_path)) if torch_logs_path \
        else None
    meta = _meta(meta)
    trace = open_trace(path, meta, jobs, events)
    return systems.build(trace.export, meta, events, trace=trace)


def compute_report(csv: str | Path, meta: str | Path | dict[str, Any] | None = None
                   ) -> ComputeDoc:
    """The compute/1 document of an Nsight Compute raw CSV."""
    return compute.build(ncu_csv.load(csv), _meta(meta))


def ranges_frame(doc: SystemsDoc) -> pd.DataFrame:
    """One row per NVTX range entry, its scalar fields (kernels: kernels_frame; the other
    threads' list is summed in other_threads_*)."""
    return _frame(ranges_rows(doc))


def _frame(table: tuple[list[str], list[tuple]]) -> pd.DataFrame:
    """A frame of (columns, rows) as ranges_rows and dataclass_rows give them."""
    columns, rows = table
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame()


def ranges_rows(doc: SystemsDoc) -> tuple[list[str], list[tuple]]:
    """ranges_frame's columns and rows as plain values (what ranges.csv is written from:
    40k entries go to the csv module directly, twice as fast as through a frame)."""
    if not doc.ranges:
        return [], []
    names = scalars()
    get = operator.attrgetter(*names)
    return names + ["devices"], [(*get(e), ",".join(map(str, e.devices)))
                                 for e in doc.ranges]


def dataclass_rows(items: list[Any]) -> tuple[list[str], list[tuple]]:
    """Field names and field values of a list of flat dataclasses (kernel_summary, ops)."""
    if not items:
        return [], []
    names = [f.name for f in dataclasses.fields(items[0])]
    get = operator.attrgetter(*names)
    return names, [get(i) for i in items]


def text_columns(cls: type, columns: list[str]) -> list[int]:
    """Positions of the columns of a table of `cls` dataclasses that may hold text or
    None: all but the fields typed plainly int or float (the csv writer formats those
    rows itself, io.write_csv_atomic)."""
    hints = typing.get_type_hints(cls)
    return [i for i, c in enumerate(columns) if hints.get(c) not in (int, float)]


def kernels_frame(doc: SystemsDoc) -> pd.DataFrame:
    """One row per (range, kernel name): count, total, avg, min, max in ns."""
    return pd.DataFrame([{"range": e.name, "domain": e.domain, **dataclasses.asdict(k)}
                         for e in doc.ranges for k in e.kernels])


def kernel_summary_frame(doc: SystemsDoc) -> pd.DataFrame:
    """Every kernel name of the trace (as nsys stats' cuda_gpu_kern_sum)."""
    return _frame(dataclass_rows(doc.kernel_summary))


def ops_frame(doc: SystemsDoc) -> pd.DataFrame:
    """emit_nvtx ops, one row per op name and direction."""
    return _frame(dataclass_rows(doc.ops))


def findings_frame(doc: SystemsDoc | ComputeDoc) -> pd.DataFrame:
    """One row per finding (evidence kept as a dict column)."""
    cols = [f.name for f in dataclasses.fields(Finding)]
    return pd.DataFrame([dataclasses.asdict(f) for f in doc.findings], columns=cols)


def launches_frame(doc: ComputeDoc) -> pd.DataFrame:
    """One row per profiled kernel launch, in launch order."""
    return pd.DataFrame([dataclasses.asdict(k) for k in doc.kernels])
