"""The findings a report lists: the ranked ones (what each saves), then the warnings the
loop model cannot price (each says why)."""

from __future__ import annotations

from ..documents.types import Finding, ordered, top_findings
from .text import code, dur, esc, short


def impact(f: Finding) -> str:
    """What removing the cause would save at most, as a reader weighs it."""
    if f.not_priced:
        return "not priced"
    if not f.saving_ns:
        return "no saving estimated"
    per = (f", {dur(f.saving_per_instance_ns)} per instance of {f.iterations}"
           if f.iterations > 1 else "")
    return f"saves up to {dur(f.saving_ns)}{per}, {f.share_pct:.1f}% of the {f.share_of}"


def findings_section(findings: list[Finding], where: str = "the JSON document") -> list[str]:
    """The findings that matter: at most 10, largest impact first, none under 1% of the
    analyzed time; one line each with what it would save, then the suggestion."""
    lines = ["## Findings", ""]
    if not findings:
        return lines + ["No rule fired (rules and thresholds: docs/rules.md).", ""]
    top, more = top_findings(findings)
    for f in top:
        lines += _finding_lines(f)
    if not top:
        lines.append("No finding would save 1% or more of the analyzed time.")
    unpriced = [f for f in ordered(findings) if f.not_priced and f.severity != "info"
                ][:UNPRICED_SHOWN]
    if unpriced:
        for f in unpriced:                   # each says why, after the ranked ones
            lines += _finding_lines(f, 150)
    more -= len(unpriced)
    if more:
        lines.append(f"{more} more finding(s) that would save less are in {where}.")
    return lines + [""]


UNPRICED_SHOWN = 3
"""Warnings without a saving (Finding.not_priced) listed under the priced findings."""


def _finding_lines(f: Finding, most: int = 300) -> list[str]:
    """One finding: severity, rule, range, what it saves (or why it is not priced), its
    message (at most `most` characters); then the suggestion."""
    place = f" {code(short(f.range))}" if f.range else ""
    said = f"not priced: {f.not_priced}" if f.not_priced else impact(f)
    return [f"- **{f.severity}** {f.rule}{place} ({esc(said)}): {esc(short(f.message, most))}  ",
            f"  Suggestion: {esc(f.suggestion)}"]
