"""A compiled model's first calls inside the measured loop, written as users write it
(only torch). Each `step` runs an MLP compiled with torch.compile(mode="reduce-overhead"):
the first call compiles, the next ones record CUDA graphs, the rest replay.

    python compile_warmup.py [--steps 30]   # planted: the first calls inside the loop
    python compile_warmup.py --fixed        # twin: three warm-up calls before the loop
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
from torch.cuda import nvtx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024),
                          nn.LayerNorm(1024)).cuda().eval()
    fast = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(512, 1024, device="cuda")
    with torch.no_grad():
        if args.fixed:
            for _ in range(3):
                fast(x)
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            nvtx.range_push("step")
            y = fast(x)
            nvtx.range_pop()
        torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: {(time.perf_counter() - t0):.3f} s for "
          f"{args.steps} steps, {float(y.abs().mean()):.4f}")


if __name__ == "__main__":
    main()
