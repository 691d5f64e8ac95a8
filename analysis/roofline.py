"""Bound classification and roofline maths on Nsight Compute frames (pure functions).

Bound, after Nsight Compute's own speed-of-light rule (SOLBottleneck): when both the
compute (SM) and the memory throughput are under 60% of peak the kernel is
latency-bound ("achieved compute throughput and/or memory bandwidth below 60.0% of peak
typically indicate latency issues"); otherwise it is bound by the more utilized of the
two ("Compute is more heavily utilized than Memory" and vice versa). 80% is the rule's
"high utilization" mark, kept here for reports.

Roofline: attainable FLOP/s at intensity I (FLOP per DRAM byte) is
min(peak FLOP/s, I x peak DRAM bytes/s), with true upper bounds only: the DRAM peak from
ncu's own counters and the dtype's dense peak from the datasheet (DATASHEET_FLOPS); a
variant's "% of roofline" is its achieved FLOP/s over that attainable value. The GEMM rate
measured in the run is reported beside it ("% of measured cuBLAS"), never as a ceiling.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .documents import Ceilings, Meta
from .settings import LATENCY_PCT

# True upper bounds from NVIDIA's datasheets (dense): the dtype's tensor-core rate for
# fp16/bf16/tf32, the vector rate for fp32 (a float32 GEMM in torch uses tf32 only when
# allowed), and HBM bandwidth. Rates measured in a run (a device copy, a cuBLAS GEMM) can
# beat neither, but a kernel can beat them: they are second references, never ceilings.
DATASHEET_FLOPS = {
    "NVIDIA H200": {"float16": 989.4e12, "bfloat16": 989.4e12, "tfloat32": 494.7e12,
                    "float32": 66.9e12},
    "NVIDIA H100 80GB HBM3": {"float16": 989.4e12, "bfloat16": 989.4e12,
                              "tfloat32": 494.7e12, "float32": 66.9e12},
}
DATASHEET_BW = {"NVIDIA H200": 4.8e12, "NVIDIA H100 80GB HBM3": 3.35e12}


def datasheet(gpu: str | None, dtype: str | None) -> tuple[float | None, float | None]:
    """(peak FLOP/s for the dtype, peak HBM bytes/s) of a GPU by its name; None unknown."""
    return (DATASHEET_FLOPS.get(gpu or "", {}).get(dtype or ""),
            DATASHEET_BW.get(gpu or ""))


def classify(sm_pct: pd.Series, mem_pct: pd.Series) -> pd.Series:
    """'latency' | 'compute' | 'memory' per kernel, as described in the module doc; None
    where the export lacks the SOL metrics."""
    out = np.where(sm_pct >= mem_pct, "compute", "memory").astype(object)
    out = np.where((sm_pct < LATENCY_PCT) & (mem_pct < LATENCY_PCT), "latency", out)
    out = np.where(sm_pct.isna() | mem_pct.isna(), None, out)      # SOL not collected
    return pd.Series(out, index=sm_pct.index, dtype=object)


def attainable(intensity: float, peak_flops: float, peak_bw: float) -> float:
    """Roofline: the most FLOP/s a kernel of this intensity can reach."""
    return min(peak_flops, intensity * peak_bw)


def ceilings(kernels: pd.DataFrame, meta: Meta | None) -> Ceilings:
    """Peak DRAM bandwidth and peak FLOP/s for the workload's dtype, with their sources."""
    bw = kernels["dram_peak_Bps"].dropna()
    out = Ceilings(dram_bytes_per_s=float(bw.median()) if len(bw) else None,
                   dram_source="ncu: dram__bytes.sum.peak_sustained x "
                   "dram__cycles_elapsed.avg.per_second" if len(bw) else None)
    dtype = meta.dtype if meta else None
    gpu = kernels["gpu"].dropna()
    name = str(gpu.iloc[0]) if len(gpu) else None
    peak, _ = datasheet(name, dtype)
    if peak:
        out.flops_per_s = peak
        out.flops_source = f"{name} datasheet, dense {dtype}"
    measured = meta.ceilings.get(f"{dtype}_gemm_flops_per_s") if meta else None
    if measured:
        out.measured_flops_per_s = float(measured)
    return out


def per_range(kernels: pd.DataFrame, meta: Meta | None, peaks: Ceilings) -> pd.DataFrame:
    """Per NVTX range: totals per iteration and roofline placement from the cost model."""
    iters = meta.iterations if meta else 1
    cost = meta.cost_model if meta else None
    g = kernels.groupby("range", sort=False)
    out = pd.DataFrame({
        "kernels_per_iter": g.size() / iters,
        "duration_ns_per_iter": g["duration_ns"].sum() / iters,
        "dram_bytes_per_iter": (g["dram_read_bytes"].sum(min_count=1)
                                + g["dram_write_bytes"].sum(min_count=1)) / iters,
    })
    seconds = out["duration_ns_per_iter"] * 1e-9
    out["dram_bytes_per_s"] = out["dram_bytes_per_iter"] / seconds
    flops = cost.flops if cost else None
    min_bytes = cost.min_bytes if cost else None
    out["dram_vs_min_bytes"] = out["dram_bytes_per_iter"] / min_bytes if min_bytes else np.nan
    out["intensity_flop_per_byte"] = flops / out["dram_bytes_per_iter"] if flops else np.nan
    out["flops_per_s"] = flops / seconds if flops else np.nan
    pf, pb = peaks.flops_per_s, peaks.dram_bytes_per_s
    if flops and pf and pb:
        roof = [attainable(i, pf, pb) for i in out["intensity_flop_per_byte"]]
        out["pct_of_roofline"] = 100.0 * out["flops_per_s"] / roof
    else:
        out["pct_of_roofline"] = np.nan
    measured = peaks.measured_flops_per_s
    out["pct_of_measured_gemm"] = 100.0 * out["flops_per_s"] / measured if flops and \
        measured else np.nan
    return out.reset_index()
