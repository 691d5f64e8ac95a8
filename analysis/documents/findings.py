"""A finding: one rule's verdict on one range (or launch), with what removing its cause
would save and what to do; how findings are ordered and which a page lists."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from ..common.settings import FINDING_MIN_PCT

Severity = typing.Literal["info", "warning", "error"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    """One rule's verdict on one range (or launch), with its numbers and what to do."""

    rule: str
    severity: Severity
    range: str | None
    kernel: str | None
    message: str
    evidence: dict[str, Any]
    suggestion: str
    saving_per_instance_ns: float = 0.0   # the most one instance (iteration) would save
    iterations: int = 1         # instances (iterations) it applies to
    saving_ns: float = 0.0      # the most the whole trace would save: per instance x
                                # instances, never more than the range's wall time
    saving_model: str = ""      # how the saving was estimated, in one sentence
    change: str | None = None   # the step model's change that priced it (loops/changes.py)
    one_time: bool = False      # a cost paid once (first calls), ranked after recurring ones
    share_pct: float = 0.0      # saving_ns as % of the analyzed time (at most 100) ...
    share_of: str = "wall time"  # ... which is this: the wall time (systems), the
                                 # profiled kernel time (compute), the ranks' step time


def ordered(findings: list[Finding]) -> list[Finding]:
    """Largest impact first, then most severe, then by range name (stable otherwise)."""
    return sorted(findings, key=lambda f: (f.share_pct < FINDING_MIN_PCT, f.one_time,
                                           -f.saving_ns, SEVERITY_ORDER[f.severity],
                                           f.range or ""))


def top_findings(findings: list[Finding], most: int = 10,
                 min_pct: float = FINDING_MIN_PCT) -> tuple[list[Finding], int]:
    """The findings a page lists: at most `most`, largest impact first, none whose impact
    saves under `min_pct` of the analyzed time; and how many more there are."""
    keep = [f for f in ordered(findings) if f.share_pct >= min_pct]
    return keep[:most], len(findings) - len(keep[:most])
