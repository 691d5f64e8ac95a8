"""The Systems range that launched a kernel, for launches Nsight Compute profiled where
its own NVTX record says "no range" (the backward's kernels: PyTorch's autograd thread
opens no range of the user's).

A launch call belongs to the innermost user range (push/pop, not a library's domain,
emit_nvtx ops cut off as the findings cut them) open around it on its own thread; else,
on another thread of its process, the innermost one open around it then: the range whose
step launched it (what systems.json counts as other threads' kernels).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ..common.names import library_mask
from ..load.nsys_sqlite import os_pid
from .ranges import range_paths


def holders(ranges: pd.DataFrame, calls: pd.DataFrame, user_path: Callable[[str], str]
            ) -> list[tuple[str, str]]:
    """Per call (rows with tid, call_ns): (range path, "own" | "other thread"), or
    ("", "") where no user range was open."""
    if ranges.empty or calls.empty:
        return [("", "")] * len(calls)
    keep = (ranges["style"] == "PushPop").to_numpy() & ~library_mask(ranges["domain"])
    r = ranges[keep]
    paths = np.array([user_path(p) for p in range_paths(ranges)[keep].tolist()], dtype=object)
    tid = r["global_tid"].to_numpy(dtype="int64")
    pid, lo, hi = os_pid(tid), r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    out = []
    for t, at in zip(calls["tid"].to_numpy(dtype="int64"), calls["call_ns"].to_numpy(),
                     strict=True):
        open_ = (lo <= at) & (at <= hi) & (paths != "") & (pid == os_pid(np.array([t]))[0])
        own = open_ & (tid == t)
        pick, said = (own, "own") if own.any() else (open_, "other thread")
        if not pick.any():
            out.append(("", ""))
            continue
        at_rows = np.flatnonzero(pick)
        out.append((str(paths[at_rows[np.argmax(lo[at_rows])]]), said))
    return out


def base_name(demangled: str) -> str:
    """A kernel's function base name (what `--kernel-name-base function` and Nsight
    Systems' shortName give) from its demangled name."""
    name = demangled.removeprefix("void ").split("(", 1)[0].split("<", 1)[0]
    return name.rsplit("::", 1)[-1].rsplit(">", 1)[-1].strip()


def fill(kernels: pd.DataFrame, plan: dict) -> pd.DataFrame:
    """`range` of the profiled launches that have none, from the plan they were profiled
    by (its targets' `range`, matched name by name in the runs' launch order)."""
    run_of = {r["invocation"]: i for i, r in enumerate(plan.get("runs") or [])}
    queue: dict[str, list[str]] = {}
    for t in sorted(plan.get("targets") or [], key=lambda t: (
            run_of.get(t["invocation"], 0), t.get("call_ns", 0))):
        queue.setdefault(t["name"], []).append(t.get("range") or "")
    out = kernels.copy()
    ranges = out["range"].tolist()
    for i, name in enumerate(out["name"].astype(str).tolist()):
        expected = queue.get(base_name(name))
        if expected:
            held = expected.pop(0)
            if not ranges[i] and held:
                ranges[i] = held
    out["range"] = ranges
    return out
