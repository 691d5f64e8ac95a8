"""The whole capture's GPU time beside the steps (the document's `capture`): span, busy
and idle per device, summed; kernel time of compute and of communication (NCCL), copies
and sets; exposed communication: NCCL kernel time with no other kernel running on its
device (read from the kernel sequence, only where there are NCCL kernels)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ..common.intervals import covered, union
from ..documents.types import CaptureTotals, SystemsDoc
from ..load.nsys_sequence import NCCL


def capture_totals(doc: SystemsDoc, sequence: Callable[[], pd.DataFrame]) -> CaptureTotals:
    """The totals of a measured document (`sequence`: the kernel sequence, read when the
    capture holds NCCL kernels)."""
    devices = [b for b in doc.gpu_busy if b.stream is None]
    comm = sum(k.total_ns for k in doc.kernel_summary if NCCL.search(k.name))
    kernels = sum(k.total_ns for k in doc.kernel_summary)
    span = sum(b.span_ns for b in devices)
    busy = sum(b.busy_ns for b in devices)
    return CaptureTotals(gpus=len(devices), span_ns=int(span), busy_ns=int(busy),
                         compute_ns=int(kernels - comm), communication_ns=int(comm),
                         memory_ns=int(sum(c.total_ns for c in doc.copies)),
                         idle_ns=int(span - busy),
                         exposed_comm_ns=exposed(sequence()) if comm else 0)


def exposed(seq: pd.DataFrame) -> int:
    """NCCL kernel time, per device, not covered by any other kernel of that device."""
    total = 0
    for _, k in seq.groupby("device"):
        s, e = k["start_ns"].to_numpy(dtype="int64"), k["end_ns"].to_numpy(dtype="int64")
        nccl = k["nccl"].to_numpy(dtype=bool)
        ns, ne = union(s[nccl], e[nccl])
        if not len(ns):
            continue
        cs, ce = union(s[~nccl], e[~nccl])
        total += int((ne - ns).sum() - covered(cs, ce, ns, ne).sum())
    return total
