"""Run a workload's variants inside NVTX ranges and write `meta.json` beside the trace.

    python -m workflows.runner WORKLOAD|FILE.py[:NAME] [--size default|small] [--iters N]
                               [--variants a,b] [--out DIR]

Order of events (what the analysis relies on):
1. inputs are made, every variant is built (`torch.compile` included), checked against
   the reference and warmed up (compile, autotune, first-launch costs) before any range;
2. the timed part pushes the range `<workload>` and, inside it, `<variant>` in the
   toolkit's NVTX domain, so the range path is `<workload>/<variant>`; each holds N
   iterations and synchronizes before it is popped;
3. `meta.json` records N, shapes, dtypes, versions, the cost model, the GPU's measured
   copy bandwidth and GEMM rate (workflows/ceilings.py), correctness and, for
   the compiled variant, graphs, graph breaks and recompiles; `torch_logs.txt` holds the
   raw `TORCH_LOGS=graph_breaks,recompiles` output.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import NVTX_DOMAIN, settings
from . import ceilings as gpu_ceilings
from . import workloads as registry
from .compile_info import explain, route_torch_logs, torch_logs
from .nvtx_ranges import push_pop, timed_range
from .siblings import sibling
from .tools import code_version, started

WARMUP_CALLS = 3


def _versions() -> dict[str, Any]:
    """Library, CUDA and GPU versions of this process, for the report's environment."""
    import torch
    import triton

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton.__version__, "cuda": torch.version.cuda}
    try:
        out["nvtx"] = importlib.metadata.version("nvtx")
    except importlib.metadata.PackageNotFoundError:
        out["nvtx"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(gpu=props.name, sm_count=props.multi_processor_count,
                   gpu_memory_bytes=props.total_memory, driver=driver_version())
    return out


def driver_version() -> str | None:
    """The NVIDIA driver version as nvidia-smi reports it, or None without one."""
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True)
        return res.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf (never passes)."""
    import torch

    diff = torch.linalg.vector_norm((out.double() - ref.double()).flatten())
    err = float(diff / torch.linalg.vector_norm(ref.double().flatten()).clamp_min(1e-30))
    return err if err == err else float("inf")


def prepare(workload: registry.Workload, variants: list[str], inputs: tuple,
            log: logging.Logger) -> tuple[dict[str, Any], dict[str, float]]:
    """Build, check and warm up each variant; no NVTX range is open yet."""
    import torch

    ref = workload.reference()(*inputs)
    fns: dict[str, Any] = {}
    errors: dict[str, float] = {}
    for name in variants:
        t0 = time.perf_counter()
        fn = workload.variants[name]()
        for _ in range(WARMUP_CALLS):
            out = fn(*inputs)
        torch.cuda.synchronize()
        errors[name] = rel_error(out, ref)
        log.info("prepared %s/%s in %.1f s (rel. error %.2e)", workload.name, name,
                 time.perf_counter() - t0, errors[name])
        fns[name] = fn
    return fns, errors


def timed(workload: str, fns: dict[str, Any], inputs: tuple, iters: int) -> None:
    """The measured part: range `<workload>` around one range per variant."""
    import torch

    push, pop = push_pop()
    torch.cuda.synchronize()
    push(workload)
    for name, fn in fns.items():
        with timed_range(name):
            for _ in range(iters):
                fn(*inputs)
            torch.cuda.synchronize()
    pop()


def run(args: argparse.Namespace) -> Path:
    """Run the workload as `args` say and return the path of the written meta.json."""
    import torch

    log = logging.getLogger("workflows.runner")
    try:
        workload = registry.resolve(args.workload)
    except KeyError as exc:
        raise SystemExit(f"runner: {exc.args[0]}") from None
    variants = args.variants or list(workload.variants)
    unknown = sorted(set(variants) - set(workload.variants))
    if unknown:
        raise SystemExit(f"runner: workload {workload.name!r} has no variant(s) {unknown}")
    if not torch.cuda.is_available():
        raise SystemExit("runner: no CUDA GPU visible to torch; run this on a GPU machine")
    rank = start_ranks()
    out = rank_out(Path(args.out))
    out.mkdir(parents=True, exist_ok=True)
    run_started = started()
    shapes = workload.shapes(args.size)
    inputs = workload.make_inputs(shapes, workload.dtype, "cuda")
    compiled = None
    if any(workload.role(v) == "compiled" for v in variants) and workload.explain_compiled:
        compiled = explain(workload.variants[workload.compiled_from](), inputs)
    peaks = gpu_ceilings.measure(workload.dtype)
    log.info("ceilings: copy %.0f GB/s, %s GEMM %.0f TFLOP/s", peaks["copy_bytes_per_s"] / 1e9,
             workload.dtype, peaks[f"{workload.dtype}_gemm_flops_per_s"] / 1e12)
    with torch_logs(out / "torch_logs.txt") as logged:
        fns, errors = prepare(workload, variants, inputs, log)
        timed(workload.name, fns, inputs, args.iters)
    if compiled is not None:
        compiled.update(logged)
    meta = {
        "schema": "meta/1", "workload": workload.name, "description": workload.description,
        "size": args.size, "shapes": [list(s) for s in shapes], "dtype": workload.dtype,
        "iterations": args.iters, "warmup_calls": WARMUP_CALLS, "domain": NVTX_DOMAIN,
        "variants": variants,
        "ranges": {v: f"{workload.name}/{v}" for v in variants},
        "roles": {v: workload.role(v) for v in variants},
        "cost_model": dataclasses.asdict(workload.cost(shapes, workload.dtype)),
        "correctness": {"rel_error": errors, "tolerance": workload.tolerance},
        "versions": _versions(), "compiled": compiled, "ceilings": peaks,
        "command": [sys.executable, "-m", "workflows.runner", *sys.argv[1:]],
        "started": run_started, "code_version": code_version(), "cwd": os.getcwd(),
    }
    meta["rank"] = rank
    path = out / "meta.json"
    sibling("analysis.documents.io").write_atomic(path, json.dumps(meta, indent=2) + "\n")
    log.info("wrote %s", path)
    if rank is not None:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return path


def rank_out(out: Path) -> Path:
    """Where this process writes: `out`, or `out/rank<RANK>` under torchrun."""
    return out / f"rank{settings.env('RANK')}" if settings.world_size() > 1 else out


def start_ranks() -> int | None:
    """Under torchrun (WORLD_SIZE > 1): take this rank's GPU and join the NCCL process
    group; the rank, or None when alone."""
    if settings.world_size() <= 1:
        return None
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(int(settings.env("LOCAL_RANK", "0") or 0))
    dist.init_process_group("nccl")
    return dist.get_rank()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m workflows.runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload", help="registered workload, workload file (x.py) or x.py:NAME")
    p.add_argument("--size", default="default", help="size preset (default, small)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per variant")
    p.add_argument("--variants", type=lambda s: [v for v in s.split(",") if v],
                   help="comma-separated subset of variants (default: all)")
    p.add_argument("--out", default=".", help="folder for meta.json and torch_logs.txt "
                   "(under torchrun: its rank<RANK>/ subfolders)")
    p.add_argument("--straggler", type=int, help="under torchrun: the rank given extra work "
                   "(workloads that read PROFKIT_STRAGGLER, e.g. ddp_step)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    args = parse_args(argv)
    out = rank_out(Path(args.out))
    out.mkdir(parents=True, exist_ok=True)
    route_torch_logs(out / "torch_logs.txt")
    if args.straggler is not None:
        settings.set_straggler(args.straggler)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
