"""A small GPT trained the way many scripts are written: no NVTX range, a DataLoader with
worker processes tokenizing text on the fly, AdamW, bf16 autocast, the loss logged every
step with `.item()`. With 2 workers the input pipeline holds the step (the loop waits in
`for x, y in loader`); the fixed twin is the same script with `--workers 8`.

    python loader_train.py [--workers 2] [--steps 60] [--out truth.json]

The truth (--out): the steady steps' time as they ran, from a synchronize before the
first steady step to one after the last, per step.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

VOCAB, SEQ, BATCH, WIDTH = 4096, 256, 32, 512


class Text(Dataset):
    """Synthetic documents tokenized on the fly by a pure-Python tokenizer."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        words = [f"w{(i * 7919 + k * 104729) % 50_000}" for k in range(SEQ * 8)]
        ids = []
        for w in words:                                  # the tokenizer: bigram hashing
            h = 0
            for a, b in zip(w, w[1:], strict=False):
                h = (h * 131 + ord(a) * 31 + ord(b)) % VOCAB
            ids.append(h)
        t = torch.tensor(ids[:SEQ + 1])
        return t[:-1], t[1:]


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(layer, 4)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.body(self.emb(x), mask=mask, is_causal=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out")
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loader = DataLoader(Text(BATCH * (args.steps + args.warmup)), batch_size=BATCH,
                        num_workers=args.workers)
    t0 = 0.0
    for step, (x, y) in enumerate(loader):
        if step == args.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - t0) / args.steps
    print(f"{per_step * 1e3:.3f} ms per steady step ({args.workers} workers)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"workers": args.workers, "steps": args.steps,
                       "step_ns": per_step * 1e9}, f)


if __name__ == "__main__":
    main()
