"""A training loop under `torch.autograd.profiler.emit_nvtx()` and no range of its own: the
trace holds only PyTorch's op ranges (the shape of many traces users bring). A 4-layer
MLP, AdamW, 40 steps.

    python emit_only.py [--steps 40]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(2048, 2048), nn.GELU())]
                          ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device="cuda")
    for _ in range(3):                                 # warm-up, outside the capture's ops
        model(x).square().mean().backward()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autograd.profiler.emit_nvtx():
        for _ in range(args.steps):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"median ms per step: {(time.perf_counter() - t0) / args.steps * 1e3:.3f} "
          f"(whole loop / steps), loss {float(loss):.5f}")


if __name__ == "__main__":
    main()
