"""Bound classification and roofline maths on Nsight Compute frames (pure functions).

Bound, after Nsight Compute's own speed-of-light rule (SOLBottleneck): when both the
compute (SM) and the memory throughput are under 60% of peak the kernel is
latency-bound ("achieved compute throughput and/or memory bandwidth below 60.0% of peak
typically indicate latency issues"); otherwise it is bound by the more utilized of the
two ("Compute is more heavily utilized than Memory" and vice versa). 80% is the rule's
"high utilization" mark, kept here for reports.

Roofline: attainable FLOP/s at intensity I (FLOP per DRAM byte) is
min(peak FLOP/s, I x peak DRAM bytes/s), with true upper bounds only: the DRAM peak from
ncu's own counters and the dtype's dense peak from the datasheet (settings.DATASHEET_FLOPS:
the workload's dtype, else the one the longest GEMM kernels' names say); a
variant's "% of roofline" is its achieved FLOP/s over that attainable value. The GEMM rate
measured in the run is reported beside it ("% of measured cuBLAS"), never as a ceiling.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..common.settings import DATASHEET_BW, DATASHEET_FLOPS, DATASHEET_SOURCE, LATENCY_PCT
from ..documents.types import Ceilings, Meta

DTYPES = {"fp8": "float8", "float8_e4m3fn": "float8", "float8_e5m2": "float8",
          "e4m3": "float8", "e5m2": "float8", "fp16": "float16", "half": "float16",
          "f16": "float16", "bf16": "bfloat16", "tf32": "tfloat32", "fp32": "float32",
          "f32": "float32", "float": "float32"}
"""Other spellings of the datasheet's dtypes (torch's `torch.float16` loses its prefix)."""
GEMM_DTYPE = [(re.compile(p), d) for p, d in (
    (r"e4m3|e5m2|fp8|_qgmma|f8f8", "float8"), (r"bf16|bfloat16|_bsb_|_bbb_|bf16bf16", "bfloat16"),
    (r"tf32|_tst_|_tss_", "tfloat32"), (r"f16f16|fp16|_hsh_|_hhs_|_hss_|_h_|f16_|half",
                                         "float16"), (r"f32f32|sgemm|_sss_|ffma", "float32"))]
"""A GEMM kernel's dtype from its name (cuBLAS nvjet/xmma/cutlass spellings), first match."""


def datasheet(gpu: str | None, dtype: str | None) -> tuple[float | None, float | None]:
    """(peak FLOP/s for the dtype, peak HBM bytes/s) of a GPU by its name; None unknown
    (settings.DATASHEET_FLOPS, its sources named there)."""
    return (DATASHEET_FLOPS.get(gpu or "", {}).get(canonical(dtype) or ""),
            DATASHEET_BW.get(gpu or ""))


def canonical(dtype: str | None) -> str | None:
    """The datasheet's name of a dtype (`torch.float16`, `fp16`, `half` -> float16)."""
    if not dtype:
        return None
    d = dtype.lower().removeprefix("torch.")
    return DTYPES.get(d, d)


def gemm_dtype(names: pd.Series, durations: pd.Series) -> str | None:
    """The dtype of the GEMM kernels that ran longest, read from their names (a command
    names no dtype): None when no name says one."""
    time: dict[str, float] = {}
    for name, d in zip(names.astype(str), durations.fillna(0), strict=True):
        low = name.lower()
        found = next((dt for rx, dt in GEMM_DTYPE if rx.search(low)), None)
        if found and ("gemm" in low or "nvjet" in low or "cutlass" in low or "xmma" in low):
            time[found] = time.get(found, 0.0) + float(d)
    return max(time, key=time.get) if time else None


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
    dtype = canonical(meta.dtype if meta else None)
    said = ""
    if dtype is None and "name" in kernels:
        dtype = gemm_dtype(kernels["name"], kernels["duration_ns"])
        said = " (the dtype read from the GEMM kernels' names)" if dtype else ""
    gpu = kernels["gpu"].dropna()
    name = str(gpu.iloc[0]) if len(gpu) else None
    peak, _ = datasheet(name, dtype)
    if peak:
        out.flops_per_s = peak
        out.flops_source = f"{name}: {DATASHEET_SOURCE}, {dtype}{said}"
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
