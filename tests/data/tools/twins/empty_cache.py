"""`torch.cuda.empty_cache()` every step "to keep memory low": the caching allocator gives
its blocks back to the driver and has to ask for them again at once. Twin: no call.

    python empty_cache.py [--steps 30 --rounds 3]
"""

from __future__ import annotations

import torch

from twins import arguments, run


def main() -> None:
    args = arguments(__doc__, steps=30).parse_args()
    torch.manual_seed(0)
    w = torch.randn(2048, 2048, device="cuda")
    acc = torch.zeros((), device="cuda")

    @torch.no_grad()
    def work() -> None:
        nonlocal acc
        x = torch.randn(1024, 2048, device="cuda")
        h = torch.relu(x @ w)
        acc = acc + (h @ w.T).mean()

    def planted() -> None:
        work()
        torch.cuda.empty_cache()

    run(planted, work, args)
    print(f"acc {float(acc):.4f}")


if __name__ == "__main__":
    main()
