"""The attributed trace: ONE attribution pass over a loaded export, read by every analysis.

`attribute(export) -> Trace` runs the launch attribution once (GPU operations and CUDA
graph launches together), builds every range instance's path and key once, and merges
each instance's GPU operations into busy blocks and idle gaps once. Range summaries,
kernel tables, gaps, variants and the facts findings read all come from the Trace; none
recomputes them.

Everything per range key is a grouped aggregate (counts, sums, minima, maxima, first and
last operation per instance) so that a later chunked reader can build the same Trace
piece by piece and merge the pieces.

Frames (row positions are the ids the others refer to):
ranges     the loader's range instances plus `path`, `pid` and `key` (int code of
           (pid, domain, path): processes are never merged)
keys       one row per key, index = key: pid, domain, path, first_ns (earliest instance start)
pairs      (range, call): range instance row -> row of `export.ops` launched inside it
graph_pairs  (range, call): range instance row -> row of `export.graph_launches`
instances  per range instance with GPU work: range, gpu_span_ns, gpu_idle_ns
gaps       per idle gap inside an instance: range, gap_start_ns, gap_ns, host_wait, and
           idle_ns: the part when no GPU operation of the process ran (busy.truly_idle)
blocks     per process (global pid): the union of its GPU operations (disjoint, sorted)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .busy import process_blocks, truly_idle
from .gaps import timeline
from .load.nsys_sqlite import NsysExport
from .ranges import attribute as attribute_calls
from .ranges import range_paths

CALL_COLUMNS = ["global_tid", "api_start_ns", "api_end_ns"]


@dataclass
class Trace:
    """An export with its launch attribution done (see the module doc for the frames)."""

    export: NsysExport
    ranges: pd.DataFrame
    keys: pd.DataFrame
    pairs: pd.DataFrame
    graph_pairs: pd.DataFrame
    instances: pd.DataFrame
    gaps: pd.DataFrame
    blocks: dict[int, tuple[np.ndarray, np.ndarray]]

    @property
    def ops(self) -> pd.DataFrame:
        return self.export.ops

    def kernel_pairs(self) -> pd.DataFrame:
        """pairs of kernels only, with the range key, kernel name and timings attached."""
        ops = self.ops
        call = self.pairs["call"].to_numpy(dtype="int64")
        is_kernel = (ops["kind"].to_numpy() == "kernel")[call]
        sub = self.pairs[is_kernel]
        call = sub["call"].to_numpy(dtype="int64")
        return pd.DataFrame({
            "range": sub["range"].to_numpy(), "call": call,
            "key": self.ranges["key"].to_numpy()[sub["range"].to_numpy(dtype="int64")],
            "name": ops["name"].array.take(call),
            "demangled_name": ops["demangled_name"].array.take(call),
            "duration_ns": ops["duration_ns"].to_numpy()[call],
            "api_start_ns": ops["api_start_ns"].to_numpy()[call]})


def keyed(ranges: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ranges with `path`, `pid` (the OS process id) and an int `key` per (process, domain,
    path): ranges of different processes are never merged. The keys frame: pid, domain,
    path, first_ns."""
    out = ranges.reset_index(drop=True).assign(path=range_paths(ranges.reset_index(drop=True)))
    out["pid"] = (out["global_tid"].to_numpy(dtype="int64") >> 24) & 0xFFFFFF
    # numbered in Python, in order of first appearance: pandas' string handling differs
    # between versions and storages (one H200 install merged every key into one)
    codes: dict[tuple[int, str, str], int] = {}
    out["key"] = np.array([codes.setdefault((pid, d if isinstance(d, str) else "", p),
                                            len(codes))
                           for pid, d, p in zip(out["pid"].tolist(), out["domain"].tolist(),
                                                out["path"].tolist(), strict=True)],
                          dtype="int64")
    keys = out.drop_duplicates("key").set_index("key")[["pid", "domain", "path"]].sort_index()
    keys["first_ns"] = out.groupby("key")["start_ns"].min()
    return out, keys


def attribute(export: NsysExport) -> Trace:
    """The one attribution pass: ops and graph launches together, then the timeline."""
    ranges, keys = keyed(export.ranges)
    ops_calls = export.ops[CALL_COLUMNS]
    graph_calls = export.graph_launches.reindex(columns=CALL_COLUMNS)
    calls = pd.concat([ops_calls, graph_calls], ignore_index=True)
    both = attribute_calls(calls, ranges)
    n_ops = len(ops_calls)
    is_op = both["call"].to_numpy() < n_ops
    pairs = both[is_op].reset_index(drop=True)
    graph_pairs = both[~is_op].reset_index(drop=True)
    graph_pairs["call"] = graph_pairs["call"] - n_ops
    instances, gaps = timeline(export.ops, pairs)
    blocks = process_blocks(export.ops)
    gaps["idle_ns"] = truly_idle(gaps, ranges, blocks)
    return Trace(export=export, ranges=ranges, keys=keys, pairs=pairs,
                 graph_pairs=graph_pairs, instances=instances, gaps=gaps, blocks=blocks)


def outside_kernels(trace: Trace) -> int:
    """Kernel launches that no range holds."""
    ops = trace.ops
    inside = np.zeros(len(ops), dtype=bool)
    inside[trace.pairs["call"].to_numpy(dtype="int64")] = True
    return int(((ops["kind"] == "kernel").to_numpy() & ~inside).sum())
