"""A small training step that reads its loss with `.item()` every step; its backward runs
on PyTorch's autograd thread while the main thread waits for it. Twin: the losses kept
on the GPU, read once after the loop.

    python item_autograd.py [--steps 20 --rounds 3]
"""

from __future__ import annotations

import torch
import torch.nn as nn

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=30).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(512, 512), nn.GELU())]
                          ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512, device="cuda")
    losses: list = []

    def train() -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    run(lambda: losses.append(train().item()),
        lambda: losses.append(train().detach()), args)
    print(f"last loss {float(losses[-1]):.5f}")


if __name__ == "__main__":
    main()
