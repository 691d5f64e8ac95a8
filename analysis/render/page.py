"""The page people read first: reports/<workload>/README.md (GitHub shows it).

Merges a systems/1 and, when there is one, a compute/1 document: the verdict on the
first screen (fastest variant, speedup over naive, % of roofline, top findings), then
the per-variant table, findings with evidence, per-kernel details, environment and the
exact commands that reproduce it.
"""

from __future__ import annotations

import json

from ..documents import ComputeDoc, SystemsDoc, ordered, top_findings
from .compute_md import kernels_section as compute_kernels
from .markdown import (
    environment_section,
    esc,
    findings_section,
    impact,
    pct,
    reflow,
    short,
    us,
    variants_section,
)
from .markdown import kernels_section as systems_kernels

TOP_FINDINGS = 5


def _roofline_pct(compute: ComputeDoc | None, rng: str) -> float | None:
    for r in compute.ranges if compute else []:
        if r.range == rng:
            return r.pct_of_roofline
    return None


def verdict(systems: SystemsDoc, compute: ComputeDoc | None) -> list[str]:
    """The first screen: fastest variant, speedup, % of roofline, top findings."""
    rows = [r for r in systems.variants if not r.missing]
    lines = ["## Verdict", ""]
    if rows:
        best = min(rows, key=lambda r: r.time_per_iter_ns)
        speed = best.speedup_vs_naive
        roof = _roofline_pct(compute, best.range)
        bw = best.pct_of_copy_bw or best.pct_of_peak_bw
        parts = [f"Fastest: **{esc(best.variant)}** at {us(best.time_per_iter_ns)} per "
                 "iteration"]
        base = next((r.variant for r in rows if r.speedup_vs_naive == 1.0), "naive")
        if speed and best.variant != base:
            parts.append(f"{speed:.2f}x faster than {base}")
        if roof is not None:
            parts.append(f"{pct(roof)} of roofline (Nsight Compute)")
        elif bw is not None:
            parts.append(f"{pct(bw)} of the measured copy bandwidth" if best.pct_of_copy_bw
                         else f"{pct(bw)} of peak memory bandwidth")
        lines.append(", ".join(parts) + ".")
    found = ordered(systems.findings + (compute.findings if compute else []))
    top = [f for f in top_findings(found)[0]
           if f.severity != "info"][:TOP_FINDINGS]
    if top:
        lines += ["", "Top findings, most at stake first:"]
        lines += [f"- {f.rule} `{esc(short(f.range or '-'))}` ({impact(f)}): "
                  f"{esc(short(f.message, 300))}" for f in top]
    elif rows:
        lines += ["", "No warning from any rule."]
    return lines + [""]


def render_page(systems: SystemsDoc, compute: ComputeDoc | None,
                images: dict[str, str], workload: str) -> str:
    """README.md for one workload; `images` maps plot kind -> file name beside it."""
    run = systems.run or {}
    lines = [f"# {esc(workload)}", ""]
    if run.get("description"):
        lines += [f"{esc(run['description'])}; shapes {run.get('shapes')}, {run.get('dtype')},"
                  f" {run.get('iterations')} iterations per variant.", ""]
    lines += verdict(systems, compute)
    lines += variants_section(systems)
    for kind, title in (("time", "time per iteration"), ("timeline", "one iteration"),
                        ("roofline", "roofline")):
        if kind in images:
            lines += [f"![{title}]({images[kind]})", ""]
    found = ordered(systems.findings + (compute.findings if compute else []))
    lines += findings_section(found, "systems.json and compute.json")
    for f in top_findings(found)[0][:TOP_FINDINGS]:
        lines += [f"<details><summary>{esc(f.rule)} {esc(short(f.range or ''))} evidence"
                  "</summary>", "", esc(short(json.dumps(f.evidence), 600)), "",
                  "</details>", ""]
    lines += compute_kernels(compute) if compute else systems_kernels(systems)
    lines += environment_section(systems)
    lines += ["## Reproduce", "", "On a GPU machine with Nsight Systems and Nsight Compute:", "",
              f"    make systems WORKLOAD={workload}", f"    make compute KERNEL={workload}",
              f"    make report WORKLOAD={workload}", "",
              "Reports: `systems.md` (timeline), `compute.md` (counters) beside this page.", ""]
    return "\n".join(reflow(lines)).rstrip() + "\n"
