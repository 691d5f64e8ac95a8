"""Systems picks, Compute measures: from a systems document, the kernels Nsight Compute
should profile, each a few times, instead of a program's first launches.

`choose(doc)` takes the steady-state GPU time per kernel name (the whole trace's kernels
less those inside set-apart warm-up instances), keeps the names that cover at least
`share` of it, most time first, and finds the loop range that launches them (the
outermost repeated range with the most kernel time). `ncu_filter(picks)` gives the ncu
arguments: the loop's NVTX range, the chosen names as one regex, and, per launch
configuration (`--filter-mode per-launch-config`: each kernel and its grid, block and
shared memory counted apart), the launches to skip (the most any chosen kernel launched
in the loop's warm-up instances) and `instances` launches to profile: each hot kernel
once by default.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .apart import APART_TAGS, apart_prefix
from .documents import RangeEntry, SystemsDoc

SHARE = 0.9
"""The share of the steady-state GPU time the chosen kernels cover."""


@dataclass
class Picks:
    """The kernels chosen for Nsight Compute and how to reach them."""

    kernels: list[tuple[str, int]]            # name, steady-state GPU ns, most first
    steady_ns: int                            # every kernel's steady-state GPU time
    left_out: list[tuple[str, int]] = field(default_factory=list)
    loop: RangeEntry | None = None
    skip: int = 0                             # chosen kernels' launches before the loop's
    count: int = 0                            # steady instances, and how many to profile
    launches: int = 0                         # (per launch configuration) and in all
    other_threads: list[str] = field(default_factory=list)   # chosen, but launched by
    # another thread than the loop's (backward): the loop's NVTX range does not hold them

    @property
    def covered_pct(self) -> float:
        return 100.0 * sum(ns for _, ns in self.kernels) / self.steady_ns \
            if self.steady_ns else 0.0


def steady_time(doc: SystemsDoc) -> dict[str, int]:
    """GPU ns per kernel name outside the set-apart warm-up instances."""
    total = {k.name: k.total_ns for k in doc.kernel_summary}
    for e in doc.ranges:
        if e.warmup and apart_prefix(e.name) == e.name:
            for k in e.kernels:
                total[k.name] = total.get(k.name, 0) - k.total_ns
    return {n: ns for n, ns in total.items() if ns > 0}


def _loop(doc: SystemsDoc, names: set[str]) -> RangeEntry | None:
    """The outermost repeated steady range that launched the most of the chosen kernels."""
    loops = [e for e in doc.ranges if e.wall_instances >= 3 and not e.warmup]
    outer = [e for e in loops if not any(e.name.startswith(o.name + "/") for o in loops)]
    held = [(sum(k.total_ns for k in e.kernels if k.name in names), e) for e in outer]
    best = max(held, key=lambda t: t[0], default=(0, None))
    return best[1] if best[0] else None


def choose(doc: SystemsDoc, share: float = SHARE, instances: int = 1) -> Picks:
    """The kernels that cover `share` of the steady-state GPU time (see the module doc)."""
    steady = sorted(steady_time(doc).items(), key=lambda kv: -kv[1])
    total = sum(ns for _, ns in steady)
    chosen, covered = [], 0
    for name, ns in steady:
        if total and covered >= share * total:
            break
        chosen.append((name, ns))
        covered += ns
    picks = Picks(kernels=chosen, steady_ns=total, left_out=steady[len(chosen):])
    names = {n for n, _ in chosen}
    picks.loop = _loop(doc, names)
    if picks.loop is None:
        picks.count = instances
        return picks
    loop = picks.loop
    own = {k.name for k in loop.kernels}
    picks.other_threads = [n for n, _ in chosen if n not in own]
    picks.kernels = [(n, ns) for n, ns in chosen if n in own]
    names = {n for n, _ in picks.kernels}
    per_iter = sum(math.ceil(k.count / loop.wall_instances) for k in loop.kernels
                   if k.name in names)
    warm = {e.name: e for e in doc.ranges}
    picks.skip = max((k.count for tag in APART_TAGS for k in getattr(
        warm.get(loop.name + tag), "kernels", []) if k.name in names), default=0)
    picks.count = instances
    picks.launches = per_iter * instances
    return picks


def ncu_filter(picks: Picks) -> list[str]:
    """ncu arguments that profile the chosen kernels' steady launches."""
    regex = "|".join(re.escape(n) for n, _ in picks.kernels)
    argv = ["--kernel-name", f"regex:^({regex})$", "--filter-mode", "per-launch-config"]
    if picks.loop is not None:
        domain = f"{picks.loop.domain}@" if picks.loop.domain else ""
        argv += ["--nvtx-include", f"{domain}{picks.loop.name}/"]
    if picks.skip:
        argv += ["--launch-skip", str(picks.skip)]
    return argv + ["--launch-count", str(picks.count)]


def said(picks: Picks) -> str:
    """The compute page's note: what was chosen, what it covers, what was left out."""
    names = ", ".join(n[:60] for n, _ in picks.kernels)
    left = 100.0 * sum(ns for _, ns in picks.left_out) / max(picks.steady_ns, 1)
    rest = (f"; left out: {len(picks.left_out)} kernel name(s) holding {left:.1f}% (e.g. "
            f"{picks.left_out[0][0][:60]})" if picks.left_out else "")
    where = f" in `{picks.loop.name}`, after {picks.skip} warm-up launch(es)" \
        if picks.loop is not None else ""
    if picks.other_threads:
        rest += (f"; not reachable through the loop's NVTX range (launched by another "
                 f"thread, e.g. backward): {', '.join(n[:60] for n in picks.other_threads)}")
    return (f"Nsight Systems picked {len(picks.kernels)} kernel name(s) covering "
            f"{picks.covered_pct:.1f}% of the steady-state GPU time: {names}; "
            f"{picks.count} launch(es) of each launch configuration profiled{where}{rest}.")
