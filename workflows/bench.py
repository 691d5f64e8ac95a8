"""`make bench`: median time of every variant at the default size, against the GPU's
ceilings measured in the same run.

    python -m workflows.bench [--workloads a,b] [--size default] [-o reports/bench]

Each variant is built, checked against the workload's reference (relative error), run once
(compilation and autotuning happen there), then timed with
`triton.testing.do_bench(..., return_mode="median")`, which times with CUDA events and
clears the L2 cache before every repetition, in interleaved rounds (see ROUNDS). Writes
reports/bench/<gpu>.json (schema in the issue tracker: gpu, driver, torch, triton,
ceilings, results; plus rounds, and per result its round times and relative error) and
<gpu>.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from . import ceilings as gpu_ceilings
from . import workloads as registry
from .runner import rel_error
from .siblings import sibling
from .tools import EXIT_TOOL_MISSING

table = sibling("analysis.render.markdown").table
datasheet = sibling("analysis.diagnosis.roofline").datasheet
write_atomic = sibling("analysis.documents.io").write_atomic

log = logging.getLogger("workflows.bench")


def floor_seconds(flops: float, min_bytes: float, peak_flops: float | None,
                  peak_bw: float | None) -> float | None:
    """The roofline floor: the larger of bytes / bandwidth and FLOPs / FLOP rate."""
    if not peak_flops or not peak_bw:
        return None
    return max(min_bytes / peak_bw, flops / peak_flops)


def score(row: dict[str, Any], gpu: str, peaks: dict[str, Any]) -> dict[str, Any]:
    """A result row's "% of roofline" against true ceilings (the datasheet's HBM bandwidth
    and dense FLOP/s for its dtype; None for a GPU not in the table) and "% of measured"
    against the copy and fp16 GEMM measured in the run (a reference a kernel can beat)."""
    seconds = row["time_ns"] * 1e-9
    flops, nbytes = row["flops_per_s"] * seconds, row["bytes_per_s"] * seconds
    true = floor_seconds(flops, nbytes, *datasheet(gpu, row["dtype"]))
    measured = floor_seconds(flops, nbytes, peaks.get("fp16_gemm_flops_per_s"),
                             peaks.get("copy_bytes_per_s"))
    row["pct_of_roofline"] = None if true is None else 100.0 * true / seconds
    row["pct_of_measured"] = None if measured is None else 100.0 * measured / seconds
    return row


ROUNDS = 5
"""Timing rounds per workload. Each round times every variant once, in turn: on a GPU
whose clock follows its power limit (the H200 swings 1.5-1.98 GHz under load), variants
timed back to back meet different clocks; taking each variant's median over interleaved
rounds puts them on the same footing."""


def build_variant(workload: registry.Workload, variant: str, inputs: tuple,
                  ref: Any) -> tuple[Any, float]:
    """The variant's callable, run once (compilation, autotuning) and checked: (fn, rel. error)."""
    import torch

    fn = workload.variants[variant]()
    out = fn(*inputs)
    torch.cuda.synchronize()
    return fn, rel_error(out, ref)


def time_interleaved(fns: dict[str, Any], inputs: tuple, rounds: int) -> dict[str, list[float]]:
    """Per variant, the `do_bench` medians (ms) of `rounds` rounds that alternate variants."""
    import triton

    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(triton.testing.do_bench(lambda fn=fn: fn(*inputs), warmup=20,
                                                       rep=60, return_mode="median"))
    return times


def result_row(workload: registry.Workload, variant: str, inputs: tuple, ms: list[float],
               err: float, peaks: dict[str, Any], gpu: str) -> dict[str, Any]:
    """One result row: median over rounds, spread, bytes/s, FLOP/s, % of roofline."""
    shapes = [tuple(t.shape) for t in inputs]
    cost = workload.cost(shapes, workload.dtype)
    median_ms = sorted(ms)[len(ms) // 2]
    seconds = median_ms * 1e-3
    return score({"workload": workload.name, "variant": variant, "dtype": workload.dtype,
                  "shape": " x ".join("x".join(map(str, s)) for s in shapes),
                  "time_ns": median_ms * 1e6, "bytes_per_s": cost.min_bytes / seconds,
                  "flops_per_s": cost.flops / seconds, "rel_error": err,
                  "round_times_ns": [t * 1e6 for t in ms]}, gpu, peaks)


def run(names: list[str], size: str, rounds: int = ROUNDS) -> dict[str, Any]:
    import torch
    import triton

    from .runner import driver_version

    peaks = gpu_ceilings.measure("float16")
    peaks = {"copy_bytes_per_s": peaks["copy_bytes_per_s"],
             "fp16_gemm_flops_per_s": peaks["float16_gemm_flops_per_s"],
             "method": peaks["method"]}
    results = []
    for name in names:
        workload = registry.resolve(name)
        inputs = workload.make_inputs(workload.shapes(size), workload.dtype, "cuda")
        ref = workload.reference()(*inputs)
        built = {v: build_variant(workload, v, inputs, ref) for v in workload.variants}
        times = time_interleaved({v: fn for v, (fn, _) in built.items()}, inputs, rounds)
        for variant, (_, err) in built.items():
            row = result_row(workload, variant, inputs, times[variant], err, peaks,
                             torch.cuda.get_device_name(0))
            log.info("%s/%s: %.1f us (rounds %.1f-%.1f), %.0f GB/s, %s%% of roofline",
                     name, variant, row["time_ns"] / 1e3, min(times[variant]) * 1e3,
                     max(times[variant]) * 1e3, row["bytes_per_s"] / 1e9,
                     row["pct_of_roofline"])
            results.append(row)
        del inputs, ref, built
        torch.cuda.empty_cache()
    return {"gpu": torch.cuda.get_device_name(0), "driver": driver_version(),
            "torch": torch.__version__, "triton": triton.__version__, "ceilings": peaks,
            "rounds": rounds, "results": results}


def file_stem(gpu: str) -> str:
    """The GPU's name as a file name: `NVIDIA H200` -> `NVIDIA_H200`."""
    return re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_")


def fastest_torch(results: list[dict[str, Any]]) -> dict[str, float]:
    """Per workload, the fastest time among its torch variants (all but `triton`)."""
    best: dict[str, float] = {}
    for r in results:
        if r["variant"] != "triton":
            best[r["workload"]] = min(best.get(r["workload"], float("inf")), r["time_ns"])
    return best


def render(doc: dict[str, Any]) -> str:
    """bench markdown; every row scored again against true ceilings (see score)."""
    c = doc["ceilings"]
    rows = [score(dict(r), doc["gpu"], c) for r in doc["results"]]
    flops, bw = datasheet(doc["gpu"], "float16")
    rounds = doc.get("rounds", 1)
    lines = [f"# Benchmarks on {doc['gpu']}", "",
             f"Driver {doc['driver']}, torch {doc['torch']}, triton {doc['triton']}. Times: "
             f"median over {rounds} interleaved rounds (each round times every variant of the "
             "workload in turn) of `triton.testing.do_bench` medians (CUDA events, L2 "
             "cleared before each repetition); the range column shows the fastest and "
             "slowest round. Floor = the larger of minimal bytes / the datasheet's HBM "
             f"bandwidth ({(bw or 0) / 1e12:.2f} TB/s) and FLOPs / the datasheet's dense rate "
             f"for the dtype (fp16 {(flops or 0) / 1e12:,.0f} TFLOP/s); % of roofline = floor "
             "/ time (true ceilings: never above 100%). % of measured = the same against the "
             f"copy ({c['copy_bytes_per_s'] / 1e9:,.0f} GB/s) and fp16 GEMM "
             f"({c['fp16_gemm_flops_per_s'] / 1e12:,.0f} TFLOP/s) measured in the same run "
             f"({c['method']}): a reference a kernel can beat. vs torch = time / the fastest "
             "torch variant's (naive, builtin or compiled).", ""]
    best = fastest_torch(rows)
    lines += table(["workload", "variant", "shape", "time", "rounds", "floor", "GB/s",
                    "TFLOP/s", "% of roofline", "% of measured", "vs torch", "rel. error"],
                   [_row(r, best) for r in rows], "lllrrrrrrrrr")
    return "\n".join(lines) + "\n"


def _row(r: dict[str, Any], best: dict[str, float]) -> list[str]:
    roof = r["pct_of_roofline"]
    floor = "–" if roof is None else f"{r['time_ns'] * roof / 100 / 1e3:,.1f} µs"
    spread = r.get("round_times_ns") or [r["time_ns"]]
    vs = f"{r['time_ns'] / best[r['workload']]:.3f}x" if r["workload"] in best else "n/a"
    return [r["workload"], r["variant"], r["shape"], f"{r['time_ns'] / 1e3:,.1f} µs",
            f"{min(spread) / 1e3:,.1f}-{max(spread) / 1e3:,.1f}", floor,
            f"{r['bytes_per_s'] / 1e9:,.0f}", f"{r['flops_per_s'] / 1e12:,.1f}",
            "–" if roof is None else f"{roof:.1f}%", f"{r['pct_of_measured']:.1f}%", vs,
            f"{r['rel_error']:.1e}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workflows.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(
        n for n, w in registry.REGISTRY.items() if w.bench))
    p.add_argument("--size", default="default", choices=registry.SIZES)
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help=f"interleaved timing rounds per workload (default {ROUNDS})")
    p.add_argument("-o", "--output", type=Path, default=Path("reports/bench"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    import torch

    if not torch.cuda.is_available():
        print("workflows.bench: no CUDA GPU visible to torch", file=sys.stderr)
        return EXIT_TOOL_MISSING
    doc = run([n for n in args.workloads.split(",") if n], args.size, args.rounds)
    stem = file_stem(doc["gpu"])
    args.output.mkdir(parents=True, exist_ok=True)
    write_atomic(args.output / f"{stem}.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(args.output / f"{stem}.md", render(doc))
    print(f"wrote {args.output / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
