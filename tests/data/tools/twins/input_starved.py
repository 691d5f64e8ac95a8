"""A training step starved by its input pipeline: batches made and augmented on the CPU in
the main process (a DataLoader without workers), copied from pageable memory. Twin: the
same Dataset through 8 workers, pinned memory, prefetch. Each step holds `load` and
`step` (a 6-layer MLP: forward, backward, AdamW).

    python input_starved.py [--steps 8 --rounds 3]
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
from torch.cuda import nvtx
from torch.utils.data import DataLoader, Dataset

from twins import arguments, run

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
    args = arguments(__doc__, steps=8).parse_args()
    torch.manual_seed(0)
    layers = [m for _ in range(6) for m in (nn.Linear(FEATURES, FEATURES), nn.ReLU())]
    model = nn.Sequential(*layers, nn.Linear(FEATURES, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n = 256 * (args.steps * args.rounds * 2 + args.warmup + 4)
    plain = iter(DataLoader(Augmented(n, 12), batch_size=256))
    workers = iter(DataLoader(Augmented(n, 12), batch_size=256, num_workers=8,
                              pin_memory=True, prefetch_factor=4, persistent_workers=True))

    def step(batches, fast: bool):
        def go() -> None:
            nvtx.range_push("load")
            x, y = next(batches)
            x, y = x.cuda(non_blocking=fast), y.cuda(non_blocking=fast)
            nvtx.range_pop()
            nvtx.range_push("step")
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            nvtx.range_pop()
        return go

    run(step(plain, False), step(workers, True), args)


if __name__ == "__main__":
    main()
