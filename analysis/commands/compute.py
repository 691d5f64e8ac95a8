"""Build the `compute/1` document (documents.ComputeDoc) from an Nsight Compute raw CSV.

Pure: loaded CSV + optional meta.json -> typed document. `kernels` holds one entry per
profiled launch in launch order; `ranges` per-range totals per iteration with roofline
placement; `ceilings` the peaks used and where they come from. Durations come from
Nsight Compute's replay (caches flushed, one kernel at a time): prefer Nsight Systems
for time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pandas as pd

from ..common.settings import HIGH_UTILIZATION_PCT, LATENCY_PCT
from ..diagnosis import roofline, rules
from ..documents.types import ComputeDoc, ComputeRange, ComputeSource, KernelLaunch, Meta, to_dict
from ..load import ncu_csv
from ..load.ncu_csv import NcuData
from .systems import as_meta

KERNEL_FIELDS = [f.name for f in dataclasses.fields(KernelLaunch)]
INT_FIELDS = {"duration_ns", "dram_read_bytes", "dram_write_bytes", "registers_per_thread",
              "block_size", "grid_size"}
RUN_FIELDS = ("workload", "description", "shapes", "dtype", "iterations", "cost_model",
              "versions", "started", "code_version")


def _clean(value: Any, field: str) -> Any:
    """JSON-safe scalar: NaN -> None, integral fields as int, floats rounded sanely."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(round(value)) if field in INT_FIELDS else round(value, 4)
    return value


def rows(table: pd.DataFrame, cls: type) -> list[Any]:
    """Typed rows of a frame (see _clean), one `cls` per row."""
    return [cls(**{k: _clean(v, k) for k, v in row.items()})
            for row in table.to_dict("records")]


def build(data: NcuData, meta: Meta | dict[str, Any] | None = None) -> ComputeDoc:
    """The compute/1 document for one raw CSV, with its findings."""
    meta = as_meta(meta)
    kernels = data.kernels.copy()
    kernels["bound"] = roofline.classify(kernels["sm_sol_pct"], kernels["mem_sol_pct"])
    peaks = roofline.ceilings(kernels, meta)
    notes = ["Durations are from Nsight Compute's replay (caches flushed before each "
             "kernel, kernels serialized); use the Nsight Systems report for time."]
    if data.missing:
        notes.append("not collected in this export (shown as –): " + ", ".join(data.missing)
                     + "; profile with " + " ".join(ncu_csv.collect_flags(data.missing))
                     + " to add them")
    notes += meta.notes if meta else []
    if not peaks.flops_per_s:
        notes.append("no peak FLOP/s known for this GPU and dtype: no % of roofline")
    gpu = kernels["gpu"].dropna()
    doc = ComputeDoc(
        source=ComputeSource(path=str(data.path), gpu=str(gpu.iloc[0]) if len(gpu) else None),
        kernels=rows(kernels[KERNEL_FIELDS], KernelLaunch),
        ranges=rows(roofline.per_range(kernels, meta, peaks), ComputeRange),
        ceilings=peaks,
        thresholds={"latency_pct": LATENCY_PCT,
                    "high_utilization_pct": HIGH_UTILIZATION_PCT},
        run=_run(meta), notes=notes)
    doc.findings = rules.run("compute", rules.Context(meta=meta, compute=doc))
    return doc


def _run(meta: Meta | None) -> dict[str, Any] | None:
    return {k: to_dict(getattr(meta, k)) for k in RUN_FIELDS} if meta else None
