"""A DistributedDataParallel training loop, written the way a user writes one: nothing
from this repository. Run under torchrun, one process per GPU:

    torchrun --nproc-per-node 2 user_ddp.py [--steps 10] [--straggler RANK]

Eight 4096x4096 linear layers, NCCL all-reduce of the gradients (DDP buckets, on DDP's
own threads), SGD. NVTX: `ddp_run` around the timed steps, each step `ddp_step` holding
`fwd`, `bwd`, `opt`. With --straggler R, rank R does extra matrix products in its forward
pass, so the other ranks wait for it in the all-reduce.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.cuda import nvtx
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--straggler", type=int, default=-1, help="rank given extra work")
    p.add_argument("--extra", type=int, default=40, help="extra products on the straggler")
    args = p.parse_args()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    torch.manual_seed(rank)
    model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    ddp = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(256, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")

    def step() -> None:
        nvtx.range_push("ddp_step")
        nvtx.range_push("fwd")
        h = x
        if rank == args.straggler:
            for _ in range(args.extra):
                h = torch.tanh(h @ w)
        loss = ddp(h).square().mean()
        nvtx.range_pop()
        nvtx.range_push("bwd")
        loss.backward()
        nvtx.range_pop()
        nvtx.range_push("opt")
        opt.step()
        opt.zero_grad(set_to_none=True)
        nvtx.range_pop()
        nvtx.range_pop()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    nvtx.range_push("ddp_run")
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    nvtx.range_pop()
    dist.destroy_process_group()
    print(f"rank {rank}: done")


if __name__ == "__main__":
    main()
