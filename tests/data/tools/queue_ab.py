"""A loop whose host fills the CUDA launch queue, beside the same loop with its GPU work made
faster, in one process, with the truth measured around each loop by its synchronize.

    python queue_ab.py [--steps 20] [--small 1500] [--n 6144] [--out truth.json]

Loops (NVTX ranges named by the program, as a user marks them):
- `qfull/step`: an fp32 GEMM (n x n, TF32 off: PyTorch's default), then `--small` tiny
  in-place adds launched one by one, no synchronize in the loop. The GPU takes longer a
  step than the host, so the host runs ahead until the launch queue is full; from then on
  its launches block until the GPU frees a slot, and the loop runs at the GPU's pace.
- `qfast/step`: the same with TF32 on for the GEMM (the fp32_gemm remedy): the GPU's step
  falls below the host's, the launches stop blocking, and the loop runs at the host's
  pace. The saving is the GPU-bound step less the host's, not the GEMM's speed-up.
Each loop runs after a `torch.cuda.synchronize()` and ends with one; the truth of a loop
is (time after the closing synchronize - time before the first step) / steps, written
to --out with the loop's name.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.cuda import nvtx


def step(a: torch.Tensor, b: torch.Tensor, small: list[torch.Tensor]) -> torch.Tensor:
    """One step: the GEMM, then the tiny adds, each its own launch."""
    c = a @ b
    for t in small:
        t.add_(1.0)
    return c


def loop(name: str, steps: int, n: int, count: int, tf32: bool) -> float:
    """`name/step` ranges; returns the loop's cost per step as it ran (ns)."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    small = [torch.zeros(64, device="cuda") for _ in range(8)] * (count // 8)
    for _ in range(2):
        step(a, b, small)                               # warm-up, outside the loop
    torch.cuda.synchronize()
    nvtx.range_push(name)
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        nvtx.range_push("step")
        step(a, b, small)
        nvtx.range_pop()
    torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    nvtx.range_pop()
    torch.backends.cuda.matmul.allow_tf32 = False
    return (t1 - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--small", type=int, default=1500, help="tiny launches a step")
    p.add_argument("--n", type=int, default=6144, help="the GEMM's size")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    truth = {}
    for name, tf32 in (("qfull", False), ("qfast", True)):
        truth[name] = loop(name, a.steps, a.n, a.small, tf32)
        print(f"{name}: {truth[name] / 1e6:.3f} ms a step as it runs", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"steps": a.steps, "small": a.small, "n": a.n,
                       "cost_ns": truth}, f, indent=1)


if __name__ == "__main__":
    main()
