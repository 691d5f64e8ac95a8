"""The attributed trace: ONE attribution pass over an export, read by every analysis.

The GPU operations go through attribution window by window (analysis/trace/partial.py): each
window of the timeline is attributed to the NVTX ranges (which are small and read whole)
and reduced to partial aggregates, and the windows merge exactly (analysis/trace/merge.py).
`attribute(export)` does it for an export already in memory, as one window;
`runners.attribute_file(path, export)` reads the file's operations window by window
(analysis/load/nsys_chunks.py) on worker processes, so memory is bounded by the window
size and every core works. Either way the Trace is the same, and every analysis
(range summaries, kernel tables, gaps, busy time, sequences for the rules, op table,
first-iteration strips, the whole-trace kernel summary) reads it; none recomputes.

The frames are listed with the type (trace/types.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ..common.frames import row_codes
from ..common.names import COMPILE_TAG, WARMUP_TAG
from ..common.settings import GAP_NS
from ..load.nsys_chunks import NEG, POS
from ..load.nsys_host import load_host, range_spans
from ..load.nsys_sqlite import CALL_COLUMNS, NsysExport, os_pid
from . import merge
from .apart import compiled_rows, set_apart, with_warmup_apart
from .ops import op_ranges
from .partial import ChunkContext, Partial, compute
from .ranges import attribute as attribute_calls
from .ranges import range_paths
from .steps import step_rows
from .types import Trace

T = TypeVar("T")
ATEN_EAGER = r"at::native::"
"""Demangled names of PyTorch's eager ATen kernels."""


def keyed(ranges: pd.DataFrame, events: list[dict] | None = None,
          session_start: int | None = None, apart: Iterable[int] = ()
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ranges with `path`, `pid` (the OS process id) and an int `key` per (process, domain,
    path): ranges of different processes are never merged. The keys frame: pid, domain,
    path, first_ns, pathid. With TORCH_LOGS `events`, the instance of a repeated range
    that compiled (and the ranges inside it) get COMPILE_TAG in their path; the rows in
    `apart` (warmup_instances) get WARMUP_TAG."""
    paths = _of(ranges, "paths", lambda: range_paths(ranges.reset_index(drop=True)))
    out = ranges.reset_index(drop=True).assign(path=paths)
    out["pid"] = os_pid(out["global_tid"].to_numpy(dtype="int64"))
    if events:
        out["path"] = set_apart(out, compiled_rows(out, events, session_start),
                                COMPILE_TAG)
    if apart:
        out["path"] = set_apart(out, set(apart), WARMUP_TAG)
    # strings numbered in Python (pandas' string handling differs between versions and
    # storages: one H200 install merged every key into one), then (pid, domain, path)
    # and (pid, path) numbered in order of first appearance on those integers
    path = _path_codes(ranges, paths, out["path"])
    dom = _of(ranges, "domains", lambda: _first_seen(
        [d if isinstance(d, str) else "" for d in out["domain"].tolist()]))
    pid = out["pid"].to_numpy(dtype="int64")
    out["key"] = row_codes(np.stack([pid, dom, path], axis=1))
    first = np.unique(out["key"].to_numpy(), return_index=True)[1]
    keys = out.iloc[first].set_index("key")[["pid", "domain", "path"]]
    keys["first_ns"] = out.groupby("key")["start_ns"].min()
    keys["pathid"] = row_codes(np.stack([pid[first], path[first]], axis=1))
    return out, keys


_SAME: dict[str, Any] = {"of": None}
"""What was computed from the last export's ranges: a trace with warm-up instances is
attributed twice (apart.with_warmup_apart), and the range paths before the tags, and the op
ranges, are the same both times. One slot, holding the frame itself (no id reuse)."""


def _of(ranges: pd.DataFrame, name: str, compute: Callable[[], T]) -> T:
    """`compute()` once per ranges frame (the last one seen) and name."""
    if _SAME["of"] is not ranges:
        _SAME.clear()
        _SAME["of"] = ranges
    if name not in _SAME:
        _SAME[name] = compute()
    return _SAME[name]


def forget_ranges() -> None:
    """Let go of the last export's ranges and what was computed from them (_of)."""
    _SAME.clear()
    _SAME["of"] = None


def _first_seen(values: list) -> np.ndarray:
    """Each value's number, in order of first appearance."""
    codes: dict = {}
    return np.array([codes.setdefault(v, len(codes)) for v in values], dtype="int64")


def _path_codes(ranges: pd.DataFrame, plain: pd.Series, tagged: pd.Series) -> np.ndarray:
    """_first_seen of the `tagged` paths, from that of the `plain` ones (kept per ranges
    frame: _of): only the rows a tag changed are numbered again, in Python."""
    codes = _of(ranges, "path_codes", lambda: _first_seen(plain.tolist()))
    if tagged is plain:
        return codes
    new, old = tagged.to_numpy(dtype=object), plain.to_numpy(dtype=object)
    changed = np.flatnonzero(new != old)
    if not len(changed):
        return codes
    known = _of(ranges, "path_index",
                lambda: dict(zip(plain.tolist(), codes.tolist(), strict=True)))
    fresh: dict[str, int] = {}
    ids = codes.copy()
    for row, p in zip(changed.tolist(), new[changed].tolist(), strict=True):
        code = known.get(p)
        ids[row] = fresh.setdefault(p, len(known) + len(fresh)) if code is None else code
    unique, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(unique), dtype="int64")
    rank[np.argsort(first)] = np.arange(len(unique))
    return rank[inverse.ravel()]


def context(export: NsysExport, watch_paths: tuple[str, ...] = (), ranks: bool = False,
            step: str | None = None, events: list[dict] | None = None,
            apart: Iterable[int] = ()) -> ChunkContext:
    """What every window needs: keyed ranges, op ranges, watched instances (the first
    instance of each path in `watch_paths`), graph launch ids, and with `ranks` the step
    range's instances (steps.step_rows: `step`, or the one found); TORCH_LOGS `events` set
    the instances that compiled apart, `apart` the warm-up instances (keyed)."""
    ranges, keys = keyed(export.ranges, events, export.session_start_utc_ns, apart)
    watched = ranges[ranges["path"].isin(list(watch_paths))] if watch_paths else ranges[:0]
    first = watched.sort_values("start_ns", kind="stable").drop_duplicates("path")
    watch = first.index.to_numpy(dtype="int64")
    graph = export.graph_launches
    ids = graph["correlation_id"].dropna().to_numpy(dtype="int64") if len(graph) else \
        np.zeros(0, dtype="int64")
    ops = _of(export.ranges, "op_ranges",                 # tags change no op
              lambda: op_ranges(ranges, export.op_names))
    return ChunkContext(ranges=ranges, keys=keys, op_ranges=ops, watch=watch,
                        gap_ns=GAP_NS, graph_ids=ids, spans=range_spans(ranges),
                        steps=step_rows(ranges, step) if ranks else None)


def combine(export: NsysExport, ctx: ChunkContext, parts: list[Partial]) -> Trace:
    """Merge the windows' partial aggregates into the Trace."""
    graph_calls = export.graph_launches.reindex(columns=CALL_COLUMNS)
    instances, gaps = merge.instances(parts, ctx.ranges, ctx.gap_ns)
    key_devices: dict[int, list[int]] = {}
    for k, d in sorted(set().union(*(p.key_devices for p in parts))):
        key_devices.setdefault(int(k), []).append(int(d))
    return Trace(
        export=export, ranges=ctx.ranges, keys=ctx.keys,
        graph_pairs=attribute_calls(graph_calls, ctx.ranges),
        kernels=merge.kernels(parts), instances=instances, gaps=gaps,
        busy=merge.busy(parts, ctx.ranges),
        other=merge.summed(parts, "other", ["range", "global_tid", "name"],
                           {"kernel_count": "sum", "kernel_time_ns": "sum", "min_ns": "min",
                            "max_ns": "max", "last_ns": "max"}),
        kernel_names=merge.summed(parts, "names", ["name"], {
            "n": "sum", "total_ns": "sum", "min_ns": "min", "max_ns": "max"}),
        devices=merge.summed(parts, "devices", ["device", "stream"], {
            "operations": "sum", "busy_ns": "sum", "first_ns": "min", "last_ns": "max"}),
        key_devices=key_devices,
        seq_names=merge.with_paths(merge.summed(parts, "seq_names", ["pathid", "name"], {
            "count": "sum", "total_ns": "sum", "aten": "any"}), ctx.keys),
        seq_durations=merge.with_paths(merge.summed(
            parts, "seq_durations", ["pathid", "duration_ns"], {"n": "sum"}), ctx.keys),
        seq_pairs=merge.with_paths(merge.pair_order(parts), ctx.keys),
        op_ranges=ctx.op_ranges,
        op_counts=merge.summed(parts, "op_counts", ["range"], {
            "kernel_count": "sum", "kernel_time_ns": "sum"}),
        first_ops=merge.first_ops(parts), outside=sum(p.outside for p in parts),
        instance_kernels=merge.summed(parts, "instance_kernels", ["range"],
                                      {"kernel_count": "sum"}),
        host=merge.summed(parts, "host", ["range"], dict.fromkeys(
            parts[0].host.columns.drop("range"), "sum")),
        copies=merge.summed(parts, "copies", ["range", "name", "memory"], {
            "count": "sum", "bytes": "sum", "total_ns": "sum"}),
        copy_names=merge.summed(parts, "copy_names", ["name", "memory"], {
            "count": "sum", "bytes": "sum", "total_ns": "sum", "min_ns": "min",
            "max_ns": "max"}),
        graph_traced=set().union(*(p.graph_traced for p in parts)),
        steps=ctx.steps if ctx.steps is not None else np.zeros(0, dtype="int64"),
        rank=merge.rank(parts))


def attribute(export: NsysExport, watch_paths: tuple[str, ...] = (),
              events: list[dict] | None = None) -> Trace:
    """The attribution pass over an export whose operations are in memory (a second one
    when warm-up instances are found: with_warmup_apart)."""
    ops, calls = _normalized(export.ops), load_host(export.db, export.ranges)

    def run(apart: dict[int, str]) -> Trace:
        ctx = context(export, watch_paths, events=events, apart=apart)
        return combine(export, ctx, [compute(ctx, ops, NEG, POS, 0, ATEN_EAGER, calls)])
    return with_warmup_apart(run)


def _normalized(ops: pd.DataFrame) -> pd.DataFrame:
    """An in-memory ops frame as the window reader gives it: names categorical, device and
    stream -1 and bytes 0 where unknown, every op owned, ordered by its row."""
    out = ops.reset_index(drop=True).assign(halo=False)
    for c in ("kind", "name", "demangled_name"):
        if not isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].astype("category")
    for c, missing in (("device_id", -1), ("stream_id", -1), ("bytes", 0)):
        if c not in out:
            out[c] = missing
    out["table"] = 0
    out["rowid"] = np.arange(len(out), dtype="int64")
    return out
