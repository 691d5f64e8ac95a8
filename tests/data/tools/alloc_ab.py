"""A loop whose allocations wait for another thread's allocator calls, beside the same loop
with that thread's cache kept, in one process, with the truth measured around each loop.

    python alloc_ab.py [--steps 40] [--n 4096] [--gemms 8] [--mib 1024] [--out truth.json]

Loops (NVTX ranges named by the program, as a user marks them), each run twice, in the
order churn, calm, calm, churn, so that a drift of the machine falls on both alike:
- `churn/step`: `--gemms` GEMMs (n x n, fp32), each output a new tensor from PyTorch's
  caching allocator, no synchronize in the loop, while a housekeeping thread allocates a
  `--mib` buffer, fills it and calls `torch.cuda.empty_cache()` every 2 ms. Its cudaFree
  waits for the GPU's backlog and its cudaMalloc and cudaFree run under the allocator's
  lock, so the loop's allocations wait for them.
- `calm/step`: the same with the housekeeping thread keeping its buffer cached (no
  empty_cache): its allocations and the loop's are served from the cache.
The truth of a loop is (time after the closing synchronize - time before the first step) /
steps, summed over its two runs, written to --out with the loop's name.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import torch
from torch.cuda import nvtx


def housekeeping(stop: threading.Event, mib: int, churn: bool) -> None:
    """Every 2 ms a buffer of `mib` MiB filled; with `churn` the cache emptied after it."""
    while not stop.is_set():
        buf = torch.empty(mib << 18, device="cuda")          # float32: 4 bytes
        buf.fill_(1.0)
        del buf
        if churn:
            torch.cuda.empty_cache()
        time.sleep(0.002)


def run(name: str, steps: int, a: torch.Tensor, gemms: int, mib: int) -> int:
    """One run of `name/step` beside its housekeeping thread; its time in ns."""
    stop = threading.Event()
    keeper = threading.Thread(target=housekeeping, args=(stop, mib, name == "churn"))
    keeper.start()
    time.sleep(0.05)
    torch.cuda.synchronize()
    nvtx.range_push(name)
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        nvtx.range_push("step")
        x = a
        for _ in range(gemms):
            x = torch.relu(x @ a) * 1e-3
        nvtx.range_pop()
    torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    nvtx.range_pop()
    stop.set()
    keeper.join()
    return t1 - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--n", type=int, default=4096, help="the GEMMs' size")
    p.add_argument("--gemms", type=int, default=8, help="GEMMs a step")
    p.add_argument("--mib", type=int, default=1024, help="the housekeeping buffer, MiB")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    x = torch.randn(a.n, a.n, device="cuda")
    for _ in range(3):
        torch.relu(x @ x)                                   # warm-up, outside the loops
    total = {"churn": 0, "calm": 0}
    for name in ("churn", "calm", "calm", "churn"):
        total[name] += run(name, a.steps, x, a.gemms, a.mib)
    truth = {k: v / (2 * a.steps) for k, v in total.items()}
    for k, v in truth.items():
        print(f"{k}: {v / 1e6:.3f} ms a step as it runs", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"steps": 2 * a.steps, "n": a.n, "gemms": a.gemms, "mib": a.mib,
                       "cost_ns": truth}, f, indent=1)


if __name__ == "__main__":
    main()
