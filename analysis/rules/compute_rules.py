"""Compute rules: what Nsight Compute's counters say of each profiled launch and range.

Bound follows Nsight Compute's own speed-of-light rule (roofline.classify); occupancy names
the limiter as ncu's AchievedOccupancy rule does.
"""

from __future__ import annotations

from typing import Any

from ..documents import Finding, KernelLaunch
from ..roofline import LATENCY_PCT
from . import Context, Rule, rule

OCCUPANCY_GAP_PTS = 10.0
HIGH_DRAM_PCT = 80.0
WAVES_MAX = 4.0
EXCESS_DRAM_X = 1.5

BOUND_TEXT = {
    "memory": ("memory throughput is the higher of the two",
               "cut bytes: fuse with neighbours, use smaller dtypes, avoid re-reads"),
    "compute": ("SM throughput is the higher of the two",
                "use tensor cores (fp16/bf16 tl.dot), cut instructions per element"),
    "latency": ("both are under 60% of peak",
                "more parallel work in flight: larger tiles per block, more blocks, fewer "
                "dependent loads; check Scheduler and Warp State statistics"),
}


def _launches(ctx: Context) -> list[tuple[int, KernelLaunch]]:
    return list(enumerate(ctx.compute.kernels)) if ctx.compute else []


def _bound(r: Rule, ctx: Context, bound: str) -> list[Finding]:
    out = []
    for i, k in _launches(ctx):
        if k.bound != bound:
            continue
        why, suggestion = BOUND_TEXT[bound]
        evidence: dict[str, Any] = {"launch": i, "sm_sol_pct": k.sm_sol_pct,
                                    "mem_sol_pct": k.mem_sol_pct,
                                    "dram_throughput_pct": k.dram_throughput_pct}
        tensor = k.tensor_pipe_pct
        if bound == "compute" and tensor is not None and tensor > 50:
            evidence["tensor_pipe_pct"] = tensor
            suggestion = (f"tensor cores already busy {tensor:.0f}% of the time: gains left "
                          "are in the epilogue, tile shape and overlap (persistent / TMA "
                          "kernels)")
        out.append(r.finding(
            range=k.range, kernel=k.name, evidence=evidence, suggestion=suggestion,
            message=f"launch {i} ({k.name[:60]}) is {bound}-bound: SM {k.sm_sol_pct:.1f}%, "
            f"memory {k.mem_sol_pct:.1f}% of peak ({why})."))
    return out


@rule("memory_bound", "compute", "info",
      "Nsight Compute's SOL rule: memory throughput ≥ `latency_pct` of peak and above SM "
      "throughput", {"latency_pct": LATENCY_PCT})
def memory_bound(r: Rule, ctx: Context) -> list[Finding]:
    return _bound(r, ctx, "memory")


@rule("compute_bound", "compute", "info",
      "Nsight Compute's SOL rule: SM throughput ≥ `latency_pct` of peak and at least the "
      "memory throughput", {"latency_pct": LATENCY_PCT})
def compute_bound(r: Rule, ctx: Context) -> list[Finding]:
    return _bound(r, ctx, "compute")


@rule("latency_bound", "compute", "warning",
      "Nsight Compute's SOL rule: SM and memory throughput both < `latency_pct` of peak",
      {"latency_pct": LATENCY_PCT})
def latency_bound(r: Rule, ctx: Context) -> list[Finding]:
    return _bound(r, ctx, "latency")


def limiter(k: KernelLaunch) -> str:
    """What keeps occupancy down, in Nsight Compute's terms.

    Under two waves the last, partial wave idles SMs (tail effect). Otherwise, when the
    theoretical occupancy is below 100%, the launch limit that allows the fewest blocks
    per SM (registers, shared memory, warps per block, blocks) caps it. At a theoretical
    100% nothing caps it, and the gap is warp scheduling overhead or workload imbalance
    (ncu's AchievedOccupancy rule).
    """
    if (k.waves_per_sm or 99) < 2:
        return "tail effect (under two waves of blocks)"
    if (k.theoretical_occupancy_pct or 0) >= 100:
        return "none at launch: warp scheduling overhead or workload imbalance"
    limits = {"registers": k.limit_registers, "shared memory": k.limit_shared_mem,
              "warps (block size)": k.limit_warps, "blocks per SM": k.limit_blocks}
    known = {n: v for n, v in limits.items() if v is not None}
    return min(known, key=known.get) if known else "unknown"


@rule("low_occupancy", "compute", "warning",
      "theoretical − achieved occupancy > `gap_pts` points; names the limiter: tail effect "
      "under two waves, else the launch limit (registers, shared memory, warps, blocks) "
      "when theoretical < 100%, else scheduling overhead or imbalance; info only when DRAM "
      "throughput ≥ `high_dram_pct`", {"gap_pts": OCCUPANCY_GAP_PTS,
                                        "high_dram_pct": HIGH_DRAM_PCT})
def low_occupancy(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for i, k in _launches(ctx):
        theo, ach = k.theoretical_occupancy_pct, k.achieved_occupancy_pct
        if theo is None or ach is None or theo - ach <= OCCUPANCY_GAP_PTS:
            continue
        # a kernel already moving >= 80% of DRAM peak is not held back by occupancy
        busy = (k.dram_throughput_pct or 0) >= HIGH_DRAM_PCT
        out.append(r.finding(
            range=k.range, kernel=k.name, severity="info" if busy else "warning",
            message=f"launch {i} achieved {ach:.1f}% occupancy of a theoretical {theo:.1f}% "
            f"(limiter: {limiter(k)}).",
            evidence={"launch": i, "achieved_pct": ach, "theoretical_pct": theo,
                      "limiter": limiter(k)},
            suggestion="balance the work per block, reduce registers or shared memory per "
            "block, or launch enough blocks for several waves"))
    return out


@rule("wave_quantization", "compute", "warning",
      "fewer than `waves_max` waves and the last wave under half full",
      {"waves_max": WAVES_MAX})
def wave_quantization(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for i, k in _launches(ctx):
        waves = k.waves_per_sm
        if waves and waves < WAVES_MAX and 0 < waves % 1 < 0.5:
            out.append(r.finding(
                range=k.range, kernel=k.name,
                message=f"launch {i} runs {waves:.2f} waves: the last wave keeps only "
                f"{100 * (waves % 1):.0f}% of the SMs busy.",
                evidence={"launch": i, "waves_per_sm": waves, "grid_size": k.grid_size},
                suggestion="pick a tile size or split-K so the grid is a multiple of the SM "
                "count, or use a persistent kernel"))
    return out


@rule("excess_dram_traffic", "compute", "warning",
      "DRAM bytes per iteration > `ratio` × the cost model's minimal bytes",
      {"ratio": EXCESS_DRAM_X})
def excess_dram_traffic(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for rg in ctx.compute.ranges if ctx.compute else []:
        x = rg.dram_vs_min_bytes
        if x is not None and x > EXCESS_DRAM_X:
            out.append(r.finding(
                range=rg.range,
                message=f"{rg.range} moved {x:.2f}x the minimal HBM bytes per iteration "
                f"({rg.dram_bytes_per_iter / 1e6:,.1f} MB measured).",
                evidence={"dram_bytes_per_iter": rg.dram_bytes_per_iter, "ratio": x,
                          "threshold": EXCESS_DRAM_X},
                suggestion="intermediates go through HBM or inputs are re-read: fuse the "
                "ops, or tile for L2 reuse (grouped tile order)"))
    return out
