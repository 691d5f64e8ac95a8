"""Build the `systems/1` report (DESIGN.md) from an Nsight Systems export.

Pure: takes the loaded export, optional meta.json dict and TORCH_LOGS events, returns a
JSON-ready dict. Beyond DESIGN's keys it adds `variants` (per-variant numbers per
iteration, when meta.json names the variants' ranges), `run` (what meta.json says of
the run) and `notes` (what the trace cannot show, e.g. untraced CUDA graph kernels).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis import findings as rules
from analysis import gaps
from analysis import ranges as rng
from analysis.load.nsys_sqlite import NsysExport

SCHEMA = "systems/1"


def _kernels(kernels: pd.DataFrame, key: str) -> list[dict[str, Any]]:
    rows = kernels[kernels["key"] == key]
    return [{"name": r.name, "count": int(r.count), "total_ns": int(r.total_ns),
             "avg_ns": round(float(r.avg_ns), 1), "min_ns": int(r.min_ns),
             "max_ns": int(r.max_ns)} for r in rows.itertuples(index=False)]


def range_entries(summary: pd.DataFrame, kernels: pd.DataFrame) -> list[dict[str, Any]]:
    """One `ranges` entry per range key, in timeline order."""
    return [{"name": r.path, "domain": r.domain if isinstance(r.domain, str) else None,
             "instances": int(r.instances), "kernel_count": int(r.kernel_count),
             "kernel_time_ns": int(r.kernel_time_ns), "gpu_span_ns": int(r.gpu_span_ns),
             "gpu_idle_ns": int(r.gpu_idle_ns), "kernels": _kernels(kernels, r.key)}
            for r in summary.itertuples(index=False)]


def graph_notes(export: NsysExport, keyed: pd.DataFrame) -> list[str]:
    """Ranges (`keyed`: ranges with their paths) that replayed CUDA graphs whose kernels
    the trace does not hold."""
    launches = export.graph_launches
    if launches.empty:
        return []
    traced = set(export.ops["correlation_id"].dropna().astype("int64"))
    untraced = launches[~launches["correlation_id"].isin(traced)]
    if untraced.empty:
        return []
    pairs = rng.attribute(untraced, keyed).join(keyed["path"], on="range")
    per_path = pairs.groupby("path").size()
    where = ", ".join(f"{p} ({n})" for p, n in per_path.items()) or "outside every range"
    return [f"{len(untraced)} CUDA graph launch(es) without traced kernels, in: {where}. "
            "Their kernels are not counted; capture with `nsys profile "
            "--cuda-graph-trace=node` to see them."]


def variant_rows(entries: list[dict[str, Any]], meta: dict[str, Any] | None,
                 peak_bw: float | None) -> list[dict[str, Any]]:
    """Per variant of meta.json: time, kernels and idle per iteration, achieved bandwidth."""
    if not meta or not meta.get("ranges"):
        return []
    by_name = {e["name"]: e for e in entries}
    iters = int(meta.get("iterations") or 1)
    cost = meta.get("cost_model") or {}
    copy_bw = (meta.get("ceilings") or {}).get("copy_bytes_per_s")
    rows = []
    for variant, path in meta["ranges"].items():
        e = by_name.get(path)
        if e is None:
            rows.append({"variant": variant, "range": path, "missing": True})
            continue
        n = iters * e["instances"]
        t = e["gpu_span_ns"] / n
        row = {"variant": variant, "range": path, "iterations": n, "time_per_iter_ns": t,
               "kernels_per_iter": e["kernel_count"] / n,
               "gpu_idle_pct": 100.0 * e["gpu_idle_ns"] / e["gpu_span_ns"]
               if e["gpu_span_ns"] else 0.0}
        if cost.get("min_bytes") and t > 0:
            row["achieved_Bps"] = cost["min_bytes"] / (t * 1e-9)
            row["pct_of_peak_bw"] = 100.0 * row["achieved_Bps"] / peak_bw if peak_bw else None
            row["pct_of_copy_bw"] = 100.0 * row["achieved_Bps"] / copy_bw if copy_bw else None
        if cost.get("flops") and t > 0:
            row["achieved_flops"] = cost["flops"] / (t * 1e-9)
        rows.append(row)
    base = next((r for r in rows if r["variant"] == "naive" and not r.get("missing")), None)
    for r in rows:
        if base and not r.get("missing"):
            r["speedup_vs_naive"] = base["time_per_iter_ns"] / r["time_per_iter_ns"]
    return rows


def _add_first_iterations(variants: list[dict[str, Any]], export: NsysExport,
                          keyed: pd.DataFrame, pairs: pd.DataFrame) -> None:
    """Give each variant row the ops of its first iteration (for the timeline strip)."""
    for row in variants:
        if row.get("missing"):
            continue
        first = keyed[keyed["path"] == row["range"]].sort_values("start_ns").index[0]
        row["first_iteration"] = gaps.first_iteration(
            export.ops, pairs, first, round(row["kernels_per_iter"]))


def build(export: NsysExport, meta: dict[str, Any] | None = None,
          torch_events: pd.DataFrame | None = None) -> dict[str, Any]:
    """The systems/1 document for one export, with its findings."""
    events = None if torch_events is None else torch_events.astype(object).where(
        torch_events.notna(), None).to_dict("records")
    keyed = rng.keyed_ranges(export.ranges)
    pairs = rng.attribute(export.ops, keyed)
    instances, gap_list = gaps.timeline(export.ops, pairs)
    summary, kernels = rng.summarize(export.ranges, export.ops, export.graph_launches,
                                     keyed, pairs, instances)
    entries = range_entries(summary, kernels)
    peak = next((g["memory_bandwidth_Bps"] for g in export.gpus
                 if g.get("memory_bandwidth_Bps")), None)
    variants = variant_rows(entries, meta, peak)
    _add_first_iterations(variants, export, keyed, pairs)
    outside = _outside_kernels(export, pairs)
    notes = list(export.notes) + graph_notes(export, keyed)
    if outside:
        notes.append(f"{outside} kernel launch(es) lie outside every NVTX range "
                     "(warm-up, compilation or unannotated code); they are in no range.")
    return {
        "schema": SCHEMA,
        "source": {"path": str(export.path), "export_schema_version":
                   export.export_schema_version, "nsys_version": export.product_version,
                   "gpus": export.gpus},
        "ranges": entries,
        "variants": variants,
        "run": _run_info(meta, events),
        "notes": notes,
        "findings": _findings(export, keyed, pairs, entries, meta, events or [], gap_list),
    }


def _findings(export: NsysExport, keyed: pd.DataFrame, pairs: pd.DataFrame,
              entries: list[dict[str, Any]], meta: dict[str, Any] | None,
              events: list[dict[str, Any]], gap_list: pd.DataFrame) -> list[dict[str, Any]]:
    """Run the systems rules with the per-range details they need."""
    if keyed.empty:
        return []
    facts = rng.kernel_facts(export.ops, pairs, keyed, rules.is_gemm, rules.is_pointwise)
    per_key = gaps.summarize_gaps(gap_list, keyed, rules.GAP_NS)
    paths = keyed.drop_duplicates("key").set_index("key")["path"]
    gap_rows = {paths[r["key"]]: r for r in per_key.to_dict("records")}
    return rules.systems_findings({"ranges": entries}, meta, events, facts, gap_rows)


def _outside_kernels(export: NsysExport, pairs: pd.DataFrame) -> int:
    """Kernel launches that no range holds."""
    is_kernel = (export.ops["kind"] == "kernel").to_numpy()
    inside = np.zeros(len(export.ops), dtype=bool)
    inside[pairs["call"].to_numpy(dtype="int64")] = True
    return int((is_kernel & ~inside).sum())


def _run_info(meta: dict[str, Any] | None,
              events: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    if meta is None and events is None:
        return None
    info: dict[str, Any] = {}
    if meta:
        for k in ("workload", "description", "size", "shapes", "dtype", "iterations",
                  "cost_model", "ceilings", "versions", "compiled", "correctness"):
            info[k] = meta.get(k)
    if events is not None:
        info["torch_log_events"] = events
    return info
