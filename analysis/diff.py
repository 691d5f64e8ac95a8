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
"""

from __future__ import annotations

import re
from typing import Any

from .apart import apart_prefix
from .diff_steps import comparability, context_lines, headline_lines, step_changes, totals
from .documents import Finding, SystemsDoc, entry_column, entry_pick
from .library import library_mask
from .render.markdown import esc, num, reflow, short, table, us
from .render.text import code

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
          if k and not x and not is_op_range(n)]
    for e in entry_pick(doc.ranges, at):
        out[e.name] = _metrics([e], max(e.instances, 1))
    return out


def _metrics(entries: list, n: int) -> dict[str, Any]:
    return {"instances": n, "wall": sum(e.wall_ns for e in entries) / n,
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
        rows.append(row)
    chosen = pick_metric(rows) if metric == "auto" else metric
    for r in rows:
        change = r["change_pct"].get(chosen)
        r["warmup"] = bool(apart_prefix(r["variant"]))
        r["regression"] = change is not None and change > threshold_pct and not r["warmup"]
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

