"""A 256 MiB batch copied to the GPU from pageable host memory every step (`copy`), then
used (`compute`). Twin: the same batch in pinned memory, copied with `non_blocking`.

    python pageable_copy.py [--steps 8 --rounds 3]
"""

from __future__ import annotations

import torch
from torch.cuda import nvtx

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=8).parse_args()
    pageable = torch.randn(256 * 2**20 // 4)
    pinned = pageable.clone().pin_memory()
    w = torch.randn(4096, 4096, device="cuda")
    total = torch.zeros((), device="cuda")

    def step(host: torch.Tensor, fast: bool):
        def go() -> None:
            nonlocal total
            nvtx.range_push("copy")
            x = host.to("cuda", non_blocking=fast)
            nvtx.range_pop()
            nvtx.range_push("compute")
            total = total + (x.view(-1, 4096)[:4096] @ w).relu().sum()
            nvtx.range_pop()
        return go

    run(step(pageable, False), step(pinned, True), args)
    print(f"{float(total):.3e}")


if __name__ == "__main__":
    main()
