"""The whole trace, before any range: every kernel name (as `nsys stats --report
cuda_gpu_kern_sum:base`) and how busy each GPU and stream was.

Independent of NVTX: a trace without ranges gets these too. Busy time is the union of the
GPU operations (kernels, copies, sets) on a device or stream, over the device's span: from
its first operation's start to its last one's end.
"""

from __future__ import annotations

import pandas as pd

from ..documents.types import KernelSummaryRow, StreamBusy


def kernel_summary(names: pd.DataFrame) -> list[KernelSummaryRow]:
    """Per kernel name, most total time first: count, total, avg, min, max (ns). `names`:
    the Trace's per-name aggregates (name, n, total_ns, min_ns, max_ns), sorted by name."""
    agg = names.sort_values("total_ns", ascending=False, kind="stable")
    total = float(agg["total_ns"].sum()) or 1.0
    return [KernelSummaryRow(name=str(r.name), count=int(r.n), total_ns=int(r.total_ns),
                             avg_ns=round(r.total_ns / r.n, 1), min_ns=int(r.min_ns),
                             max_ns=int(r.max_ns),
                             time_pct=round(100.0 * r.total_ns / total, 1))
            for r in agg.itertuples(index=False)]


def gpu_busy(devices: pd.DataFrame) -> list[StreamBusy]:
    """Per device (stream None) and per (device, stream): operations, busy time, and the
    device's span they are measured against. `devices`: the Trace's per (device, stream)
    aggregates, stream -2 for the device as a whole, sorted by device then stream."""
    out = []
    span_of = {int(r.device): int(r.last_ns - r.first_ns)
               for r in devices[devices["stream"] == -2].itertuples(index=False)}
    for r in devices.itertuples(index=False):
        span = span_of[int(r.device)]
        busy = int(r.busy_ns)
        out.append(StreamBusy(device=int(r.device), stream=None if r.stream == -2 else
                              int(r.stream), operations=int(r.operations), busy_ns=busy,
                              span_ns=span,
                              busy_pct=round(100.0 * busy / span, 1) if span else 0.0))
    return out
