"""A plain PyTorch training loop, written the way a user writes one: nothing from this
repository, only torch. It is the program the toolkit is tested against as a stranger's.

    python user_train.py [--steps 5] [--emit-nvtx-steps 1] [--d-model 1024]

A `torch.nn.TransformerEncoderLayer` trained with MSE loss under bf16 autocast and fused
AdamW. Each step is an NVTX range `step` holding `fwd`, `bwd` and `opt` (torch.cuda.nvtx
push/pop); the warm-up steps run inside a range `warmup`, the timed ones inside `train`.
With --emit-nvtx-steps N, N more steps run under
`torch.autograd.profiler.emit_nvtx(record_shapes=True)` inside a range `train_emit_nvtx`:
PyTorch then adds one NVTX range per op (`aten::linear, seq = 12, op_id = 3, sizes = ...`),
and the backward ops run on PyTorch's autograd engine thread.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.cuda import nvtx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=5, help="timed steps inside range `train`")
    p.add_argument("--warmup", type=int, default=2, help="steps inside range `warmup`")
    p.add_argument("--emit-nvtx-steps", type=int, default=0,
                   help="steps under emit_nvtx(record_shapes=True) after the timed ones")
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    args = p.parse_args()

    torch.manual_seed(0)
    d = args.d_model
    model = nn.TransformerEncoderLayer(d, nhead=16, dim_feedforward=4 * d, batch_first=True,
                                       device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(args.batch, args.seq, d, device="cuda")
    target = torch.randn_like(x)

    def step() -> None:
        nvtx.range_push("step")
        nvtx.range_push("fwd")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(x), target)
        nvtx.range_pop()
        nvtx.range_push("bwd")
        loss.backward()
        nvtx.range_pop()
        nvtx.range_push("opt")
        opt.step()
        opt.zero_grad(set_to_none=True)
        nvtx.range_pop()
        nvtx.range_pop()

    for name, n in (("warmup", args.warmup), ("train", args.steps)):
        nvtx.range_push(name)
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        nvtx.range_pop()
    if args.emit_nvtx_steps:
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            nvtx.range_push("train_emit_nvtx")
            for _ in range(args.emit_nvtx_steps):
                step()
            torch.cuda.synchronize()
            nvtx.range_pop()
    print(f"done: {args.warmup} warm-up, {args.steps} timed, {args.emit_nvtx_steps} emit_nvtx steps")


if __name__ == "__main__":
    main()
