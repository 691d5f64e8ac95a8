"""The same fp32 matrix product in a loop the host holds (4 ms of numpy bookkeeping per
step, the GPU idle most of it). Twin: TF32 tensor cores, as in kernel_gpu_bound.py: the
faster kernel saves almost nothing at the wall.

    python kernel_host_bound.py [--steps 10 --rounds 3]
"""

from __future__ import annotations

import time

import numpy as np
import torch

from twins import arguments, run


def bookkeeping(rng: np.random.Generator, ms: float) -> float:
    end, acc = time.perf_counter() + ms / 1e3, 0.0
    while time.perf_counter() < end:
        acc += float(np.tanh(rng.standard_normal(256)).sum())
    return acc


def main() -> None:
    args = arguments(__doc__, steps=10).parse_args()
    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda") / 64
    w = torch.randn(4096, 4096, device="cuda") / 64
    rng = np.random.default_rng(0)

    def step(tf32: bool):
        def go() -> None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.tanh(a @ w)
            bookkeeping(rng, 4.0)
        return go

    run(step(False), step(True), args)


if __name__ == "__main__":
    main()
