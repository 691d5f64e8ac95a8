"""Rules read on a loop's kernels in its modeled steps, by their demangled names or
launch configurations where the short name says nothing: fills of buffers the next op
overwrites, tensors grown by concatenation, chains of elementwise kernels one fused kernel
would make in one pass. Each leaves the saving to the replay (loops/changes.py:
`no_fill`, `one_cat`, `one_pass`).
"""

from __future__ import annotations

import re

from ...common.settings import (
    CAT_GROWTH,
    CAT_MIN_PER_STEP,
    CAT_TREND,
    CHAIN_MIN_KERNELS,
    CHAIN_MIN_PCT,
    FILL_MIN_PCT,
)
from ...documents.types import Finding, KernelStat, RangeEntry
from ..pricing import ChainStat
from .host_rules import found_loops, loops, nested_evidence
from .lines import HOW, inside, named_lines
from .registry import Context, Rule, rule
from .run_rules import per_loop

FILL = r"FillFunctor|fill_kernel"
"""The kernels of torch.zeros, torch.full and Tensor.fill_ (their demangled names: the
short name is every elementwise kernel's)."""
CAT = re.compile(r"CatArrayBatchedCopy")
"""The kernels of torch.cat."""


def _named(e: RangeEntry, pattern: re.Pattern) -> list[KernelStat]:
    return [k for k in e.kernels if pattern.search(k.name)]


@rule("fill_overwritten", "systems", "warning",
      "a loop fills buffers every step (torch.zeros, torch.full, Tensor.fill_ kernels, "
      "from their demangled names in its modeled steps) for at least `fill_pct` of its "
      "kernel time: where the next op overwrites the buffer, the fill is work for nothing",
      {"fill_pct": FILL_MIN_PCT}, change="no_fill")
def fill_overwritten(r: Rule, ctx: Context) -> list[Finding]:
    if ctx.kernels is None:
        return []
    stats = {e.name: ctx.kernels(e.name, FILL) if any(   # a fill's short name is an
        "elementwise" in k.name for k in e.kernels) else (0.0, 0.0, 0.0)   # elementwise one
        for e in loops(ctx)}

    def make(e: RangeEntry) -> dict:
        n, ns, total = stats[e.name]
        return {
            "message": f"{e.name} fills buffers every step: {n:,.1f} fill kernel(s) a step "
            f"(FillFunctor: torch.zeros, torch.full or Tensor.fill_), {ns / 1e6:,.3f} ms, "
            f"{100 * ns / max(total, 1):.0f}% of its kernel time. Where the next operation "
            "overwrites every element (an `out=` argument, a copy, a matmul), the zeros are "
            "never read.",
            "evidence": {"pattern": FILL, "per_step": n, "fill_ns": ns, "kernel_ns": total},
            "suggestion": "allocate with torch.empty (or torch.empty_like) where the next "
            "operation writes every element; keep torch.zeros only for buffers accumulated "
            "into"}
    return per_loop(r, ctx, lambda e: stats[e.name][0] >= 1 and 100 * stats[e.name][1]
                    >= FILL_MIN_PCT * stats[e.name][2], make)


def _growing(ctx: Context, e: RangeEntry) -> bool:
    """At least CAT_MIN_PER_STEP concatenation kernels a step, growing: the longest
    CAT_GROWTH x the shortest, or (small pieces, whose copies' time grows less than their
    launches' jitter) their durations or grids ranked in a step's order (Pricer.growth)
    at least CAT_TREND."""
    cats = _named(e, CAT)
    if sum(k.count for k in cats) < CAT_MIN_PER_STEP * max(e.wall_instances, 1):
        return False
    if max((k.max_ns for k in cats), default=0) >= CAT_GROWTH * min(
            (k.min_ns for k in cats), default=0):
        return True
    trend = ctx.growth(e.name, CAT.pattern, CAT_MIN_PER_STEP) if ctx.growth else None
    return trend is not None and trend >= CAT_TREND


@rule("cat_in_loop", "systems", "warning",
      "a loop launches at least `per_step` concatenation kernels a step, growing (the "
      "longest `growth`x the shortest or more, or their durations' or grids' rank "
      "correlation with their order in a step `trend` or more): a tensor grown by "
      "torch.cat in a Python loop copies everything so far each time",
      {"per_step": CAT_MIN_PER_STEP, "growth": CAT_GROWTH, "trend": CAT_TREND},
      change="one_cat")
def cat_in_loop(r: Rule, ctx: Context) -> list[Finding]:
    def make(e: RangeEntry) -> dict:
        cats = _named(e, CAT)
        n = sum(k.count for k in cats) / max(e.wall_instances, 1)
        return {
            "message": f"{e.name} grows a tensor by concatenation: {n:,.0f} torch.cat "
            f"kernels an instance, from {min(k.min_ns for k in cats) / 1e3:,.1f} to "
            f"{max(k.max_ns for k in cats) / 1e3:,.1f} µs: each copies everything "
            "concatenated so far, and each is an op launched from Python.",
            "evidence": {"kernels": [k.name for k in cats], "per_instance": n,
                         "kernel_ns": sum(k.total_ns for k in cats)},
            "suggestion": "collect the pieces in a list and concatenate once after the loop "
            "(torch.cat(pieces)), or write into a preallocated tensor by slices"}
    return per_loop(r, ctx, lambda e: _growing(ctx, e), make)


def _chains(ctx: Context, e: RangeEntry) -> dict[int, ChainStat]:
    """The loop's chains by launch configuration whose kernels beyond one pass, or whose
    dispatch but one op's, hold CHAIN_MIN_PCT of its time as it runs."""
    if ctx.chains is None or not any("elementwise" in k.name for k in e.kernels):
        return {}
    per = e.run_ns / max(e.run_instances or e.wall_instances, 1)
    return {grid: c for grid, c in ctx.chains(e.name).items() if 100 * max(
        c.fused_away_ns, c.host_ns * (1 - c.chains / max(c.kernels, 1))) >= CHAIN_MIN_PCT * per}


@rule("unfused_elementwise", "systems", "warning",
      "a loop runs chains of `min_kernels` elementwise kernels or more, launched one after "
      "the other with one launch configuration (eager PyTorch: one kernel per op of an "
      "expression), whose kernels beyond one pass over the tensor, or whose dispatch, "
      "hold at least `chain_pct` of its time as it runs",
      {"min_kernels": CHAIN_MIN_KERNELS, "chain_pct": CHAIN_MIN_PCT}, change="one_pass")
def unfused_elementwise(r: Rule, ctx: Context) -> list[Finding]:
    found = {e.name: _chains(ctx, e) for e in loops(ctx)}
    out = []
    for path, inner in found_loops(ctx, lambda e: bool(found[e.name])).items():
        e = ctx.entries[path]
        for grid, c in sorted(found[path].items(), key=lambda kv: -kv[1].fused_away_ns):
            out.append(r.finding(range=path, iterations=e.run_instances or e.wall_instances,
                                 **_chain_fields(e, grid, c, nested_evidence(inner))))
    return out


def _chain_fields(e: RangeEntry, grid: int, c: ChainStat, nested: dict) -> dict:
    """A chain finding's message, evidence and suggestion, naming its sampled line."""
    line = inside(e.lines, c.lines)
    n = c.kernels / max(c.chains, 1)
    where = (f" In your code: {c.lines[(line.function, line.line)]} Python sample(s) "
             f"while launching them on {line.file}:{line.line} in {line.function}"
             + (f" (`{line.code}`)" if line.code else "") + "." if line else
             "" if e.py_samples else " " + HOW)
    return {
        "message": f"{e.name} runs {c.chains:,.1f} chain(s) a step of {n:,.0f} elementwise "
        f"kernels each, one after the other on one tensor size ({grid // 1024:,} blocks of "
        f"{grid % 1024} threads): {c.kernel_ns / 1e6:,.3f} ms of kernels a step, each "
        "reading and writing the whole tensor, each an op dispatched from Python; one "
        "fused kernel would read the input once and write the output once." + where,
        "evidence": {"grid": grid, "chains_per_step": c.chains, "kernels_per_chain": n,
                     "kernel_ns": c.kernel_ns, "fused_away_ns": c.fused_away_ns,
                     "launch_span_ns": c.host_ns,
                     "lines_named": named_lines([line]) if line else [], **nested},
        "suggestion": (f"at {line.file}:{line.line}: " if line else "") + "fuse the "
        "expression: a fused op where one exists (F.gelu(x, approximate='tanh'), "
        "torch.addcmul, torch.lerp, F.silu; an optimizer's per-parameter update: "
        "fused=True, as torch.optim.AdamW(params, fused=True)), torch.compile on the "
        "function that holds it, or one Triton kernel"}
