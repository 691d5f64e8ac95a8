"""A background Python thread (a pure-Python "metrics aggregator") runs beside the loop:
each time the loop's thread gives up the GIL (a synchronize, `.item()`), it waits for the
thread to hand it back. Twin: the same loop with the thread stopped.

    python gil_thread.py [--steps 4 --rounds 2]
"""

from __future__ import annotations

import threading

import torch

from twins import arguments, run


def aggregate_metrics(stop: threading.Event, out: list) -> None:
    """Pure Python work that never releases the GIL by itself."""
    acc = 0
    while not stop.is_set():
        for k in range(20_000):
            acc = (acc * 31 + k) % 1_000_003
        out.append(acc)


def main() -> None:
    args = arguments(__doc__, steps=4, rounds=2).parse_args()
    x = torch.randn(1 << 20, device="cuda")
    holder: dict = {"thread": None, "stop": None}
    out: list = []

    def thread(on: bool) -> None:
        if on and holder["thread"] is None:
            holder["stop"] = threading.Event()
            holder["thread"] = threading.Thread(target=aggregate_metrics,
                                                args=(holder["stop"], out), daemon=True)
            holder["thread"].start()
        elif not on and holder["thread"] is not None:
            holder["stop"].set()
            holder["thread"].join()
            holder["thread"] = None

    def work() -> float:
        y = x
        for _ in range(30):
            y = torch.tanh(y * 1.0001 + 0.001)
        return float(y.sum())                          # .item(): the GIL released

    def planted() -> None:
        thread(True)
        for _ in range(2):
            work()

    def fixed() -> None:
        thread(False)
        for _ in range(2):
            work()

    run(planted, fixed, args)
    thread(False)
    print(len(out))


if __name__ == "__main__":
    main()
