"""Compute rules: what Nsight Compute's counters say of each profiled launch and range.

Bound follows Nsight Compute's own speed-of-light rule (roofline.classify); occupancy names
the limiter as ncu's AchievedOccupancy rule does.
"""

from __future__ import annotations

import math

from ...common.names import kernel_label
from ...common.settings import (
    EXCESS_DRAM_X,
    HIGH_DRAM_PCT,
    LATENCY_PCT,
    OCCUPANCY_GAP_PTS,
    WAVES_MAX,
)
from ...documents.types import Finding, KernelLaunch
from ..remedies import layer, remedy
from .registry import KERNELS, Context, Rule, rule

BOUND_TEXT = {"memory": "memory throughput is the higher of the two",
              "compute": "SM throughput is the higher of the two",
              "latency": "both are under 60% of peak"}


def _launches(ctx: Context) -> list[tuple[int, KernelLaunch]]:
    return list(enumerate(ctx.compute.kernels)) if ctx.compute else []


def _iterations(ctx: Context) -> int:
    return ctx.meta.iterations if ctx.meta else 1


def below_light_ns(k: KernelLaunch) -> float:
    """A launch's time at stake: its duration times how far its busier unit (SM or memory)
    stayed from speed of light. 0 when ncu did not collect the SOL metrics."""
    sol = max(k.sm_sol_pct or 0.0, k.mem_sol_pct or 0.0)
    return (k.duration_ns or 0) * max(0.0, 1.0 - sol / 100.0) if sol else 0.0


def grouped(ctx: Context, hits: list[tuple[int, KernelLaunch]]) -> dict[str, list]:
    """Launches by range, in launch order (findings are one per rule and range)."""
    out: dict[str, list] = {}
    for i, k in hits:
        out.setdefault(k.range, []).append((i, k))
    return out


def _names(launches: list[tuple[int, KernelLaunch]]) -> str:
    names = list(dict.fromkeys(kernel_label(k.name) for _, k in launches))
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _bound(r: Rule, ctx: Context, bound: str) -> list[Finding]:
    """One finding per kernel name and range whose launches are `bound`, with the remedy
    of the kernel's own layer (remedies.py)."""
    why = BOUND_TEXT[bound]
    groups: dict[tuple[str, str], list[tuple[int, KernelLaunch]]] = {}
    for i, k in _launches(ctx):
        if k.bound == bound:
            groups.setdefault((k.range, k.name), []).append((i, k))
    out = []
    for (rng, name), launches in groups.items():
        tensor = max((k.tensor_pipe_pct or 0) for _, k in launches)
        first = launches[0][1]
        advice = (f"tensor cores already busy {tensor:.0f}% of the time: gains left are in "
                  "the epilogue, tile shape and overlap (persistent / TMA kernels)"
                  if bound == "compute" and tensor > 50
                  else remedy(bound, name, rng, ctx.meta))
        out.append(r.finding(
            range=rng, kernel=name, suggestion=advice,
            saving_per_instance_ns=sum(below_light_ns(k) for _, k in launches) / _iterations(ctx),
            evidence={"launches": [i for i, _ in launches], "launch": launches[0][0],
                      "layer": layer(name, rng, ctx.meta),
                      "sm_sol_pct": [k.sm_sol_pct for _, k in launches],
                      "mem_sol_pct": [k.mem_sol_pct for _, k in launches],
                      "dram_throughput_pct": [k.dram_throughput_pct for _, k in launches],
                      **({"tensor_pipe_pct": tensor} if bound == "compute" and tensor > 50
                         else {})},
            message=f"{len(launches)} launch(es) of {kernel_label(name)} in "
            f"{rng or 'no range'} are "
            f"{bound}-bound: SM {first.sm_sol_pct:.1f}%, memory {first.mem_sol_pct:.1f}% of "
            f"peak for launch {launches[0][0]} ({why})."))
    return out


@rule("memory_bound", "compute", "info",
      "Nsight Compute's SOL rule: memory throughput ≥ `latency_pct` of peak and above SM "
      "throughput", {"latency_pct": LATENCY_PCT}, unpriced=KERNELS)
def memory_bound(r: Rule, ctx: Context) -> list[Finding]:
    return _bound(r, ctx, "memory")


@rule("compute_bound", "compute", "info",
      "Nsight Compute's SOL rule: SM throughput ≥ `latency_pct` of peak and at least the "
      "memory throughput", {"latency_pct": LATENCY_PCT}, unpriced=KERNELS)
def compute_bound(r: Rule, ctx: Context) -> list[Finding]:
    return _bound(r, ctx, "compute")


@rule("latency_bound", "compute", "warning",
      "Nsight Compute's SOL rule: SM and memory throughput both < `latency_pct` of peak",
      {"latency_pct": LATENCY_PCT}, unpriced=KERNELS)
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
                                        "high_dram_pct": HIGH_DRAM_PCT}, unpriced=KERNELS)
def low_occupancy(r: Rule, ctx: Context) -> list[Finding]:
    hits = [(i, k) for i, k in _launches(ctx)
            if k.theoretical_occupancy_pct is not None and k.achieved_occupancy_pct is not None
            and k.theoretical_occupancy_pct - k.achieved_occupancy_pct > OCCUPANCY_GAP_PTS]
    out = []
    for rng, launches in grouped(ctx, hits).items():
        i, k = launches[0]
        # launches already moving >= 80% of DRAM peak are not held back by occupancy
        busy = all((k.dram_throughput_pct or 0) >= HIGH_DRAM_PCT for _, k in launches)
        theo, ach = k.theoretical_occupancy_pct, k.achieved_occupancy_pct
        out.append(r.finding(
            range=rng, kernel=k.name, severity="info" if busy else "warning",
            saving_per_instance_ns=0.0 if busy else sum(below_light_ns(x) for _, x in launches)
            / _iterations(ctx),
            message=f"{len(launches)} launch(es) in {rng or 'no range'} reach less occupancy "
            f"than they could ({_names(launches)}); launch {i} achieved {ach:.1f}% of a "
            f"theoretical {theo:.1f}% (limiter: {limiter(k)}).",
            evidence={"launches": [j for j, _ in launches], "launch": i,
                      "achieved_pct": ach, "theoretical_pct": theo, "limiter": limiter(k)},
            suggestion="balance the work per block, reduce registers or shared memory per "
            "block, or launch enough blocks for several waves"))
    return out


@rule("wave_quantization", "compute", "warning",
      "fewer than `waves_max` waves and the last wave under half full",
      {"waves_max": WAVES_MAX}, unpriced=KERNELS)
def wave_quantization(r: Rule, ctx: Context) -> list[Finding]:
    hits = [(i, k) for i, k in _launches(ctx)
            if k.waves_per_sm and k.waves_per_sm < WAVES_MAX and 0 < k.waves_per_sm % 1 < 0.5]
    out = []
    for rng, launches in grouped(ctx, hits).items():
        i, k = launches[0]
        waves = k.waves_per_sm
        # the last partial wave's share of the launch idles the SMs it leaves empty
        at_stake = sum((x.duration_ns or 0) * (1 - x.waves_per_sm % 1) / math.ceil(
            x.waves_per_sm) for _, x in launches)
        out.append(r.finding(
            range=rng, kernel=k.name, saving_per_instance_ns=at_stake / _iterations(ctx),
            message=f"{len(launches)} launch(es) in {rng or 'no range'} end on a part-full "
            f"wave; launch {i} runs {waves:.2f} waves: the last keeps only "
            f"{100 * (waves % 1):.0f}% of the SMs busy.",
            evidence={"launches": [j for j, _ in launches], "launch": i,
                      "waves_per_sm": waves, "grid_size": k.grid_size},
            suggestion="pick a tile size or split-K so the grid is a multiple of the SM "
            "count, or use a persistent kernel"))
    return out


@rule("excess_dram_traffic", "compute", "warning",
      "DRAM bytes per iteration > `ratio` × the cost model's minimal bytes",
      {"ratio": EXCESS_DRAM_X}, unpriced=KERNELS)
def excess_dram_traffic(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for rg in ctx.compute.ranges if ctx.compute else []:
        x = rg.dram_vs_min_bytes
        if x is not None and x > EXCESS_DRAM_X:
            peak = ctx.compute.ceilings.dram_bytes_per_s
            extra = rg.dram_bytes_per_iter * (1 - 1 / x)
            out.append(r.finding(
                range=rg.range, saving_per_instance_ns=extra / peak * 1e9 if peak else 0.0,
                message=f"{rg.range} moved {x:.2f}x the minimal HBM bytes per iteration "
                f"({rg.dram_bytes_per_iter / 1e6:,.1f} MB measured).",
                evidence={"dram_bytes_per_iter": rg.dram_bytes_per_iter, "ratio": x,
                          "threshold": EXCESS_DRAM_X},
                suggestion="intermediates go through HBM or inputs are re-read: fuse the "
                "ops, or tile for L2 reuse (grouped tile order)"))
    return out
