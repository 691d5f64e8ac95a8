"""Each variant's biggest lever and what it should gain (the seeds' financial model): the
cost model's floor over true ceilings, then fusing down to the ideal kernel count, else
the variant's largest finding, else the distance to the floor."""

from __future__ import annotations

from ..documents.types import Gpu, Meta, SystemsDoc
from .roofline import datasheet


def floor_ns(meta: Meta, gpus: list[Gpu]) -> float | None:
    """The cost model's floor per call over true ceilings: the larger of minimal bytes /
    peak bandwidth (the trace's, else the datasheet's) and FLOPs / the dtype's peak."""
    cost = meta.cost_model
    name = gpus[0].name if gpus else None
    peak_flops, sheet_bw = datasheet(name, meta.dtype)
    bw = next((g.memory_bandwidth_Bps for g in gpus if g.memory_bandwidth_Bps), None) or sheet_bw
    if not cost or not bw:
        return None
    t = cost.min_bytes / bw
    if peak_flops:
        t = max(t, cost.flops / peak_flops)
    return t * 1e9


def add_levers(doc: SystemsDoc, meta: Meta | None) -> None:
    """Per variant, the biggest lever and what it should gain (the seeds' financial model):
    fusing down to the ideal kernel count (measured - floor), else its largest finding,
    else the distance to the floor."""
    if not meta:
        return
    floor = floor_ns(meta, doc.source.gpus)
    ideal = meta.ideal_kernels
    for row in doc.variants:
        if row.missing:
            continue
        row.floor_ns = floor
        gap = row.time_per_iter_ns - floor if floor else None
        found = [f for f in doc.findings if f.range == row.range and f.saving_per_instance_ns > 0]
        breaks = [f for f in doc.findings if f.range == row.range and f.evidence.get("file")]
        if breaks:
            row.lever = "; ".join(f"remove the {f.rule.replace('_', ' ')} at "
                                  f"{f.evidence['file']}:{f.evidence['line']}" for f in breaks)
        elif ideal and row.kernels_per_iter and row.kernels_per_iter > ideal + 1e-9 and gap:
            row.lever = (f"fuse its {row.kernels_per_iter:g} kernels per iteration into "
                         f"{ideal}: about {gap / 1e3:,.1f} µs per iteration to gain (measured "
                         f"{row.time_per_iter_ns / 1e3:,.1f} µs, floor {floor / 1e3:,.1f} µs)")
        elif found:
            f = max(found, key=lambda f: f.saving_per_instance_ns)
            where = (f" at {f.evidence.get('file')}:{f.evidence.get('line')}"
                     if f.evidence.get("file") else "")
            row.lever = (f"{f.rule}{where}: saves up to "
                         f"{f.saving_per_instance_ns / 1e3:,.1f} µs per iteration")
        elif gap is not None:
            row.lever = (f"{100 * floor / row.time_per_iter_ns:.0f}% of the floor's speed: "
                         f"{max(gap, 0) / 1e3:,.1f} µs per iteration above the floor "
                         f"({floor / 1e3:,.1f} µs)")
