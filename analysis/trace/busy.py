"""What launch attribution leaves out: other threads' kernels and the real GPU busy time.

`nsys stats` credits a range only with kernels its own thread launched. PyTorch runs
backward on its autograd engine thread and DDP's collectives on their own threads, so a
`step` range credits only the forward. Per range instance [start, end) this module adds,
for the same process:

- other-thread kernels: kernels whose launching CUDA call starts in [start, end) on
  another thread of the process (count, summed duration, and per thread);
- busy time: how much of [start, end] at least one GPU operation (kernel, copy, set) of
  the process was running: the union of the process's operations, measured inside the
  window (`wall_ns` = end - start);
- per idle gap of the range's own operations, the part during which no operation of the
  process ran: a range whose GPU runs another thread's kernels is not idle.

All grouped and vectorized: sorted launch times and binary searches per process and
thread, one interval union per process, then binary searches per range instance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.frames import aggregate
from ..load.nsys_sqlite import PID_MASK
from .ranges import expand

if TYPE_CHECKING:
    from .types import Trace


OTHER_COLUMNS = ("range", "global_tid", "name", "kernel_count", "kernel_time_ns", "min_ns",
                 "max_ns", "last_ns")


def other_thread_kernels(ranges: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Kernels of `ops` launched by other threads of the range's process while it was
    open: one row per (range instance, launching thread, kernel name) with any: range,
    global_tid, name, kernel_count, kernel_time_ns, min_ns, max_ns, last_ns (the latest
    end: where the range's run ends, loops/runs.py). Pairs come from one binary search per
    range and thread (their number: such kernels times the ranges open around each)."""
    kern = ops[(ops["kind"] == "kernel").to_numpy() & (ops["global_tid"] >= 0).to_numpy()]
    kern = kern.sort_values("api_start_ns", kind="stable")
    tid_all = kern["global_tid"].to_numpy(dtype="int64")
    start_all = kern["api_start_ns"].to_numpy(dtype="int64")
    r_tid = ranges["global_tid"].to_numpy(dtype="int64")
    r_pid = r_tid & PID_MASK
    lo = ranges["start_ns"].to_numpy(dtype="int64")
    hi = ranges["end_ns"].to_numpy(dtype="int64")
    rows, calls = [], []
    for tid in np.unique(tid_all):
        who = np.flatnonzero((r_pid == (tid & PID_MASK)) & (r_tid != tid))
        if not len(who):
            continue
        mine = np.flatnonzero(tid_all == tid)
        a = np.searchsorted(start_all[mine], lo[who], side="left")
        n = np.searchsorted(start_all[mine], hi[who], side="left") - a
        if not n.sum():
            continue
        owner, at = expand(a, n)
        rows.append(who[owner])
        calls.append(mine[at])
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "int64")
                             for c in OTHER_COLUMNS})
    call = np.concatenate(calls)
    pairs = pd.DataFrame({"range": np.concatenate(rows), "global_tid": tid_all[call],
                          "name": kern["name"].astype(str).to_numpy()[call],
                          "duration_ns": kern["duration_ns"].to_numpy(dtype="int64")[call],
                          "end_ns": kern["end_ns"].to_numpy(dtype="int64")[call]})
    return aggregate(pairs.groupby(["range", "global_tid", "name"], sort=True),
                     kernel_count=("duration_ns", "size"), kernel_time_ns=("duration_ns", "sum"),
                     min_ns=("duration_ns", "min"), max_ns=("duration_ns", "max"),
                     last_ns=("end_ns", "max")).reset_index()


THREAD_ROLES = (("pt_autograd", "PyTorch's autograd engine thread (backward)"),
                ("pt_nccl", "a PyTorch NCCL process-group thread"),
                ("pt_", "a PyTorch worker thread"))


def thread_role(name: str | None) -> str | None:
    """What a launching thread is, from its name (PyTorch names its own threads)."""
    for prefix, role in THREAD_ROLES:
        if name and name.startswith(prefix):
            return role
    return None


def _thread_kernels(other: pd.DataFrame) -> pd.DataFrame:
    """Per (key, thread): the kernels it launched inside the key's instances, by name,
    most time first (ties by name): key, tid, then KernelStat's fields."""
    g = aggregate(other.groupby(["key", "global_tid", "name"]),
                  count=("kernel_count", "sum"), total_ns=("kernel_time_ns", "sum"),
                  min_ns=("min_ns", "min"), max_ns=("max_ns", "max")).reset_index()
    g = g.sort_values(["key", "global_tid", "total_ns", "name"],
                      ascending=[True, True, False, True], kind="stable")
    return pd.DataFrame({"key": g["key"].to_numpy(dtype="int64"),
                         "tid": g["global_tid"].to_numpy(dtype="int64"),
                         "name": g["name"].astype(object).to_numpy(),
                         "count": g["count"].to_numpy(dtype="int64"),
                         "total_ns": g["total_ns"].to_numpy(dtype="int64"),
                         "avg_ns": [round(t / n, 1) for t, n in zip(
                             g["total_ns"].tolist(), g["count"].tolist(), strict=True)],
                         "min_ns": g["min_ns"].to_numpy(dtype="int64"),
                         "max_ns": g["max_ns"].to_numpy(dtype="int64")})


def per_key(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per range key, summed over its instances: busy_ns, other_threads_kernel_count,
    other_threads_kernel_time_ns (wall time: ranges.summarize); the other launching
    threads per key (key, then ThreadLaunches' fields: tid, name, kernel_count,
    kernel_time_ns, role), most time first; and their kernels by name (_thread_kernels)."""
    keys = trace.ranges["key"].to_numpy()
    busy = trace.busy.assign(key=keys)
    out = busy.groupby("key")[["busy_ns"]].sum()
    other = trace.other.copy()
    other["key"] = keys[other["range"].to_numpy(dtype="int64")]
    per_thread = other.groupby(["key", "global_tid"], as_index=False)[
        ["kernel_count", "kernel_time_ns"]].sum()
    totals = per_thread.groupby("key")[["kernel_count", "kernel_time_ns"]].sum()
    out["other_threads_kernel_count"] = totals["kernel_count"].reindex(out.index, fill_value=0)
    out["other_threads_kernel_time_ns"] = totals["kernel_time_ns"].reindex(out.index,
                                                                           fill_value=0)
    names = trace.export.thread_names
    per_thread = per_thread.sort_values(["key", "kernel_time_ns"], ascending=[True, False])
    tids = per_thread["global_tid"].to_numpy(dtype="int64").tolist()
    named = [names.get(t) for t in tids]
    threads = pd.DataFrame({"key": per_thread["key"].to_numpy(dtype="int64"),
                            "tid": np.array(tids, dtype="int64"),
                            "name": pd.Series(named, dtype=object),
                            "kernel_count": per_thread["kernel_count"].to_numpy(dtype="int64"),
                            "kernel_time_ns": per_thread["kernel_time_ns"].to_numpy(
                                dtype="int64"),
                            "role": pd.Series([thread_role(n) for n in named], dtype=object)})
    return out.astype("int64"), threads, _thread_kernels(other)
