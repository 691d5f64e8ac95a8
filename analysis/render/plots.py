"""Plots as PNG (matplotlib, Agg backend: no display needed), drawn from report documents.

roofline_png      compute/1: ceilings and one point per range
time_bars_png     systems/2: time per iteration per variant, speedup labels
timeline_png      systems/2: one iteration per variant, kernels as boxes, gaps visible
bench_png         analysis.commands.bench rows: time and memory against trace size, both tools
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..documents.types import ComputeDoc, SystemsDoc


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    _pyplot().close(fig)
    return path


def time_bars_png(doc: SystemsDoc, path: Path) -> Path | None:
    """Horizontal bars of time per iteration, labelled with µs and speedup vs naive."""
    rows = [r for r in doc.variants if not r.missing]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.2), dpi=120)
    names = [r.variant for r in rows][::-1]
    times = [r.time_per_iter_ns / 1e3 for r in rows][::-1]
    bars = ax.barh(names, times, color="#4c72b0")
    for bar, r in zip(bars, rows[::-1], strict=True):
        speed = r.speedup_vs_baseline
        label = f" {bar.get_width():,.1f} µs" + (f" ({speed:.2f}x)" if speed else "")
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, label, va="center",
                fontsize=8)
    ax.set_xlabel("GPU time per iteration (µs, Nsight Systems)")
    ax.set_xlim(0, max(times) * 1.35)
    ax.set_title(f"{(doc.run or {}).get('workload', '')}: time per iteration")
    return _save(fig, path)


def timeline_png(doc: SystemsDoc, path: Path) -> Path | None:
    """One strip per variant: the GPU operations of its first iteration."""
    rows = [r for r in doc.variants if r.first_iteration]
    if not rows:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(len(rows), 1, figsize=(8, 0.9 * len(rows) + 1.0), dpi=120,
                             squeeze=False, sharex=True)
    longest = max(o.end_ns for r in rows for o in r.first_iteration) / 1e3
    colors = {"kernel": "#4c72b0", "memcpy": "#dd8452", "memset": "#55a868"}
    for ax, r in zip(axes[:, 0], rows, strict=True):
        ops = r.first_iteration
        ax.broken_barh([(o.start_ns / 1e3, max(o.end_ns - o.start_ns, 1) / 1e3)
                        for o in ops], (0, 1), facecolors=[colors.get(o.kind, "grey")
                                                          for o in ops], edgecolor="white")
        ax.set_yticks([0.5], [r.variant])
        ax.set_xlim(0, longest * 1.02)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel("µs from the iteration's first GPU operation")
    fig.suptitle("One iteration per variant: blue kernels, orange copies, green sets; "
                 "space between boxes = GPU idle", fontsize=9)
    return _save(fig, path)


def roofline_png(doc: ComputeDoc, path: Path) -> Path | None:
    """Roofline with the DRAM and compute ceilings and one point per range (variant).

    Each point is the range's kernels together per iteration: cost-model FLOPs over
    measured DRAM bytes (x) and over summed kernel duration (y). Returns None when the
    ceilings or the cost model needed for it are missing.
    """
    peaks = doc.ceilings
    points = [r for r in doc.ranges if r.intensity_flop_per_byte
              and r.flops_per_s and "/" in r.range]
    if not (peaks.flops_per_s and peaks.dram_bytes_per_s and points):
        return None
    plt = _pyplot()
    pf, pb = peaks.flops_per_s, peaks.dram_bytes_per_s
    xs = [p.intensity_flop_per_byte for p in points]
    x = np.logspace(np.log10(min(xs + [pf / pb]) / 10), np.log10(max(xs + [pf / pb]) * 10), 200)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    ax.loglog(x, np.minimum(pf, x * pb) / 1e12, color="black", lw=1.5, label="roofline")
    ax.axvline(pf / pb, color="grey", ls=":", lw=1)
    for p in points:
        ax.loglog(p.intensity_flop_per_byte, p.flops_per_s / 1e12, "o", ms=7,
                  label=f"{p.range} ({p.pct_of_roofline:.0f}% of roof)"
                  if p.pct_of_roofline is not None else p.range)
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte, measured bytes)")
    ax.set_ylabel("TFLOP/s (cost-model FLOPs / ncu duration)")
    ax.set_title(f"Roofline: {pb / 1e12:.2f} TB/s DRAM, {pf / 1e12:.0f} TFLOP/s peak")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def bench_png(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Wall time and peak memory against trace size, the analysis beside nsys stats."""
    if not rows:
        return None
    plt = _pyplot()
    fig, (t_ax, m_ax) = plt.subplots(1, 2, figsize=(10, 4))
    x = [r["kernels"] / 1e6 for r in rows]
    for key, label, style in (("analysis", "python -m analysis", "o-"),
                              ("nsys_stats", "nsys stats", "s--")):
        if f"{key}_s" in rows[0]:
            t_ax.plot(x, [r[f"{key}_s"] for r in rows], style, label=label)
            m_ax.plot(x, [r[f"{key}_mib"] for r in rows], style, label=label)
    t_ax.set(xlabel="kernels (millions)", ylabel="wall time (s, median)", title="time")
    m_ax.set(xlabel="kernels (millions)", ylabel="peak memory (MiB)", title="memory")
    for ax in (t_ax, m_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    return _save(fig, path)
