"""A step timed by `torch.cuda.synchronize()` after it, as many training scripts do for a
per-step time. Twin: CUDA events recorded around the step, read after the loop.

    python sync_timing.py [--steps 30 --rounds 3]
"""

from __future__ import annotations

import time

import numpy as np
import torch

from twins import arguments, run


def prepare(rng: np.random.Generator, ms: float = 0.6) -> float:
    """Host work of a step that needs nothing from the GPU (the next batch, a schedule)."""
    end, acc = time.perf_counter() + ms / 1e3, 0.0
    while time.perf_counter() < end:
        acc += float(np.tanh(rng.standard_normal(64)).sum())
    return acc


def main() -> None:
    args = arguments(__doc__, steps=30).parse_args()
    torch.manual_seed(0)
    w = torch.randn(2048, 2048, device="cuda") / 45
    x = torch.randn(2048, 2048, device="cuda")
    host_times: list[float] = []
    events: list[tuple] = []

    rng = np.random.default_rng(0)

    def work() -> None:
        prepare(rng)                      # the step's host work: next batch, schedule
        h = x
        for _ in range(6):
            h = torch.relu(h @ w) * 0.5 + 0.1

    def planted() -> None:
        t0 = time.perf_counter()
        work()
        torch.cuda.synchronize()
        host_times.append(time.perf_counter() - t0)

    def fixed() -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        events.append((start, end))

    run(planted, fixed, args)
    torch.cuda.synchronize()
    print(f"timed: {len(host_times)} by synchronize, {len(events)} by events "
          f"({sum(s.elapsed_time(e) for s, e in events) / len(events):.3f} ms each)")


if __name__ == "__main__":
    main()
