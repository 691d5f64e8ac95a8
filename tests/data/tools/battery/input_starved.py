"""A training loop starved by its input pipeline, written as users write one (only torch
and numpy). Each `train_step` holds `load` (the next batch: CPU preprocessing in the
Dataset, then a copy to the GPU) and `step` (a 6-layer MLP: forward, backward, AdamW).

    python input_starved.py [--steps 30]          # planted: DataLoader in the main process
    python input_starved.py --fixed               # twin: 8 workers, pinned memory, prefetch
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from torch.cuda import nvtx
from torch.utils.data import DataLoader, Dataset

FEATURES = 4096


class Augmented(Dataset):
    """Samples made and augmented on the CPU (a stand-in for decoding and transforms)."""

    def __init__(self, n: int, prep_iters: int) -> None:
        self.n, self.prep_iters = n, prep_iters

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        x = rng.standard_normal(FEATURES, dtype=np.float32)
        for _ in range(self.prep_iters):                 # "augmentation"
            x = np.tanh(x * 1.01 + 0.01).astype(np.float32)
        return torch.from_numpy(x), int(i % 10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--prep-iters", type=int, default=12)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    layers = [m for _ in range(6) for m in (nn.Linear(FEATURES, FEATURES), nn.ReLU())]
    model = nn.Sequential(*layers, nn.Linear(FEATURES, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = Augmented(args.batch * (args.steps + 2), args.prep_iters)
    extra = dict(num_workers=8, pin_memory=True, prefetch_factor=4,
                 persistent_workers=True) if args.fixed else {}
    batches = iter(DataLoader(data, batch_size=args.batch, shuffle=False, **extra))
    t0 = time.perf_counter()
    for _ in range(args.steps):
        nvtx.range_push("train_step")
        nvtx.range_push("load")
        x, y = next(batches)
        x, y = x.cuda(non_blocking=args.fixed), y.cuda(non_blocking=args.fixed)
        nvtx.range_pop()
        nvtx.range_push("step")
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        nvtx.range_pop()
        nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"{'fixed' if args.fixed else 'planted'}: "
          f"{(time.perf_counter() - t0) / args.steps * 1e3:.2f} ms per train_step")


if __name__ == "__main__":
    main()
