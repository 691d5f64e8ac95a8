"""A program with two loops, written as users write one (only torch): a token-by-token
decode loop whose KV cache grows by `torch.cat` every token (each token a new launch
configuration of the copy), then a training loop whose backward runs on PyTorch's
autograd thread. fp16 throughout. NVTX ranges `decode` (per token) and `train_step`.

    python decode_train.py [--tokens 48] [--steps 12]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.cuda import nvtx

D, HEADS, LAYERS = 2048, 16, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.ModuleList(Block() for _ in range(LAYERS)).cuda().half()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-4)
    t0 = time.perf_counter()
    with torch.no_grad():                       # serving: one token at a time
        caches: list[list] = [[] for _ in model]
        x = torch.randn(8, 1, D, device="cuda", dtype=torch.half)
        for _ in range(args.tokens):
            nvtx.range_push("decode")
            h = x
            for blk, c in zip(model, caches, strict=True):
                h = blk(h, c)
            x = h[:, -1:]
            nvtx.range_pop()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    batch = torch.randn(8, 512, D, device="cuda", dtype=torch.half)
    for _ in range(args.steps):                 # training: backward on the autograd thread
        nvtx.range_push("train_step")
        h = batch
        for blk in model:
            h = blk(h)
        h.float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        nvtx.range_pop()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"decode {1e3 * (t1 - t0) / args.tokens:.2f} ms per token, train "
          f"{1e3 * (t2 - t1) / args.steps:.2f} ms per step")


if __name__ == "__main__":
    main()
