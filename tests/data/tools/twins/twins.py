"""Run a planted loop and its fixed twin interleaved in one process, with a control.

Each program of the battery gives two step functions, the planted one and its fix; this
runs them in rounds, planted, fixed, control (the planted step again), each `steps`
steps inside an NVTX range (`planted/step`, `fixed/step`, `control/step`), after
`warmup` calls of each outside every range. Realized saving: the planted step's median
wall time less the fixed one's, in the same process and the same minutes (two captures
minutes apart differed by up to 2x in Python-bound host speed); noise: how far the
control loop, the same code as the planted one, lands from it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.cuda import nvtx

Step = Callable[[], object]


def arguments(doc: str, steps: int = 20, rounds: int = 3) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--steps", type=int, default=steps, help="steps per loop and round")
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--warmup", type=int, default=3, help="calls of each step before timing")
    return p


def run(planted: Step, fixed: Step, args: argparse.Namespace, step: str = "step",
        fixed_first: bool = False) -> dict[str, float]:
    """Warm both up, then the rounds (see the module doc); prints and returns the median
    ms per step of each loop. `fixed_first`: warm the fixed step up first (a first call
    that would otherwise land in the planted one)."""
    order = (fixed, planted) if fixed_first else (planted, fixed)
    for fn in order:
        for _ in range(args.warmup):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {"planted": [], "fixed": [], "control": []}
    for _ in range(args.rounds):
        for label, fn in (("planted", planted), ("fixed", fixed), ("control", planted)):
            nvtx.range_push(label)
            for _ in range(args.steps):
                t0 = time.perf_counter()
                nvtx.range_push(step)
                fn()
                nvtx.range_pop()
                times[label].append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            nvtx.range_pop()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"median ms per {step}: planted {med['planted']:.3f}, fixed {med['fixed']:.3f}, "
          f"control {med['control']:.3f} (host clock, {args.rounds} rounds of "
          f"{args.steps})")
    return med
