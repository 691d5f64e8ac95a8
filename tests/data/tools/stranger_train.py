"""A token-classifier training script written the way many are: no NVTX ranges, nothing
from this repository, only torch. It carries three common causes, each with its fix:

    python stranger_train.py [--fix none|item|mask|batch|all] [--steps 300] [--warmup 30]

- item:  the loss is logged with `loss.item()` every step (a sync); fixed: summed on the GPU
         and read once at the end.
- mask:  padding is dropped with a boolean index (`logits[keep]`, a sync for the count);
         fixed: a per-token loss weighted by the mask.
- batch: each batch is built in Python lists of random ids on the loop's thread; fixed: the
         ids are drawn on the GPU.

The script times itself: after the warm-up steps it synchronizes, runs `--steps` steps,
synchronizes again and prints the milliseconds per step, so that a variant's saving is the
difference between two runs of this file (the realized figure a finding is checked against).
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CLASSES = 8192, 16


class Tagger(nn.Module):
    """Embedding, two encoder layers, a per-token classifier."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, nhead=8, dim_feedforward=4 * d, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(ids)))


def python_batch(batch: int, seq: int) -> torch.Tensor:
    """Ids drawn in Python lists, then copied: the slow way."""
    rows = [[random.randrange(1, VOCAB) for _ in range(seq)] for _ in range(batch)]
    for row in rows:  # a random tail of padding (id 0)
        cut = random.randrange(seq // 2, seq)
        row[cut:] = [0] * (seq - cut)
    return torch.tensor(rows).cuda()


def gpu_batch(batch: int, seq: int) -> torch.Tensor:
    """The same distribution drawn on the GPU."""
    ids = torch.randint(1, VOCAB, (batch, seq), device="cuda")
    cut = torch.randint(seq // 2, seq, (batch, 1), device="cuda")
    return ids.masked_fill(torch.arange(seq, device="cuda") >= cut, 0)


def loss_of(logits: torch.Tensor, labels: torch.Tensor, keep: torch.Tensor,
            fix_mask: bool) -> torch.Tensor:
    """Cross-entropy over the tokens that are not padding."""
    if fix_mask:
        per = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
        w = keep.flatten().float()
        return (per * w).sum() / w.sum()
    return F.cross_entropy(logits[keep], labels[keep])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fix", choices=["none", "item", "mask", "batch", "all"], default="none")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    args = p.parse_args()
    fixed = {args.fix} if args.fix != "all" else {"item", "mask", "batch"}
    random.seed(0)
    torch.manual_seed(0)
    model = Tagger(args.d_model).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    total, start = 0.0, 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        ids = gpu_batch(args.batch, args.seq) if "batch" in fixed else python_batch(args.batch, args.seq)
        labels = ids % CLASSES
        logits = model(ids)
        loss = loss_of(logits, labels, ids != 0, "mask" in fixed)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        total = total + (loss.detach() if "item" in fixed else loss.item())
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) * 1e3 / args.steps
    print(f"fix={args.fix} steps={args.steps} ms_per_step={ms:.4f} mean_loss={float(total) / (args.warmup + args.steps):.4f}")


if __name__ == "__main__":
    main()
