"""`make sweep KERNEL=matmul_relu|attention`: time each config of a Triton kernel's search
space at the workload's default size, next to torch's own implementations of the op.

    python -m workflows.sweep matmul_relu|attention [--limit N] [-o reports/bench]

It is how the configs the kernels autotune over were chosen: run it again after changing
a kernel. Every point is checked against the workload's reference first (a config that
fails to compile, e.g. for lack of shared memory, or gives a wrong answer is listed with
the reason), then timed as `make bench` times: median of `triton.testing.do_bench`, L2
cleared before each repetition. Results are written after every point, so a run cut
short keeps what it measured: reports/bench/sweep_<kernel>_<gpu>.{json,md}.

Order matters on a GPU that boosts its clock while cool: the first thing timed after a
pause runs faster than the same thing a minute into a sweep (seen on the H200: SDPA
835 us first, 935-940 us later). So the reference runs for --warmup-s seconds before
anything is timed, and the torch points are timed again after the sweep ("again" rows):
compare a config with the torch rows around it, not with the first one alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import workloads as registry
from .bench import file_stem
from .runner import rel_error
from .siblings import sibling
from .tools import EXIT_TOOL_MISSING

table = sibling("analysis.render.markdown").table
write_atomic = sibling("analysis.documents.io").write_atomic

Point = tuple[str, str, Callable[[], Callable[..., Any]]]   # (group, label, build)
UNCHECKED = "torch, unchecked"     # a point of another op (the GEMM alone): timed, not checked


def matmul_points() -> Iterator[Point]:
    """torch's GEMM (+ ReLU), then the persistent TMA space, then the pointer kernel's."""
    import torch

    mm = sibling("kernels.matmul_relu")

    yield "torch", "relu(a @ b)", lambda: mm.matmul_relu_reference
    yield UNCHECKED, "a @ b (the GEMM alone)", lambda: torch.matmul
    for bm, bn, bk, stages, warps, split in itertools.product(
            [128], [256, 128], [64, 128], [3, 4, 2, 5], [8, 4], [True, False]):
        if bn == 256 and warps == 4 or bk == 128 and stages > 4:
            continue                    # spills (acc alone is 256 regs) / over 228 KiB smem
        config = mm.persistent_config(bm, bn, bk, stages, warps, split)
        yield "persistent", _label(config), _bind(mm.matmul_relu, config)
    for bm, bn, bk, stages, warps in [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4),
                                      (128, 128, 32, 4, 4), (64, 128, 64, 4, 4)]:
        config = mm.tile_config(bm, bn, bk, stages, warps)
        yield "pointer", _label(config), _bind(mm.matmul_relu, config)


def attention_points(causal: bool) -> Iterator[Point]:
    """SDPA with its default choice and with each backend, then the Triton space."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    at = sibling("kernels.attention")

    def sdpa(backend: SDPBackend | None) -> Callable[..., Any]:
        def run(q, k, v):
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    yield "sdpa", "default dispatch", lambda: sdpa(None)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                    SDPBackend.CUDNN_ATTENTION):
        yield "sdpa", backend.name, lambda b=backend: sdpa(b)
    space = [(128, bn, st, w) for bn, st, w in itertools.product([64, 128], [2, 3], [4, 8])]
    space += [(256, 64, st, 8) for st in (2, 3)]
    space += [(64, bn, st, 4) for bn, st in itertools.product([64, 32], [2, 3])]
    for bm, bn, stages, warps in space:
        config = at.attention_config(bm, bn, stages, warps)
        yield "triton", _label(config), _bind(lambda q, k, v, c: at.attention(q, k, v, causal, c),
                                              config)


def _label(config: Any) -> str:
    meta = ", ".join(f"{k}={v}" for k, v in config.kwargs.items() if k != "GROUP_M")
    return f"{meta}, stages={config.num_stages}, warps={config.num_warps}"


def _bind(fn: Callable[..., Any], config: Any) -> Callable[[], Callable[..., Any]]:
    return lambda: (lambda *inputs: fn(*inputs, config))


SPACES: dict[str, Callable[[], Iterator[Point]]] = {
    "matmul_relu": matmul_points,
    "attention": lambda: attention_points(False),
    "attention_causal": lambda: attention_points(True),
}


def measure(build: Callable[[], Callable[..., Any]], inputs: tuple, ref: Any,
            tol: float) -> dict[str, Any]:
    """{time_ns, rel_error} or {error}: one point, checked before it is timed (against
    `ref`; None times it unchecked)."""
    import torch
    import triton

    try:
        fn = build()
        out = fn(*inputs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a config that cannot run is a result too
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
    err = None if ref is None else rel_error(out, ref)
    if err is not None and not err < tol:
        return {"error": f"wrong result: relative error {err:.2e}", "rel_error": err}
    ms = triton.testing.do_bench(lambda: fn(*inputs), warmup=25, rep=100,
                                 return_mode="median")
    return {"time_ns": ms * 1e6, "rel_error": err}


def render(doc: dict[str, Any]) -> str:
    """Markdown: every point, fastest first, against the fastest torch implementation."""
    timed = [r for r in doc["points"] if "time_ns" in r]
    base = min((r["time_ns"] for r in timed if r["group"] in ("torch", "sdpa")), default=None)
    lines = [f"# Config sweep: {doc['kernel']} on {doc['gpu']}", "",
             f"{doc['shape']}, {doc['dtype']}. Driver {doc['driver']}, torch {doc['torch']}, "
             f"triton {doc['triton']}. Median of `triton.testing.do_bench` (L2 cleared before "
             "each repetition); ratio = time / the fastest torch or SDPA entry. "
             "Written by `python -m workflows.sweep`.", ""]
    lines += table(["group", "config", "time", "TFLOP/s", "ratio"], [
        [r["group"], r["label"], f"{r['time_ns'] / 1e3:,.1f} µs",
         f"{doc['flops'] / r['time_ns'] / 1e3:,.0f}",
         f"{r['time_ns'] / base:.3f}" if base else "n/a"]
        for r in sorted(timed, key=lambda r: r["time_ns"])], "llrrr")
    failed = [r for r in doc["points"] if "error" in r]
    if failed:
        lines += ["", "Points that did not run:", ""]
        lines += [f"- {r['group']} {r['label']}: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def warm_up(fn: Callable[[], Any], seconds: float) -> None:
    """Keep the GPU busy with `fn` for `seconds`, so timing starts at steady clocks."""
    import torch

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def with_repeats(points: list[Point]) -> list[Point]:
    """The torch points again after the others, to show any drift over the sweep."""
    again = [(group, f"{label} (again)", build) for group, label, build in points
             if group in ("torch", "sdpa")]
    return points + again


def sweep(kernel: str, limit: int | None, output: Path,
          warmup_s: float) -> dict[str, Any]:
    import torch
    import triton

    from .runner import driver_version

    workload = registry.get(kernel)
    shapes = workload.shapes("default")
    inputs = workload.make_inputs(shapes, workload.dtype, "cuda")
    ref = workload.reference()(*inputs)
    doc = {"kernel": kernel, "gpu": torch.cuda.get_device_name(0), "driver": driver_version(),
           "torch": torch.__version__, "triton": triton.__version__, "dtype": workload.dtype,
           "shape": " x ".join("x".join(map(str, s)) for s in shapes),
           "flops": workload.cost(shapes, workload.dtype).flops, "points": []}
    stem = f"sweep_{kernel}_{file_stem(doc['gpu'])}"
    points = with_repeats(list(SPACES[kernel]())[:limit])
    warm_up(lambda: workload.reference()(*inputs), warmup_s)
    for i, (group, label, build) in enumerate(points, 1):
        t0 = time.perf_counter()
        checked = None if group == UNCHECKED else ref
        row = {"group": group, "label": label, "start_unix_s": time.time(),
               **measure(build, inputs, checked, 1e-2)}
        doc["points"].append(row)
        shown = f"{row['time_ns'] / 1e3:,.1f} us" if "time_ns" in row else row["error"]
        print(f"[{i}/{len(points)}] {group} {label}: {shown} ({time.perf_counter() - t0:.1f} s)",
              flush=True)
        write_atomic(output / f"{stem}.json", json.dumps(doc, indent=2) + "\n")
        write_atomic(output / f"{stem}.md", render(doc))
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workflows.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel", choices=sorted(SPACES))
    p.add_argument("--limit", type=int, default=None, help="time only the first N points")
    p.add_argument("--warmup-s", type=float, default=5.0,
                   help="seconds of the reference before timing (steady clocks; default 5)")
    p.add_argument("-o", "--output", type=Path, default=Path("reports/bench"))
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("workflows.sweep: no CUDA GPU visible to torch", file=sys.stderr)
        return EXIT_TOOL_MISSING
    args.output.mkdir(parents=True, exist_ok=True)
    doc = sweep(args.kernel, args.limit, args.output, args.warmup_s)
    print(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
