"""Adam stepped one parameter at a time (`foreach=False`) over a model of many small
tensors. Twin: the same optimizer with `foreach=True` (multi-tensor kernels).

    python foreach_adam.py [--steps 20 --rounds 3]
"""

from __future__ import annotations

import torch
import torch.nn as nn

from twins import arguments, run


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(256, 256) for _ in range(48)]).cuda()


def main() -> None:
    args = arguments(__doc__, steps=20).parse_args()
    x = torch.randn(64, 256, device="cuda")

    def trainer(foreach: bool):
        m = model()
        opt = torch.optim.Adam(m.parameters(), lr=1e-4, foreach=foreach)
        m(x).square().mean().backward()           # gradients kept: each step is Adam's
        return opt.step

    run(trainer(False), trainer(True), args)


if __name__ == "__main__":
    main()
