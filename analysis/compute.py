"""Build the `compute/1` report (DESIGN.md) from an Nsight Compute raw CSV.

Pure: loaded CSV + optional meta.json -> JSON-ready dict. `kernels` holds one entry per
profiled launch in launch order; `ranges` per-range totals per iteration with roofline
placement; `ceilings` the peaks used and where they come from. Durations come from
Nsight Compute's replay (caches flushed, one kernel at a time): prefer Nsight Systems
for time.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis import findings as rules
from analysis import roofline
from analysis.load.ncu_csv import NcuData

SCHEMA = "compute/1"
KERNEL_FIELDS = ["range", "name", "duration_ns", "dram_read_bytes", "dram_write_bytes",
                 "dram_throughput_pct", "dram_bytes_per_s", "sm_sol_pct", "mem_sol_pct",
                 "achieved_occupancy_pct", "theoretical_occupancy_pct",
                 "registers_per_thread", "block_size", "grid_size", "waves_per_sm",
                 "tensor_pipe_pct", "bound", "limit_registers", "limit_shared_mem",
                 "limit_warps", "limit_blocks"]
INT_FIELDS = {"duration_ns", "dram_read_bytes", "dram_write_bytes", "registers_per_thread",
              "block_size", "grid_size"}


def _clean(value: Any, field: str) -> Any:
    """JSON-safe scalar: NaN -> None, integral fields as int, floats rounded sanely."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(round(value)) if field in INT_FIELDS else round(value, 4)
    return value


def entries(table: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-safe rows of a frame (see _clean)."""
    return [{k: _clean(v, k) for k, v in row.items()} for row in table.to_dict("records")]


def build(data: NcuData, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The compute/1 document for one raw CSV, with its findings."""
    kernels = data.kernels.copy()
    kernels["bound"] = roofline.classify(kernels["sm_sol_pct"], kernels["mem_sol_pct"])
    peaks = roofline.ceilings(kernels, meta)
    notes = ["Durations are from Nsight Compute's replay (caches flushed before each "
             "kernel, kernels serialized); use the Nsight Systems report for time."]
    if data.missing:
        notes.append("optional metrics missing from the export (shown as –): "
                     + ", ".join(data.missing))
    if not peaks.get("flops_per_s"):
        notes.append("no peak FLOP/s known for this GPU and dtype: no % of roofline")
    gpu = kernels["gpu"].dropna()
    doc = {
        "schema": SCHEMA,
        "source": {"path": str(data.path), "gpu": str(gpu.iloc[0]) if len(gpu) else None},
        "kernels": entries(kernels[KERNEL_FIELDS]),
        "ranges": entries(roofline.per_range(kernels, meta, peaks)),
        "ceilings": peaks,
        "thresholds": {"latency_pct": roofline.LATENCY_PCT,
                       "high_utilization_pct": roofline.HIGH_UTILIZATION_PCT},
        "run": {k: (meta or {}).get(k) for k in ("workload", "description", "shapes",
                                                   "dtype", "iterations", "cost_model",
                                                   "versions")} if meta else None,
        "notes": notes,
        "findings": [],
    }
    doc["findings"] = rules.compute_findings(doc)
    return doc
