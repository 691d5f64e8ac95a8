"""What a Compute finding saves of the wall time: its kernels made as fast as the finding
says they can be, replayed on the Systems step model of the range that launched them.

A Compute finding prices its cause in kernel time (the profiled launches, replayed by
ncu); whether the step gets shorter depends on what held its critical path. Where the
Systems run models the finding's range as a loop (timeline/), the step is replayed with
every launch of the finding's kernel names scaled by its own speed-up (1 - saving over
the profiled launches' time: `faster_kernels`), and the difference, over the loop's steady
steps, goes into the finding's evidence (`wall_saving_ns`) and message.
"""

from __future__ import annotations

from ..documents.findings import ordered, share_pct
from ..documents.types import ComputeDoc, Finding
from ..loops.changes import CHANGES
from ..loops.model import StepModels
from ..trace.launch_ranges import base_name
from .pricing import Pricer, exact_names


def wall_savings(doc: ComputeDoc, steps: StepModels, loops: set[str],
                 wall_ns: float = 0.0) -> int:
    """Price each Compute finding of a modeled loop (`loops`: the Systems document's ranges
    with modeled instances) by its replayed wall-time saving, its graphs built from `steps`
    only for the loops the findings name: the saving, as a share of the Systems run's
    analyzed wall time `wall_ns`, ranks it beside the Systems findings; return how many
    got one, the findings re-ordered."""
    if not steps.readable or not loops:
        return 0
    pricer = Pricer(steps, loops)
    priced = 0
    for f in doc.findings:
        wall = _replayed(f, doc, pricer)
        if wall is None:
            continue
        factor, total = wall
        f.evidence = {**f.evidence, "wall_saving_ns": total, "kernel_speed_factor": factor}
        f.saving_ns, f.saving_per_instance_ns = float(total), total / max(f.iterations, 1)
        f.not_priced, f.change = "", "faster_kernels"
        f.saving_model = CHANGES["faster_kernels"]
        f.share_pct = share_pct(total, wall_ns)
        f.share_of = "wall time"
        f.message += (f" Replayed on the Systems step model of {f.range} with these kernels "
                      f"{100 * (1 - factor):.0f}% faster: {total / 1e3:,.1f} µs of wall time "
                      "over its "
                      "steady steps" + (" (the kernels are off its critical path)."
                                        if total == 0 else "."))
        priced += 1
    doc.findings = ordered(doc.findings)
    return priced


def _replayed(f: Finding, doc: ComputeDoc, pricer: Pricer) -> tuple[float, int] | None:
    """(speed factor, whole-trace wall saving ns) of one finding, or None."""
    ev = f.evidence if isinstance(f.evidence, dict) else {}
    launches = [doc.kernels[i] for i in ev.get("launches", []) if i < len(doc.kernels)]
    spent = sum(k.duration_ns or 0 for k in launches)
    kernel_saving = float(ev.get("kernel_saving_ns") or 0.0)
    if not f.range or not spent or not kernel_saving:
        return None
    factor = max(0.0, 1.0 - kernel_saving / spent)
    pattern = exact_names({base_name(k.name) for k in launches})
    proxy = Finding(rule=f.rule, severity=f.severity, range=f.range, kernel=None,
                    message="", evidence={"pattern": pattern, "speed_factor": factor},
                    suggestion="", change="faster_kernels")
    total = pricer.price(proxy)
    return None if total is None else (factor, int(round(total)))
