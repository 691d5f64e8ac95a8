"""Run-to-run comparison of two systems/2 documents, with a regression gate on GPU time.

Per variant (or per range when the runs have no meta.json), per iteration, three metrics:
`span` (first to last GPU operation of the range's own thread, as `nsys stats` projects
it), `kernel` (the range's kernel time, own and other threads': backward on the autograd
thread included) and `busy` (the range's wall time during which any GPU operation of the
process ran). PyTorch's emit_nvtx op ranges are grouped by op name (their `seq`/`op_id`
parts stripped), so one op is one row. The gate uses one metric (`--metric`), by default
the one that moved most; a row slower by more than the threshold (percent) is a
regression. Kernel names that appeared or went away and findings that appeared or went
away are listed. The page lists the largest changes first; the JSON holds every row.

The diff's headline: each process's steps before and after, with the noise measured; then
each loop both runs have as it runs (loops/runs.py), gated on its cost per instance only
where the median steps' intervals lie apart (loops.stats.loop_verdict).

Per process (matched in pid order), the steady steps' median on each side with its
interval (loops.stats.median_interval) and the change between the medians with its
bootstrap interval (loops.stats.change_interval): `slower` only when the whole interval
lies above the threshold, `faster` when it lies below minus the threshold, else `within
noise`. Warm-up steps are not in them (loops/find.py). Beside them: how comparable the two
captures are (the kernels both ran, by GPU time; step counts; GPUs) and the whole
captures' totals (GPU busy, kernel time by kind, idle, exposed communication).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..common.names import apart_prefix, is_detected, library_mask
from ..documents.types import CaptureTotals, Finding, StepSet, SystemsDoc, entry_column, entry_pick
from ..loops.stats import change_interval, loop_verdict
from ..render.markdown import esc, num, pct, reflow, short, table, us
from ..render.text import code

METRICS = ("span", "kernel", "busy")
TOP_ROWS = 25
_OP = re.compile(r"^(?P<op>[^,]+?)(?:, seq = \d+)?, op_id = \d+.*$")


def op_key(path: str) -> str:
    """A range path with emit_nvtx op names stripped: one key per op, not per call."""
    return "/".join(m["op"] if (m := _OP.match(part)) else part for part in path.split("/"))


def is_op_range(path: str) -> bool:
    """Whether a path runs through an emit_nvtx op range (those are compared per op, in
    the ops view, not as paths)."""
    return ", op_id = " in path or "autograd::engine::evaluate_function" in path


def _rows(doc: SystemsDoc) -> dict[str, dict[str, Any]]:
    """variant (or the user's range) -> metrics per iteration, kernels per iteration,
    names, instances (the entries read as columns, only those compared made)."""
    names = entry_column(doc.ranges, "name")
    out: dict[str, dict[str, Any]] = {}
    if any(not v.missing for v in doc.variants):
        at = {n: i for i, n in enumerate(names)}
        kept = [v for v in doc.variants if not v.missing]
        for v, e in zip(kept, entry_pick(doc.ranges, [at[v.range] for v in kept]),
                        strict=True):
            out[v.variant] = _metrics([e], v.iterations or 1)
        return out
    instances = entry_column(doc.ranges, "instances")
    lib = library_mask(entry_column(doc.ranges, "domain"))
    at = [i for i, (n, k, x) in enumerate(zip(names, instances, lib.tolist(), strict=True))
          if k and not x and not is_op_range(n) and not is_detected(n)]  # steps: above
    for e in entry_pick(doc.ranges, at):
        out[e.name] = _metrics([e], max(e.instances, 1))
    return out


def _metrics(entries: list, n: int) -> dict[str, Any]:
    loop = entries[0] if len(entries) == 1 and entries[0].runs else None
    return {"instances": n, "wall": sum(e.wall_ns for e in entries) / n,
            "run": loop and (loop.run_per_instance_ns, loop.step_median_ns,
                             loop.step_low_ns, loop.step_high_ns),
            "host": sum(e.wall_ns - e.busy_ns for e in entries) / n,
            "span": sum(e.gpu_span_ns for e in entries) / n,
            "kernel": sum(e.kernel_time_ns + e.other_threads_kernel_time_ns
                          for e in entries) / n,
            "busy": sum(e.busy_ns for e in entries) / n,
            "kernels": sum(e.kernel_count for e in entries) / n,
            "names": {k.name for e in entries for k in e.kernels}}


def _finding_keys(doc: SystemsDoc) -> dict[tuple, Finding]:
    return {(f.rule, f.range, f.kernel): f for f in doc.findings}


def _change(before: float, after: float) -> float | None:
    return 100.0 * (after - before) / before if before else None


def pick_metric(rows: list[dict[str, Any]]) -> str:
    """The metric that moved most: the largest relative change of its total over the rows
    both runs have (a small range's swing does not outvote the run's GPU time)."""
    both = [r for r in rows if r.get("metrics_base")]

    def moved(metric: str) -> float:
        before = sum(r["metrics_base"][metric] for r in both)
        after = sum(r["metrics_new"][metric] for r in both)
        return abs(after - before) / before if before else 0.0
    return max(METRICS, key=moved)


def compare(base: SystemsDoc, new: SystemsDoc, threshold_pct: float,
            metric: str = "auto") -> dict[str, Any]:
    """The diff document; `regressions` lists rows slower than the threshold in `metric`."""
    a, b = _rows(base), _rows(new)
    rows = []
    for name in [*a, *(n for n in b if n not in a)]:
        before, after = a.get(name), b.get(name)
        row: dict[str, Any] = {"variant": name, "base": before and before[METRICS[0]],
                               "new": after and after[METRICS[0]], "change_pct": {}}
        if before and after:
            row["metrics_base"] = {m: before[m] for m in METRICS}
            row["metrics_new"] = {m: after[m] for m in METRICS}
            row["change_pct"] = {m: _change(before[m], after[m]) for m in METRICS}
            row["kernels_base"], row["kernels_new"] = before["kernels"], after["kernels"]
            row["instances"] = before["instances"]
            row["wall_base"], row["wall_new"] = before["wall"], after["wall"]
            row["idle_base"], row["idle_new"] = before["host"], after["host"]
            row["kernels_added"] = sorted(after["names"] - before["names"])
            row["kernels_removed"] = sorted(before["names"] - after["names"])
        if before and after and before["run"] and after["run"]:
            row["loop"] = _loop_row(before["run"], after["run"], threshold_pct)
        rows.append(row)
    chosen = pick_metric(rows) if metric == "auto" else metric
    for r in rows:
        change = r["change_pct"].get(chosen)
        r["warmup"] = bool(apart_prefix(r["variant"]))
        r["regression"] = not r["warmup"] and (r["loop"]["verdict"] == "slower" if "loop" in r
                                               else change is not None
                                               and change > threshold_pct)
    rows.sort(key=lambda r: (-_stake(r, chosen), r["variant"].count("/")))
    fa, fb = _finding_keys(base), _finding_keys(new)
    changes = step_changes(base, new, threshold_pct)
    return {"threshold_pct": threshold_pct, "metric": chosen, "step_changes": changes,
            "comparability": comparability(base, new), "totals": totals(base, new),
            "variants": rows, "steps": steps(rows), "ops": op_changes(base, new),
            "findings_new": [fb[k] for k in fb if k not in fa],
            "findings_gone": [fa[k] for k in fa if k not in fb],
            "regressions": [f"steps ({c['new']['source']})" for c in changes
                            if c["regression"]]
            + [r["variant"] for r in rows if r.get("regression")]}


def _loop_row(a: tuple, b: tuple, threshold_pct: float) -> dict[str, Any]:
    """A loop both runs have: its cost per instance as it runs and its median step with
    the interval on each side, the change and the verdict (loops.stats.loop_verdict)."""
    change = _change(a[0], b[0])
    return {"run_base": a[0], "run_new": b[0], "change_pct": change,
            "step_base": list(a[1:]), "step_new": list(b[1:]),
            "verdict": loop_verdict(a[1:], b[1:], change or 0.0, threshold_pct)}


def loop_lines(diff: dict[str, Any]) -> list[str]:
    """The loops both runs have, as they run: first on the page after the steps."""
    loops = [r for r in diff["variants"] if "loop" in r and not r["warmup"]][:TOP_ROWS]
    if not loops:
        return []
    out = ["Loops as they run (cost per instance from the first start to the end of the GPU "
           "work queued; a loop is gated on it only where the median steps' intervals do "
           "not overlap):", ""]
    for r in loops:
        x = r["loop"]
        out.append(f"- {code(short(r['variant']))}: {us(x['run_base'])} → {us(x['run_new'])} "
                   f"({_pct(x['change_pct'])}); median step {us(x['step_base'][0])} "
                   f"({us(x['step_base'][1])} to {us(x['step_base'][2])}) → "
                   f"{us(x['step_new'][0])} ({us(x['step_new'][1])} to "
                   f"{us(x['step_new'][2])}): **{x['verdict']}**")
    return out + [""]


def steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user's loop ranges both runs have (repeated, no repeated range around them):
    wall time per instance before and after, and what the change is made of."""
    loops = {r["variant"] for r in rows if r.get("metrics_base") and r["instances"] >= 3}
    out = []
    for r in rows:
        name = r["variant"]
        parts = name.split("/")
        if name not in loops or any("/".join(parts[:i]) in loops for i in range(1, len(parts))):
            continue
        b, n = r["metrics_base"], r["metrics_new"]
        out.append({"range": name, "instances": r["instances"], "wall_base": r["wall_base"],
                    "wall_new": r["wall_new"],
                    "change_pct": _change(r["wall_base"], r["wall_new"]),
                    "gpu_busy_change_ns": n["busy"] - b["busy"],
                    "kernel_change_ns": n["kernel"] - b["kernel"],
                    "idle_change_ns": r["idle_new"] - r["idle_base"]})
    return out


def op_changes(base: SystemsDoc, new: SystemsDoc) -> list[dict[str, Any]]:
    """emit_nvtx ops (forward and backward rows) by kernel time per call, most time at
    stake first."""
    a = {(o.name, o.direction): o for o in base.ops}
    out = []
    for o in new.ops:
        old = a.get((o.name, o.direction))
        if old and old.calls and o.calls:
            before, after = old.kernel_time_ns / old.calls, o.kernel_time_ns / o.calls
            out.append({"op": o.name, "direction": o.direction, "calls": o.calls,
                        "base_ns": before, "new_ns": after,
                        "change_pct": _change(before, after),
                        "stake_ns": abs(after - before) * o.calls})
    return sorted(out, key=lambda r: -r["stake_ns"])


def _stake(row: dict[str, Any], metric: str) -> float:
    """A row's time at stake in the whole trace: its change per instance x instances."""
    if not row.get("metrics_base"):
        return 0.0
    return abs(row["metrics_new"][metric] - row["metrics_base"][metric]) * row["instances"]


def _cell(r: dict[str, Any], metric: str, flag: bool) -> str:
    change = r["change_pct"].get(metric)
    if change is None:
        return "–"
    return f"{change:+.1f}%" + (" **slower**" if flag and r.get("regression") else "")


def render_diff(diff: dict[str, Any], base_name: str, new_name: str) -> str:
    m, rows = diff["metric"], diff["variants"]
    body = [[esc(short(r["variant"])),
             us((r.get("metrics_base") or {}).get(m)), us((r.get("metrics_new") or {}).get(m)),
             *(_cell(r, x, x == m) for x in METRICS),
             f"{num(r.get('kernels_base'))} → {num(r.get('kernels_new'))}",
             esc(short(", ".join(r.get("kernels_added") or []), 60)) or "–",
             esc(short(", ".join(r.get("kernels_removed") or []), 60)) or "–"]
            for r in rows[:TOP_ROWS]]
    regressions = diff["regressions"]
    named = ", ".join(short(n, 60) for n in regressions[:10])
    more = f" and {len(regressions) - 10} more" if len(regressions) > 10 else ""
    lines = [f"# Diff: {code(base_name)} → {code(new_name)}", ""] + headline_lines(diff)
    lines += loop_lines(diff)
    lines += context_lines(diff) + _steps_lines(diff)
    lines += [f"Ranges, mean per iteration (warm-up instances in rows of their own, never "
              f"gated). span: the range's own GPU span (as `nsys stats`); kernel: its "
              "kernel time, own and other threads' (backward included); busy: its wall "
              f"time with any GPU operation running. Gate: `{m}` slower by more than "
              f"{diff['threshold_pct']:g}%. Rows: most time at stake in the whole trace "
              "first (change per instance x instances).", "",
              f"**{len(regressions)} regression(s)**: {esc(named)}{esc(more)}."
              if regressions else "No regression.", ""]
    lines += table(["variant or range", f"base {m}", f"new {m}", "span", "kernel", "busy",
                    "kernels / iter", "kernels added", "kernels removed"], body, "lrrrrrrll") \
        if body else ["No range of the user's in both captures (the steps above compare "
                      "them)."]
    if len(rows) > TOP_ROWS:
        lines += ["", f"{len(rows) - TOP_ROWS} more rows with smaller changes are in the "
                  "diff's JSON."]
    lines += _ops_lines(diff)
    for title, key in (("Findings that appeared", "findings_new"),
                       ("Findings that went away", "findings_gone")):
        found = diff[key]
        lines += ["", f"## {title}", ""]
        lines += [f"- {f.rule} {code(short(f.range or '-'))}: {esc(short(f.message, 200))}"
                  for f in found[:10]] or ["None."]
        if len(found) > 10:
            lines.append(f"- and {len(found) - 10} more (in the diff's JSON)")
    return "\n".join(reflow(lines)) + "\n"


def _steps_lines(diff: dict[str, Any]) -> list[str]:
    """The headline: each loop range's wall time per instance, before -> after."""
    out = []
    for s in diff.get("steps", []):
        change = s["change_pct"] or 0.0
        out.append(f"- **{esc(short(s['range']))}**: {us(s['wall_base'])} → "
                   f"{us(s['wall_new'])} mean per instance ({change:+.1f}%; "
                   f"{num(s['instances'])} instances). Of the change: GPU busy "
                   f"{s['gpu_busy_change_ns'] / 1e3:+,.1f} µs, idle (host, launches, waits) "
                   f"{s['idle_change_ns'] / 1e3:+,.1f} µs; kernel time "
                   f"{s['kernel_change_ns'] / 1e3:+,.1f} µs.")
    return (["Wall time of the loop ranges, mean per instance (their steady instances; "
             "the steps above give the median):", "", *out, ""]) if out else []


def _ops_lines(diff: dict[str, Any]) -> list[str]:
    ops = diff.get("ops") or []
    if not ops:
        return []
    body = [[esc(short(o["op"])), o["direction"], num(o["calls"]), us(o["base_ns"]),
             us(o["new_ns"]), f"{o['change_pct']:+.1f}%" if o["change_pct"] is not None
             else "–"] for o in ops[:10]]
    return ["", "## Ops (emit_nvtx), kernel time per call", ""] + table(
        ["op", "direction", "calls", "base", "new", "change"], body, "llrrrr")


TOTALS = (("busy_ns", "GPU busy"), ("compute_ns", "compute kernels"),
          ("communication_ns", "communication kernels (NCCL)"),
          ("memory_ns", "copies and sets"), ("idle_ns", "GPU idle"),
          ("exposed_comm_ns", "exposed communication"))


def step_changes(base: SystemsDoc, new: SystemsDoc, threshold_pct: float
                 ) -> list[dict[str, Any]]:
    """One row per process both captures have steps for (matched by pid order)."""
    out = []
    for a, b in zip(base.steps, new.steps, strict=False):
        change = 100.0 * (b.median_ns - a.median_ns) / a.median_ns if a.median_ns else None
        lo, hi = change_interval(np.array(a.durations_ns), np.array(b.durations_ns))
        verdict = ("slower" if lo > threshold_pct else "faster" if hi < -threshold_pct
                   else "within noise")
        out.append({"base": _side(a), "new": _side(b), "change_pct": change,
                    "change_low_pct": lo, "change_high_pct": hi, "verdict": verdict,
                    "regression": verdict == "slower"})
    return out


def _side(s: StepSet) -> dict[str, Any]:
    return {"pid": s.pid, "source": s.source, "name": s.name, "count": s.count,
            "warmup": s.warmup, "median_ns": s.median_ns, "median_low_ns": s.median_low_ns,
            "median_high_ns": s.median_high_ns, "mean_ns": s.mean_ns}


def comparability(base: SystemsDoc, new: SystemsDoc) -> dict[str, Any]:
    """Kernel-set overlap (the share of each side's kernel time in names both ran, and the
    share of names in common), step counts and GPUs of each side."""
    ka = {k.name: k.total_ns for k in base.kernel_summary}
    kb = {k.name: k.total_ns for k in new.kernel_summary}
    both = ka.keys() & kb.keys()
    names = len(both) / len(ka.keys() | kb.keys()) if ka or kb else 1.0
    return {"kernel_time_shared_base_pct": _share(ka, both),
            "kernel_time_shared_new_pct": _share(kb, both),
            "kernel_names_shared_pct": 100.0 * names,
            "steps_base": [s.count for s in base.steps], "steps_new": [s.count for s in new.steps],
            "gpus_base": [g.name for g in base.source.gpus],
            "gpus_new": [g.name for g in new.source.gpus]}


def _share(times: dict[str, int], names: set[str]) -> float:
    total = sum(times.values())
    return 100.0 * sum(times[n] for n in names) / total if total else 100.0


def totals(base: SystemsDoc, new: SystemsDoc) -> list[dict[str, Any]]:
    """The whole captures' totals side by side (CaptureTotals fields)."""
    a, b = base.capture or CaptureTotals(), new.capture or CaptureTotals()
    return [{"total": k, "base_ns": getattr(a, k), "new_ns": getattr(b, k)}
            for k, _ in TOTALS]


def headline_lines(diff: dict[str, Any]) -> list[str]:
    """The page's first lines: the steps' medians, their change and its interval."""
    out = []
    for i, s in enumerate(diff.get("step_changes") or []):
        a, b = s["base"], s["new"]
        where = f"process {i + 1}: " if len(diff["step_changes"]) > 1 else ""
        out.append(f"- **{where}{_said(a)} → {_said(b)}**: median {us(a['median_ns'])} → "
                   f"{us(b['median_ns'])} per step ({_pct(s['change_pct'])}, "
                   f"{pct_interval(s)}: **{s['verdict']}**; "
                   f"{a['count']} → {b['count']} steady steps, warm-up left out).")
    return (["Steps (the median of the steady steps, with its interval):", "", *out, ""]
            if out else [])


SOURCE_SAID = {"detected": "steps detected in the kernel sequence",
               "profiler marker": "profiler step markers",
               "whole capture": "the whole capture"}


def _said(side: dict[str, Any]) -> str:
    """Where one side's steps came from, in words."""
    if side["source"] in ("user range", "named") and side["name"]:
        return code(side["name"])
    return SOURCE_SAID.get(side["source"], side["source"])


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:+.1f}%"


def pct_interval(s: dict[str, Any]) -> str:
    """The change's interval in words."""
    lo, hi = s["change_low_pct"], s["change_high_pct"]
    if not np.isfinite(lo) or not np.isfinite(hi):
        return "one step on a side: no interval"
    return f"interval {lo:+.1f}% to {hi:+.1f}%"


def context_lines(diff: dict[str, Any]) -> list[str]:
    """Comparability line and the totals table."""
    c = diff["comparability"]
    gpus = ", ".join(sorted(set(c["gpus_base"]))) or "?"
    gpus_new = ", ".join(sorted(set(c["gpus_new"]))) or "?"
    lines = [f"Comparability: kernels both ran hold {pct(c['kernel_time_shared_base_pct'])} "
             f"of the base's kernel time and {pct(c['kernel_time_shared_new_pct'])} of the "
             f"new one's ({pct(c['kernel_names_shared_pct'])} of the names); steps "
             f"{c['steps_base']} → {c['steps_new']}; GPUs {len(c['gpus_base'])} ({esc(gpus)}) "
             f"→ {len(c['gpus_new'])} ({esc(gpus_new)}).", ""]
    said = dict(TOTALS)
    body = [[said[t["total"]], us(t["base_ns"]), us(t["new_ns"]),
             _pct(100.0 * (t["new_ns"] - t["base_ns"]) / t["base_ns"] if t["base_ns"]
                  else None)] for t in diff["totals"]]
    return lines + ["Whole captures (every device, from its first operation to its last):",
                    ""] + table(["total", "base", "new", "change"], body, "lrrr") + [""]
