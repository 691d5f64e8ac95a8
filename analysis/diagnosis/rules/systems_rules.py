"""Systems rules: what the timeline shows against what the cost model says is possible."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ...common.settings import (
    GAP_NS,
    IDLE_WARN_PCT,
    LAUNCH_HOST_PCT,
    LAUNCH_IDLE_PCT,
    LAUNCH_KERNEL_NS,
    SYNC_INSTANCES_PCT,
)
from ...documents.types import Finding
from .. import guards
from .host_rules import explained
from .registry import ONCE, Context, Rule, rule

GEMM_KERNEL = re.compile(r"(^nvjet_|gemm|cutlass|cudnn|xmma|sm\d+_.*_tn|cublas)", re.I)
INDUCTOR_POINTWISE = re.compile(r"^triton_poi_fused")
INDUCTOR_KERNEL = re.compile(r"^triton_(poi|red|per|tem)_")


def iterations(ctx: Context, e: Any) -> int:
    """Iterations a range entry ran: the runner's iterations for a variant range of
    meta.json, else its instances (impact is then per instance)."""
    if ctx.meta and e.name in ctx.meta.ranges.values():
        return ctx.meta.iterations_of(e.instances)
    return max(e.instances, 1)


def idle_ns(e: Any) -> int:
    """Wall time of a range during which no GPU operation of its process ran."""
    return max(e.wall_ns - e.busy_ns, 0)


def _suggest_fusion(names: list[str]) -> str:
    if any(GEMM_KERNEL.search(n) for n in names):
        return ("the GEMM epilogue was not fused: use a Triton matmul that applies the "
                "activation before its store (kernels/matmul_relu.py), or try "
                "torch._inductor.config.max_autotune=True / epilogue fusion")
    return ("look at what Inductor generated (TORCH_LOGS=output_code) for the ops left in "
            "separate kernels, or fuse them in one Triton kernel")


def _matches(names: pd.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """pattern.search per row, evaluated once per distinct name."""
    cats = pd.Categorical(names)
    hit = np.array([bool(pattern.search(str(c))) for c in cats.categories], dtype=bool)
    return hit[cats.codes] if len(cats) else np.zeros(0, dtype=bool)


def gemm_then_pointwise(pairs: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Per path, the first (GEMM, Inductor pointwise) kernels that ran back to back
    (`pairs`: Context.seq_pairs, in order of first occurrence)."""
    if pairs.empty:
        return {}
    hit = _matches(pairs["a"], GEMM_KERNEL) & _matches(pairs["b"], INDUCTOR_POINTWISE)
    out: dict[str, tuple[str, str]] = {}
    for path, a, b in pairs.loc[hit, ["path", "a", "b"]].itertuples(index=False):
        out.setdefault(path, (str(a), str(b)))
    return out


@rule("fusion_failure", "systems", "warning",
      "the range of a variant whose role is compiled or triton runs more kernels per "
      "iteration than the workload's ideal count (meta.json); without meta.json, a GEMM "
      "library kernel (nvjet, gemm, CUTLASS, cuDNN) directly followed in the same range "
      "by `triton_poi_fused_*`; never when kernels/iteration = ideal", change="fused")
def fusion_failure(r: Rule, ctx: Context) -> list[Finding]:
    meta = ctx.meta
    if meta and meta.ranges:
        out = []
        for _, path in meta.ranges_of("compiled", "triton"):
            e = ctx.entries.get(path)
            if not e or not meta.ideal_kernels:
                continue
            n = meta.iterations_of(e.instances)
            per_iter = e.kernel_count / n
            if per_iter > meta.ideal_kernels + 1e-9:
                names = [k.name for k in e.kernels]
                by_time = sorted(e.kernels, key=lambda k: -k.avg_ns)
                out.append(r.finding(
                    range=e.name, kernel=names[0] if names else None, iterations=n,
                    message=f"{e.name} launched {per_iter:g} kernels per iteration where the "
                    f"workload needs {meta.ideal_kernels}: {', '.join(names)}.",
                    evidence={"kernels_per_iter": per_iter,
                              "ideal_kernels": meta.ideal_kernels, "kernels": names,
                              "unfused": [k.name for k in by_time[meta.ideal_kernels:]]},
                    suggestion=_suggest_fusion(names)))
        return out
    pairs = gemm_then_pointwise(ctx.seq_pairs)
    if not pairs:
        return []
    return [r.finding(range=path, kernel=b,
                      message=f"in {path} the GEMM kernel {a} is followed by the separate "
                      f"pointwise kernel {b}: the epilogue was not fused.",
                      evidence={"gemm_kernel": a, "epilogue_kernel": b, "unfused": [b]},
                      suggestion=_suggest_fusion([a]))
            for path in ctx.kernel_leaves if (pair := pairs.get(path)) for a, b in [pair]]


def compiled_range(ctx: Context) -> tuple[str | None, str]:
    """The range compile events belong to, and how it was chosen."""
    compiled = ctx.meta.ranges_of("compiled") if ctx.meta else []
    if compiled:
        return compiled[0][1], "the compiled variant's range (meta.json)"
    seq = ctx.seq_names
    inductor = set(seq["path"][_matches(seq["name"], INDUCTOR_KERNEL)])
    found = [p for p in ctx.kernel_leaves if p in inductor] if inductor else []
    if len(found) == 1:
        return found[0], "the only range that ran Inductor kernels"
    synced = broken_ranges(ctx, found)
    if len(synced) == 1:
        return synced[0], BROKEN_BY_READBACK
    return None, "no single range ran Inductor kernels, so no range is named"


def broken_ranges(ctx: Context, found: list[str] | None = None) -> list[str]:
    """The leaf ranges that ran Inductor kernels with a host readback between them in
    most iterations (`found`: the leaves that ran Inductor kernels)."""
    if found is None:
        seq = ctx.seq_names
        inductor = set(seq["path"][_matches(seq["name"], INDUCTOR_KERNEL)])
        found = [p for p in ctx.kernel_leaves if p in inductor]
    return [p for p in found if (e := ctx.entries.get(p)) is not None
            and e.sync_instances * 100 >= SYNC_INSTANCES_PCT * e.wall_instances]


BROKEN_BY_READBACK = ("the range whose Inductor kernels are split by a host readback in "
                      "every iteration: a graph broken on a value the host needs runs as "
                      "two graphs with a sync between them")


def _breaks(ctx: Context) -> list[dict[str, Any]]:
    """Graph breaks, TORCH_LOGS first (it words the reason best), one per file:line."""
    seen, out = set(), []
    for b in [e for e in ctx.events if e["kind"] == "graph_break"] + (
            ctx.meta.graph_breaks if ctx.meta else []):
        if (b.get("file"), b.get("line")) not in seen:
            seen.add((b.get("file"), b.get("line")))
            out.append(b)
    return out


@rule("graph_break", "systems", "warning",
      "each break from meta.json (`torch._dynamo.explain`) or TORCH_LOGS, on the compiled "
      "range (without meta: the only range that ran Inductor kernels, else those whose "
      "Inductor kernels a host readback splits in most iterations); eager `at::native` "
      "kernels inside a compiled range",
      unpriced="the graphs a break splits are compiled code the capture does not hold; "
      "only a break on a host readback is priced (no_break)")
def graph_break(r: Rule, ctx: Context) -> list[Finding]:
    where, how = compiled_range(ctx)
    places = [where] if where or ctx.meta else broken_ranges(ctx)
    out = []
    for b in _breaks(ctx):
        for at in places or [None]:
            out.append(_break_finding(r, ctx, b, at, how if at == where else
                                      BROKEN_BY_READBACK))
    return out + _eager_in_compiled(r, ctx, where)


def _break_finding(r: Rule, ctx: Context, b: dict[str, Any], where: str | None,
                   how: str) -> Finding:
    """One graph break, placed on `where` (or the range open when it was logged)."""
    e = ctx.entries.get(where) if where else None
    n = iterations(ctx, e) if e else 1
    place, idle, said = _placed(ctx, b, where, how, e, n)
    return r.finding(
        range=place, iterations=1 if b.get("range") else n,
        change="no_break" if how == BROKEN_BY_READBACK and not b.get("range") else None,
        message=f"torch.compile broke the graph at {b.get('file')}:{b.get('line')}: "
        f"{b.get('reason') or 'reason not logged'} ({said}).",
        evidence={"file": b.get("file"), "line": b.get("line"), "reason": b.get("reason"),
                  "at_ns": b.get("at_ns")},
        suggestion="remove the data-dependent Python control flow or side effect at that "
        "line (torch.where / torch.cond instead of `if tensor`, no print in the compiled "
        "function), or compile only the part without it")


def _eager_in_compiled(r: Rule, ctx: Context, where: str | None) -> list[Finding]:
    """Eager ATen kernels inside the compiled range: part of it ran outside the graph."""
    e = ctx.entries.get(where) if where else None
    n = iterations(ctx, e) if e else 1
    out: list[Finding] = []
    seq = ctx.seq_names
    in_range = seq[seq["path"] == where] if where else seq.iloc[:0]
    aten = sorted(set(in_range["name"][in_range["aten"].astype(bool)].astype(str)))
    if aten:
        out.append(r.finding(
            range=where, kernel=aten[0], iterations=n,
            message=f"{len(aten)} eager ATen kernel(s) ran inside the compiled range {where}: "
            f"{', '.join(aten)}; part of the function ran outside the compiled graph.",
            evidence={"aten_kernels": aten},
            suggestion="find the graph break (TORCH_LOGS=graph_breaks) that leaves these "
            "ops eager"))
    return out


def _placed(ctx: Context, ev: dict[str, Any], where: str | None, how: str, e: Any,
            n: int) -> tuple[str | None, float, str]:
    """(range, GPU idle charged, how it was placed) of a compile event: the range open
    when TORCH_LOGS logged it and that instance's idle time, else the compiled range's."""
    row = ev.get("range_row")
    if row is not None and ctx.trace is not None:
        sharing = sum(1 for x in ctx.events if x.get("range_row") == row)
        idle = float(ctx.instance_idle_ns[row]) / sharing     # events of one instance share it
        return ev["range"], idle, (f"logged while {ev['range']} was open: compiled there, "
                                   f"{idle / 1e6:,.1f} ms of GPU idle charged to it")
    return where, idle_ns(e) / n if e else 0.0, f"range: {how}"


@rule("recompile", "systems", "warning",
      "each \"Recompiling function\" record in TORCH_LOGS; one logged while no range was "
      "open (on the trace clock) is warm-up: info, charged to no range",
      unpriced=ONCE)
def recompile(r: Rule, ctx: Context) -> list[Finding]:
    where, how = compiled_range(ctx)
    e = ctx.entries.get(where) if where else None
    n = iterations(ctx, e) if e else 1
    out = []
    for ev in (ev for ev in ctx.events if ev["kind"] == "recompile"):
        if ev.get("at_ns") is not None and ev.get("range_row") is None:
            place, idle, said = None, 0.0, (f"logged at {ev['at_ns'] / 1e9:,.3f} s on the "
                                            "trace clock, while no range was open: warm-up, "
                                            "charged to no range")
        else:
            place, idle, said = _placed(ctx, ev, where, how, e, n)
        why, fix = guards.explain(ev.get("reason"))
        out.append(r.finding(
            range=place, iterations=1 if ev.get("range") else n,
            severity="info" if place is None else r.severity,
            message=f"{ev.get('function')} at {ev.get('file')}:{ev.get('line')} was "
            f"recompiled: {why or 'guard failure not logged'} ({said}).",
            evidence={k: ev.get(k) for k in ("function", "file", "line", "reason", "at_ns")},
            suggestion=fix))
    return out


def idle_facts(ctx: Context) -> list[tuple[Any, dict[str, Any], float | None]]:
    """Per leaf range with idle gaps >= GAP_NS: (entry, gap summary, median kernel ns);
    computed once for both idle rules."""
    if "idle" not in ctx.cache:
        ctx.cache["idle"] = _idle_facts(ctx)
    return ctx.cache["idle"]


def _idle_facts(ctx: Context) -> list[tuple[Any, dict[str, Any], float | None]]:
    trace = ctx.trace
    if trace is None:
        return []
    per_key, keys = trace.gaps, trace.keys
    wanted = keys["path"].isin(ctx.leaves).to_numpy()     # only leaves are asked for below
    if ctx.pid is not None:
        wanted = wanted & (keys["pid"].to_numpy() == ctx.pid)
    mine = per_key[per_key["key"].isin(keys.index[wanted]).to_numpy()]
    paths = keys["path"].reindex(mine["key"]).tolist()
    gap_rows = dict(zip(paths, mine.to_dict("records"), strict=True))
    medians = ctx.median_kernel_ns
    compiled = {ev["range"] for ev in ctx.events if ev.get("range")}
    out = []
    for path in ctx.leaves:
        if compiled and any(c == path or c.startswith(path + "/") for c in compiled):
            continue                   # its idle time is compilation (the compile rules)
        e, gaps = ctx.entries[path], gap_rows.get(path)
        if gaps and e.gpu_span_ns:
            out.append((e, gaps, medians.get(path)))
    return out


def _idle_evidence(e: Any, gaps: dict[str, Any], med: float | None) -> dict[str, Any]:
    idle_pct = 100.0 * gaps["gap_ns"] / e.gpu_span_ns
    host_pct = 100.0 * gaps["host_wait_ns"] / gaps["gap_ns"] if gaps["gap_ns"] else 0.0
    return {"gpu_span_ns": e.gpu_span_ns, "idle_ns": int(gaps["gap_ns"]),
            "idle_pct": round(idle_pct, 1), "gaps": int(gaps["gaps"]),
            "largest_gap_ns": int(gaps["largest_gap_ns"]), "host_wait_pct": round(host_pct, 1),
            "min_gap_ns": GAP_NS, "median_kernel_ns": med}


def _is_launch_bound(ev: dict[str, Any], e: Any) -> bool:
    """Short kernels and an idle GPU, and (where the host calls were traced) launch calls
    filling a good part of the idle time."""
    med = ev["median_kernel_ns"]
    idle = max(e.wall_ns - e.busy_ns, 0)
    launches = not e.launch_calls or e.host_launch_ns * 100 >= LAUNCH_HOST_PCT * idle
    return (ev["idle_pct"] > LAUNCH_IDLE_PCT and med is not None and med < LAUNCH_KERNEL_NS
            and launches)


@rule("launch_bound", "systems", "warning",
      "idle > `idle_pct` of the span, median kernel < `median_kernel_ns` and launch calls "
      "fill at least `launch_pct` of the idle time (where host calls were traced); not "
      "where kernels are built every call or the loop waits for input",
      {"idle_pct": LAUNCH_IDLE_PCT, "median_kernel_ns": LAUNCH_KERNEL_NS,
       "min_gap_ns": GAP_NS, "launch_pct": LAUNCH_HOST_PCT}, change="one_graph")
def launch_bound(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for e, gaps, med in idle_facts(ctx):
        ev = _idle_evidence(e, gaps, med)
        if _is_launch_bound(ev, e) and not explained(ctx, e.name):
            n = iterations(ctx, e)
            out.append(r.finding(
                range=e.name, evidence=ev, iterations=n,
                message=f"{e.name} is launch-bound: the GPU idled {ev['idle_pct']:.1f}% of its "
                f"span in {ev['gaps']} gaps while the median kernel ran {med / 1e3:.1f} µs "
                f"({ev['host_wait_pct']:.0f}% of the idle time waiting for the host to "
                "launch).",
                suggestion="fuse the small ops (torch.compile, a Triton kernel) or capture "
                "the sequence in a CUDA graph (torch.compile mode='reduce-overhead')"))
    return out


@rule("gpu_idle_gaps", "systems", "warning",
      "gaps of at least `min_gap_ns` between GPU operations inside a range's span add up to "
      "more than `idle_pct` of it (and it is not launch-bound); each gap is \"host wait\" "
      "when the next launch call began after the GPU went idle; not where a host-side rule "
      "names the cause", {"idle_pct": IDLE_WARN_PCT, "min_gap_ns": GAP_NS}, change="gpu_fed")
def gpu_idle_gaps(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for e, gaps, med in idle_facts(ctx):
        ev = _idle_evidence(e, gaps, med)
        if (not _is_launch_bound(ev, e) and ev["idle_pct"] > IDLE_WARN_PCT
                and not explained(ctx, e.name)):
            n = iterations(ctx, e)
            out.append(r.finding(
                range=e.name, evidence=ev, iterations=n,
                message=f"the GPU sat idle {ev['idle_pct']:.1f}% of {e.name}'s span in "
                f"{ev['gaps']} gaps of {GAP_NS / 1e3:g} µs or more (largest "
                f"{ev['largest_gap_ns'] / 1e3:.1f} µs, {ev['host_wait_pct']:.0f}% host wait).",
                suggestion="look at the CUDA API calls in the gaps (syncs, allocations, "
                "copies) on the Nsight Systems timeline and move them out of the loop"))
    return out


@rule("compile_kernels_in_range", "systems", "warning",
      "kernel counts in a variant's range not a multiple of the iterations and more kernels "
      "than iterations × ideal (compilation, autotuning or benchmarking ran inside it)",
      unpriced=ONCE)
def compile_kernels_in_range(r: Rule, ctx: Context) -> list[Finding]:
    meta = ctx.meta
    if not meta or not meta.ranges:
        return []
    ideal = meta.ideal_kernels or 1
    out = []
    for path in meta.ranges.values():
        e = ctx.all_entries.get(path)
        if not e:
            continue
        n = meta.iterations_of(e.instances)
        odd = [k for k in e.kernels if k.count % n]
        if odd and e.kernel_count > n * ideal:
            out.append(r.finding(
                range=path, kernel=odd[0].name, iterations=n,
                message=f"{path} holds {e.kernel_count} kernels for {n} iterations; "
                f"{len(odd)} kernel name(s) ran a number of times that is not a multiple of "
                "the iterations: compilation, autotuning or benchmarking ran inside the "
                "measured range.",
                evidence={"iterations": n, "kernel_count": e.kernel_count,
                          "odd_kernels": {k.name: k.count for k in odd[:10]}},
                suggestion="move warm-up, torch.compile's first call and autotuning before "
                "the range (the runner does: warm-up calls happen before any NVTX range "
                "opens)"))
    return out
