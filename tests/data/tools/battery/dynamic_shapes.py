"""Token-by-token generation whose attention sees a new sequence length every call,
written as users write it (only torch). Each `decode` range runs causal attention over
the whole sequence so far (16 heads x 128, bf16) with cuDNN's fused attention, then
appends a token; cuDNN builds an execution plan for every new length.

    python dynamic_shapes.py [--tokens 40]     # planted: cuDNN attention
    python dynamic_shapes.py --fixed           # twin: flash attention (no plan per shape)
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.cuda import nvtx
from torch.nn.attention import SDPBackend, sdpa_kernel


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    backend = SDPBackend.FLASH_ATTENTION if args.fixed else SDPBackend.CUDNN_ATTENTION
    seq = torch.randn(1, 16, args.prompt, 128, device="cuda", dtype=torch.bfloat16)
    proj = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16) / 128**0.5
    t0 = time.perf_counter()
    with sdpa_kernel(backend):
        for _ in range(args.tokens):
            nvtx.range_push("decode")
            q, k, v = seq @ proj, seq, seq
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            seq = torch.cat([seq, out[:, :, -1:]], dim=2)
            nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: "
          f"{(time.perf_counter() - t0) / args.tokens * 1e3:.2f} ms per decode")


if __name__ == "__main__":
    main()
