"""Loops whose cost as they run differs from their host ranges', each cause beside its
fix in one process, with the truth measured around each loop by its synchronize.

    python runs_ab.py [--steps 40] [--out truth.json]

Loops (NVTX ranges named by the program, as a user marks them):
- `ckpt/step`: a small MLP step; every eighth step also saves a checkpoint
  (`torch.save` into memory: a device-to-host copy of every weight and a pickle). Its
  median step does not move; the slow step is the tail. Fix: `nockpt/step`, no save.
- `fill/step`: a 512 MiB output zero-filled, then overwritten by `torch.add(out=)`; the
  host range lasts microseconds, the GPU work it queues milliseconds (the backlog of
  one step delays the next). Fix: `nofill/step`, `torch.empty` semantics (no fill).
Each loop runs after a `torch.cuda.synchronize()` and ends with one; the truth of a loop
is (time after the closing synchronize - time before the first step) / steps, written
to --out with the loop's name.
"""

from __future__ import annotations

import argparse
import io
import json
import time

import torch
import torch.nn as nn
from torch.cuda import nvtx


def mlp_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    """One training step of the MLP (forward, backward, AdamW)."""
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def ckpt_loop(name: str, steps: int, save_every: int) -> float:
    """`name/step` ranges; every `save_every`-th step saves a checkpoint (0: never).
    Returns the loop's cost per step as it ran (ns)."""
    model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, 2048, device="cuda")
    for _ in range(3):
        mlp_step(model, opt, x)                         # warm-up, outside the loop
    torch.cuda.synchronize()
    nvtx.range_push(name)
    t0 = time.perf_counter_ns()
    for i in range(steps):
        nvtx.range_push("step")
        mlp_step(model, opt, x)
        if save_every and i % save_every == save_every - 1:
            torch.save(model.state_dict(), io.BytesIO())
        nvtx.range_pop()
    torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    nvtx.range_pop()
    return (t1 - t0) / steps


def fill_loop(name: str, steps: int, fill: bool) -> float:
    """`name/step` ranges: `out` zero-filled (when `fill`) then overwritten."""
    n = 512 * 2**20 // 4
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    for _ in range(3):
        torch.add(a, b, out=out)
    torch.cuda.synchronize()
    nvtx.range_push(name)
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        nvtx.range_push("step")
        if fill:
            out.zero_()
        torch.add(a, b, out=out)
        nvtx.range_pop()
    torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    nvtx.range_pop()
    return (t1 - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--out", default="truth.json")
    args = p.parse_args()
    truth = {}
    for _round in range(2):                 # each cause beside its fix, twice, interleaved
        for name, run in (("ckpt", lambda: ckpt_loop("ckpt", args.steps, 8)),
                          ("nockpt", lambda: ckpt_loop("nockpt", args.steps, 0)),
                          ("fill", lambda: fill_loop("fill", args.steps, True)),
                          ("nofill", lambda: fill_loop("nofill", args.steps, False))):
            truth.setdefault(f"{name}/step", []).append(run())
    with open(args.out, "w") as fh:
        json.dump({"steps": args.steps, "per_instance_ns": truth}, fh, indent=1)
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
