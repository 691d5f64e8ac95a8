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
                                # instances, never more than the range's wall time (a
                                # change of the whole step: its loop's) nor the cost as
                                # it runs of the loop around it
    saving_model: str = ""      # how the saving was estimated, in one sentence
    not_priced: str = ""        # why the loop model cannot price it ("" when it did):
                                # its saving is then 0, and no formula stands in
    change: str | None = None   # the step model's change that priced it (loops/changes.py)
    one_time: bool = False      # a cost paid once (first calls), ranked after recurring ones
    share_pct: float = 0.0      # saving_ns as % of the analyzed time (at most 100) ...
    share_of: str = "wall time"  # ... which is this: the wall time (systems), the
                                 # profiled kernel time (compute), the ranks' step time


def rank_key(f: Finding) -> tuple:
    """Largest impact first (unpriced Compute findings by their kernels' own saving,
    evidence kernel_saving_ns), then most severe, then by range name."""
    ev = f.evidence if isinstance(f.evidence, dict) else {}
    return (f.share_pct < FINDING_MIN_PCT, f.one_time, -f.saving_ns,
            -ev.get("kernel_saving_ns", 0.0), SEVERITY_ORDER[f.severity], f.range or "")


def ordered(findings: list[Finding]) -> list[Finding]:
    """The findings by rank_key (stable otherwise)."""
    return sorted(findings, key=rank_key)


def share_pct(saving_ns: float, total_ns: float) -> float:
    """A saving as % of the analyzed time (Finding.share_pct): at most 100, 0 without one."""
    return min(round(100.0 * saving_ns / total_ns, 2), 100.0) if total_ns else 0.0


def top_findings(findings: list[Finding], most: int = 10,
                 min_pct: float = FINDING_MIN_PCT) -> tuple[list[Finding], int]:
    """The findings a page lists: at most `most`, largest impact first, none whose impact
    saves under `min_pct` of the analyzed time; and how many more there are."""
    keep = [f for f in ordered(findings) if f.share_pct >= min_pct]
    return keep[:most], len(findings) - len(keep[:most])


NONE_APPLIES = {
    "gpu": "no rule found a kernel to make faster or remove (Nsight Compute, `make compute`, "
           "says how near each kernel is to its floor)",
    "cpu": "no rule names the host work between its calls (Python samples, `make systems "
           "SAMPLE=cpu`, name the lines that spend it)",
    "launch": "no sequence of its kernels was short enough for launch_bound (a CUDA graph "
              "removes launch calls: torch.compile mode='reduce-overhead')",
    "sync": "it waits for GPU work that would hold it anyway: removing the wait saves "
            "nothing while the GPU is busy",
    "copy_h2d": "no rule found its copies pageable, blocking or on the compute stream",
    "copy_d2h": "no rule found its copies pageable, blocking or on the compute stream",
    "copy_other": "its sets and device copies are GPU work no rule removes",
    "memory": "its memory calls stay under alloc_in_loop's threshold",
    "module": "its module loads stay under kernel_loads_per_call's threshold",
    "other_cuda": "no rule names its other CUDA calls",
    "os": "no rule names its OS calls (I/O, sleep, locks): CPU samples name the code",
    "gil": "its waits for the GIL stay under gil_contention's threshold",
    "other_thread": "no rule prices the other thread's work (the autograd engine's "
                    "backward launches go with a CUDA graph of the whole step: torch.compile "
                    "mode='reduce-overhead')",
}
"""Why no finding applies to what holds a loop's critical path most, per category
(entries.CATEGORIES): the page says it where the loop has no priced finding."""
