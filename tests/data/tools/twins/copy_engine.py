"""The next batch (64 MiB, pinned) copied to the GPU with a blocking copy on the compute
stream every step, then used by 2 ms of matrix products: the copy waits for the kernels
before it and the kernels for the copy. Twin: the batch prefetched on a side stream
(`non_blocking`), one step ahead, so the copy engine works beside the SMs.

    python copy_engine.py [--steps 16 --rounds 3]
"""

from __future__ import annotations

import torch
from torch.cuda import nvtx

from twins import arguments, run

ROWS, COLS = 2048, 8192


def main() -> None:
    args = arguments(__doc__, steps=16).parse_args()
    host = [torch.randn(ROWS, COLS).pin_memory() for _ in range(2)]
    w = torch.randn(COLS, COLS, device="cuda", dtype=torch.half) / COLS ** 0.5
    total = torch.zeros((), device="cuda")
    side = torch.cuda.Stream()
    state = {"i": 0, "next": None}

    def compute(x: torch.Tensor) -> None:
        nonlocal total
        nvtx.range_push("compute")
        h = x.half()
        for _ in range(4):
            h = (h @ w).relu_()
        total = total + h.float().sum()
        nvtx.range_pop()

    def planted() -> None:
        state["i"] += 1
        nvtx.range_push("copy")
        x = host[state["i"] % 2].to("cuda")            # blocking, on the compute stream
        nvtx.range_pop()
        compute(x)

    def prefetch() -> torch.Tensor:
        state["i"] += 1
        with torch.cuda.stream(side):
            x = host[state["i"] % 2].to("cuda", non_blocking=True)
        return x

    def fixed() -> None:
        if state["next"] is None:
            state["next"] = prefetch()
        nvtx.range_push("copy")
        torch.cuda.current_stream().wait_stream(side)
        x = state["next"]
        x.record_stream(torch.cuda.current_stream())
        state["next"] = prefetch()                      # the next batch, beside this one
        nvtx.range_pop()
        compute(x)

    run(planted, fixed, args)
    print(f"{float(total):.3e}")


if __name__ == "__main__":
    main()
