"""A training loop that reads its loss with `.item()` every step, written as users write
one (only torch and numpy). Each `step` runs the model (`train`), then logs the loss
(`log`: `.item()`) and does per-step host bookkeeping (`bookkeeping`: numpy work).

    python item_sync.py [--steps 40]    # planted: loss.item() every step
    python item_sync.py --fixed         # twin: losses kept on the GPU, read once at the end
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from torch.cuda import nvtx


def bookkeeping(rng: np.random.Generator, ms: float) -> float:
    """Host work of a step that needs nothing from the GPU (schedules, metrics, I/O)."""
    end, acc = time.perf_counter() + ms / 1e3, 0.0
    while time.perf_counter() < end:
        acc += float(np.tanh(rng.standard_normal(256)).sum())
    return acc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--book-ms", type=float, default=4.0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(4096, 4096), nn.GELU())]
                          ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 4096, device="cuda")
    rng = np.random.default_rng(0)
    losses = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        nvtx.range_push("step")
        nvtx.range_push("train")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        nvtx.range_pop()
        nvtx.range_push("log")
        losses.append(loss.detach() if args.fixed else loss.item())
        nvtx.range_pop()
        nvtx.range_push("bookkeeping")
        bookkeeping(rng, args.book_ms)
        nvtx.range_pop()
        nvtx.range_pop()
    final = float(torch.stack(losses)[-1]) if args.fixed else losses[-1]
    torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: "
          f"{(time.perf_counter() - t0) / args.steps * 1e3:.2f} ms per step, loss {final:.4f}")


if __name__ == "__main__":
    main()
