"""Rank rules: what several ranks' exports say side by side (analysis/diagnosis/ranks.py)."""

from __future__ import annotations

import statistics

from ...common.settings import EXPOSED_PCT, STRAGGLER_PCT
from ...documents.types import Finding
from .registry import RANKS, Context, Rule, rule


@rule("straggler", "ranks", "warning",
      "one rank's compute kernel time per step exceeds the median rank's by more than "
      "`pct_of_step` of the step; the wait it causes is the others' NCCL time beyond its",
      {"pct_of_step": STRAGGLER_PCT}, unpriced=RANKS)
def straggler(r: Rule, ctx: Context) -> list[Finding]:
    live = [x for x in ctx.ranks if x.steps]
    if len(live) < 2:
        return []
    slow = max(live, key=lambda x: x.compute_kernel_ns)
    median = statistics.median(x.compute_kernel_ns for x in live)
    step = statistics.median(x.step_ns for x in live)
    if slow.compute_kernel_ns - median <= STRAGGLER_PCT / 100 * step:
        return []
    waits = {x.rank: max(x.nccl_kernel_ns - slow.nccl_kernel_ns, 0.0)
             for x in live if x is not slow}
    wait = statistics.mean(waits.values())
    return [r.finding(
        range=None, iterations=slow.steps,
        message=f"rank {slow.rank} is the straggler: {slow.compute_kernel_ns / 1e3:,.1f} µs "
        f"of compute kernels per step against a median of {median / 1e3:,.1f} µs; the other "
        f"ranks wait for it inside their collectives, {wait / 1e3:,.1f} µs per step on "
        "average (their NCCL kernel time beyond the straggler's).",
        evidence={"rank": slow.rank, "compute_kernel_ns": slow.compute_kernel_ns,
                  "median_compute_kernel_ns": median,
                  "wait_ns_per_step": {str(k): v for k, v in waits.items()}},
        suggestion="balance the work across ranks (data sharding, uneven batches, extra "
        "work on one rank); profile the straggler's step alone to see what it adds")]


@rule("comm_not_overlapped", "ranks", "warning",
      "a rank's NCCL kernel time with no compute kernel beside it on its GPU exceeds "
      "`pct_of_step` of its step", {"pct_of_step": EXPOSED_PCT}, unpriced=RANKS)
def comm_not_overlapped(r: Rule, ctx: Context) -> list[Finding]:
    return [r.finding(
        range=None, iterations=x.steps,
        message=f"rank {x.rank}: {x.exposed_comm_ns / 1e3:,.1f} µs per step of NCCL kernels "
        f"ran with no compute kernel beside them "
        f"({100.0 * x.exposed_comm_ns / x.step_ns:.1f}% of its step).",
        evidence={"rank": x.rank, "exposed_comm_ns": x.exposed_comm_ns, "step_ns": x.step_ns,
                  "threshold_pct": EXPOSED_PCT},
        suggestion="overlap communication with compute: DDP bucket sizes (bucket_cap_mb), "
        "gradient accumulation with no_sync(), or fix the straggler the others wait for")
        for x in ctx.ranks if x.steps and x.exposed_comm_ns > EXPOSED_PCT / 100 * x.step_ns]
