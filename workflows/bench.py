"""`make bench`: median time of every variant at the default size, against the GPU's
ceilings measured in the same run.

    python -m workflows.bench [--workloads a,b] [--size default] [-o reports/bench]

Each variant is built, checked against the workload's reference (relative error), warmed
up (compilation and autotuning happen there), then timed with
`triton.testing.do_bench(..., return_mode="median")`, which times with CUDA events and
clears the L2 cache before every repetition. Writes reports/bench/<gpu>.json (schema in
the issue tracker: gpu, driver, torch, triton, ceilings, results) and <gpu>.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

from workflows import ceilings as gpu_ceilings
from workflows import workloads as registry

log = logging.getLogger("workflows.bench")


def roofline_pct(flops: int, min_bytes: int, seconds: float, peaks: dict[str, float]) -> float:
    """Achieved over attainable: min(peak FLOP/s, intensity x copy bandwidth)."""
    attainable_s = max(min_bytes / peaks["copy_bytes_per_s"],
                       flops / peaks["fp16_gemm_flops_per_s"])
    return 100.0 * attainable_s / seconds


def bench_variant(workload: registry.Workload, variant: str, inputs: tuple, ref: Any,
                  peaks: dict[str, float]) -> dict[str, Any]:
    """One result row: correctness, median time, bytes/s, FLOP/s, % of roofline."""
    import torch
    import triton

    fn = workload.variants[variant]()
    out = fn(*inputs)
    torch.cuda.synchronize()
    err = float(torch.linalg.vector_norm((out.double() - ref.double()).flatten())
                / torch.linalg.vector_norm(ref.double().flatten()))
    ms = triton.testing.do_bench(lambda: fn(*inputs), warmup=50, rep=200,
                                 return_mode="median")
    shapes = [tuple(t.shape) for t in inputs]
    cost = workload.cost([tuple(s) for s in shapes], workload.dtype)
    seconds = ms * 1e-3
    return {"workload": workload.name, "variant": variant, "dtype": workload.dtype,
            "shape": " x ".join("x".join(map(str, s)) for s in shapes),
            "time_ns": ms * 1e6, "bytes_per_s": cost.min_bytes / seconds,
            "flops_per_s": cost.flops / seconds,
            "pct_of_roofline": roofline_pct(cost.flops, cost.min_bytes, seconds, peaks),
            "rel_error": err}


def run(names: list[str], size: str) -> dict[str, Any]:
    import torch
    import triton

    from workflows.runner import driver_version

    peaks = gpu_ceilings.measure("float16")
    peaks = {"copy_bytes_per_s": peaks["copy_bytes_per_s"],
             "fp16_gemm_flops_per_s": peaks["float16_gemm_flops_per_s"],
             "method": peaks["method"]}
    results = []
    for name in names:
        workload = registry.get(name)
        inputs = workload.make_inputs(workload.shapes(size), workload.dtype, "cuda")
        ref = workload.reference()(*inputs)
        for variant in workload.variants:
            row = bench_variant(workload, variant, inputs, ref, peaks)
            log.info("%s/%s: %.1f us, %.0f GB/s, %.1f%% of roofline", name, variant,
                     row["time_ns"] / 1e3, row["bytes_per_s"] / 1e9, row["pct_of_roofline"])
            results.append(row)
        del inputs, ref
        torch.cuda.empty_cache()
    return {"gpu": torch.cuda.get_device_name(0), "driver": driver_version(),
            "torch": torch.__version__, "triton": triton.__version__, "ceilings": peaks,
            "results": results}


def render(doc: dict[str, Any]) -> str:
    c = doc["ceilings"]
    lines = [f"# Benchmarks on {doc['gpu']}", "",
             f"Driver {doc['driver']}, torch {doc['torch']}, triton {doc['triton']}. Ceilings "
             f"measured in the same run ({c['method']}): copy "
             f"{c['copy_bytes_per_s'] / 1e9:,.0f} GB/s, fp16 GEMM "
             f"{c['fp16_gemm_flops_per_s'] / 1e12:,.0f} TFLOP/s. Times: median of "
             "`triton.testing.do_bench` (CUDA events, L2 cleared before each repetition). "
             "Floor = the larger of minimal bytes / copy bandwidth and FLOPs / GEMM rate; "
             "% of roofline = floor / time.", "",
             "| workload | variant | shape | time | floor | GB/s | TFLOP/s | % of roofline | "
             "rel. error |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["results"]:
        floor_ns = r["time_ns"] * r["pct_of_roofline"] / 100
        lines.append(f"| {r['workload']} | {r['variant']} | {r['shape']} | "
                     f"{r['time_ns'] / 1e3:,.1f} µs | {floor_ns / 1e3:,.1f} µs | "
                     f"{r['bytes_per_s'] / 1e9:,.0f} | {r['flops_per_s'] / 1e12:,.1f} | "
                     f"{r['pct_of_roofline']:.1f}% | {r['rel_error']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workflows.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default=",".join(
        n for n, w in registry.REGISTRY.items() if w.bench))
    p.add_argument("--size", default="default", choices=["default", "small"])
    p.add_argument("-o", "--output", type=Path, default=Path("reports/bench"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    import torch

    if not torch.cuda.is_available():
        print("workflows.bench: no CUDA GPU visible to torch", file=sys.stderr)
        return 3
    doc = run([n for n in args.workloads.split(",") if n], args.size)
    stem = re.sub(r"[^A-Za-z0-9]+", "_", doc["gpu"]).strip("_")
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.output / f"{stem}.md").write_text(render(doc))
    print(f"wrote {args.output / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
