"""A step of fp32 matrix products, written as users write it (only torch): by default
PyTorch runs fp32 GEMMs without tensor cores.

    python fp32_gemm.py [--steps 20]    # planted: torch's default fp32 precision
    python fp32_gemm.py --fixed         # twin: torch.set_float32_matmul_precision("high")
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.cuda import nvtx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    if args.fixed:
        torch.set_float32_matmul_precision("high")        # TF32 tensor cores
    torch.manual_seed(0)
    a = torch.randn(args.n, args.n, device="cuda") / args.n**0.5
    ws = [torch.randn(args.n, args.n, device="cuda") / args.n**0.5 for _ in range(8)]
    a @ ws[0]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        nvtx.range_push("step")
        h = a
        for w in ws:
            h = torch.tanh(h @ w)
        nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: "
          f"{(time.perf_counter() - t0) / args.steps * 1e3:.2f} ms per step, "
          f"{float(h.abs().mean()):.4f}")


if __name__ == "__main__":
    main()
