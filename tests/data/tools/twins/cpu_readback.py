"""A per-step `.cpu()` of a 64 MiB activation to log a statistic of it on the host (numpy
work on the copy). Twin: the statistic kept on the GPU, read after the loop.

    python cpu_readback.py [--steps 15 --rounds 3]
"""

from __future__ import annotations

import torch

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=15).parse_args()
    torch.manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda") / 64
    w = torch.randn(4096, 4096, device="cuda") / 64
    logged: list = []

    @torch.no_grad()
    def planted() -> None:
        h = torch.tanh(x @ w)                       # 4096 x 4096 fp32: 64 MiB
        a = h.cpu().numpy()
        logged.append(float(abs(a).mean()))

    @torch.no_grad()
    def fixed() -> None:
        h = torch.tanh(x @ w)
        logged.append(h.abs().mean())

    run(planted, fixed, args)
    print(f"logged {len(logged)}, last {float(logged[-1]):.5f}")


if __name__ == "__main__":
    main()
