"""Markdown rendering of `systems/2` documents: GitHub-flavoured tables, escaped names.

Numbers carry units: microseconds with one decimal, GB/s without decimals, percentages
with one. C++ kernel names (`<`, `>`, `|`, `*`, `&`, backticks) are escaped so that they
render literally inside table cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..common.names import kernel_labels
from ..documents.files import KERNEL_RANGES, kernel_rows, shown_rows
from ..documents.types import (
    RangeEntry,
    RankRow,
    SystemsDoc,
    VariantRow,
    entry_column,
    entry_pick,
)
from .findings_md import findings_section
from .steps_md import steps_section
from .text import (
    NAME_WIDTH,
    WIDTH,
    code,
    dur,
    esc,
    gbps,
    num,
    pct,
    reflow,
    short,
    shown_path,
    table,
    us,
)
from .timeline_md import critical_path_section

__all__ = ["NAME_WIDTH", "WIDTH", "dur", "esc", "gbps", "num", "pct", "reflow", "short",
           "table", "us"]


def _kernels_per_iter(r: VariantRow) -> str:
    other = r.other_thread_kernels_per_iter
    return num(r.kernels_per_iter) + (f" (+{num(other)} other threads)" if other else "")


def variants_section(doc: SystemsDoc) -> list[str]:
    if not doc.variants:
        return []
    body = []
    for r in doc.variants:
        if r.missing:
            body.append([esc(r.variant), esc(r.range)] + ["not in trace"] + ["–"] * 7)
            continue
        speed, flops = r.speedup_vs_baseline, r.achieved_flops
        body.append([esc(r.variant), esc(r.range), us(r.time_per_iter_ns),
                     "–" if speed is None else f"{speed:.2f}x", _kernels_per_iter(r),
                     pct(r.gpu_idle_pct), gbps(r.achieved_Bps), pct(r.pct_of_peak_bw),
                     pct(r.pct_of_copy_bw), "–" if flops is None else f"{flops / 1e12:,.1f}"])
    run = doc.run or {}
    cost = run.get("cost_model") or {}
    copy_bw = (run.get("ceilings") or {}).get("copy_bytes_per_s")
    lines = ["## Variants", "",
             f"Per iteration: GPU span of the range / iterations ({run.get('iterations')} "
             "per range). GPU idle: share of the range's wall time during which no GPU "
             "operation of the process ran. Achieved bandwidth = the cost model's minimal bytes "
             f"({num(cost.get('min_bytes'))} B per call) / time per iteration; peak BW = the "
             "GPU's memory bandwidth as the trace reports it; measured copy = a device-to-device "
             f"copy measured in the same run ({gbps(copy_bw)}; a reference, not a ceiling: "
             "a kernel can beat it). TFLOP/s = cost-model FLOPs "
             f"({num(cost.get('flops'))} per call) / time per iteration.", ""]
    base = next((v.variant for v in doc.variants if v.speedup_vs_baseline == 1.0), "naive")
    levers = [f"- {esc(r.variant)}: {esc(r.lever)}" for r in doc.variants if r.lever]
    lines += table(["variant", "range", "time / iter", f"speedup vs {base}", "kernels / iter",
                    "GPU idle", "achieved", "% of peak BW", "% of measured copy", "TFLOP/s"],
                   body,
                   "llrrrrrrrr")
    if levers:
        lines += ["", "Next lever per variant (cost model over true ceilings):", ""] + levers
    return lines + [""]


def shown_ranges(doc: SystemsDoc) -> tuple[Sequence[RangeEntry], int]:
    """(ranges to show, in timeline order; how many were left out)."""
    rows = shown_rows(doc)
    return entry_pick(doc.ranges, rows), len(doc.ranges) - len(rows)


def _more(left_out: int) -> list[str]:
    return [f"{left_out:,} more ranges with less time are in ranges.parquet (every range; "
            "`analysis.api.load_report` reads it).", ""] if left_out else []


def ranges_section(doc: SystemsDoc) -> list[str]:
    """The ranges, those without GPU work too; one table per process when there are
    several (an export of `nsys profile torchrun ...`), headed by its pid and GPUs."""
    shown, left_out = shown_ranges(doc)
    lines = ["## NVTX ranges", "",
             "Kernels are credited to a range when the CUDA call that launched them lies "
             "inside it, on the same thread (as `nsys stats` does); a kernel counts in every "
             "enclosing range. Wall / instance: the median instance's end - start (instances: "
             "all of them, GPU work or not, as `nsys stats nvtx_sum` counts them). "
             "GPU span: first GPU operation start to last end, summed over "
             "instances; idle: span not covered by any GPU operation. Other threads: "
             "kernels that other threads of the process launched while the range was open "
             "(PyTorch's backward runs on its autograd thread); GPU busy: share of the "
             "range's wall time during which any GPU operation of the process ran.", ""]
    if not shown:
        return lines + ["The trace holds no NVTX range.", ""]
    of = [p or 0 for p in entry_column(doc.ranges, "pid")]
    pids = sorted(set(of))
    for pid in pids:
        mine = under_parents([e for e in shown if (e.pid or 0) == pid])
        if len(pids) > 1:
            gpus = sorted({d for p, devices in zip(of, entry_column(doc.ranges, "devices"),
                                                   strict=True) if p == pid for d in devices})
            lines += [f"### Process {pid}" + (f" (GPU {', '.join(map(str, gpus))})"
                                              if gpus else ""), ""]
        body = [[("↳ " if e.parent else "") + esc(short(e.name))
                 + (" (warm-up)" if e.warmup else ""),
                 esc(e.domain or "(default)"), num(e.wall_instances), dur(e.wall_median_ns),
                 _busy(e), num(e.kernel_count), us(e.kernel_time_ns), us(e.gpu_span_ns),
                 us(e.gpu_idle_ns), _other(e)] for e in mine]
        lines += table(["range", "domain", "instances", "wall / instance", "GPU busy",
                        "kernels", "kernel time", "GPU span", "GPU idle",
                        "other threads' kernels"], body, "llrrrrrrrr")
        lines.append("")
    return lines + _more(left_out)


def under_parents(entries: list[RangeEntry]) -> list[RangeEntry]:
    """The entries in their order, each library range (its `parent` set) moved right
    below the user's range that held it, where that range is among them."""
    names = {e.name for e in entries}
    below: dict[str, list[RangeEntry]] = {}
    for e in entries:
        if e.parent in names:
            below.setdefault(e.parent, []).append(e)
    out = []
    for e in entries:
        if e.parent not in names:
            out += [e, *below.get(e.name, [])]
    return out


def _other(e: RangeEntry) -> str:
    if not e.other_threads_kernel_count:
        return "–"
    return f"{num(e.other_threads_kernel_count)} ({us(e.other_threads_kernel_time_ns)})"


def _busy(e: RangeEntry) -> str:
    return pct(100.0 * e.busy_ns / e.wall_ns) if e.wall_ns else "–"


def other_threads_line(e: RangeEntry) -> list[str]:
    """Who else launched kernels while the range was open (thread names from the export)."""
    if not e.other_threads:
        return []
    who = "; ".join(f"{esc(t.name or t.tid)}" + (f" ({t.role})" if t.role else "")
                    + f": {num(t.kernel_count)} kernels, {us(t.kernel_time_ns)}"
                    for t in e.other_threads[:3])
    more = f"; {len(e.other_threads) - 3} more" if len(e.other_threads) > 3 else ""
    return [f"Other threads launched {num(e.other_threads_kernel_count)} kernels "
            f"({us(e.other_threads_kernel_time_ns)}) while it was open: {who}{more}.", ""]


KERNELS_EACH = 8


def kernels_section(doc: SystemsDoc, n: int = KERNEL_RANGES) -> list[str]:
    """The kernels of the `n` ranges that hold the most kernel time, their own thread's
    and (tagged with the thread) those other threads launched while they were open; the
    rest: systems.json."""
    lines = ["## Kernels per range", ""]
    shown = entry_pick(doc.ranges, kernel_rows(doc, n))
    left_out = len(doc.ranges) - len(shown)
    for e in shown:
        lines += [f"### {esc(short(e.name))}", ""] + other_threads_line(e)
        groups = [("own", e.kernels)] + [(str(t.name or t.tid), t.kernels)
                                         for t in e.other_threads]
        label = kernel_labels([k.name for _, kernels in groups for k in kernels])
        body = []
        for thread, kernels in groups:
            body += [[esc(short(label[k.name])), esc(thread), num(k.count), us(k.total_ns),
                      us(k.avg_ns), us(k.min_ns), us(k.max_ns)]
                     for k in kernels[:KERNELS_EACH]]
            if len(kernels) > KERNELS_EACH:
                body.append([f"{len(kernels) - KERNELS_EACH} more kernels (systems.json)",
                             esc(thread), "", "", "", "", ""])
        if not body:
            lines += ["No kernels (copies or sets only).", ""]
            continue
        if len(groups) == 1:
            body = [row[:1] + row[2:] for row in body]
            lines += table(["kernel", "count", "total", "avg", "min", "max"], body, "lrrrrr")
        else:
            lines += table(["kernel", "thread", "count", "total", "avg", "min", "max"], body,
                           "llrrrrr")
        lines.append("")
    return lines + _more(left_out)


TOP_KERNELS = 15


def whole_trace_section(doc: SystemsDoc) -> list[str]:
    """Every kernel of the trace, NVTX or not, as `nsys stats`' cuda_gpu_kern_sum: the top
    ones, then how busy each GPU and its streams were."""
    if not doc.kernel_summary:
        return []
    top = doc.kernel_summary[:TOP_KERNELS]
    label = kernel_labels([k.name for k in doc.kernel_summary])
    body = [[esc(short(label[k.name])), pct(k.time_pct), us(k.total_ns), num(k.count), us(k.avg_ns),
             us(k.min_ns), us(k.max_ns)] for k in top]
    lines = ["## Whole trace", "",
             "Every kernel of the trace, in or out of NVTX ranges (as `nsys stats --report "
             "cuda_gpu_kern_sum`), most time first:", ""]
    lines += table(["kernel", "time", "total", "count", "avg", "min", "max"], body,
                   "lrrrrrr")
    more = len(doc.kernel_summary) - len(top)
    lines += [""] + ([f"{more} more kernel names are in kernel\\_summary.csv and systems.json.",
                      ""]
                     if more > 0 else [])
    for d in sorted({b.device for b in doc.gpu_busy}):
        rows = [b for b in doc.gpu_busy if b.device == d]
        gpu = next(b for b in rows if b.stream is None)
        streams = sorted((b for b in rows if b.stream is not None), key=lambda b: -b.busy_ns)
        per = ", ".join(f"stream {b.stream} {pct(b.busy_pct)}" for b in streams[:4])
        lines += [f"GPU {d}: busy {pct(gpu.busy_pct)} of {us(gpu.span_ns)} from its first to "
                  f"its last operation ({num(gpu.operations)} operations); {per}"
                  + (f"; {len(streams) - 4} more streams" if len(streams) > 4 else "") + ".",
                  ""]
    return lines


TOP_OPS = 15


def ops_section(doc: SystemsDoc) -> list[str]:
    """PyTorch's emit_nvtx op ranges, one row per op, most forward + backward time first."""
    fwd = [o for o in doc.ops if o.direction == "forward"]
    if not fwd:
        return []
    top = sorted(fwd, key=lambda o: -(o.kernel_time_ns + o.backward_kernel_time_ns))[:TOP_OPS]
    body = [[esc(o.name), num(o.calls), num(o.kernel_count), us(o.kernel_time_ns),
             num(o.backward_kernel_count), us(o.backward_kernel_time_ns),
             us(o.kernel_time_ns + o.backward_kernel_time_ns)] for o in top]
    lines = ["## PyTorch ops (emit_nvtx)", "",
             "Op ranges with the `seq`, `op_id` and `sizes` parts stripped; kernels counted "
             "inclusively (an op's kernels include those of the ops it calls); backward: "
             "the kernels of the backward nodes with the op's `seq`, on the autograd thread.",
             ""]
    lines += table(["op", "calls", "kernels", "kernel time", "backward kernels",
                    "backward time", "forward + backward"], body, "lrrrrrr")
    more = len(doc.ops) - len(top)
    return lines + [""] + ([f"{more} more op rows (backward ops among them) are in ops.csv "
                            "and systems.json.", ""] if more > 0 else [])


def compile_section(doc: SystemsDoc) -> list[str]:
    run = doc.run or {}
    compiled = run.get("compiled")
    events = run.get("torch_log_events")
    if not compiled and not events:
        return []
    lines = ["## torch.compile", ""]
    if compiled:
        lines.append(f"Graphs: {compiled.get('graph_count')}, graph breaks: "
                     f"{compiled.get('graph_break_count')}, recompiles: "
                     f"{compiled.get('recompiles')} (torch._dynamo.explain and TORCH_LOGS, "
                     "compiled before the measured ranges).")
        for b in compiled.get("graph_breaks") or []:
            lines.append(f"- graph break at {code(_at(b))}: "
                         f"{esc(b.get('reason'))}")
    if events is not None:
        lines.append(f"TORCH_LOGS events: {len(events)}.")
        for ev in events:
            why = ev.get("said") or ev["reason"]     # "said": systems/2 documents
            lines.append(f"- {ev['kind']} at {code(_at(ev))}: {esc(why)}")
    return lines + [""]


def _at(event: dict) -> str:
    """A graph break's or recompile's place, `file:line`."""
    return f"{event.get('file')}:{event.get('line')}"


def environment_section(doc: SystemsDoc) -> list[str]:
    src = doc.source
    versions = (doc.run or {}).get("versions") or {}
    gpus = "; ".join(f"{g.name} ({g.sm_count} SMs, "
                     f"{gbps(g.memory_bandwidth_Bps)} peak memory bandwidth)"
                     for g in src.gpus) or "not recorded in the trace"
    lines = ["## Environment", "", f"- GPU: {esc(gpus)}",
             f"- Nsight Systems: {esc(src.nsys_version)}, export schema "
             f"{esc(src.export_schema_version)}",
             f"- trace: {code(shown_path(src.path))}"]
    if versions:
        lines.append("- " + ", ".join(f"{k} {esc(v)}" for k, v in versions.items()
                                      if k in ("driver", "cuda", "torch", "triton", "python",
                                               "nvtx")))
    return lines + [""]


def run_header(run: dict, per_variant: bool = True) -> list[str]:
    """What ran, one line, with only the fields the run recorded."""
    if not run.get("description"):
        return []
    said = [esc(run["description"])]
    if run.get("shapes"):
        said.append(f"shapes {run['shapes']}")
    if run.get("dtype"):
        said.append(str(run["dtype"]))
    if per_variant and run.get("cost_model") and run.get("iterations"):
        said.append(f"{run['iterations']} iterations per variant")
    return ["; ".join(said) + ".", ""]


def render_systems(doc: SystemsDoc, images: dict[str, str] | None = None) -> str:
    """The whole systems.md page for one systems/2 document (plots by file name)."""
    run = doc.run or {}
    title = run.get("workload") or shown_path(doc.source.path)
    lines = [f"# Nsight Systems report: {esc(title)}", ""]
    lines += run_header(run, per_variant=False)
    for note in doc.notes:
        lines.append(f"> Note: {esc(note)}")
    if doc.notes:
        lines.append("")
    lines += whole_trace_section(doc) + steps_section(doc)
    lines += findings_section(doc.findings, "systems.json")
    lines += ranks_section(doc.ranks)
    lines += variants_section(doc)
    for kind, title in (("time", "time per iteration"), ("timeline", "one iteration")):
        if kind in (images or {}):
            lines += [f"![{title}]({images[kind]})", ""]
    lines += critical_path_section(doc, (images or {}).get("critical"))
    for section in (ops_section, ranges_section, compile_section, kernels_section,
                    environment_section):
        lines += section(doc)
    return "\n".join(reflow(lines)).rstrip() + "\n"


def ranks_table(rows: list[RankRow], folders: dict[int, str]) -> list[str]:
    """Per rank its step, compute, communication and busy time (a link to the rank's
    folder where `folders` has one)."""
    body = [[f"[rank {r.rank}]({folders[r.rank]}/README.md)" if r.rank in folders
             else f"rank {r.rank}" + (f" (pid {r.pid})" if r.pid is not None else ""),
             str(r.steps), us(r.step_ns), us(r.compute_kernel_ns), us(r.nccl_kernel_ns),
             us(r.exposed_comm_ns), pct(r.busy_pct), us(r.nccl_kernel_total_ns)]
            for r in rows]
    return table(["rank", "steps", "step", "compute kernels", "NCCL kernels",
                  "exposed comm", "GPU busy", "NCCL, whole export"], body, "lrrrrrrr")


INTRO = ("Per step (means over each rank's step range instances): wall time, compute "
         "kernels and NCCL kernels that started inside the steps, exposed communication "
         "(NCCL kernel time with no compute kernel beside it on the GPU), and the share of "
         "the step any GPU operation of the process ran.")


def ranks_section(rows: list[RankRow]) -> list[str]:
    """A systems page's ranks, when its export holds every rank's process (the rank of
    each is the CUDA device it used: analysis/diagnosis/ranks.py)."""
    if not rows:
        return []
    steps = [r.step_ns for r in rows if r.steps]
    skew = max(steps) - min(steps) if steps else 0.0
    return ["## Ranks in this export", "",
            f"{INTRO} Each process is a rank (its CUDA device). Step time skew: "
            f"{us(skew)}.", "", *ranks_table(rows, {}), ""]
