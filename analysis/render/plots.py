"""Plots as PNG (matplotlib, no display): the roofline of a compute/1 document."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def roofline_png(doc: dict[str, Any], path: Path) -> Path | None:
    """Roofline with the DRAM and compute ceilings and one point per range (variant).

    Each point is the range's kernels together per iteration: cost-model FLOPs over
    measured DRAM bytes (x) and over summed kernel duration (y). Returns None when the
    ceilings or the cost model needed for it are missing.
    """
    peaks = doc["ceilings"]
    points = [r for r in doc["ranges"] if r.get("intensity_flop_per_byte")
              and r.get("flops_per_s") and "/" in r["range"]]
    if not (peaks.get("flops_per_s") and peaks.get("dram_bytes_per_s") and points):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    pf, pb = peaks["flops_per_s"], peaks["dram_bytes_per_s"]
    xs = [p["intensity_flop_per_byte"] for p in points]
    x = np.logspace(np.log10(min(xs + [pf / pb]) / 10), np.log10(max(xs + [pf / pb]) * 10), 200)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    ax.loglog(x, np.minimum(pf, x * pb) / 1e12, color="black", lw=1.5, label="roofline")
    ax.axvline(pf / pb, color="grey", ls=":", lw=1)
    for p in points:
        ax.loglog(p["intensity_flop_per_byte"], p["flops_per_s"] / 1e12, "o", ms=7,
                  label=f"{p['range']} ({p['pct_of_roofline']:.0f}% of roof)"
                  if p.get("pct_of_roofline") is not None else p["range"])
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte, measured bytes)")
    ax.set_ylabel("TFLOP/s (cost-model FLOPs / ncu duration)")
    ax.set_title(f"Roofline: {pb / 1e12:.2f} TB/s DRAM, {pf / 1e12:.0f} TFLOP/s peak")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
