"""Markdown rendering of `compute/1` documents (Nsight Compute per-kernel counters)."""

from __future__ import annotations

from ..common.names import kernel_labels
from ..documents.types import ComputeDoc, KernelLaunch
from .findings_md import findings_section
from .markdown import esc, gbps, num, pct, reflow, short, table, us
from .text import code, shown_path

NAME_WIDTH = 60


def mb(value: float | None) -> str:
    return "–" if value is None else f"{value / 1e6:,.1f} MB"


def _bound(k: KernelLaunch) -> str:
    if k.bound is None:
        return "–"
    if k.bound == "latency":
        lean = "memory" if (k.mem_sol_pct or 0) > (k.sm_sol_pct or 0) else "compute"
        return f"latency ({lean}-leaning)"
    return str(k.bound)


def ranges_section(doc: ComputeDoc) -> list[str]:
    body = []
    for r in doc.ranges:
        tflops = r.flops_per_s
        body.append([esc(r.range), num(r.kernels_per_iter),
                     us(r.duration_ns_per_iter), mb(r.dram_bytes_per_iter),
                     "–" if r.dram_vs_min_bytes is None
                     else f"{r.dram_vs_min_bytes:.2f}x", gbps(r.dram_bytes_per_s),
                     "–" if tflops is None else f"{tflops / 1e12:,.1f}",
                     "–" if r.intensity_flop_per_byte is None
                     else f"{r.intensity_flop_per_byte:,.1f}",
                     pct(r.pct_of_roofline), pct(r.pct_of_measured_gemm)])
    lines = ["## Per range, per iteration", "",
             "Kernel durations summed (Nsight Compute replay), DRAM bytes read + written, "
             "intensity = cost-model FLOPs / measured DRAM bytes.", ""]
    lines += table(["range", "kernels", "duration", "DRAM", "DRAM / minimal bytes",
                    "DRAM rate", "TFLOP/s", "FLOP/byte", "% of roofline",
                    "% of measured cuBLAS"], body, "lrrrrrrrrr")
    return lines + [""]


def _median(values: list) -> float | None:
    known = sorted(v for v in values if v is not None)
    return None if not known else (known[(len(known) - 1) // 2] + known[len(known) // 2]) / 2


def per_kernel(doc: ComputeDoc, gpu_time: dict[str, int] | None = None) -> list[tuple]:
    """(name, launches) per kernel name: by GPU time in the Systems run where it has the
    name (`gpu_time`: kernel_summary's total per name), else by profiled time."""
    by: dict[str, list[KernelLaunch]] = {}
    for k in doc.kernels:
        by.setdefault(k.name, []).append(k)
    gpu_time = gpu_time or {}

    def weight(item: tuple) -> tuple:
        name, launches = item
        return (-gpu_time.get(name, -1), -sum(k.duration_ns or 0 for k in launches))
    return sorted(by.items(), key=weight)


BOUND_RULES = ("memory_bound", "compute_bound", "latency_bound")


def suggestions(doc: ComputeDoc) -> dict[str, str]:
    """Per kernel name, the one suggestion that applies: its bound finding's (the remedy
    in its own layer), else that of the finding that saves most."""
    out: dict[str, str] = {}
    for f in sorted(doc.findings, key=lambda f: (f.rule not in BOUND_RULES, -f.saving_ns,
                                                  -f.evidence.get("kernel_saving_ns", 0.0))):
        if f.kernel:
            out.setdefault(f.kernel, f.suggestion)
    return out


def kernels_section(doc: ComputeDoc, gpu_time: dict[str, int] | None = None) -> list[str]:
    """One row per kernel name, the kernels that hold the time first; every launch is in
    compute.json and launches.csv."""
    advice = suggestions(doc)
    rows = per_kernel(doc, gpu_time)
    label = kernel_labels([name for name, _ in rows])
    body = []
    for name, ks in rows:
        med = {f: _median([getattr(k, f) for k in ks]) for f in (
            "duration_ns", "sm_sol_pct", "mem_sol_pct", "dram_throughput_pct",
            "achieved_occupancy_pct", "theoretical_occupancy_pct", "waves_per_sm")}
        bounds = [_bound(k) for k in ks]
        body.append([esc(short(label[name], NAME_WIDTH)), num(len(ks)), us(med["duration_ns"]),
                     max(set(bounds), key=lambda b: (bounds.count(b), b)), pct(med["sm_sol_pct"]),
                     pct(med["mem_sol_pct"]), pct(med["dram_throughput_pct"]),
                     f"{pct(med['achieved_occupancy_pct'])} / "
                     f"{pct(med['theoretical_occupancy_pct'])}",
                     num(med["waves_per_sm"], 2), esc(advice.get(name, "–"))])
    order = "GPU time in the Nsight Systems run" if gpu_time else "profiled time"
    lines = ["## Kernels", "",
             f"One row per kernel name, most {order} first; medians over its profiled "
             "launches (Nsight Compute replays each with caches flushed: prefer Nsight "
             "Systems for time). SOL = speed of light (% of peak). Bound follows Nsight "
             "Compute's SOL rule: latency when SM and memory are both under "
             f"{doc.thresholds['latency_pct']:.0f}%, else the more utilized unit. Every "
             "launch: compute.json and launches.csv.", ""]
    lines += table(["kernel", "launches", "median duration", "bound", "SM SOL",
                    "memory SOL", "DRAM throughput", "occupancy achieved / theor.",
                    "waves/SM", "suggestion"], body, "lrrlrrrrrl")
    full = [f"- {esc(label[name])}: {code(name)}" for name, _ in rows if label[name] != name]
    if full:
        lines += ["", "<details><summary>Full kernel names</summary>", "", *full, "",
                  "</details>"]
    return lines + [""]


def render_compute(doc: ComputeDoc, roofline_png: str | None = None) -> str:
    """The whole compute.md page for one compute/1 document."""
    run = doc.run or {}
    lines = [f"# Nsight Compute report: "
             f"{esc(run.get('workload') or shown_path(doc.source.path))}",
             ""]
    for note in doc.notes:
        lines.append(f"> Note: {esc(note)}")
    lines.append("")
    lines += findings_section(doc.findings, "compute.json")
    c = doc.ceilings
    peak = "–" if not c.flops_per_s else f"{c.flops_per_s / 1e12:,.0f} TFLOP/s"
    measured = "" if not c.measured_flops_per_s else (
        f"; measured in the run (cuBLAS GEMM, a second reference, not a ceiling): "
        f"{c.measured_flops_per_s / 1e12:,.0f} TFLOP/s")
    lines += ["## Ceilings", "",
              f"- DRAM: {gbps(c.dram_bytes_per_s)} ({esc(c.dram_source)})",
              f"- compute: {peak} ({esc(c.flops_source)}){measured}", ""]
    lines += ranges_section(doc)
    if roofline_png:
        lines += [f"![roofline]({roofline_png})", ""]
    lines += kernels_section(doc)
    versions = run.get("versions") or {}
    lines += ["## Environment", "", f"- GPU: {esc(doc.source.gpu)}",
              f"- CSV: {code(shown_path(doc.source.path))}"]
    if versions:
        lines.append("- " + ", ".join(f"{k} {esc(v)}" for k, v in versions.items()
                                      if k in ("driver", "cuda", "torch", "triton")))
    return "\n".join(reflow(lines)).rstrip() + "\n"
