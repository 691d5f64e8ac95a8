"""A training loop with no range of its own, as many traces users bring: PyTorch's
`emit_nvtx` op ranges only, the first steps warm-up inside the capture, and optionally
NCCL's own ranges (one process, world size 1: an all-reduce of the gradients each step)
or a profiler's step markers (`ProfilerStep#N`, the name `torch.profiler` gives each
step). `--fast` trains the same model under bf16 autocast (its faster twin).

    python emit_train.py [--steps 30] [--fast] [--nccl] [--markers]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
import torch.nn as nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fast", action="store_true", help="bf16 autocast")
    p.add_argument("--nccl", action="store_true", help="all-reduce the gradients (NCCL)")
    p.add_argument("--markers", action="store_true", help="ProfilerStep#N around each step")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.nccl:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(2048, 2048), nn.GELU())]
                          ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(1024, 2048, device="cuda")
    cast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.fast else \
        contextlib.nullcontext
    times = []
    with torch.autograd.profiler.emit_nvtx():
        for i in range(args.steps):
            t0 = time.perf_counter()
            mark = torch.profiler.record_function(f"ProfilerStep#{i}") if args.markers \
                else contextlib.nullcontext()
            with mark:
                with cast():
                    loss = model(x).float().square().mean()
                loss.backward()
                if args.nccl:
                    for q in model.parameters():
                        dist.all_reduce(q.grad)
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    steady = sorted(times[3:])
    print(f"median ms per step: {steady[len(steady) // 2] * 1e3:.3f} (host clock, steps 4-"
          f"{args.steps}), first step {times[0] * 1e3:.1f} ms")
    if args.nccl:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
