"""A simulation step of many tiny element-wise ops, written as users write it (only
torch). Each `step` updates a 256 x 256 state with 200 small ops: the GPU finishes each
kernel faster than Python launches the next.

    python launch_bound.py [--steps 50]     # planted: eager, one launch per op
    python launch_bound.py --fixed          # twin: the step captured once in a CUDA graph
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.cuda import nvtx


def update(x: torch.Tensor, v: torch.Tensor, ops: int) -> None:
    for i in range(ops // 4):
        v.mul_(0.999).add_(x, alpha=-1e-3)
        x.add_(v, alpha=1e-2).clamp_(-10.0, 10.0 + i)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--ops", type=int, default=200)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    x, v = torch.randn(256, 256, device="cuda"), torch.zeros(256, 256, device="cuda")
    step = lambda: update(x, v, args.ops)  # noqa: E731
    if args.fixed:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()                                   # warm up on a side stream
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        step = graph.replay
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        nvtx.range_push("step")
        step()
        nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: "
          f"{(time.perf_counter() - t0) / args.steps * 1e3:.3f} ms per step, "
          f"{float(x.abs().mean()):.4f}")


if __name__ == "__main__":
    main()
