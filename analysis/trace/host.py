"""Where a range's wall time goes on its own thread, and the memory copies it made.

Per window of the timeline (analysis/trace/partial.py) and per range instance: the time its
thread spent in each part of HOST_PARTS (calls that lie inside the instance, as launch
attribution takes them: load/nsys_host.py reads them), the launch, sync and module-load
calls it made, and the copies and sets it launched (count, bytes, time; those from or to
pageable host memory apart). A copy call that waited for a copy from pageable memory is
a blocking copy: synchronisation. OS runtime calls count only outside CUDA calls (the
driver's own ioctls are CUDA time). All sums: windows merge by adding them up.

Per range key (`per_key`): the same summed over its instances, the CPU time outside
every traced call (wall time less the parts, per instance), and how many instances loaded
modules or synchronized. `copy_table` and `copy_summary` give the copies per range and
for the whole trace (as `nsys stats` cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.frames import aggregate
from ..documents.types import CopyStat
from ..load.nsys_host import HOST_PARTS, PART
from .ranges import attribute as attribute_calls

if TYPE_CHECKING:
    from .types import Trace

PART_COLUMNS = [f"host_{p}_ns" for p in HOST_PARTS]
COUNT_COLUMNS = ["launch_calls", "sync_calls", "module_loads", "blocking_copy_calls",
                 "blocking_copy_ns"]
PAGEABLE = "Pageable"


def _pageable(ops: pd.DataFrame) -> pd.DataFrame:
    """The copies and sets from or to pageable memory that this window owns."""
    copies = ops[(ops["kind"].to_numpy() != "kernel") & ~ops["halo"].to_numpy()]
    return copies[copies["demangled_name"].astype(str).str.contains(PAGEABLE, regex=False)
                  .to_numpy()]


def pageable_launchers(ops: pd.DataFrame, lo: int) -> np.ndarray:
    """(global_tid, api_start_ns) of the calls that started before `lo` and launched a
    pageable copy or set this window owns: read_host reads them for `_blocking_copies`."""
    p = _pageable(ops)
    tid, start = p["global_tid"].to_numpy(dtype="int64"), p["api_start_ns"].to_numpy(
        dtype="int64")
    early = (tid >= 0) & (start < lo)
    return np.column_stack([tid[early], start[early]])


def _blocking_copies(host: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Which host calls launched a copy or set from or to pageable memory that this window
    owns (such a call waits for its copy: synchronisation)."""
    copies = _pageable(ops)
    if not (len(copies) and len(host)):
        return np.zeros(len(host), dtype=bool)
    start = host["start_ns"].to_numpy()
    rows = np.flatnonzero(host["part"].to_numpy() == PART["other_cuda"])  # a few rows
    rows = rows[np.isin(start[rows], copies["api_start_ns"].to_numpy())]
    hit = np.zeros(len(host), dtype=bool)
    if len(rows):
        keys = set(zip(copies["global_tid"].tolist(), copies["api_start_ns"].tolist(),
                       strict=True))
        tid = host["global_tid"].to_numpy()
        hit[rows] = [(t, s) in keys for t, s in zip(tid[rows].tolist(), start[rows].tolist(),
                                                     strict=True)]
    return hit


def _outside_cuda(host: pd.DataFrame, part: np.ndarray) -> np.ndarray:
    """Each call's duration; an OS call's less the part of it inside the CUDA call of its
    thread that started last before it in the same span (load/nsys_host.range_spans)."""
    start = host["start_ns"].to_numpy(dtype="int64")
    end = host["end_ns"].to_numpy(dtype="int64")
    span = host["span"].to_numpy(dtype="int64")
    dur = end - start
    cuda, os_rows = np.flatnonzero(part != PART["os"]), np.flatnonzero(part == PART["os"])
    if not (len(cuda) and len(os_rows)):
        return dur
    j = np.searchsorted(cuda, os_rows) - 1           # rows are sorted by (tid, start)
    c = cuda[np.maximum(j, 0)]
    same = (j >= 0) & (span[c] == span[os_rows])
    inside = np.clip(np.minimum(end[os_rows], end[c]) - start[os_rows], 0, None)
    dur[os_rows] -= np.where(same, inside, 0)
    return dur


def instance_calls(ranges: pd.DataFrame, host: pd.DataFrame,
                   ops: pd.DataFrame) -> pd.DataFrame:
    """Per range instance with calls in this window: PART_COLUMNS and COUNT_COLUMNS. A
    call counts in the window where it starts; a blocking copy is found in the window
    that owns its copy, which may be the next one: the call's time then moves there from
    other CUDA calls to synchronisation (sums stay exact at any window size)."""
    if not len(host):
        return pd.DataFrame(columns=["range", *PART_COLUMNS, *COUNT_COLUMNS], dtype="int64")
    part = host["part"].to_numpy(dtype="int64")
    dur = _outside_cuda(host, part)
    owned, blocking = host["owned"].to_numpy(dtype=bool), _blocking_copies(host, ops)
    moved = blocking & ~owned                  # counted as other CUDA in an earlier window
    part = np.where(blocking, PART["sync"], part)
    rows = np.r_[np.flatnonzero(owned), np.flatnonzero(moved), np.flatnonzero(moved)]
    n_owned, n_moved = int(owned.sum()), int(moved.sum())
    parts = np.r_[part[rows[:n_owned + n_moved]], np.full(n_moved, PART["other_cuda"])]
    block = np.r_[blocking[rows[:n_owned + n_moved]], np.zeros(n_moved, bool)]
    sign = np.r_[np.ones(n_owned + n_moved, "int64"), -np.ones(n_moved, "int64")]
    calls = pd.DataFrame({"global_tid": host["global_tid"].to_numpy()[rows],
                          "api_start_ns": host["start_ns"].to_numpy()[rows],
                          "api_end_ns": host["end_ns"].to_numpy()[rows]})
    pairs = attribute_calls(calls, ranges)
    c = pairs["call"].to_numpy(dtype="int64")
    p, d, w = parts[c], dur[rows][c] * sign[c], (sign[c] > 0).astype("int64")
    frame = pd.DataFrame({"range": pairs["range"].to_numpy(dtype="int64")})
    for name, code in PART.items():
        frame[f"host_{name}_ns"] = np.where(p == code, d, 0)
    frame["launch_calls"] = (p == PART["launch"]) * w
    frame["sync_calls"] = (p == PART["sync"]) * w
    frame["module_loads"] = (p == PART["module"]) * w
    frame["blocking_copy_calls"] = block[c] * w
    frame["blocking_copy_ns"] = np.where(block[c], d, 0)
    return frame.groupby("range", as_index=False).sum()


def instance_copies(ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (range instance, copy name, memory kinds): count, bytes, total_ns of the owned
    copies and sets its thread launched in this window."""
    call = pairs["call"].to_numpy(dtype="int64")
    copy = ((ops["kind"].to_numpy() != "kernel") & ~ops["halo"].to_numpy())[call]
    call = call[copy]
    frame = pd.DataFrame({"range": pairs["range"].to_numpy(dtype="int64")[copy],
                          "name": ops["name"].astype(str).to_numpy()[call],
                          "memory": ops["demangled_name"].astype(str).to_numpy()[call],
                          "count": 1, "bytes": ops["bytes"].to_numpy(dtype="int64")[call],
                          "total_ns": ops["duration_ns"].to_numpy(dtype="int64")[call]})
    return frame.groupby(["range", "name", "memory"], as_index=False).sum()


def copy_names(ops: pd.DataFrame) -> pd.DataFrame:
    """Per copy name and memory kinds, the owned copies and sets of the window: count,
    bytes, total_ns, min_ns, max_ns."""
    own = ops[(ops["kind"].to_numpy() != "kernel") & ~ops["halo"].to_numpy()]
    frame = pd.DataFrame({"name": own["name"].astype(str).to_numpy(),
                          "memory": own["demangled_name"].astype(str).to_numpy(),
                          "bytes": own["bytes"].to_numpy(dtype="int64"),
                          "duration_ns": own["duration_ns"].to_numpy(dtype="int64")})
    return aggregate(frame.groupby(["name", "memory"]),
                     count=("bytes", "size"), bytes=("bytes", "sum"),
                     total_ns=("duration_ns", "sum"), min_ns=("duration_ns", "min"),
                     max_ns=("duration_ns", "max")).reset_index()


def per_key(trace: Trace) -> pd.DataFrame:
    """Per range key, summed over its instances: PART_COLUMNS, host_cpu_ns (wall time
    outside every traced call), COUNT_COLUMNS, the copies (copy_count, copy_bytes, copy_ns
    and their pageable_ share), and the instances that loaded
    modules (`module_load_instances`) or synchronized (`sync_instances`: a synchronize
    call, not only blocking copies)."""
    keys = trace.ranges["key"].to_numpy()
    wall = trace.busy["wall_ns"].to_numpy(dtype="int64")
    calls = trace.host.set_index("range").reindex(np.arange(len(keys)), fill_value=0)
    calls["host_cpu_ns"] = np.maximum(wall - calls[PART_COLUMNS].sum(axis=1).to_numpy(), 0)
    calls["module_load_instances"] = (calls["module_loads"] > 0).astype("int64")
    calls["sync_instances"] = (calls["sync_calls"] > calls["blocking_copy_calls"]).astype(
        "int64")
    cp = trace.copies
    rows = cp["range"].to_numpy(dtype="int64")
    pageable = cp["memory"].str.contains(PAGEABLE, regex=False).to_numpy()
    for col, values in (("copy_count", cp["count"]), ("copy_bytes", cp["bytes"]),
                        ("copy_ns", cp["total_ns"])):
        v = values.to_numpy(dtype="int64")
        calls[col] = np.bincount(rows, weights=v, minlength=len(keys)).astype("int64")
        calls[f"pageable_{col}"] = np.bincount(rows, weights=v * pageable,
                                               minlength=len(keys)).astype("int64")
    return calls.assign(key=keys).groupby("key").sum().astype("int64")


def copy_table(trace: Trace) -> pd.DataFrame:
    """Per range key, its copies by name and memory kinds, most time first: key, then
    CopyStat's fields."""
    cp = trace.copies.assign(key=trace.ranges["key"].to_numpy()[
        trace.copies["range"].to_numpy(dtype="int64")])
    agg = cp.groupby(["key", "name", "memory"], as_index=False)[
        ["count", "bytes", "total_ns"]].sum().sort_values(
        ["key", "total_ns"], ascending=[True, False], kind="stable")
    return agg[["key", "name", "memory", "count", "bytes", "total_ns"]].reset_index(drop=True)


def copy_summary(names: pd.DataFrame) -> list[CopyStat]:
    """Every copy and set of the trace by name and memory kinds, most time first."""
    agg = names.sort_values("total_ns", ascending=False, kind="stable")
    return [CopyStat(str(r.name), str(r.memory), int(r.count), int(r.bytes),
                     int(r.total_ns)) for r in agg.itertuples(index=False)]


HOT_MODULES = 3


def sample_hits(trace: Trace, samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each (range instance, sample) pair where a sample (global_tid, time_ns) falls inside
    a range instance of its own thread, any depth: the instance's range key and the
    sample's row, as two arrays."""
    t = samples["time_ns"].to_numpy(dtype="int64")
    pairs = attribute_calls(pd.DataFrame({
        "global_tid": samples["global_tid"].to_numpy(dtype="int64"),
        "api_start_ns": t, "api_end_ns": t}), trace.ranges)
    return (trace.ranges["key"].to_numpy()[pairs["range"].to_numpy(dtype="int64")],
            pairs["call"].to_numpy(dtype="int64"))


def hot_frames(trace: Trace, samples: pd.DataFrame) -> tuple[pd.Series, pd.DataFrame]:
    """Per range key: its CPU samples (on its own thread, inside its instances; a Series
    by key) and the HOT_MODULES libraries most of them fell in, each with its most
    frequent resolved function (key, then HotFrame's fields)."""
    if not len(samples):
        return pd.Series(dtype="int64"), pd.DataFrame(
            {c: pd.Series(dtype=object if c in ("module", "symbol") else
                          "float64" if c == "pct" else "int64")
             for c in ("key", "module", "symbol", "samples", "pct")})
    key, c = sample_hits(trace, samples)
    hits = pd.DataFrame({"key": key, "module": samples["module"].to_numpy()[c],
                         "symbol": samples["symbol"].to_numpy()[c]})
    totals, rows = {}, []
    for key, grp in hits.groupby("key", sort=False):
        total = totals[int(key)] = len(grp)
        for module, n in grp["module"].value_counts().head(HOT_MODULES).items():
            named = grp.loc[(grp["module"] == module) & (grp["symbol"] != ""), "symbol"]
            rows.append((int(key), str(module), str(named.mode().iat[0]) if len(named)
                         else "", int(n), round(100.0 * n / total, 1)))
    frame = pd.DataFrame(rows, columns=["key", "module", "symbol", "samples", "pct"])
    return pd.Series(totals, dtype="int64"), frame.astype(
        {"module": object, "symbol": object})
