"""Findings: what was measured against what the cost model says is possible.

Pure functions over report documents (systems/1, compute/1), meta.json and per-range
details; each finding carries its numbers (`evidence`) and a concrete `suggestion`.
Rules and thresholds (also listed in README.md):

fusion_failure     compiled/triton range with more kernels per iteration than the
                   workload's ideal count (meta.json); without meta.json, a GEMM library
                   kernel (cuBLAS nvjet_*, *gemm*, CUTLASS, cuDNN) directly followed in
                   the same range by an Inductor pointwise kernel (triton_poi_fused_*).
                   Never raised when kernels per iteration equal the ideal.
graph_break        each break from meta.json / TORCH_LOGS, on the compiled range; and
                   eager ATen kernels (demangled at::native::*) inside a compiled range.
recompile          each recompile record from TORCH_LOGS / meta.json.
gpu_idle_gaps      idle gaps >= GAP_NS inside a range's GPU span adding up to more than
                   IDLE_WARN_PCT of the span; host-wait share reported.
launch_bound       idle > LAUNCH_IDLE_PCT of the span and median kernel < LAUNCH_KERNEL_NS.
compile_kernels_in_range  kernels in a range whose counts are not a multiple of the
                   iterations while the range holds more kernels than iterations x ideal
                   (compilation, autotuning or benchmarking ran inside the range).
memory_bound / compute_bound / latency_bound   Nsight Compute's SOL rule (roofline.py).
low_occupancy      theoretical - achieved occupancy > OCCUPANCY_GAP_PTS, naming the limiter;
                   info only when the kernel already moves >= HIGH_DRAM_PCT of DRAM peak.
wave_quantization  fewer than WAVES_MAX waves with the last wave under half full.
excess_dram_traffic  DRAM bytes per iteration > EXCESS_DRAM_X x the cost model's minimum.
"""

from __future__ import annotations

import re
from typing import Any

GAP_NS = 5_000
IDLE_WARN_PCT = 10.0
LAUNCH_IDLE_PCT = 20.0
LAUNCH_KERNEL_NS = 20_000
OCCUPANCY_GAP_PTS = 10.0
HIGH_DRAM_PCT = 80.0
WAVES_MAX = 4.0
EXCESS_DRAM_X = 1.5
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}

GEMM_KERNEL = re.compile(r"(^nvjet_|gemm|cutlass|cudnn|xmma|sm\d+_.*_tn|cublas)", re.I)
INDUCTOR_POINTWISE = re.compile(r"^triton_poi_fused")
INDUCTOR_KERNEL = re.compile(r"^triton_(poi|red|per|tem)_")
ATEN_EAGER = re.compile(r"at::native::")


def finding(rule: str, severity: str, rng: str | None, kernel: str | None, message: str,
            evidence: dict[str, Any], suggestion: str) -> dict[str, Any]:
    return {"rule": rule, "severity": severity, "range": rng, "kernel": kernel,
            "message": message, "evidence": evidence, "suggestion": suggestion}


def ordered(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most severe first, then by range name (stable otherwise)."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f["severity"]], f["range"] or ""))


def _leaf_paths(paths: list[str]) -> set[str]:
    return {p for p in paths if not any(o.startswith(p + "/") for o in paths)}


def _suggest_fusion(names: list[str]) -> str:
    if any(GEMM_KERNEL.search(n) for n in names):
        return ("the GEMM epilogue was not fused: use a Triton matmul that applies the "
                "activation before its store (kernels/matmul_relu.py), or try "
                "torch._inductor.config.max_autotune=True / epilogue fusion")
    return ("look at what Inductor generated (TORCH_LOGS=output_code) for the ops left in "
            "separate kernels, or fuse them in one Triton kernel")


def is_gemm(name: str) -> bool:
    return bool(GEMM_KERNEL.search(name))


def is_pointwise(name: str) -> bool:
    return bool(INDUCTOR_POINTWISE.search(name))


def fusion_failures(entries: dict[str, dict], meta: dict | None,
                    facts: dict[str, dict]) -> list[dict[str, Any]]:
    """fusion_failure from the cost model when meta.json is there, else from names."""
    out = []
    if meta and meta.get("ranges"):
        ideal = (meta.get("cost_model") or {}).get("ideal_kernels")
        iters = int(meta.get("iterations") or 1)
        for variant in ("compiled", "triton"):
            e = entries.get(meta["ranges"].get(variant, ""))
            if not e or not ideal:
                continue
            per_iter = e["kernel_count"] / (iters * e["instances"])
            if per_iter > ideal + 1e-9:
                names = [k["name"] for k in e["kernels"]]
                out.append(finding(
                    "fusion_failure", "warning", e["name"], names[0] if names else None,
                    f"{e['name']} launched {per_iter:g} kernels per iteration where the "
                    f"workload needs {ideal}: {', '.join(names)}.",
                    {"kernels_per_iter": per_iter, "ideal_kernels": ideal,
                     "kernels": names}, _suggest_fusion(names)))
        return out
    for path in sorted(_leaf_paths(list(facts))):
        pair = facts[path]["gemm_then_pointwise"]
        if pair:
            a, b = pair
            out.append(finding(
                "fusion_failure", "warning", path, b,
                f"in {path} the GEMM kernel {a} is followed by the separate pointwise "
                f"kernel {b}: the epilogue was not fused.",
                {"gemm_kernel": a, "epilogue_kernel": b}, _suggest_fusion([a])))
    return out


def compile_findings(entries: dict[str, dict], meta: dict | None, events: list[dict],
                     facts: dict[str, dict]) -> list[dict[str, Any]]:
    """graph_break and recompile findings, attached to the compiled range."""
    compiled_range = ((meta or {}).get("ranges") or {}).get("compiled")
    how = "the compiled variant's range (meta.json)"
    if compiled_range is None:
        inductor = [p for p in _leaf_paths(list(facts))
                    if any(INDUCTOR_KERNEL.search(n) for n, _ in facts[p]["names"])]
        compiled_range = inductor[0] if len(inductor) == 1 else None
        how = ("the only range that ran Inductor kernels" if compiled_range else
               "no single range ran Inductor kernels, so no range is named")
    # TORCH_LOGS words the reason best; explain() in meta.json fills in what logs lack
    breaks = [e for e in events if e["kind"] == "graph_break"]
    breaks += list(((meta or {}).get("compiled") or {}).get("graph_breaks") or [])
    seen, out = set(), []
    for b in breaks:
        key = (b.get("file"), b.get("line"))
        if key in seen:
            continue
        seen.add(key)
        out.append(finding(
            "graph_break", "warning", compiled_range, None,
            f"torch.compile broke the graph at {b.get('file')}:{b.get('line')}: "
            f"{b.get('reason') or 'reason not logged'} (range: {how}).",
            {"file": b.get("file"), "line": b.get("line"), "reason": b.get("reason")},
            "remove the data-dependent Python control flow or side effect at that line "
            "(torch.where / torch.cond instead of `if tensor`, no print in the compiled "
            "function), or compile only the part without it"))
    for ev in (e for e in events if e["kind"] == "recompile"):
        out.append(finding(
            "recompile", "warning", compiled_range, None,
            f"{ev.get('function')} at {ev.get('file')}:{ev.get('line')} was recompiled: "
            f"{ev.get('reason') or 'guard failure not logged'}.",
            {k: ev.get(k) for k in ("function", "file", "line", "reason")},
            "keep shapes and dtypes stable across calls, or mark the varying dimension "
            "dynamic (torch._dynamo.mark_dynamic / dynamic=True)"))
    if compiled_range and compiled_range in facts:
        aten = sorted({n for n, d in facts[compiled_range]["names"] if ATEN_EAGER.search(d)})
        if aten:
            out.append(finding(
                "graph_break", "warning", compiled_range, aten[0],
                f"{len(aten)} eager ATen kernel(s) ran inside the compiled range "
                f"{compiled_range}: {', '.join(aten)}; part of the function ran outside "
                "the compiled graph.", {"aten_kernels": aten},
                "find the graph break (TORCH_LOGS=graph_breaks) that leaves these ops eager"))
    return out


def idle_findings(entries: dict[str, dict], gap_rows: dict[str, dict],
                  median_kernel_ns: dict[str, float | None]) -> list[dict[str, Any]]:
    """gpu_idle_gaps and launch_bound per leaf range."""
    out = []
    for path in sorted(_leaf_paths(list(entries))):
        e, gaps = entries[path], gap_rows.get(path)
        if not gaps or not e["gpu_span_ns"]:
            continue
        idle_pct = 100.0 * gaps["gap_ns"] / e["gpu_span_ns"]
        host_pct = 100.0 * gaps["host_wait_ns"] / gaps["gap_ns"] if gaps["gap_ns"] else 0.0
        evidence = {"gpu_span_ns": e["gpu_span_ns"], "idle_ns": int(gaps["gap_ns"]),
                    "idle_pct": round(idle_pct, 1), "gaps": int(gaps["gaps"]),
                    "largest_gap_ns": int(gaps["largest_gap_ns"]),
                    "host_wait_pct": round(host_pct, 1), "min_gap_ns": GAP_NS,
                    "median_kernel_ns": median_kernel_ns.get(path)}
        med = median_kernel_ns.get(path)
        if idle_pct > LAUNCH_IDLE_PCT and med is not None and med < LAUNCH_KERNEL_NS:
            out.append(finding(
                "launch_bound", "warning", path, None,
                f"{path} is launch-bound: the GPU idled {idle_pct:.1f}% of its span in "
                f"{int(gaps['gaps'])} gaps while the median kernel ran {med / 1e3:.1f} µs "
                f"({host_pct:.0f}% of the idle time waiting for the host to launch).",
                evidence, "fuse the small ops (torch.compile, a Triton kernel) or capture "
                "the sequence in a CUDA graph (torch.compile mode='reduce-overhead')"))
        elif idle_pct > IDLE_WARN_PCT:
            out.append(finding(
                "gpu_idle_gaps", "warning", path, None,
                f"the GPU sat idle {idle_pct:.1f}% of {path}'s span in {int(gaps['gaps'])} "
                f"gaps of {GAP_NS / 1e3:g} µs or more (largest "
                f"{gaps['largest_gap_ns'] / 1e3:.1f} µs, {host_pct:.0f}% host wait).",
                evidence, "look at the CUDA API calls in the gaps (syncs, allocations, "
                "copies) on the Nsight Systems timeline and move them out of the loop"))
    return out


def compile_in_range(entries: dict[str, dict], meta: dict | None) -> list[dict[str, Any]]:
    """compile_kernels_in_range: kernel counts that do not fit N identical iterations."""
    if not meta or not meta.get("ranges"):
        return []
    iters = int(meta.get("iterations") or 1)
    ideal = (meta.get("cost_model") or {}).get("ideal_kernels") or 1
    out = []
    for path in meta["ranges"].values():
        e = entries.get(path)
        if not e:
            continue
        n = iters * e["instances"]
        odd = [k for k in e["kernels"] if k["count"] % n]
        if odd and e["kernel_count"] > n * ideal:
            out.append(finding(
                "compile_kernels_in_range", "warning", path, odd[0]["name"],
                f"{path} holds {e['kernel_count']} kernels for {n} iterations; "
                f"{len(odd)} kernel name(s) ran a number of times that is not a multiple "
                "of the iterations: compilation, autotuning or benchmarking ran inside the "
                "measured range.",
                {"iterations": n, "kernel_count": e["kernel_count"],
                 "odd_kernels": {k["name"]: k["count"] for k in odd[:10]}},
                "move warm-up, torch.compile's first call and autotuning before the range "
                "(the runner does: warm-up calls happen before any NVTX range opens)"))
    return out


def systems_findings(doc: dict[str, Any], meta: dict | None, events: list[dict],
                     facts: dict[str, dict], gap_rows: dict[str, dict]) -> list[dict[str, Any]]:
    """Every systems rule over one systems/1 document, most severe first.

    `facts` per range path comes from ranges.kernel_facts, `gap_rows` per path from
    gaps.summarize_gaps.
    """
    entries = {e["name"]: e for e in doc["ranges"]}
    medians = {p: f["median_ns"] for p, f in facts.items()}
    found = (fusion_failures(entries, meta, facts)
             + compile_findings(entries, meta, events, facts)
             + idle_findings(entries, gap_rows, medians) + compile_in_range(entries, meta))
    return ordered(found)


def _limiter(k: dict[str, Any]) -> str:
    """What keeps occupancy down, in Nsight Compute's terms.

    Under two waves the last, partial wave idles SMs (tail effect). Otherwise, when the
    theoretical occupancy is below 100%, the launch limit that allows the fewest blocks
    per SM (registers, shared memory, warps per block, blocks) caps it. At a theoretical
    100% nothing caps it, and the gap is warp scheduling overhead or workload imbalance
    (ncu's AchievedOccupancy rule).
    """
    if (k.get("waves_per_sm") or 99) < 2:
        return "tail effect (under two waves of blocks)"
    if (k.get("theoretical_occupancy_pct") or 0) >= 100:
        return "none at launch: warp scheduling overhead or workload imbalance"
    limits = {"registers": k.get("limit_registers"), "shared memory": k.get("limit_shared_mem"),
              "warps (block size)": k.get("limit_warps"), "blocks per SM": k.get("limit_blocks")}
    known = {n: v for n, v in limits.items() if v is not None}
    return min(known, key=known.get) if known else "unknown"


def bound_finding(i: int, k: dict[str, Any]) -> dict[str, Any]:
    evidence = {"launch": i, "sm_sol_pct": k["sm_sol_pct"], "mem_sol_pct": k["mem_sol_pct"],
                "dram_throughput_pct": k["dram_throughput_pct"]}
    text = {"memory": ("memory_bound", "info", "memory throughput is the higher of the two",
                       "cut bytes: fuse with neighbours, use smaller dtypes, avoid re-reads"),
            "compute": ("compute_bound", "info", "SM throughput is the higher of the two",
                        "use tensor cores (fp16/bf16 tl.dot), cut instructions per element"),
            "latency": ("latency_bound", "warning", "both are under 60% of peak",
                        "more parallel work in flight: larger tiles per block, more blocks, "
                        "fewer dependent loads; check Scheduler and Warp State statistics")}
    rule, severity, why, suggestion = text[k["bound"]]
    tensor = k.get("tensor_pipe_pct")
    if k["bound"] == "compute" and tensor is not None and tensor > 50:
        evidence["tensor_pipe_pct"] = tensor
        suggestion = (f"tensor cores already busy {tensor:.0f}% of the time: gains left are "
                      "in the epilogue, tile shape and overlap (persistent / TMA kernels)")
    return finding(rule, severity, k["range"], k["name"],
                   f"launch {i} ({k['name'][:60]}) is {k['bound']}-bound: SM "
                   f"{k['sm_sol_pct']:.1f}%, memory {k['mem_sol_pct']:.1f}% of peak ({why}).",
                   evidence, suggestion)


def kernel_findings(i: int, k: dict[str, Any]) -> list[dict[str, Any]]:
    """Bound, occupancy and wave findings of one profiled launch."""
    out = [bound_finding(i, k)]
    theo, ach = k.get("theoretical_occupancy_pct"), k.get("achieved_occupancy_pct")
    if theo is not None and ach is not None and theo - ach > OCCUPANCY_GAP_PTS:
        # a kernel already moving >= 80% of DRAM peak is not held back by occupancy
        busy = (k.get("dram_throughput_pct") or 0) >= HIGH_DRAM_PCT
        out.append(finding(
            "low_occupancy", "info" if busy else "warning", k["range"], k["name"],
            f"launch {i} achieved {ach:.1f}% occupancy of a theoretical {theo:.1f}% "
            f"(limiter: {_limiter(k)}).", {"launch": i, "achieved_pct": ach,
                                           "theoretical_pct": theo, "limiter": _limiter(k)},
            "balance the work per block, reduce registers or shared memory per block, or "
            "launch enough blocks for several waves"))
    waves = k.get("waves_per_sm")
    if waves and waves < WAVES_MAX and 0 < waves % 1 < 0.5:
        out.append(finding(
            "wave_quantization", "warning", k["range"], k["name"],
            f"launch {i} runs {waves:.2f} waves: the last wave keeps only "
            f"{100 * (waves % 1):.0f}% of the SMs busy.",
            {"launch": i, "waves_per_sm": waves, "grid_size": k.get("grid_size")},
            "pick a tile size or split-K so the grid is a multiple of the SM count, or use a "
            "persistent kernel"))
    return out


def compute_findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every compute rule over one compute/1 document, most severe first."""
    out = [f for i, k in enumerate(doc["kernels"]) for f in kernel_findings(i, k)]
    for r in doc["ranges"]:
        x = r.get("dram_vs_min_bytes")
        if x is not None and x > EXCESS_DRAM_X:
            out.append(finding(
                "excess_dram_traffic", "warning", r["range"], None,
                f"{r['range']} moved {x:.2f}x the minimal HBM bytes per iteration "
                f"({r['dram_bytes_per_iter'] / 1e6:,.1f} MB measured).",
                {"dram_bytes_per_iter": r["dram_bytes_per_iter"], "ratio": x,
                 "threshold": EXCESS_DRAM_X},
                "intermediates go through HBM or inputs are re-read: fuse the ops, or tile "
                "for L2 reuse (grouped tile order)"))
    return ordered(out)
