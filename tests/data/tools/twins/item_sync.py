"""A training step that reads its loss with `.item()` (`log`), then does 4 ms of host
bookkeeping that needs nothing from the GPU. Twin: the losses kept on the GPU, read
once after the loop, so the bookkeeping overlaps the GPU's work.

    python item_sync.py [--steps 10 --rounds 3]
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn as nn
from torch.cuda import nvtx

from twins import arguments, run


def bookkeeping(rng: np.random.Generator, ms: float) -> float:
    """Host work of a step that needs nothing from the GPU (schedules, metrics, I/O)."""
    end, acc = time.perf_counter() + ms / 1e3, 0.0
    while time.perf_counter() < end:
        acc += float(np.tanh(rng.standard_normal(256)).sum())
    return acc


def main() -> None:
    args = arguments(__doc__, steps=10).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(4096, 4096), nn.GELU())]
                          ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 4096, device="cuda")
    rng = np.random.default_rng(0)
    losses: list = []

    def step(read: bool):
        def go() -> None:
            nvtx.range_push("train")
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            nvtx.range_pop()
            nvtx.range_push("log")
            losses.append(loss.item() if read else loss.detach())
            nvtx.range_pop()
            nvtx.range_push("bookkeeping")
            bookkeeping(rng, 4.0)
            nvtx.range_pop()
        return go

    run(step(True), step(False), args)


if __name__ == "__main__":
    main()
