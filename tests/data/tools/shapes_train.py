"""A small decoder-only transformer trained the way a user writes it, under
`torch.autograd.profiler.emit_nvtx(record_shapes=True)` and nothing else from any tool.

    python shapes_train.py [--steps 60] [--layers 4] [--d-model 512]

Each step draws its sequence length from a fixed cycle (64 to 512 tokens), so the op ranges
that emit_nvtx writes (`aten::linear, seq = 12, op_id = 3, sizes = [[8, 192, 512], ...]`)
carry many distinct shapes: the NVTX-heavy kind of capture with tens of thousands of
distinct range names. Plain AdamW (foreach, not fused) adds its many small ops. No range of
the program's own: what the analysis knows of the loop comes from the op ranges alone.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

LENGTHS = (64, 96, 128, 192, 256, 320, 384, 512)


class Decoder(nn.Module):
    """Token embedding, causal encoder layers and a tied head: a small GPT."""

    def __init__(self, vocab: int, d: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max(LENGTHS), d)
        layer = nn.TransformerEncoderLayer(d, nhead=8, dim_feedforward=4 * d,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        h = self.embed(tokens) + self.pos(torch.arange(n, device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        h = self.blocks(h, mask=mask, is_causal=True)
        return self.norm(h) @ self.embed.weight.t()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Decoder(args.vocab, args.d_model, args.layers).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    with torch.autograd.profiler.emit_nvtx(record_shapes=True):
        for i in range(args.steps):
            n = LENGTHS[i % len(LENGTHS)]
            tokens = torch.randint(0, args.vocab, (args.batch, n + 1), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens[:, :-1])
                loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                   tokens[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    print(f"done: {args.steps} steps, {args.layers} layers, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
