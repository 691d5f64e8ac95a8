"""A program that autotunes, written the way a user writes it: nothing from this
repository. An MLP compiled with `mode="max-autotune-no-cudagraphs"` and a Triton kernel
with `@triton.autotune`, each called every step inside the user's own NVTX ranges
(`step` around `mlp` and `scale_add`). The first step compiles and benchmarks the GEMM
templates and the kernel's configs inside those ordinary ranges; no range is named
warm-up, and no TORCH_LOGS are asked for.

    python user_autotune.py --steps 8
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.cuda import nvtx


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w)
             for b in (256, 1024, 4096) for w in (2, 4, 8)],
    key=["n"])
@triton.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=512)
    args = p.parse_args()
    torch.manual_seed(0)
    w = args.width
    mlp = nn.Sequential(nn.Linear(w, 4 * w), nn.GELU(), nn.Linear(4 * w, w)).cuda().half()
    fast = torch.compile(mlp, mode="max-autotune-no-cudagraphs")
    x = torch.randn(args.batch, w, device="cuda", dtype=torch.half)
    n = 1 << 24
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(a)
    with torch.no_grad():
        for _ in range(args.steps):
            nvtx.range_push("step")
            nvtx.range_push("mlp")
            fast(x)
            nvtx.range_pop()
            nvtx.range_push("scale_add")
            scale_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](a, b, out, n)
            nvtx.range_pop()
            torch.cuda.synchronize()
            nvtx.range_pop()
    print("done", float(out[:4].sum()))


if __name__ == "__main__":
    main()
