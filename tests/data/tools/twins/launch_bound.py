"""200 tiny eager ops per step on a 256 x 256 tensor (an optimizer-like update): the
host's launches hold the step. Twin: the step captured once in a CUDA graph, replayed.

    python launch_bound.py [--steps 20 --rounds 3]
"""

from __future__ import annotations

import torch

from twins import arguments, run


def update(x: torch.Tensor, v: torch.Tensor, ops: int) -> None:
    for i in range(ops // 4):
        v.mul_(0.999).add_(x, alpha=-1e-3)
        x.add_(v, alpha=1e-2).clamp_(-10.0, 10.0 + i)


def main() -> None:
    args = arguments(__doc__, steps=20).parse_args()
    torch.manual_seed(0)
    x, v = torch.randn(256, 256, device="cuda"), torch.zeros(256, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        update(x, v, 200)                            # warm up on a side stream
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        update(x, v, 200)
    run(lambda: update(x, v, 200), graph.replay, args)
    print(f"{float(x.abs().mean()):.4f}")


if __name__ == "__main__":
    main()
