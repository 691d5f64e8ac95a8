"""A hidden sync: the mean of the positive activations taken by boolean-mask indexing,
`h[h > 0]`, which runs `nonzero` and copies the count to the host every step. Twin: the
same mean with a fixed-shape `torch.where`.

    python mask_sync.py [--steps 30 --rounds 3]
"""

from __future__ import annotations

import time

import numpy as np
import torch

from twins import arguments, run


def prepare(rng: np.random.Generator, ms: float = 0.6) -> float:
    """Host work of a step that needs nothing from the GPU (the next batch, a schedule)."""
    end, acc = time.perf_counter() + ms / 1e3, 0.0
    while time.perf_counter() < end:
        acc += float(np.tanh(rng.standard_normal(64)).sum())
    return acc


def main() -> None:
    args = arguments(__doc__, steps=30).parse_args()
    torch.manual_seed(0)
    w = torch.randn(2048, 2048, device="cuda") / 45
    x = torch.randn(2048, 2048, device="cuda")
    acc = torch.zeros((), device="cuda")

    rng = np.random.default_rng(0)

    def model() -> torch.Tensor:
        prepare(rng)                      # the step's host work: next batch, schedule
        h = x
        for _ in range(6):
            h = torch.relu(h @ w) * 0.5 - 0.1
        return h

    def planted() -> None:
        nonlocal acc
        h = model()
        acc = acc + h[h > 0].mean()

    def fixed() -> None:
        nonlocal acc
        h = model()
        pos = h > 0
        acc = acc + torch.where(pos, h, 0).sum() / pos.sum()

    run(planted, fixed, args)
    print(f"acc {float(acc):.4f}")


if __name__ == "__main__":
    main()
