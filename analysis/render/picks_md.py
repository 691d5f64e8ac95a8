"""The Nsight Compute plan, printed before any GPU time is spent (`python -m analysis
picks`): the kernels and their share, the launches to profile, the ncu arguments of each
run, and the estimate of the time; drawn from the plan's JSON form (picks.plan_dict)
alone."""

from __future__ import annotations

import shlex
from typing import Any

from .text import esc, pct, reflow, short, table, us


def plan_text(p: dict[str, Any]) -> str:
    """The plan (its JSON form) as a markdown page."""
    per: dict[str, int] = {}
    for t in p["targets"]:
        per[t["name"]] = per.get(t["name"], 0) + 1
    body = [[esc(short(k["name"], 70)), us(k["steady_ns"]), pct(k["share_pct"]),
             str(per.get(k["name"], 0))] for k in p["kernels"]]
    lines = [f"# Nsight Compute plan: {esc(p['source'])}", "",
             f"{len(p['kernels'])} kernel name(s) cover {pct(p['covered_pct'])} of the "
             f"steady-state GPU time ({us(p['steady_ns'])}), every loop and thread:", ""]
    lines += table(["kernel", "steady GPU time", "share", "configurations"], body, "lrrr")
    lines += ["", f"{p['launches']} launch(es) to profile, one per launch configuration "
              "(the configurations with the most GPU time), in "
              f"{len(p['runs'])} ncu run(s):", ""]
    lines += table(["kernel", "configuration", "its steady time", "launches", "invocation"],
                   [[esc(short(t["name"], 50)), t["config"], us(t["steady_ns"]),
                     str(t["launches"]), str(t["invocation"])] for t in p["targets"]], "llrrr")
    lines += ["", "ncu arguments, one run each (beside the section set `make compute` "
              "gives):", ""]
    lines += [f"    {shlex.join(r['ncu_args'])}" for r in p["runs"]] + [""]
    lines += _left(p)
    until = " + ".join(f"{r['until_s']:.1f}" for r in p["runs"])
    lines += [f"Estimate: {p['estimate_s']:.1f} s = {len(p['runs'])} run(s) x "
              f"{p['run_overhead_s']:g} s start + {p['slowdown']:g} x ({until}) s of the "
              "program until each run's last launch (then it is stopped) + "
              f"{p['launches']} launch(es) x {p['passes_per_launch']} passes x (the kernel + "
              f"{p['pass_overhead_s']:g} s).", ""]
    return "\n".join(reflow(lines)) + "\n"


def _left(p: dict[str, Any]) -> list[str]:
    """What the plan leaves out, in words."""
    out = []
    if p["not_profiled"]:
        out += [f"{p['not_profiled']} more launch configuration(s) among the top ones of "
                "their names are not profiled: no run's invocation number reaches them, and "
                f"each holds under {p['run_share_pct']:g}% of the steady time (a run of their "
                "own would be the whole program again).", ""]
    if p["unreached"]:
        why = (f"the names profiled cover {pct(p['covered_pct'])} without them, so no run "
               "was made for them" if p["covered_pct"] >= p["share_pct"] else
               f"no steady launch, or no run of the {p['max_runs']} allowed reaches them")
        out += [f"Not profiled, though among the names that hold {pct(p['share_pct'])} of the "
                f"time: {esc(', '.join(p['unreached']))} ({why}).", ""]
    return out
