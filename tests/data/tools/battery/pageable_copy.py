"""Host-to-device copies from pageable memory every step, written as users write them
(only torch). Each `step` copies a 256 MiB host buffer to the GPU (`copy`) and reduces it
(`compute`).

    python pageable_copy.py [--steps 20]     # planted: a plain (pageable) host tensor
    python pageable_copy.py --fixed          # twin: the same buffer pinned, copied async
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.cuda import nvtx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    host = torch.randn(args.mib * 2**20 // 4)
    if args.fixed:
        host = host.pin_memory()
    w = torch.randn(4096, 4096, device="cuda")
    total = torch.zeros((), device="cuda")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        nvtx.range_push("step")
        nvtx.range_push("copy")
        x = host.to("cuda", non_blocking=args.fixed)
        nvtx.range_pop()
        nvtx.range_push("compute")
        total += (x.view(-1, 4096)[:4096] @ w).relu().sum()
        nvtx.range_pop()
        nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: "
          f"{(time.perf_counter() - t0) / args.steps * 1e3:.2f} ms per step, {float(total):.3e}")


if __name__ == "__main__":
    main()
