"""The measured trace, `Trace`: an export with its launch attribution done, the type every
stage above `trace` reads (built by trace/build.py).

Trace frames (range rows are the rows of `ranges`):
ranges        the loader's range instances plus `path`, `pid` and `key` (int code of
              (pid, domain, path): processes are never merged)
keys          per key: pid, domain, path, first_ns (earliest instance start), pathid
              (int code of (pid, path): keys of several domains share it)
graph_pairs   (range, call): range instance row -> row of `export.graph_launches`
kernels       per (key, kernel name): count, total_ns, min_ns, max_ns, avg_ns
instances     per range instance with GPU work: range, gpu_span_ns, gpu_idle_ns
gaps          per key: idle gaps of at least gap_ns (partial.GAP_COLUMNS)
busy          per range instance: wall_ns, busy_ns (process GPU busy inside it)
host          per range instance with host calls: host.PART_COLUMNS, host.COUNT_COLUMNS
copies        per (range instance, copy name, memory kinds): count, bytes, total_ns
copy_names    per (copy name, memory kinds) over the whole trace: count, bytes, total_ns,
              min_ns, max_ns
other         per (range instance, other launching thread, kernel name): kernel_count,
              kernel_time_ns, min_ns, max_ns
kernel_names  per kernel name over the whole trace: n, total_ns, min_ns, max_ns
devices       per device (stream -2) and (device, stream): operations, busy_ns, first/last
seq_*         kernels per (pid, path) once per launch: per name, per duration, the
              back-to-back name pairs in order (the systems rules read these)
op_counts     per emit_nvtx op range instance: kernel_count, kernel_time_ns
op_ranges     the emit_nvtx op range instances (ops.op_ranges)
first_ops     the operations of the watched instances (first iterations), in start order
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..load.nsys_sqlite import NsysExport


@dataclass
class Trace:
    """An export with its launch attribution done (see the module doc for the frames)."""

    export: NsysExport
    ranges: pd.DataFrame
    keys: pd.DataFrame
    graph_pairs: pd.DataFrame
    kernels: pd.DataFrame
    instances: pd.DataFrame
    gaps: pd.DataFrame
    busy: pd.DataFrame
    other: pd.DataFrame
    kernel_names: pd.DataFrame
    devices: pd.DataFrame
    key_devices: dict[int, list[int]]
    seq_names: pd.DataFrame
    seq_durations: pd.DataFrame
    seq_pairs: pd.DataFrame
    op_counts: pd.DataFrame
    first_ops: pd.DataFrame
    op_ranges: pd.DataFrame
    instance_kernels: pd.DataFrame     # per range instance: its own thread's kernels
    host: pd.DataFrame                 # per range instance: host parts, call counts
    copies: pd.DataFrame               # per (range instance, copy name, memory kinds)
    copy_names: pd.DataFrame           # per (copy name, memory kinds), the whole trace
    outside: int = 0
    graph_traced: set[int] = field(default_factory=set)
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype="int64"))
    rank: dict[int, dict[str, int]] = field(default_factory=dict)  # per OS pid, summed
    warmup: dict[str, str] = field(default_factory=dict)  # WARMUP_TAG path -> why
