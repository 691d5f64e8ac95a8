"""Systems picks, Compute measures: the plan of what Nsight Compute profiles, made from
the Systems run of the same program over the whole program, every loop and thread.

1. The kernel names that cover SHARE of the steady-state GPU time (every kernel of the
   trace less those inside set-apart warm-up instances), most time first.
2. Per name, its launch configurations (grid, block, shared memory) by the GPU time their
   steady launches held: the `instances` that held the most (settings.NCU_INSTANCES).
   A steady launch is one past the name's launches inside warm-up instances and past its
   first (load/nsys_launches.py numbers each launch as Nsight Compute counts invocations).
3. Each chosen configuration is one target, reached by its kernel name and one of its
   invocation numbers, on whatever thread launched it (the backward's GEMMs on the
   autograd thread too): no NVTX range is needed. Nsight Compute takes one `--kernel-id`
   per run, `::regex:^(A|B)$:N` profiling the N-th invocation of each name listed, so the
   targets are grouped into runs by a common invocation number (`group`): a run profiles
   exactly its targets, one launch each; every name's top configuration decides the runs,
   most time first until the runs reach SHARE (a name past it is left out: each launch
   profiled costs its replay passes), the other configurations of the names reached join
   a run, or get runs of their own when they hold NCU_RUN_SHARE of the steady time, else
   are left (a run is the whole program under ncu).
4. Each run stops the program once its launches are profiled (`--launch-count`,
   `--kill`). Where the command is a Python program that launched every target itself
   (`own_process`), ncu follows that process alone (`--target-processes
   application-only`): under ncu's default (every process of the tree), the DataLoader
   worker processes of a training script ran so slowly that a 27 ms step took 12.3 s on the
   H200 (115 s for a run the plan put at 17 s; 13 s with the option). The time it will
   take, before any is spent: per run NCU_RUN_OVERHEAD_S plus
   the program under ncu (NCU_SLOWDOWN times the Systems timeline up to the run's last
   target launch), per profiled launch NCU_PASSES replay passes of the kernel plus
   NCU_PASS_OVERHEAD_S each.
`python -m analysis picks REPORT [--json]` prints it; `make compute` runs it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..common.names import apart_prefix
from ..common.settings import (
    NCU_INSTANCES,
    NCU_MAX_RUNS,
    NCU_PASS_OVERHEAD_S,
    NCU_PASSES,
    NCU_RUN_OVERHEAD_S,
    NCU_RUN_SHARE,
    NCU_SLOWDOWN,
)
from ..documents.types import SystemsDoc, entry_column, entry_pick

SHARE = 0.9
"""The share of the steady-state GPU time the profiled kernels cover."""
POOL_SHARE = 0.995
"""The names the plan may pick from: those that cover this share of the steady time ..."""
POOL_NAMES = 60
"""... at most this many of them."""
CANDIDATES = 4096
"""Invocation numbers kept per target for the grouping (evenly spaced among its steady
launches: a kernel launched a million times needs no million votes)."""


@dataclass
class Target:
    """One launch configuration of a chosen kernel name, reached by one invocation."""

    name: str
    config: str                       # "grid x,y,z block x,y,z shared N"
    steady_ns: int                    # GPU time of its steady launches
    launches: int                     # its steady launches
    duration_ns: float                # their mean duration
    invocation: int = 0               # the one profiled (Nsight Compute's numbering)
    candidates: list[int] = field(default_factory=list, repr=False)
    starts: list[int] = field(default_factory=list, repr=False)   # each candidate's start,
    # ns after the program's first kernel (when a run reaches it)
    range: str = ""                   # the user's range that launched the profiled launch
    thread: str = ""                  # "own" (its thread) or "other thread" (backward)
    call_ns: int = 0                  # when its launch call started

    @property
    def at_s(self) -> float:
        """Seconds into the program the profiled launch comes (0: none chosen)."""
        return self.starts[self.candidates.index(self.invocation)] * 1e-9 \
            if self.invocation in self.candidates else 0.0


@dataclass
class Run:
    """One ncu run: the N-th invocation of each of its names; the program is stopped once
    they are profiled (`--kill`), `until_s` into it."""

    invocation: int
    names: list[str]
    until_s: float = 0.0
    own_process: bool = False             # the launched process alone (see the module doc)

    def argv(self) -> list[str]:
        regex = "|".join(re.escape(n) for n in self.names)
        only = ["--target-processes", "application-only"] if self.own_process else []
        return ["--kernel-id", f"::regex:^({regex})$:{self.invocation}",
                "--launch-count", str(len(self.names)), "--kill", "yes", *only]


LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch", "accelerate",
             "deepspeed", "mpi4py")
"""Python modules that start the program in other processes (`python -m ...`)."""


def own_process(command: list[str], pids: set[int]) -> bool:
    """Whether the command's own process launched the kernels: a Python interpreter (or a
    script) that is no launcher module, and one process launched them all."""
    if len(pids) != 1 or not command:
        return False
    exe = command[0].rsplit("/", 1)[-1]
    if exe.endswith(".py"):
        return True
    if not re.fullmatch(r"python[\d.]*", exe):
        return False
    module = command[command.index("-m") + 1] if "-m" in command[:-1] else ""
    return not module.startswith(LAUNCHERS)


@dataclass
class Plan:
    """What Nsight Compute profiles, why, and how long it will take."""

    kernels: list[tuple[str, int]]            # chosen names, steady-state GPU ns, most first
    steady_ns: int                            # every kernel's steady-state GPU time
    left_out: list[tuple[str, int]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)   # chosen, no steady launch found
    not_profiled: int = 0                     # configurations no run's number reaches
    program_s: float = 0.0                    # the capture's GPU span
    max_runs: int = NCU_MAX_RUNS              # ncu runs allowed

    @property
    def covered_pct(self) -> float:
        return 100.0 * sum(ns for _, ns in self.kernels) / self.steady_ns \
            if self.steady_ns else 0.0

    @property
    def estimate_s(self) -> float:
        """Seconds the plan should take on the GPU machine (see the module doc)."""
        passes = sum(NCU_PASSES * (t.duration_ns * 1e-9 + NCU_PASS_OVERHEAD_S)
                     for t in self.targets)
        return sum(NCU_RUN_OVERHEAD_S + NCU_SLOWDOWN * r.until_s for r in self.runs) + passes


def steady_time(doc: SystemsDoc) -> dict[str, int]:
    """GPU ns per kernel name outside the set-apart warm-up instances."""
    total = {k.name: k.total_ns for k in doc.kernel_summary}
    for name, n in warmup_counts(doc, "total_ns").items():
        total[name] = total.get(name, 0) - n
    return {n: ns for n, ns in total.items() if ns > 0}


def warmup_counts(doc: SystemsDoc, what: str = "count") -> dict[str, int]:
    """Per kernel name, its launches (or GPU ns) inside set-apart warm-up instances (only
    those entries made: a document may hold 100k ranges)."""
    names, warm = entry_column(doc.ranges, "name"), entry_column(doc.ranges, "warmup")
    at = [i for i, (n, w) in enumerate(zip(names, warm, strict=True))
          if w and apart_prefix(n) == n]
    out: Counter = Counter()
    for e in entry_pick(doc.ranges, at):
        for k in e.kernels:
            out[k.name] += getattr(k, what)
    return dict(out)


def choose(doc: SystemsDoc, share: float = SHARE,
           ranked: list[tuple[str, int]] | None = None) -> Plan:
    """The names that cover `share` of the steady-state GPU time (no targets yet);
    `ranked`: steady_time, most first, where the caller has it already."""
    steady = ranked if ranked is not None else sorted(steady_time(doc).items(),
                                                      key=lambda kv: -kv[1])
    total = sum(ns for _, ns in steady)
    chosen, covered = [], 0
    for name, ns in steady:
        if total and covered >= share * total:
            break
        chosen.append((name, ns))
        covered += ns
    span = doc.capture.span_ns if doc.capture else 0
    return Plan(kernels=chosen, steady_ns=total, left_out=steady[len(chosen):],
                program_s=span * 1e-9)


def plan(doc: SystemsDoc, launches: pd.DataFrame, instances: int = NCU_INSTANCES,
         share: float = SHARE, max_runs: int = NCU_MAX_RUNS) -> Plan:
    """The whole plan from a systems document and the launches of its candidate names
    (`candidates(doc)`, load/nsys_launches.launches): the runs that reach `share` of the
    steady GPU time in as few runs as they can (`max_runs` at most), the names they
    profile, what is left."""
    ranked = sorted(steady_time(doc).items(), key=lambda kv: -kv[1])
    pool = choose(doc, POOL_SHARE, ranked)
    time_of = dict(pool.kernels)
    found = targets(launches, warmup_counts(doc), instances)
    p = Plan(kernels=[], steady_ns=pool.steady_ns, program_s=pool.program_s,
             max_runs=max_runs)
    p.runs = group(found, time_of, share * pool.steady_ns,
                   NCU_RUN_SHARE / 100 * pool.steady_ns, max_runs)
    p.targets = [t for t in found if t.invocation]
    for r in p.runs:
        r.until_s = max((t.at_s for t in p.targets if t.invocation == r.invocation
                         and t.name in r.names), default=0.0)
    reached = {t.name for t in p.targets}
    p.kernels = [(n, ns) for n, ns in pool.kernels + pool.left_out if n in reached]
    p.left_out = [(n, ns) for n, ns in pool.kernels + pool.left_out if n not in reached]
    p.not_profiled = sum(t.name in reached and not t.invocation for t in found)
    p.unreached = [n for n, _ in choose(doc, share, ranked).kernels if n not in reached]
    return p


def candidates(doc: SystemsDoc) -> list[str]:
    """The names whose launches the plan reads: those that cover POOL_SHARE of the steady
    GPU time (a name below the SHARE cut is reached where a bigger one is not)."""
    return [n for n, _ in choose(doc, POOL_SHARE).kernels][:POOL_NAMES]


def targets(launches: pd.DataFrame, warm: dict[str, int], instances: int) -> list[Target]:
    """Per name, its `instances` launch configurations with the most steady GPU time."""
    if launches.empty:
        return []
    skip = launches["name"].map(lambda n: warm.get(n, 0)).to_numpy()
    steady = launches[(launches["invocation"].to_numpy() > skip)
                      & (launches["invocation"].to_numpy() > 1)]
    if steady.empty:
        steady = launches
    steady = steady.assign(since=steady["start_ns"] - int(launches["start_ns"].min()))
    per = steady.groupby(["name", "config"], sort=False).agg(
        steady_ns=("duration_ns", "sum"), launches=("duration_ns", "size"),
        duration_ns=("duration_ns", "mean"), candidates=("invocation", list),
        starts=("since", list)).reset_index()
    per = per.sort_values(["name", "steady_ns"], ascending=[True, False])
    top = per.groupby("name", sort=False).head(max(instances, 1))
    return [Target(name=r.name, config=r.config, steady_ns=int(r.steady_ns),
                   launches=int(r.launches), duration_ns=float(r.duration_ns),
                   candidates=_spaced(r.candidates), starts=_spaced(r.starts))
            for r in top.itertuples()]


def _spaced(values: list[int]) -> list[int]:
    """At most CANDIDATES of the values, evenly spaced, first and last kept."""
    if len(values) <= CANDIDATES:
        return [int(v) for v in values]
    at = np.linspace(0, len(values) - 1, CANDIDATES).round().astype(int)
    return [int(values[i]) for i in at]


def group(found: list[Target], time_of: dict[str, int], goal_ns: float,
          worth_ns: float, max_runs: int = NCU_MAX_RUNS) -> list[Run]:
    """Runs of a common invocation number (sets each profiled target's `invocation`).
    First the names, greedily: the number whose run reaches the most steady GPU time of
    names not yet reached (a name through the configuration with the most time that the
    number reaches), until the runs reach `goal_ns` or number `max_runs`; then each other
    configuration of a name reached joins a run whose number it can take, or, holding
    `worth_ns` or more while runs are left, gets runs of its own; the rest are not
    profiled (a run is the whole program under ncu)."""
    names: dict[str, list[Target]] = {}
    for t in sorted(found, key=lambda t: -t.steady_ns):
        names.setdefault(t.name, []).append(t)
    runs = _greedy(list(names.values()), lambda g: time_of.get(g[0].name, g[0].steady_ns),
                   goal_ns, max_runs)
    rest = [t for t in found if not t.invocation and any(t.name in r.names for r in runs)]
    for t in sorted(rest, key=lambda t: -t.steady_ns):
        run = next((r for r in runs if t.name not in r.names and r.invocation in
                    t.candidates), None)
        if run is not None:
            t.invocation = run.invocation
            run.names = sorted([*run.names, t.name])
    big = [[t] for t in rest if not t.invocation and t.steady_ns >= worth_ns]
    return runs + _greedy(big, lambda g: g[0].steady_ns, float("inf"), max_runs - len(runs))


def _greedy(left: list[list[Target]], weight_of, goal_ns: float, most: int) -> list[Run]:
    """At most `most` runs over groups of targets of one name each (a group is reached
    through its first target, by most time, that the number reaches), each run the
    invocation number that reaches the most weight of the groups left (the earliest on a
    tie), one target per name, most weight first, until `goal_ns`: a group past the goal
    is left out, as each profiled launch costs NCU_PASSES replays of the kernel with the
    program's memory saved and restored."""
    runs: list[Run] = []
    reached = 0.0
    while left and reached < goal_ns and len(runs) < most:
        weight: Counter = Counter()           # the names' time each number reaches ...
        config: Counter = Counter()           # ... and their configurations' (on a tie)
        for g in left:
            best: dict[int, int] = {}
            for t in g:
                for v in t.candidates:
                    best.setdefault(v, t.steady_ns)
            for v, ns in best.items():
                weight[v] += weight_of(g)
                config[v] += ns
        n = min(weight, key=lambda v: (-weight[v], -config[v], v))
        taken: dict[str, Target] = {}
        for g in sorted(left, key=lambda g: -weight_of(g)):
            t = next((t for t in g if n in t.candidates), None)
            if t is not None and t.name not in taken and reached < goal_ns:
                taken[t.name] = t
                t.invocation = n
                reached += weight_of(g)
        runs.append(Run(invocation=n, names=sorted(taken)))
        left = [g for g in left if not any(t.invocation for t in g)]
    return runs


def plan_dict(p: Plan, source: str) -> dict[str, Any]:
    """The plan as JSON: every field, the shares, each run's ncu arguments, the estimate."""
    return {"source": source, "steady_ns": p.steady_ns, "covered_pct": p.covered_pct,
            "kernels": [{"name": n, "steady_ns": ns, "share_pct": _share(p, ns)}
                        for n, ns in p.kernels],
            "left_out": [{"name": n, "steady_ns": ns} for n, ns in p.left_out],
            "targets": [{"name": t.name, "config": t.config, "steady_ns": t.steady_ns,
                         "launches": t.launches, "duration_ns": t.duration_ns,
                         "invocation": t.invocation, "range": t.range, "thread": t.thread,
                         "call_ns": t.call_ns} for t in p.targets],
            "runs": [{"invocation": r.invocation, "names": r.names, "until_s": r.until_s,
                      "ncu_args": r.argv()} for r in p.runs],
            "unreached": p.unreached, "not_profiled": p.not_profiled,
            "launches": len(p.targets), "program_s": p.program_s,
            "passes_per_launch": NCU_PASSES, "pass_overhead_s": NCU_PASS_OVERHEAD_S,
            "run_overhead_s": NCU_RUN_OVERHEAD_S, "run_share_pct": NCU_RUN_SHARE,
            "slowdown": NCU_SLOWDOWN, "max_runs": p.max_runs, "share_pct": 100 * SHARE,
            "estimate_s": p.estimate_s}


def _share(p: Plan, ns: int) -> float:
    return 100.0 * ns / p.steady_ns if p.steady_ns else 0.0


def said(p: Plan) -> str:
    """The compute page's note: what was chosen, what it covers, what was left out."""
    names = ", ".join(n[:60] for n, _ in p.kernels)
    left = 100.0 * sum(ns for _, ns in p.left_out) / max(p.steady_ns, 1)
    rest = (f"; left out: {len(p.left_out)} kernel name(s) holding {left:.1f}% (e.g. "
            f"{p.left_out[0][0][:60]})" if p.left_out else "")
    if p.unreached:
        why = ("the others cover the share" if p.covered_pct >= 100 * SHARE else
               f"not reached in the {p.max_runs} run(s) allowed (or no steady launch)")
        rest += f"; not profiled ({why}): {', '.join(n[:60] for n in p.unreached)}"
    return (f"Nsight Systems picked {len(p.kernels)} kernel name(s) covering "
            f"{p.covered_pct:.1f}% of the steady-state GPU time, on every thread: {names}; "
            f"{len(p.targets)} launch(es), one per launch configuration (at most "
            f"{max((sum(t.name == n for t in p.targets) for n, _ in p.kernels), default=0)} "
            f"per name), by kernel name and invocation in {len(p.runs)} ncu run(s); "
            f"estimated {p.estimate_s:.0f} s{rest}.")
