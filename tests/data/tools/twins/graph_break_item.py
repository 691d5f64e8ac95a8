"""A compiled function whose graph breaks on `.item()` (a scale read on the host), run in
a program with a second compiled function. Twin: the scale kept as a tensor (one graph).

    TORCH_LOGS=graph_breaks,recompiles python graph_break_item.py [--steps 20 --rounds 3]
"""

from __future__ import annotations

import torch

from twins import arguments, run


@torch.compile
def broken(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w)
    scale = h.mean().item()                     # graph break: the host needs the value
    return torch.tanh(h * (1.0 / (scale + 1e-6)))


@torch.compile
def whole(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w)
    scale = h.mean()
    return torch.tanh(h * (1.0 / (scale + 1e-6)))


def main() -> None:
    args = arguments(__doc__, steps=20).parse_args()
    torch.manual_seed(0)
    x = torch.randn(1024, 1024, device="cuda")
    w = torch.randn(1024, 1024, device="cuda") / 32
    out = []
    run(lambda: out.append(broken(x, w)), lambda: out.append(whole(x, w)), args)
    print(f"{float(out[-1].mean()):.5f}")


if __name__ == "__main__":
    main()
