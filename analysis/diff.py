"""Run-to-run comparison of two systems/1 documents, with a regression gate.

Per variant (or per range when the runs have no meta.json): time per iteration before
and after and the change in percent, kernels per iteration, kernel names that appeared
or went away; findings that appeared or went away. A variant slower by more than the
threshold (percent) is a regression.
"""

from __future__ import annotations

from typing import Any

from .documents import Finding, SystemsDoc
from .render.markdown import esc, num, table, us


def _per_variant(doc: SystemsDoc) -> dict[str, dict[str, Any]]:
    """variant (or range) -> time_ns per iteration, kernels per iteration, kernel names."""
    ranges = {e.name: e for e in doc.ranges}
    out = {}
    for r in doc.variants:
        if not r.missing:
            names = {k.name for k in ranges[r.range].kernels}
            out[r.variant] = {"time_ns": r.time_per_iter_ns, "kernels": r.kernels_per_iter,
                              "names": names}
    if out:
        return out
    for e in doc.ranges:
        n = max(e.instances, 1)
        out[e.name] = {"time_ns": e.gpu_span_ns / n, "kernels": e.kernel_count / n,
                       "names": {k.name for k in e.kernels}}
    return out


def _finding_keys(doc: SystemsDoc) -> dict[tuple, Finding]:
    return {(f.rule, f.range, f.kernel): f for f in doc.findings}


def compare(base: SystemsDoc, new: SystemsDoc, threshold_pct: float) -> dict[str, Any]:
    """The diff document; `regressions` lists variants slower by more than the threshold."""
    a, b = _per_variant(base), _per_variant(new)
    rows = []
    for name in [*a, *(n for n in b if n not in a)]:
        before, after = a.get(name), b.get(name)
        row: dict[str, Any] = {"variant": name, "base": before and before["time_ns"],
                               "new": after and after["time_ns"]}
        if before and after:
            row["change_pct"] = 100.0 * (after["time_ns"] - before["time_ns"]) / before["time_ns"]
            row["kernels_base"], row["kernels_new"] = before["kernels"], after["kernels"]
            row["kernels_added"] = sorted(after["names"] - before["names"])
            row["kernels_removed"] = sorted(before["names"] - after["names"])
            row["regression"] = row["change_pct"] > threshold_pct
        rows.append(row)
    fa, fb = _finding_keys(base), _finding_keys(new)
    return {"threshold_pct": threshold_pct, "variants": rows,
            "findings_new": [fb[k] for k in fb if k not in fa],
            "findings_gone": [fa[k] for k in fa if k not in fb],
            "regressions": [r["variant"] for r in rows if r.get("regression")]}


def render_diff(diff: dict[str, Any], base_name: str, new_name: str) -> str:
    body = []
    for r in diff["variants"]:
        change = r.get("change_pct")
        flag = " **slower**" if r.get("regression") else ""
        body.append([esc(r["variant"]), us(r["base"]), us(r["new"]),
                     "–" if change is None else f"{change:+.1f}%{flag}",
                     f"{num(r.get('kernels_base'))} → {num(r.get('kernels_new'))}",
                     esc(", ".join(r.get("kernels_added") or [])) or "–",
                     esc(", ".join(r.get("kernels_removed") or [])) or "–"])
    lines = [f"# Diff: `{esc(base_name)}` → `{esc(new_name)}`", "",
             f"Regression gate: slower by more than {diff['threshold_pct']:g}% per iteration. "
             + (f"**{len(diff['regressions'])} regression(s)**: "
                f"{esc(', '.join(diff['regressions']))}." if diff["regressions"] else
                "No regression."), ""]
    lines += table(["variant", "base / iter", "new / iter", "change", "kernels / iter",
                    "kernels added", "kernels removed"], body, "lrrrrll")
    for title, key in (("Findings that appeared", "findings_new"),
                       ("Findings that went away", "findings_gone")):
        lines += ["", f"## {title}", ""]
        lines += [f"- {f.rule} `{f.range or '-'}`: {esc(f.message)}"
                  for f in diff[key]] or ["None."]
    return "\n".join(lines) + "\n"
