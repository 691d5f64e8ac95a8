"""The analyses as a small Python API, for notebooks and scripts.

    from nsight_workflows.analysis import api     # installed (in a checkout: analysis.api)
    doc = api.systems_report("trace.sqlite", meta="meta.json")
    api.ranges_frame(doc).sort_values("kernel_time_ns", ascending=False).head()
    api.kernels_frame(doc)          # one row per (range, kernel), as nsys stats' nvtx_kern_sum
    api.findings_frame(doc)
    api.ranges_frame("reports/train")       # a report folder: read from its Parquet tables
    doc = api.load_report("reports/train")  # its whole document (systems.json + Parquet)
    trace = api.open_trace("trace.sqlite")   # the attributed trace: ranges, kernels, gaps...

Documents are the typed SystemsDoc / ComputeDoc of analysis/documents/types.py (the same the
command line writes as JSON); the *_frame functions turn their tables into DataFrames.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from .commands import compute, systems
from .documents.files import load_systems, range_table_of, ranges_columns
from .documents.io import read_json_object
from .documents.range_table import RangeTable
from .documents.tables import read_range_table
from .documents.types import ComputeDoc, Finding, SystemsDoc
from .load import ncu_csv, nsys_sqlite, torch_logs
from .loops.detected import with_detected_steps
from .trace import build as model
from .trace import runners

__all__ = ["open_trace", "systems_report", "compute_report", "load_report", "ranges_frame",
           "kernels_frame", "kernel_summary_frame", "ops_frame", "findings_frame",
           "launches_frame"]


def _meta(meta: str | Path | dict[str, Any] | None) -> dict[str, Any] | None:
    if meta is None or isinstance(meta, dict):
        return meta
    return read_json_object(Path(meta), "meta.json")


def open_trace(path: str | Path, meta: dict[str, Any] | None = None,
               jobs: int | None = None, events: list[dict] | None = None) -> model.Trace:
    """An Nsight Systems SQLite export, attributed window by window (analysis/trace/runners.py)
    on `jobs` processes (default: every core); `meta` names the ranges whose first
    iteration is kept, TORCH_LOGS `events` the range instances that compiled."""
    export = with_detected_steps(nsys_sqlite.load(path, ops=False))
    return runners.attribute_file(Path(path), export, systems.watch_paths(meta), jobs=jobs,
                                events=events)


def systems_report(path: str | Path, meta: str | Path | dict[str, Any] | None = None,
                   torch_logs_path: str | Path | None = None,
                   jobs: int | None = None) -> SystemsDoc:
    """The systems/2 document of an export (what `analysis systems` writes as JSON)."""
    events = systems.event_list(torch_logs.load(torch_logs_path)) if torch_logs_path \
        else None
    meta = _meta(meta)
    trace = open_trace(path, meta, jobs, events)
    return systems.build(trace.export, meta, events, trace=trace)


def compute_report(csv: str | Path, meta: str | Path | dict[str, Any] | None = None
                   ) -> ComputeDoc:
    """The compute/1 document of an Nsight Compute raw CSV."""
    return compute.build(ncu_csv.load(csv), _meta(meta))


def load_report(folder: str | Path) -> SystemsDoc:
    """The whole systems document of a report folder (`analysis systems -o DIR`): its
    systems.json with every range from the Parquet tables (made when read)."""
    return load_systems(Path(folder))


def ranges_frame(doc: SystemsDoc | str | Path) -> pd.DataFrame:
    """One row per NVTX range entry (the index: its row in ranges.parquet), its scalar
    fields, `devices` joined by commas (kernels: kernels_frame; the other threads' list
    is summed in other_threads_*); a report folder is read from its ranges.parquet."""
    table = _table(doc)
    return pd.DataFrame(ranges_columns(table)) if table.n else pd.DataFrame()


def _table(doc: SystemsDoc | str | Path) -> RangeTable:
    """The range table of a document, or of a report folder's Parquet files."""
    if isinstance(doc, (str, Path)):
        return read_range_table(Path(doc))
    return range_table_of(doc)


def _frame(items: list[Any]) -> pd.DataFrame:
    """A frame of a list of flat dataclasses (kernel_summary, ops), one column a field."""
    if not items:
        return pd.DataFrame()
    return pd.DataFrame([dataclasses.astuple(i) for i in items],
                        columns=[f.name for f in dataclasses.fields(items[0])])


def kernels_frame(doc: SystemsDoc | str | Path) -> pd.DataFrame:
    """One row per (range, kernel name): the range's name and domain, count, total, avg,
    min, max in ns (its own thread's kernels, as nsys stats' nvtx_kern_sum)."""
    table = _table(doc)
    kernels = table.items.get("kernels")
    if kernels is None or not len(kernels):
        return pd.DataFrame()
    rows = kernels["range_row"].to_numpy()
    names, domains = table.column("name"), table.column("domain")
    out = kernels.drop(columns="range_row").reset_index(drop=True)
    out.insert(0, "domain", pd.Series([domains[r] for r in rows.tolist()], dtype=object))
    out.insert(0, "range", pd.Series([names[r] for r in rows.tolist()], dtype=object))
    return out


def kernel_summary_frame(doc: SystemsDoc) -> pd.DataFrame:
    """Every kernel name of the trace (as nsys stats' cuda_gpu_kern_sum)."""
    return _frame(doc.kernel_summary)


def ops_frame(doc: SystemsDoc) -> pd.DataFrame:
    """emit_nvtx ops, one row per op name and direction."""
    return _frame(doc.ops)


def findings_frame(doc: SystemsDoc | ComputeDoc) -> pd.DataFrame:
    """One row per finding (evidence kept as a dict column)."""
    cols = [f.name for f in dataclasses.fields(Finding)]
    return pd.DataFrame([dataclasses.asdict(f) for f in doc.findings], columns=cols)


def launches_frame(doc: ComputeDoc) -> pd.DataFrame:
    """One row per profiled kernel launch, in launch order."""
    return pd.DataFrame([dataclasses.asdict(k) for k in doc.kernels])
