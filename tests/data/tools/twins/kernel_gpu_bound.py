"""A GPU-bound loop of fp32 matrix products on the CUDA cores. Twin: the same products on
TF32 tensor cores (`torch.backends.cuda.matmul.allow_tf32`, set for its loop only): the
faster kernels shorten the step.

    python kernel_gpu_bound.py [--steps 10 --rounds 3]
"""

from __future__ import annotations

import torch

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=10).parse_args()
    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda") / 64
    ws = [torch.randn(4096, 4096, device="cuda") / 64 for _ in range(4)]

    def step(tf32: bool):
        def go() -> None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            h = a
            for w in ws:
                h = torch.tanh(h @ w)
        return go

    run(step(False), step(True), args)


if __name__ == "__main__":
    main()
