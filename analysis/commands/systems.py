"""Build the `systems/2` document (documents.SystemsDoc) from an Nsight Systems export.

Pure: takes the loaded export, optional meta.json and TORCH_LOGS events, attributes the
trace once (model.attribute) and derives every part of the document from that one Trace:
first what was measured (`measure`), then the findings on it (`judge`); `build` does both.
Beyond DESIGN's keys it adds `variants` (per-variant numbers per iteration, when meta.json
names the variants' ranges), `run` (what meta.json says of the run) and `notes` (what the
trace cannot show, e.g. untraced CUDA graph kernels).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..common.names import apart_prefix, is_op_path, steady_path, user_path
from ..common.paths import relative_compiled, relative_events
from ..diagnosis import guards, rules
from ..diagnosis.levers import add_levers
from ..diagnosis.pricing import Pricer
from ..diagnosis.ranks import compare, detected_measures, detected_ranks, export_ranks, rank_row
from ..documents.range_build import add_by_row, range_table
from ..documents.range_table import RangeEntries, RangeTable
from ..documents.types import (
    Gpu,
    GpuOp,
    Meta,
    OpRow,
    RangeEntry,
    SystemsDoc,
    SystemsSource,
    VariantRow,
    entry_column,
    entry_pick,
    from_dict,
    to_dict,
)
from ..load.nsys_pysamples import load_py_samples
from ..load.nsys_samples import load_samples
from ..load.nsys_sequence import DETECT_ROWS, SEQUENCE_ROWS, from_ops, kernel_sequence
from ..load.nsys_sqlite import NsysExport
from ..loops.detected import with_detected_steps
from ..loops.find import find_steps
from ..loops.gil import thread_starts
from ..loops.model import StepModels, loop_rows, model_columns, model_loops
from ..loops.runs import run_columns
from ..loops.totals import capture_totals
from ..trace import build as model
from ..trace import busy, compile_events, host, library, pylines, summary
from ..trace import ranges as rng
from ..trace.ops import op_table

RUN_FIELDS = ("workload", "description", "size", "shapes", "dtype", "iterations",
              "cost_model", "ceilings", "versions", "compiled", "correctness", "started",
              "code_version")


def as_meta(meta: Meta | dict[str, Any] | None) -> Meta | None:
    """meta.json as its type (a dict read from the file is converted once, here)."""
    return from_dict(Meta, meta) if isinstance(meta, dict) else meta


def graph_notes(trace: model.Trace) -> list[str]:
    """Ranges that replayed CUDA graphs whose kernels the trace does not hold."""
    launches = trace.export.graph_launches
    if launches.empty:
        return []
    traced = trace.graph_traced
    untraced = ~launches["correlation_id"].isin(traced).to_numpy()
    if not untraced.any():
        return []
    gp = trace.graph_pairs
    gp = gp[untraced[gp["call"].to_numpy(dtype="int64")]]
    keys = trace.ranges["key"].to_numpy()[gp["range"].to_numpy(dtype="int64")]
    per_path = pd.Series(trace.keys["path"].to_numpy()[keys]).value_counts(sort=False)
    per_path = per_path.sort_index()
    where = ", ".join(f"{p} ({n})" for p, n in per_path.items()) or "outside every range"
    return [f"{int(untraced.sum())} CUDA graph launch(es) without traced kernels, in: "
            f"{where}. Their kernels are not counted; capture with `nsys profile "
            "--cuda-graph-trace=node` to see them."]


def _variant(variant: str, e: RangeEntry, meta: Meta, peak_bw: float | None) -> VariantRow:
    n = meta.iterations_of(e.instances)
    t = e.gpu_span_ns / n
    row = VariantRow(variant=variant, range=e.name, iterations=n, time_per_iter_ns=t,
                     kernels_per_iter=e.kernel_count / n,
                     other_thread_kernels_per_iter=e.other_threads_kernel_count / n,
                     gpu_idle_pct=100.0 * (e.wall_ns - e.busy_ns) / e.wall_ns
                     if e.wall_ns else 0.0)
    cost, copy_bw = meta.cost_model, meta.ceilings.get("copy_bytes_per_s")
    if cost and cost.min_bytes and t > 0:
        row.achieved_Bps = cost.min_bytes / (t * 1e-9)
        row.pct_of_peak_bw = 100.0 * row.achieved_Bps / peak_bw if peak_bw else None
        row.pct_of_copy_bw = 100.0 * row.achieved_Bps / copy_bw if copy_bw else None
    if cost and cost.flops and t > 0:
        row.achieved_flops = cost.flops / (t * 1e-9)
    return row


def variant_rows(entries: Sequence[RangeEntry], meta: Meta | None,
                 peak_bw: float | None) -> list[VariantRow]:
    """Per variant of meta.json: time, kernels and idle per iteration, achieved bandwidth
    (from the entries not set apart as warm-up)."""
    if not meta or not meta.ranges:
        return []
    wanted = set(meta.ranges.values())
    names, warm = entry_column(entries, "name"), entry_column(entries, "warmup")
    at = {name: i for i, (name, w) in enumerate(zip(names, warm, strict=True))
          if name in wanted and not w}
    by_name = dict(zip(at, entry_pick(entries, at.values()), strict=True))
    rows = [_variant(v, by_name[p], meta, peak_bw) if p in by_name else
            VariantRow(variant=v, range=p, missing=True) for v, p in meta.ranges.items()]
    base = next((r for r in rows if meta.role(r.variant) == "baseline" and not r.missing),
                None)
    for r in rows:
        if base and not r.missing:
            r.speedup_vs_baseline = base.time_per_iter_ns / r.time_per_iter_ns
    return rows


def add_first_iterations(variants: list[VariantRow], trace: model.Trace) -> None:
    """Give each variant row the ops of its first iteration (for the timeline strip): the
    first `kernels per iteration` kernels of the range's first instance, with the copies
    and sets that start among them, times relative to the first operation."""
    if all(row.missing for row in variants):
        return
    ranges = trace.ranges
    first = ranges.sort_values("start_ns", kind="stable").drop_duplicates("path")
    first_of = dict(zip(first["path"], first.index, strict=True))
    ops = trace.first_ops
    for row in variants:
        if row.missing:
            continue
        sub = ops[ops["range"].to_numpy() == int(first_of[row.range])]
        is_kernel = (sub["kind"] == "kernel").to_numpy()
        upto = int(np.searchsorted(np.cumsum(is_kernel), max(round(row.kernels_per_iter), 1)))
        sub = sub.iloc[:upto + 1]
        if len(sub):
            t0 = int(sub["start_ns"].iloc[0])
            row.first_iteration = [GpuOp(name=str(n), kind=str(k), start_ns=int(s) - t0,
                                         end_ns=int(e) - t0)
                                   for n, k, s, e in zip(sub["name"], sub["kind"],
                                                         sub["start_ns"], sub["end_ns"],
                                                         strict=True)]


def watch_paths(meta: Meta | dict[str, Any] | None) -> tuple[str, ...]:
    """The range paths whose first instance's operations the attribution keeps: the
    variants' ranges of meta.json (their first-iteration strips)."""
    meta = as_meta(meta)
    return tuple(meta.ranges.values()) if meta and meta.ranges else ()


def event_list(torch_events: pd.DataFrame | list[dict] | None) -> list[dict[str, Any]] | None:
    """TORCH_LOGS events as a list of dicts (the loader's frame converted; a list as is)."""
    if torch_events is None or isinstance(torch_events, list):
        return torch_events
    return torch_events.astype(object).where(torch_events.notna(), None).to_dict("records")


TablesMade = Callable[[RangeTable, list[OpRow]], None]
"""Told the range table and the op table once measure() has made them final."""


@dataclass
class Measured:
    """A systems document whose tables are final, before the rules: what `judge` needs
    beside it (meta.json, the placed TORCH_LOGS events, the attributed trace)."""

    doc: SystemsDoc
    meta: Meta | None
    events: list[dict[str, Any]] | None
    trace: model.Trace
    steps: StepModels | None = None      # the step models the findings are priced on
    detected: dict = dataclasses.field(default_factory=dict)   # ranks.detected_measures


def measure(export: NsysExport, meta: Meta | dict[str, Any] | None = None,
            torch_events: pd.DataFrame | list[dict] | None = None,
            trace: model.Trace | None = None, step: str | None = None,
            tables_made: TablesMade | None = None) -> Measured:
    """The document's measured part: ranges, variants, notes, kernel summary, op table
    and GPU busy time, the steps and the capture's totals, no findings (`trace`: the
    export's attributed trace, when the caller already made it; `step`: the range that
    is the step, else found: loops/find.py). The document's range list is a RangeEntries
    over the range table: entries are made where they are read, the files written from
    the table. `tables_made(table, ops)` is called as soon as the range table and the
    op table are final, so that a caller writes them while the rest is measured."""
    meta, events = as_meta(meta), event_list(torch_events)
    cwd = (meta.cwd if meta else None) or export.working_dir
    events = relative_events(events, cwd)
    if meta is not None and meta.compiled:
        meta = dataclasses.replace(meta, compiled=relative_compiled(meta.compiled, cwd))
    if trace is None:
        export = with_detected_steps(export)
        trace = model.attribute(export, watch_paths(meta), events)
    if events:
        events = compile_events.place(trace, events)
    extra, threads, thread_kernels = busy.per_key(trace)
    py, cpu = load_py_samples(export.db), load_samples(export.db)
    per_range = rng.summarize(trace)
    table = range_table(per_range, trace.kernels,
                        [extra, host.per_key(trace)],
                        (threads, thread_kernels), trace.key_devices, host.copy_table(trace),
                        host.hot_frames(trace, cpu),
                        (events or [], trace.warmup), pylines.py_lines(trace, py, cwd))
    steps = StepModels(trace, export.db, cpu, py)
    cols = {c: table.column(c) for c in ("name", "wall_instances", "warmup", "domain",
                                         "wall_ns")}
    models = model_loops(steps, per_range["key"].to_numpy(), cols, is_op_path)
    starts = thread_starts(py, cpu, set().union(*(m.thread_ids() for m in models)), cwd)
    add_by_row(table, model_columns(models, trace.export.thread_names, starts), "run_model")
    add_by_row(table, run_columns(trace, per_range["key"].to_numpy(),
                                  loop_rows(cols, is_op_path), steps.run_context, py,
                                  cwd), "runs")
    add_by_row(table, library_columns(trace, per_range["key"].to_numpy()), "library")
    ops = op_table(trace)
    if tables_made is not None:
        tables_made(table, ops)
    source = SystemsSource(path=str(export.path),
                           export_schema_version=export.export_schema_version,
                           nsys_version=export.product_version,
                           gpus=[Gpu(**g) for g in export.gpus])
    entries = RangeEntries(table)
    peak = next((g["memory_bandwidth_Bps"] for g in export.gpus
                 if g.get("memory_bandwidth_Bps")), None)
    variants = variant_rows(entries, meta, peak)
    add_first_iterations(variants, trace)
    notes = list(export.notes) + (meta.notes if meta else []) + graph_notes(trace) + \
        pylines.notes(py)
    outside = trace.outside
    if outside:
        notes.append(f"{outside} kernel launch(es) lie outside every NVTX range "
                     "(warm-up, compilation or unannotated code); they are in no range.")
    doc = SystemsDoc(
        source=source, ranges=entries, variants=variants, run=_run_info(meta, events), notes=notes,
        ops=ops, kernel_summary=summary.kernel_summary(trace.kernel_names),
        gpu_busy=summary.gpu_busy(trace.devices),
        copies=host.copy_summary(trace.copy_names))
    return Measured(doc, meta, events, trace, steps, add_steps(doc, export, trace, step))


def library_columns(trace: model.Trace, keys: np.ndarray) -> pd.DataFrame:
    """`parent` of the library ranges (library.parents), by range table row."""
    held = library.parents(trace.ranges, user_path)
    rows = [i for i, k in enumerate(keys.tolist()) if k in held]
    return pd.DataFrame({"parent": pd.Series([held[int(keys[i])] for i in rows],
                                             index=rows, dtype=object)})


def add_steps(doc: SystemsDoc, export: NsysExport, trace: model.Trace,
              step: str | None) -> dict:
    """The document's `steps` (loops/find.py) and `capture` totals; returns the detected
    steps' rank measures (ranks.detected_measures). The kernel sequence is read only
    where needed: its first DETECT_ROWS kernels to detect steps, all of them where NCCL
    ran (exposed communication)."""
    def sequence(limit: int) -> pd.DataFrame:
        return kernel_sequence(export.db, limit) if export.db.is_file() else \
            from_ops(export.ops)
    first = functools.cache(lambda: sequence(DETECT_ROWS))
    doc.steps, windows = find_steps(trace.ranges, is_op_path, first, step)
    doc.capture = capture_totals(doc, functools.cache(lambda: sequence(SEQUENCE_ROWS)))
    return detected_measures(first(), windows) if windows else {}


def judge(measured: Measured) -> SystemsDoc:
    """The measured document with its findings and each variant's biggest lever."""
    doc, meta = measured.doc, measured.meta
    if len(measured.trace.ranges):
        doc.findings = run_rules(doc, meta, measured.events or [], measured.trace,
                                 measured.steps)
        ranked = [rank_row(measured.trace, r, pid)
                  for pid, r in export_ranks(measured.trace)] or detected_rows(measured)
        if ranked:                    # every rank's process in this one export
            cross = compare(ranked)
            doc.ranks = cross.ranks
            doc.findings = sorted(doc.findings + cross.findings, key=rules.sort_key)
    add_levers(doc, meta)
    return doc


def build(export: NsysExport, meta: Meta | dict[str, Any] | None = None,
          torch_events: pd.DataFrame | list[dict] | None = None,
          trace: model.Trace | None = None) -> SystemsDoc:
    """The systems/2 document for one export, with its findings: `judge(measure(...))`."""
    return judge(measure(export, meta, torch_events, trace))


def detected_rows(measured: Measured) -> list:
    """Ranks of the processes of one export whose steps were detected (loops/find.py),
    when there are several: measured over their detected steps' windows."""
    if len(measured.detected) < 2:
        return []
    devices = {s.pid: s.device for s in measured.doc.steps if s.source == "detected"}
    return detected_ranks(measured.detected, devices, str(measured.trace.export.path))


def _priced_by(pricer: Pricer | None, pid: int | None) -> dict:
    """The Context's price, syncs, why_not, kernels, growth, slow_steps, blocked,
    backtraced, sampled_in, chains, sync_sites and readback_share for process `pid` (none
    without a model)."""
    if pricer is None:
        return {}
    return {name: functools.partial(getattr(pricer, name), pid=pid)
            for name in ("price", "syncs", "why_not", "kernels", "growth", "slow_steps",
                         "blocked", "backtraced", "sampled_in", "chains", "sync_sites",
                         "readback_share")}


def run_rules(doc: SystemsDoc, meta: Meta | None, events: list[dict[str, Any]],
              trace: model.Trace, steps: StepModels | None = None) -> list:
    """The systems rules, once per process (ranges of different processes never meet in
    a rule); with several processes each finding says which one. Findings are priced on
    the step models (`steps`), where they hold their ranges."""
    pricer = None
    if steps is not None and steps.readable:
        modeled = entry_column(doc.ranges, "modeled_instances")
        pricer = Pricer(steps, {n for n, k in zip(entry_column(doc.ranges, "name"), modeled,
                                                  strict=True) if k})
    pids = sorted({p for p in entry_column(doc.ranges, "pid") if p is not None})
    if len(pids) <= 1:
        return once(rules.run("systems", rules.Context(
            meta=meta, events=events, systems=doc, trace=trace, **_priced_by(pricer, None))))
    found = []
    for pid in pids:
        ctx = rules.Context(meta=meta, events=events, systems=doc, trace=trace, pid=pid,
                            **_priced_by(pricer, pid))
        for f in rules.run("systems", ctx):
            f.message = f"[pid {pid}] {f.message}"
            f.evidence = {**f.evidence, "pid": pid}
            found.append(f)
    return once(sorted(found, key=rules.sort_key))


def once(found: list) -> list:
    """A cause found on a range and on its warm-up copy (`step [warm-up]`, set apart) is
    one finding: the steady range's."""
    steady = {(f.rule, f.range) for f in found}
    return [f for f in found if not (f.range and apart_prefix(f.range)
                                     and f.rule != "first_calls"
                                     and (f.rule, steady_path(f.range)) in steady)]


def _run_info(meta: Meta | None, events: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    if meta is None and events is None:
        return None
    info: dict[str, Any] = {}
    if meta:
        info.update({k: to_dict(getattr(meta, k)) for k in RUN_FIELDS})
    if events is not None:
        info["torch_log_events"] = [
            {**{k: v for k, v in ev.items() if k != "range_row"},
             "said": guards.explain(ev["reason"])[0] if ev["kind"] == "recompile"
             else ev["reason"]} for ev in events]
    return info



