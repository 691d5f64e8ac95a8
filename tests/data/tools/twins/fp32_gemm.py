"""Eight fp32 4096^3 matrix products per step on the CUDA cores (fp32 without tensor
cores, PyTorch's default). Twin: `torch.set_float32_matmul_precision("high")` for its
loop (TF32 tensor cores).

    python fp32_gemm.py [--steps 8 --rounds 3]
"""

from __future__ import annotations

import torch

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=8).parse_args()
    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda") / 64
    ws = [torch.randn(4096, 4096, device="cuda") / 64 for _ in range(8)]

    def step(precision: str):
        def go() -> None:
            torch.set_float32_matmul_precision(precision)
            h = a
            for w in ws:
                h = torch.tanh(h @ w)
        return go

    run(step("highest"), step("high"), args)


if __name__ == "__main__":
    main()
