"""The page people read first: reports/<workload>/README.md (GitHub shows it).

Merges a systems/2 and, when there is one, a compute/1 document: the verdict on the
first screen (fastest variant, speedup over naive, % of roofline, top findings), then
the per-variant table, findings with evidence, per-kernel details, environment and the
exact commands that reproduce it.
"""

from __future__ import annotations

from ..common.names import library_mask
from ..documents.types import (
    NONE_APPLIES,
    ComputeDoc,
    RangeEntry,
    SystemsDoc,
    entry_column,
    entry_pick,
    ordered,
    top_findings,
)
from .compute_md import kernels_section as compute_kernels
from .evidence import evidence_lines
from .findings_md import findings_section, impact
from .markdown import (
    dur,
    environment_section,
    esc,
    pct,
    reflow,
    run_header,
    short,
    us,
    variants_section,
)
from .markdown import kernels_section as systems_kernels
from .steps_md import steps_lines
from .text import code, html
from .timeline_md import loop_entries, sentence, shares

TOP_FINDINGS = 5
PAGE_KERNEL_RANGES = 4
"""Ranges whose kernels the page lists (systems.md lists more): with the verdict, the
loops' sentences and the top findings' evidence, a page stays under 300 lines."""


def _roofline_pct(compute: ComputeDoc | None, rng: str) -> float | None:
    for r in compute.ranges if compute else []:
        if r.range == rng:
            return r.pct_of_roofline
    return None


def _run(doc: SystemsDoc | ComputeDoc | None) -> dict:
    return (doc.run or {}) if doc else {}


def joinable(systems: SystemsDoc, compute: ComputeDoc | None) -> tuple[ComputeDoc | None,
                                                                       list[str]]:
    """(the compute document if it belongs on this page, warnings for the verdict).

    A compute document of another workload is not joined; one of the same workload made
    by other code, or before the timeline it would be read with, is joined and said."""
    if compute is None:
        return None, []
    a, b = _run(systems), _run(compute)
    if a.get("workload") and b.get("workload") and a["workload"] != b["workload"]:
        return None, [f"compute.json here is of workload {b['workload']}, not "
                      f"{a['workload']}: its counters are left out of this page."]
    warn = []
    if a.get("code_version") and b.get("code_version") and \
            a["code_version"] != b["code_version"]:
        warn.append(f"the timeline (code {a['code_version']}) and the counters (code "
                    f"{b['code_version']}) come from different code.")
    if a.get("started") and b.get("started") and b["started"] < a["started"]:
        warn.append(f"the counters (run of {b['started']}) are older than the timeline "
                    f"(run of {a['started']}): run make compute again to match it.")
    return compute, warn


def runs_line(systems: SystemsDoc, compute: ComputeDoc | None) -> list[str]:
    """Which run each part of the page comes from."""
    def said(run: dict) -> str:
        return ", ".join(x for x in (run.get("started") and f"run of {run['started']}",
                                     run.get("code_version") and
                                     f"code {run['code_version']}") if x)
    parts = [f"{what}: {said(_run(doc))}" for what, doc in (
        ("timeline (Nsight Systems)", systems), ("counters (Nsight Compute)", compute))
        if doc is not None and said(_run(doc))]
    return ["Runs: " + "; ".join(parts) + ".", ""] if parts else []


HOST_SAID = {"host_cpu_ns": "CPU outside CUDA calls", "host_os_ns": "OS runtime calls",
             "host_sync_ns": "waiting for the GPU", "host_launch_ns": "launching kernels",
             "host_module_ns": "loading modules", "host_memory_ns": "memory management",
             "host_other_cuda_ns": "other CUDA calls"}


def where_time_went(doc: SystemsDoc) -> list[str]:
    """The verdict's first sentence: how busy the GPU was over the outermost ranges' time
    (wall time, or the span of their GPU work where it ran behind the host) and where the
    largest share of it went (the first finding's range, or the outermost range that took
    the most), with the host part that dominated it when the host was the bound."""
    col = {f: entry_column(doc.ranges, f) for f in (
        "name", "warmup", "wall_ns", "gpu_span_ns", "busy_ns", "kernel_time_ns",
        "other_threads_kernel_time_ns", "domain")}
    lib = library_mask(col["domain"])                # a library's range is never the verdict
    roots = [i for i, (name, w) in enumerate(zip(col["name"], col["warmup"], strict=True))
             if "/" not in name and not w and not lib[i]]
    times = {i: RangeEntry.time_of(col["wall_ns"][i], col["gpu_span_ns"][i]) for i in roots}
    total = sum(times.values())
    if not total:
        return []
    busy = min(sum(max(col["busy_ns"][i], col["kernel_time_ns"][i]
                       + col["other_threads_kernel_time_ns"][i]) for i in roots), total)
    gpu_bound = busy >= 0.8 * total
    first = next((f for f in ordered(doc.findings) if f.range), None)
    at = {name: i for i, name in enumerate(col["name"])}
    chosen = at[first.range] if first and first.range in at else max(roots, key=times.get)
    where = entry_pick(doc.ranges, [chosen])[0]
    share = min(100.0 * where.time_ns / total, 100.0)
    said = (f"GPU busy {pct(100.0 * busy / total)} of {dur(total)}: "
            f"{'GPU-bound' if gpu_bound else 'host-bound'}; {pct(share)} of it in "
            f"{code(where.name)}")
    if not gpu_bound:
        parts = {k: getattr(where, k) for k in HOST_SAID}
        top = max(parts, key=parts.get)
        said += (f", mostly {HOST_SAID[top]} "
                 f"({pct(100.0 * parts[top] / max(where.wall_ns, 1))} of its wall time)")
    return [said + ".", ""]


def verdict(systems: SystemsDoc, compute: ComputeDoc | None,
            warnings: list[str] | None = None) -> list[str]:
    """The first screen: where the time went, fastest variant, speedup, % of roofline,
    each loop as it runs and what held it, top findings."""
    rows = [r for r in systems.variants if not r.missing]
    lines = ["## Verdict", ""] + [f"**Warning:** {esc(w)}" for w in warnings or []]
    if warnings:
        lines.append("")
    lines += where_time_went(systems) + ([] if systems.variants else steps_lines(systems))
    if rows:
        best = min(rows, key=lambda r: r.time_per_iter_ns)
        speed = best.speedup_vs_baseline
        roof = _roofline_pct(compute, best.range)
        bw = best.pct_of_copy_bw or best.pct_of_peak_bw
        parts = [f"Fastest: **{esc(best.variant)}** at {us(best.time_per_iter_ns)} per "
                 "iteration"]
        base = next((r.variant for r in rows if r.speedup_vs_baseline == 1.0), "naive")
        if speed and best.variant != base:
            parts.append(f"{speed:.2f}x faster than {base}")
        if roof is not None:
            parts.append(f"{pct(roof)} of roofline (Nsight Compute)")
        elif bw is not None:
            parts.append(f"{pct(bw)} of the measured copy bandwidth" if best.pct_of_copy_bw
                         else f"{pct(bw)} of peak memory bandwidth")
        lines.append(", ".join(parts) + ".")
    held = loops_lines(systems)
    lines += ([""] + held[:-1]) if held else []
    found = ordered(systems.findings + (compute.findings if compute else []))
    top = [f for f in top_findings(found)[0]
           if f.severity != "info"][:TOP_FINDINGS]
    if top:
        lines += ["", "Top findings, largest saving first:"]
        lines += [f"- {f.rule}" + (f" {code(short(f.range))}" if f.range else "")
                  + f" ({impact(f)}): {esc(short(f.message, 300))}" for f in top]
    unpriced = [f for f in found if f.not_priced and f.severity != "info"]
    if unpriced:
        lines += ["", f"{len(unpriced)} finding(s) not priced (the loop model cannot replay "
                  "their change; each says why under Findings): "
                  + ", ".join(sorted({f.rule for f in unpriced})) + "."]
    elif not top and rows:
        lines += ["", "No warning from any rule."]
    return lines + [""]


PAGE_LOOPS = 3


def loops_lines(doc: SystemsDoc) -> list[str]:
    """The loops' critical paths in a sentence each (systems.md has the table)."""
    loops = loop_entries(doc)[:PAGE_LOOPS]
    if not loops:
        return []
    said = [f"- {sentence(e)}.{_none_applies(doc, e)}" for e in loops]
    return ["Each loop as it runs, and what held its steps (the replayed step model; all "
            "of them in systems.md):", *said, ""]


def _none_applies(doc: SystemsDoc, e: RangeEntry) -> str:
    """` No finding shortens it: why` where no priced finding lies on the loop's range or
    inside it, said of the category that holds its critical path most."""
    held = shares(e)
    if not held or any(f.saving_ns > 0 and f.range and (
            f.range == e.name or f.range.startswith(e.name + "/")) for f in doc.findings):
        return ""
    category = held[0][0]
    return f" No finding shortens it: {NONE_APPLIES.get(category, 'no rule names it')}."


def render_page(systems: SystemsDoc, compute: ComputeDoc | None,
                images: dict[str, str], workload: str) -> str:
    """README.md for one workload; `images` maps plot kind -> file name beside it."""
    run = systems.run or {}
    compute, warnings = joinable(systems, compute)
    lines = [f"# {esc(workload)}", ""]
    lines += run_header(run)
    lines += verdict(systems, compute, warnings)
    lines += runs_line(systems, compute)
    lines += variants_section(systems)
    for kind, title in (("time", "time per iteration"), ("timeline", "one iteration"),
                        ("roofline", "roofline")):
        if kind in images and (kind != "roofline" or compute is not None):
            lines += [f"![{title}]({images[kind]})", ""]
    found = ordered(systems.findings + (compute.findings if compute else []))
    lines += findings_section(found, "systems.json and compute.json")
    for f in top_findings(found)[0][:TOP_FINDINGS]:
        lines += [f"<details><summary>{html(f.rule)} {html(short(f.range or ''))} evidence"
                  "</summary>", "", *evidence_lines(f.evidence), "",
                  f"Saving model: {esc(f.saving_model)}" if f.saving_model else "",
                  "", "</details>", ""]
    gpu_time = {k.name: k.total_ns for k in systems.kernel_summary}
    lines += (compute_kernels(compute, gpu_time) if compute
              else systems_kernels(systems, PAGE_KERNEL_RANGES))
    lines += environment_section(systems)
    lines += ["## Reproduce", "", "On a GPU machine with Nsight Systems and Nsight Compute:", "",
              f"    make systems WORKLOAD={workload}", f"    make compute KERNEL={workload}",
              f"    make report WORKLOAD={workload}", "",
              "Reports: `systems.md` (timeline), `compute.md` (counters) beside this page.", ""]
    return "\n".join(reflow(lines)).rstrip() + "\n"
