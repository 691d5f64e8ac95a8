"""A compiled MLP served at changing batch sizes, written the way a user writes it:
nothing from this repository. Run with TORCH_LOGS=recompiles,graph_breaks.

    TORCH_LOGS=recompiles,graph_breaks TORCH_LOGS_OUT=logs.txt python user_serve.py

Each batch size gets an NVTX range `batch_<n>` around --calls calls of the compiled
function. A new batch size makes torch.compile recompile inside that range, and the
`.item()` in the function breaks the graph.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.cuda import nvtx


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", default="8,16,24,32")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--width", type=int, default=2048)
    args = p.parse_args()
    torch.manual_seed(0)
    w = args.width
    mlp = nn.Sequential(nn.Linear(w, 4 * w), nn.GELU(), nn.Linear(4 * w, w)).cuda().half()

    @torch.compile
    def serve(x: torch.Tensor) -> torch.Tensor:
        h = mlp(x)
        scale = h.abs().mean().item()          # a host sync: graph break
        return torch.layer_norm(h / (scale + 1e-3), (w,))

    with torch.no_grad():
        for b in (int(s) for s in args.batches.split(",")):
            x = torch.randn(b, w, device="cuda", dtype=torch.half)
            nvtx.range_push(f"batch_{b}")
            for _ in range(args.calls):
                serve(x)
            torch.cuda.synchronize()
            nvtx.range_pop()
    print("done")


if __name__ == "__main__":
    main()
