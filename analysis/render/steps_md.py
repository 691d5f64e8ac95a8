"""The steps' lines of the pages (the document's `steps`, analysis/loops/find.py): per
process where its steps came from, their median with its interval and their spread. The
page leaves them out where meta.json names variants (their table is its subject);
systems.md always has them."""

from __future__ import annotations

from ..documents.types import SystemsDoc
from .text import code, dur, esc

STEP_SAID = {"user range": "the range {name}", "named": "the range {name} (--step)",
             "profiler marker": "the profiler's step markers",
             "detected": "the repeating kernel sequence of GPU {device} ({period} kernels "
                         "a step)", "whole capture": "the whole capture, as one step"}


def steps_lines(doc: SystemsDoc) -> list[str]:
    """The steps each process ran (loops/find.py): where they came from, their median and
    spread, why the sources before gave none."""
    out = []
    for s in doc.steps:
        where = STEP_SAID.get(s.source, s.source).format(
            name=code(s.name or ""), device=s.device, period=s.period_kernels)
        who = f"Process {s.pid}: " if len(doc.steps) > 1 else ""
        nccl = f", {s.nccl_per_step} NCCL calls each" if s.nccl_per_step else ""
        out.append(f"{who}{s.count} steady step(s) from {where}{nccl}: median "
                   f"{dur(s.median_ns)} (95% interval {dur(s.median_low_ns)}–"
                   f"{dur(s.median_high_ns)}; 10th–90th percentile {dur(s.p10_ns)}–"
                   f"{dur(s.p90_ns)})" + (f", {s.warmup} warm-up step(s) left out"
                                           if s.warmup else "") + "."
                   + (f" ({esc(s.note)}.)" if s.note and s.source != "user range" else ""))
    return [*out, ""] if out else []


def steps_section(doc: SystemsDoc) -> list[str]:
    """systems.md's section of the steps."""
    lines = steps_lines(doc)
    return ["## Steps", "", *lines] if lines else []
