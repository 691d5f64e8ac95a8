"""One window of the GPU timeline reduced to partial aggregates that merge exactly.

`compute(ctx, ops, lo, hi) -> Partial`: `ops` are the GPU operations that start in
[lo, hi) (owned) plus those that started earlier and still run at lo (`halo`). Owned
operations feed every count, sum, minimum and maximum; owned and halo together feed the
interval unions, each clipped to [lo, hi), so that unions over the whole trace are sums
over windows. Per range instance the window also keeps what the merge needs to join its
timeline across window edges: the first operation (start, launching call), the running
end, and how much of the stretch before that first operation and after that end the
process's GPU was busy. `merge.combine` puts the windows back together
(see analysis/trace/merge.py).

Everything here is per window: memory is bounded by the window, not by the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..common.frames import aggregate
from ..common.intervals import clipped_union, covered
from ..load.nsys_sqlite import CALL_COLUMNS, PID_MASK, os_pid
from . import host
from .busy import other_thread_kernels
from .ranges import attribute as attribute_calls
from .steps import rank_measures

FIRST_OPS_CAP = 100_000        # GPU operations kept per watched range instance (strip)


@dataclass
class ChunkContext:
    """What every window needs of the whole trace (all small: ranges, not operations)."""

    ranges: pd.DataFrame            # model.keyed ranges: path, pid, key, global_tid, ...
    keys: pd.DataFrame
    op_ranges: pd.DataFrame         # ops.op_ranges: range, op (emit_nvtx op ranges)
    watch: np.ndarray               # range rows whose operations are kept (first iteration)
    gap_ns: int                     # idle gaps at least this long are summarized per key
    graph_ids: np.ndarray           # correlation ids of CUDA graph launches
    spans: np.ndarray               # load/nsys_host.range_spans: where host calls are read
    steps: np.ndarray | None = None  # ranks: the step range's instances (rows)


@dataclass
class Partial:
    """The aggregates of one window (columns documented where they are made)."""

    index: int
    kernels: pd.DataFrame
    instances: pd.DataFrame
    gaps: pd.DataFrame
    busy: pd.DataFrame
    process_busy: dict[int, int]     # global pid -> GPU busy ns in the window
    other: pd.DataFrame
    names: pd.DataFrame
    devices: pd.DataFrame
    key_devices: set[tuple[int, int]]
    seq_names: pd.DataFrame
    seq_durations: pd.DataFrame
    seq_pairs: pd.DataFrame
    seq_ends: pd.DataFrame
    op_counts: pd.DataFrame
    instance_kernels: pd.DataFrame   # range, kernel_count: owned kernels per instance
    first_ops: pd.DataFrame
    host: pd.DataFrame               # per range instance: host parts and call counts
    copies: pd.DataFrame             # per (range instance, copy name, memory kinds)
    copy_names: pd.DataFrame         # per (copy name, memory kinds), the whole window
    outside: int = 0
    graph_traced: set[int] = field(default_factory=set)
    sorted_ok: bool = True
    rank: dict[int, dict[str, int]] | None = None   # per OS pid: steps.rank_measures


def _blocks(ops: pd.DataFrame, lo: int, hi: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per process: the union of its operations (owned and halo), clipped to [lo, hi)."""
    gpid = ops["global_pid"].to_numpy(dtype="int64")
    s, e = ops["start_ns"].to_numpy(dtype="int64"), ops["end_ns"].to_numpy(dtype="int64")
    return {int(g): clipped_union(s[gpid == g], e[gpid == g], lo, hi) for g in np.unique(gpid)}


def process_covered(blocks: dict[int, tuple[np.ndarray, np.ndarray]], gpids: np.ndarray,
                    lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """covered() of each (lo, hi) by its own process's blocks (0 for other processes);
    processes by global pid (the export's masked global id, not the OS pid)."""
    out = np.zeros(len(lo), dtype="int64")
    for g, (bs, be) in blocks.items():
        mine = np.flatnonzero(gpids == g)
        if len(mine):
            out[mine] = covered(bs, be, lo[mine], hi[mine])
    return out


def _kernel_pairs(ctx: ChunkContext, ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs of owned kernels with key, pathid, name and the columns that order them."""
    call = pairs["call"].to_numpy(dtype="int64")
    keep = ((ops["kind"].to_numpy() == "kernel") & ~ops["halo"].to_numpy())[call]
    call, rng = call[keep], pairs["range"].to_numpy(dtype="int64")[keep]
    key = ctx.ranges["key"].to_numpy()[rng]
    return pd.DataFrame({
        "range": rng, "call": call, "key": key,
        "tid": ctx.ranges["global_tid"].to_numpy(dtype="int64")[rng],
        "pathid": ctx.keys["pathid"].to_numpy()[key],
        "name": ops["name"].array.take(call),
        "demangled_name": ops["demangled_name"].array.take(call),
        "duration_ns": ops["duration_ns"].to_numpy()[call],
        "start_ns": ops["start_ns"].to_numpy()[call],
        "api_start_ns": ops["api_start_ns"].to_numpy()[call],
        "device_id": ops["device_id"].to_numpy()[call],
        "table": ops["table"].to_numpy()[call], "rowid": ops["rowid"].to_numpy()[call]})


FIRST_COLUMNS = ["tid", "range", "api_start_ns", "table", "rowid"]


def kernel_rows(kp: pd.DataFrame) -> pd.DataFrame:
    """Per (key, name): count, total/min/max ns, and the first pair's ordering columns
    (pairs come in (thread, range, launch) order: the merge keeps that appearance order)."""
    k = kp.drop_duplicates(["key", "call"])
    g = k.groupby(["key", "name"], sort=False, observed=True)
    out = aggregate(g, count=("duration_ns", "count"), total_ns=("duration_ns", "sum"),
                    min_ns=("duration_ns", "min"), max_ns=("duration_ns", "max"))
    first = g[FIRST_COLUMNS].first()
    return out.join(first).reset_index()


def timeline(ctx: ChunkContext, ops: pd.DataFrame, pairs: pd.DataFrame, lo: int, hi: int,
             blocks: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per range instance with operations here: its part of the timeline (INSTANCE columns);
    and per key, the idle gaps closed by an owned operation that is not the instance's
    first here (the merge adds the gaps across window edges)."""
    call = pairs["call"].to_numpy(dtype="int64")
    rng = pairs["range"].to_numpy(dtype="int64")
    start, end = ops["start_ns"].to_numpy()[call], ops["end_ns"].to_numpy()[call]
    api, halo = ops["api_start_ns"].to_numpy()[call], ops["halo"].to_numpy()[call]
    order = np.lexsort((start, rng))
    rng, start, end, api, halo = rng[order], start[order], end[order], api[order], halo[order]
    if not len(rng):
        return pd.DataFrame(columns=INSTANCE_COLUMNS), pd.DataFrame(columns=GAP_COLUMNS)
    first = np.r_[True, rng[1:] != rng[:-1]]
    run_end = pd.Series(end).groupby(rng).cummax().to_numpy()
    prev_end = np.r_[0, run_end[:-1]]
    gap = np.where(first, 0, np.maximum(start - prev_end, 0))
    heads = np.flatnonzero(first)
    tails = np.r_[heads[1:], len(rng)] - 1
    gpids = ctx.ranges["global_tid"].to_numpy(dtype="int64")[rng] & PID_MASK
    own_s = np.where(halo, np.iinfo(np.int64).max, start)
    own_e = np.where(halo, -1, end)
    inst = pd.DataFrame({
        "range": rng[heads], "first_ns": np.minimum.reduceat(own_s, heads),
        "last_ns": np.maximum.reduceat(own_e, heads), "run_end": run_end[tails],
        "covered": (np.minimum(run_end[tails], hi) - np.maximum(start[heads], lo)
                    - np.add.reduceat(gap, heads)),
        "head_ns": start[heads], "head_api": api[heads], "head_owned": ~halo[heads],
        "left_cov": process_covered(blocks, gpids[heads], np.full(len(heads), lo),
                                    start[heads]),
        "right_cov": process_covered(blocks, gpids[heads], run_end[tails],
                                     np.full(len(heads), hi))})
    at = np.flatnonzero((gap > 0) & ~halo)
    idle = gap[at] - process_covered(blocks, gpids[at], prev_end[at], start[at])
    gaps = pd.DataFrame({"key": ctx.ranges["key"].to_numpy()[rng[at]], "idle": idle,
                         "host_wait": api[at] > prev_end[at]})
    return inst, gap_summary(gaps, ctx.gap_ns)


INSTANCE_COLUMNS = ["range", "first_ns", "last_ns", "run_end", "covered", "head_ns",
                    "head_api", "head_owned", "left_cov", "right_cov"]
GAP_COLUMNS = ["key", "gaps", "gap_ns", "largest_gap_ns", "host_wait_ns"]


def gap_summary(gaps: pd.DataFrame, min_gap_ns: int) -> pd.DataFrame:
    """Per key: gaps whose truly idle part (`idle`) is at least `min_gap_ns`: count, idle
    total, largest, host-wait share (GAP_COLUMNS); sums and maxima, so windows merge."""
    g = gaps[gaps["idle"] >= min_gap_ns]
    if g.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    g = g.assign(host_wait_ns=g["idle"].where(g["host_wait"], 0))
    out = aggregate(g.groupby("key"), gaps=("idle", "size"), gap_ns=("idle", "sum"),
                    largest_gap_ns=("idle", "max"), host_wait_ns=("host_wait_ns", "sum"))
    return out.reset_index()


def range_busy(ctx: ChunkContext, blocks: dict, lo: int, hi: int) -> pd.DataFrame:
    """Per range instance open during [lo, hi): how long its process's GPU ran inside it."""
    r = ctx.ranges
    rs, re = r["start_ns"].to_numpy(dtype="int64"), r["end_ns"].to_numpy(dtype="int64")
    rows = np.flatnonzero((rs < hi) & (re > lo))
    gpids = r["global_tid"].to_numpy(dtype="int64")[rows] & PID_MASK
    busy = process_covered(blocks, gpids, rs[rows], re[rows])
    nz = busy > 0
    return pd.DataFrame({"range": rows[nz], "busy_ns": busy[nz]})


def devices(ops: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """Per device (stream -2) and per (device, stream): owned operations, their first start
    and last end, and the union of all operations here clipped to [lo, hi)."""
    dev, stream = ops["device_id"].to_numpy(dtype="int64"), ops["stream_id"].to_numpy(
        dtype="int64")
    s, e = ops["start_ns"].to_numpy(dtype="int64"), ops["end_ns"].to_numpy(dtype="int64")
    owned = ~ops["halo"].to_numpy()
    rows = []
    for d in np.unique(dev):
        on = dev == d
        for st, mask in [(-2, on)] + [(int(x), on & (stream == x)) for x in np.unique(stream[on])]:
            bs, be = clipped_union(s[mask], e[mask], lo, hi)
            length = int((be - bs).sum())
            mine = mask & owned
            rows.append((int(d), st, int(mine.sum()), length,
                         int(s[mine].min()) if mine.any() else np.iinfo(np.int64).max,
                         int(e[mine].max()) if mine.any() else -1))
    return pd.DataFrame(rows, columns=["device", "stream", "operations", "busy_ns",
                                       "first_ns", "last_ns"])


def names(ops: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name (owned kernels): count, total, min, max ns."""
    kern = ops[(ops["kind"].to_numpy() == "kernel") & ~ops["halo"].to_numpy()]
    agg = aggregate(kern.groupby("name", observed=True), n=("duration_ns", "count"),
                    total_ns=("duration_ns", "sum"), min_ns=("duration_ns", "min"),
                    max_ns=("duration_ns", "max"))
    return agg.reset_index().assign(name=lambda f: f["name"].astype(str))


def sequences(kp: pd.DataFrame, aten: np.ndarray) -> tuple[pd.DataFrame, ...]:
    """Kernels of each (process, range path) (`pathid`), once per launch, in GPU start
    order: per name (count, total ns, any eager ATen demangled name), per duration (how
    many: the median merges from these), the distinct back-to-back name pairs in order of
    first occurrence, and the first and last name (to join pairs across window edges)."""
    seq = kp.drop_duplicates(["pathid", "call"]).sort_values(
        ["pathid", "start_ns", "table", "rowid"], kind="stable")
    seq = seq.assign(aten=aten[seq.index.to_numpy()])
    by_name = aggregate(seq.groupby(["pathid", "name"], sort=False, observed=True),
                        count=("duration_ns", "size"), total_ns=("duration_ns", "sum"),
                        aten=("aten", "any")).reset_index()
    by_name["name"] = by_name["name"].astype(object)
    durations = seq.groupby(["pathid", "duration_ns"]).size().rename("n").reset_index()
    names = np.asarray(seq["name"].cat.categories.astype(str), dtype=object)
    path_id, code = seq["pathid"].to_numpy(), seq["name"].cat.codes.to_numpy()
    same = path_id[1:] == path_id[:-1]
    pairs = pd.DataFrame({"pathid": path_id[1:][same], "a": code[:-1][same],
                          "b": code[1:][same]}).drop_duplicates()
    for c in ("a", "b"):
        pairs[c] = pd.Series(names[pairs[c].to_numpy()], index=pairs.index, dtype=object)
    heads = np.flatnonzero(np.r_[True, ~same]) if len(path_id) else np.zeros(0, dtype=int)
    tails = np.r_[heads[1:], len(path_id)] - 1 if len(path_id) else heads
    ends = pd.DataFrame({"pathid": path_id[heads],
                         "first": pd.Series(names[code[heads]], dtype=object),
                         "last": pd.Series(names[code[tails]], dtype=object)})
    return by_name, durations, pairs, ends


def op_counts(ctx: ChunkContext, kp: pd.DataFrame) -> pd.DataFrame:
    """Per emit_nvtx op range instance: owned kernels inside it, once per op name."""
    kern = kp[["range", "call", "duration_ns"]].merge(ctx.op_ranges[["range", "op"]],
                                                      on="range")
    kern = kern.drop_duplicates(["op", "call"])
    return aggregate(kern.groupby("range"), kernel_count=("call", "size"),
                     kernel_time_ns=("duration_ns", "sum")).reset_index()


def first_ops(ctx: ChunkContext, ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """Owned operations of the watched range instances (the first-iteration strips)."""
    p = pairs[np.isin(pairs["range"].to_numpy(), ctx.watch)]
    call = p["call"].to_numpy(dtype="int64")
    keep = ~ops["halo"].to_numpy()[call]
    call = call[keep]
    return pd.DataFrame({"range": p["range"].to_numpy()[keep],
                         "name": np.asarray(ops["name"].array.take(call), dtype=object)
                         .astype(str),
                         "kind": np.asarray(ops["kind"].array.take(call), dtype=object)
                         .astype(str),
                         "start_ns": ops["start_ns"].to_numpy()[call],
                         "end_ns": ops["end_ns"].to_numpy()[call],
                         "table": ops["table"].to_numpy()[call],
                         "rowid": ops["rowid"].to_numpy()[call]})


@dataclass
class Counted:
    """What the attribution of a window to the range instances gives before any path is
    read: the pairs (range, call), and per instance its kernels (range, kernel_count)
    and host calls (host.instance_calls). Tags (apart.py) change none of them."""

    pairs: pd.DataFrame
    kernels: pd.DataFrame
    host: pd.DataFrame


def instance_counts(ctx: ChunkContext, ops: pd.DataFrame, calls: pd.DataFrame) -> Counted:
    """The window's Counted: what the Partial holds of it, and all that warm-up instances
    are found from (apart.warmup_instances)."""
    ops = ops.reset_index(drop=True)
    pairs = attribute_calls(ops[CALL_COLUMNS], ctx.ranges)
    return Counted(pairs, _kernel_counts(_kernel_pairs(ctx, ops, pairs)),
                   host.instance_calls(ctx.ranges, calls, ops))


def _kernel_counts(kp: pd.DataFrame) -> pd.DataFrame:
    return kp.groupby("range").size().rename("kernel_count").reset_index()


def compute(ctx: ChunkContext, ops: pd.DataFrame, lo: int, hi: int, index: int,
            aten_pattern: str, calls: pd.DataFrame, counted: Counted | None = None
            ) -> Partial:
    """The window's partial aggregates (see the module doc); `calls`: the window's host
    calls (load/nsys_host.py); `counted`: the window's instance_counts where already made
    (for the same ranges, tags aside)."""
    sorted_ok = bool(ops.attrs.get("sorted_ok", True))
    ops = ops.reset_index(drop=True)
    pairs = attribute_calls(ops[CALL_COLUMNS], ctx.ranges) if counted is None \
        else counted.pairs
    blocks = _blocks(ops, lo, hi)
    kp = _kernel_pairs(ctx, ops, pairs)
    inst, gaps = timeline(ctx, ops, pairs, lo, hi, blocks)
    owned = ops[~ops["halo"].to_numpy()]
    kern = (owned["kind"].to_numpy() == "kernel")
    inside = np.zeros(len(ops), dtype=bool)
    inside[kp["call"].to_numpy(dtype="int64")] = True
    dem = ops["demangled_name"]
    aten = np.asarray(dem.cat.categories.str.contains(aten_pattern, regex=True),
                      dtype=bool)[dem.cat.codes.to_numpy()] if len(ops) else np.zeros(0, bool)
    by_name, durations, seq_pairs, ends = sequences(kp.set_index("call", drop=False),
                                                    aten)
    other = other_thread_kernels(ctx.ranges, owned)
    return Partial(
        index=index, kernels=kernel_rows(kp), instances=inst, gaps=gaps,
        busy=range_busy(ctx, blocks, lo, hi),
        process_busy={p: int((be - bs).sum()) for p, (bs, be) in blocks.items()},
        other=other, names=names(ops), devices=devices(ops, lo, hi),
        key_devices=set(map(tuple, kp.loc[kp["device_id"] >= 0, ["key", "device_id"]]
                            .drop_duplicates().to_numpy().tolist())),
        seq_names=by_name, seq_durations=durations, seq_pairs=seq_pairs, seq_ends=ends,
        op_counts=op_counts(ctx, kp), first_ops=first_ops(ctx, ops, pairs),
        host=host.instance_calls(ctx.ranges, calls, ops) if counted is None else counted.host,
        copies=host.instance_copies(ops, pairs), copy_names=host.copy_names(ops),
        instance_kernels=_kernel_counts(kp),
        outside=int((kern & ~inside[~ops["halo"].to_numpy()]).sum()),
        graph_traced=_graph_traced(owned["correlation_id"].to_numpy(), ctx.graph_ids),
        sorted_ok=sorted_ok, rank=_rank(ctx, ops, lo, hi))


def _graph_traced(corr: np.ndarray, graph_ids: np.ndarray) -> set[int]:
    """The graph launches' correlation ids among the window's (none: no set operation
    over a million ids, which took 0.1 s a window)."""
    if not len(graph_ids):
        return set()
    return set(graph_ids[np.isin(graph_ids, corr)].tolist())


def _rank(ctx: ChunkContext, ops: pd.DataFrame, lo: int, hi: int
          ) -> dict[int, dict[str, int]] | None:
    """Per process (OS pid) holding step instances: its window share of the rank measures
    over its own operations (one export may hold every rank's process)."""
    if ctx.steps is None:
        return None
    r = ctx.ranges
    pids = r["pid"].to_numpy(dtype="int64")[ctx.steps]
    op_pid = os_pid(ops["global_pid"].to_numpy(dtype="int64"))
    out = {}
    for pid in np.unique(pids).tolist():
        rows = ctx.steps[pids == pid]
        out[pid] = rank_measures(ops[op_pid == pid], r["start_ns"].to_numpy(dtype="int64")[rows],
                                 r["end_ns"].to_numpy(dtype="int64")[rows], lo, hi)
    return out
