"""The diff's headline: each process's steps before and after, with the noise measured.

Per process (matched in pid order), the steady steps' median on each side with its
interval (step_stats.median_interval) and the change between the medians with its
bootstrap interval (step_stats.change_interval): `slower` only when the whole interval
lies above the threshold, `faster` when it lies below minus the threshold, else `within
noise`. Warm-up steps are not in them (step_find.py). Beside them: how comparable the two
captures are (the kernels both ran, by GPU time; step counts; GPUs) and the whole
captures' totals (GPU busy, kernel time by kind, idle, exposed communication).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .documents import CaptureTotals, StepSet, SystemsDoc
from .render.markdown import esc, pct, table, us
from .render.text import code
from .step_stats import change_interval

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
