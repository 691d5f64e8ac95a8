"""The whole trace, before any range: every kernel name (as `nsys stats --report
cuda_gpu_kern_sum:base`) and how busy each GPU and stream was.

Independent of NVTX: a trace without ranges gets these too. Busy time is the union of the
GPU operations (kernels, copies, sets) on a device or stream, over the device's span: from
its first operation's start to its last one's end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .busy import union
from .documents import KernelSummaryRow, StreamBusy


def kernel_summary(ops: pd.DataFrame) -> list[KernelSummaryRow]:
    """Per kernel name, most total time first: count, total, avg, min, max (ns)."""
    kern = ops[(ops["kind"] == "kernel").to_numpy()]
    agg = kern.groupby("name", observed=True)["duration_ns"].agg(
        n="count", total_ns="sum", min_ns="min", max_ns="max")
    agg = agg.sort_values("total_ns", ascending=False, kind="stable").reset_index()
    total = float(agg["total_ns"].sum()) or 1.0
    return [KernelSummaryRow(name=str(r.name), count=int(r.n), total_ns=int(r.total_ns),
                             avg_ns=round(r.total_ns / r.n, 1), min_ns=int(r.min_ns),
                             max_ns=int(r.max_ns),
                             time_pct=round(100.0 * r.total_ns / total, 1))
            for r in agg.itertuples(index=False)]


def gpu_busy(ops: pd.DataFrame) -> list[StreamBusy]:
    """Per device (stream None) and per (device, stream): operations, busy time, and the
    device's span they are measured against."""
    out = []
    dev = ops["device_id"].to_numpy(dtype="int64") if "device_id" in ops else np.full(
        len(ops), -1)
    stream = ops["stream_id"].to_numpy(dtype="int64") if "stream_id" in ops else np.full(
        len(ops), -1)
    s, e = ops["start_ns"].to_numpy(dtype="int64"), ops["end_ns"].to_numpy(dtype="int64")
    for d in np.unique(dev):
        on_dev = dev == d
        span = int(e[on_dev].max() - s[on_dev].min())
        groups = [(None, on_dev)] + [(int(st), on_dev & (stream == st))
                                     for st in np.unique(stream[on_dev])]
        for st, mask in groups:
            bs, be = union(s[mask], e[mask])
            busy = int((be - bs).sum())
            out.append(StreamBusy(device=int(d), stream=st, operations=int(mask.sum()),
                                  busy_ns=busy, span_ns=span,
                                  busy_pct=round(100.0 * busy / span, 1) if span else 0.0))
    return out
