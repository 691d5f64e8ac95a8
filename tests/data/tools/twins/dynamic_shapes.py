"""Token-by-token decoding with cuDNN attention over a sequence one token longer every
`decode` step: cuDNN builds (and compiles) a new plan per shape. Twin: flash attention,
which needs no plan per shape.

    python dynamic_shapes.py [--steps 10 --rounds 3]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=10).parse_args()
    torch.manual_seed(0)
    proj = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16) / 128**0.5
    seqs = {b: torch.randn(1, 16, 512, 128, device="cuda", dtype=torch.bfloat16)
            for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION)}

    def decode(backend: SDPBackend):
        def go() -> None:
            seq = seqs[backend]
            with sdpa_kernel(backend):
                q, k, v = seq @ proj, seq, seq
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            seqs[backend] = torch.cat([seq, out[:, :, -1:]], dim=2)
        return go

    run(decode(SDPBackend.CUDNN_ATTENTION), decode(SDPBackend.FLASH_ATTENTION), args,
        step="decode")


if __name__ == "__main__":
    main()
