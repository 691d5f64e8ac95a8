"""The rules registry: `@rule(...)` registers a function with its id, source, severity,
thresholds and one-line doc; `run(source, ctx)` runs the rules of one source on a typed
`Context`. The rules themselves live in the modules beside this one (analysis/diagnosis/rules/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress
from typing import Any

import numpy as np
import pandas as pd

from ...common.names import library_mask, op_paths, steady_path, user_path
from ...common.settings import HOST_OUTSIDE_PCT, OFF_PATH_PCT
from ...documents.findings import rank_key, share_pct
from ...documents.types import (
    ComputeDoc,
    Finding,
    Meta,
    RangeEntry,
    RankRow,
    Severity,
    SystemsDoc,
    entry_array,
    entry_column,
    entry_pick,
)
from ...loops.changes import CHANGES as CHANGE_SAID
from ...loops.changes import WHOLE_STEP
from ...trace.ranges import leaf_paths
from ...trace.types import Trace
from .lines import locate


@dataclass
class Context:
    """What every rule reads; derived tables are computed once, on first use."""

    meta: Meta | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    systems: SystemsDoc | None = None
    compute: ComputeDoc | None = None
    trace: Trace | None = None             # the attributed trace, for systems rules
    ranks: list[RankRow] = field(default_factory=list)    # one per rank, rank rules
    pid: int | None = None                 # systems rules look at one process at a time
    cache: dict[str, Any] = field(default_factory=dict)   # facts several rules share
    price: Callable[[Finding], float | None] | None = None   # a finding's saving (ns, the
    # whole trace) replayed on the step model with its rule's change; None: not modeled
    syncs: Callable[[str], Any] | None = None   # a range's blocking calls by kind (Counter
    # of pricing.SYNC_SAID's keys), read off its step model
    why_not: Callable[[Finding], str] | None = None   # why price gave None (no model of
    # the finding's range, and what to do)
    kernels: Callable[[str, str], tuple[float, float, float]] | None = None   # a range's
    # kernels matching a pattern (short or demangled name) per modeled step: count, ns,
    # and all its kernels' ns (Pricer.kernels)
    slow_steps: Callable[[str, float], Any] | None = None   # a range's steps a factor of
    # its median or longer: their windows and sampled line (Pricer.slow_steps)
    growth: Callable[[str, str, int], float | None] | None = None   # how a range's kernels
    # matching a pattern grow through a step (Pricer.growth)
    blocked: Callable[[str, str], Any] | None = None   # a range's user lines sampled
    # inside its blocking calls of a kind (Counter of (function, line); Pricer.blocked)
    backtraced: Callable[[str, str], Any] | None = None   # the Python calls of those
    # blocking calls, from CUDA backtraces (Counter; Pricer.backtraced)
    sampled_in: Callable[[str, set], list] | None = None   # the lines of some functions
    # a range's threads were sampled on anywhere in the capture (Pricer.sampled_in)
    chains: Callable[[str], dict] | None = None   # a range's chains of elementwise
    # kernels by launch configuration, per modeled step (Pricer.chains)
    sync_sites: Callable[[str], list] | None = None   # a range's syncs by the user's
    # line that makes them (sync_sites.py, Pricer.sync_sites)
    readback_share: Callable[[str, int], float | None] | None = None   # the share of a
    # range's modeled steps that read back that many bytes outside torch.save
    # (Pricer.readback_share)

    def analyzed_ns(self) -> float:
        """The time savings are weighed against: the wall time of the outermost NVTX
        ranges (the kernels of the whole trace when it has no range), or every profiled
        launch (compute), or the ranks' steps."""
        if self.systems is not None:
            return float(self._root_time_ns) or float(sum(k.total_ns for k in
                                                          self.systems.kernel_summary))
        if self.compute is not None:
            return float(sum(k.duration_ns or 0 for k in self.compute.kernels))
        if self.ranks:
            return float(sum(x.step_ns * x.steps for x in self.ranks) / len(self.ranks))
        return 0.0

    def wall_of(self, path: str | None) -> int | None:
        """A range's time over all its instances: its wall time, or the span of the GPU
        work it launched when that ran longer (a loop that queues work ahead of the GPU);
        None: no such range."""
        e = self.all_entries.get(path) if path else None
        return e.time_ns or None if e is not None else None

    def loop_cost(self, path: str | None, own: bool = True) -> float | None:
        """The most a finding on `path` can save: the cost as it runs, over all its
        instances (run_per_instance_ns x run_instances), of the outermost loop around it
        (itself included), no more than its own time (wall_of) unless `own` is False (a
        change of the whole step as it runs: loops.changes.WHOLE_STEP); None: no such
        range."""
        mine = self.wall_of(path)
        if not path:
            return mine
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            e = self.all_entries.get("/".join(parts[:i]))
            if e is not None and e.run_instances:
                loop = float(e.run_per_instance_ns) * e.run_instances
                return min(loop, float(mine)) if own and mine is not None else loop
        return mine

    @cached_property
    def entries(self) -> dict[str, RangeEntry]:
        """systems range entries by path, warm-up ranges left out (they ran compilation:
        only the compile rules look at them)."""
        ranges = self._ranges
        kept = [not e.warmup for e in ranges]
        return dict(zip(compress(self._names, kept), compress(ranges, kept), strict=True))

    @cached_property
    def all_entries(self) -> dict[str, RangeEntry]:
        """systems range entries by path, warm-up included."""
        return dict(zip(self._names, self._ranges, strict=True))

    @cached_property
    def _ranges(self) -> list[RangeEntry]:
        """The process's range entries that rules judge (every process's when none is
        chosen): the user's ranges, emit_nvtx op ranges left out (those nested in user
        ranges, and those at the top of the autograd thread: their time still counts in
        analyzed_ns). Findings name the user's range that holds an op (user_path), the
        op table judges the ops, and every fact a rule reads of an op range's entry is
        in its user range's too (attribution is inclusive): reading 110k op entries in
        every pass cost 0.17 s of 3 on a 200-step emit_nvtx capture, for 11 user ranges,
        and making the 13k outermost ones' entries 0.09 s more."""
        return self._judged[0]

    @cached_property
    def _names(self) -> list[str]:
        """Their paths, read once (the maps above are built from them in C: 110k
        emit_nvtx entries read attribute by attribute took 0.1 s per map)."""
        return self._judged[1]

    @cached_property
    def _root_time_ns(self) -> int:
        """The outermost ranges' time (RangeEntry.time_ns), of this process, read as
        columns (emit_nvtx op ranges at the top of the autograd thread among them)."""
        ranges = self.systems.ranges if self.systems else []
        top = np.array(["/" not in n for n in entry_column(ranges, "name")], dtype=bool)
        if self.pid is not None:
            top &= np.array([p == self.pid for p in entry_column(ranges, "pid")], dtype=bool)
        return int(np.maximum(entry_array(ranges, "wall_ns")[top],       # RangeEntry.time_of
                              entry_array(ranges, "gpu_span_ns")[top]).sum())

    @cached_property
    def _judged(self) -> tuple[list[RangeEntry], list[str]]:
        ranges = self.systems.ranges if self.systems else []
        names = entry_column(ranges, "name")
        kept = judged_mask(names, entry_column(ranges, "domain")).tolist()
        if self.pid is not None:
            kept = [k and p == self.pid for k, p in zip(kept, entry_column(ranges, "pid"),
                                                         strict=True)]
        at = list(compress(range(len(names)), kept))
        return entry_pick(ranges, at), [names[i] for i in at]

    @cached_property
    def instance_idle_ns(self) -> np.ndarray:
        """Per range instance (row of trace.ranges): wall time no GPU op of its process ran."""
        b = self.trace.busy
        return (b["wall_ns"] - b["busy_ns"]).to_numpy()

    def _mine(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["pid"] == self.pid].reset_index(drop=True) \
            if self.pid is not None and len(frame) else frame

    @cached_property
    def seq_names(self) -> pd.DataFrame:
        """Kernels per range path, once per launch: pid, path, name, count, total_ns, aten
        (some demangled name of it is an eager ATen kernel)."""
        if self.trace is None:
            return pd.DataFrame(columns=["pid", "path", "name", "count", "total_ns", "aten"])
        return self._mine(self.trace.seq_names)

    @cached_property
    def seq_pairs(self) -> pd.DataFrame:
        """Distinct back-to-back kernel pairs (a then b) per path, in order of first
        occurrence on the GPU: pid, path, a, b."""
        if self.trace is None:
            return pd.DataFrame(columns=["pid", "path", "a", "b"])
        return self._mine(self.trace.seq_pairs)

    @cached_property
    def median_kernel_ns(self) -> dict[str, float]:
        """Per range path: the median duration of its kernels (once per launch)."""
        if self.trace is None or not len(self.trace.seq_durations):
            return {}
        d = self._mine(self.trace.seq_durations)
        if d["pid"].nunique() > 1:       # one path of several processes: merge them
            d = d.groupby(["path", "duration_ns"], sort=True)["n"].sum().reset_index()
        # else already one block per path (pathid), durations ascending (merge.summed)
        if d.empty:
            return {}
        path, values = d["path"].to_numpy(dtype=object), d["duration_ns"].to_numpy()
        count = d["n"].to_numpy(dtype="int64")
        cum = np.cumsum(count)
        heads = np.flatnonzero(np.r_[True, path[1:] != path[:-1]])
        tails = np.r_[heads[1:], len(path)] - 1
        before = cum[heads] - count[heads]            # kernels of the paths sorted before
        n = cum[tails] - before
        lo = values[np.searchsorted(cum, before + (n - 1) // 2, side="right")]
        hi = values[np.searchsorted(cum, before + n // 2, side="right")]
        return dict(zip(path[heads].tolist(), ((lo + hi) / 2).tolist(), strict=True))

    @cached_property
    def kernel_leaves(self) -> list[str]:
        """The user's range paths (emit_nvtx op ranges cut off: user_path) that launched
        kernels and no other such path extends, sorted (warm-up ranges left out)."""
        warm = {e.name for e in self._ranges if e.warmup}
        paths = list(set(self.seq_names["path"].tolist()))    # pandas' unique: 10x slower
        # an op path's user_path is a user path that launched the same kernels (counts are
        # inclusive, on one thread): the user paths among them are all there is to cut
        users = list(compress(paths, ~op_paths(paths)))
        return sorted(leaf_paths(users) - warm - self.library_paths)

    @cached_property
    def leaves(self) -> list[str]:
        """The user's range paths (user_path) that launched GPU work and no other such
        path extends, sorted."""
        users = {user_path(e.name) for e in self.entries.values() if e.instances}
        return sorted(p for p in leaf_paths(list(users - {""})) if p in self.entries)

    @cached_property
    def library_paths(self) -> frozenset[str]:
        """Paths of the ranges libraries annotate their own calls with (library.py: CUB,
        NCCL, cuDNN; the user cannot change them): no rule judges them."""
        ranges = self.systems.ranges if self.systems else []
        lib = library_mask(entry_column(ranges, "domain"))
        return frozenset(compress(entry_column(ranges, "name"), lib.tolist()))


def judged_mask(names: list[str], domains: list[str | None]) -> np.ndarray:
    """Which entries the rules judge: the user's ranges, not emit_nvtx op ranges
    (is_op_path) nor a library's (library.py)."""
    return ~(op_paths(names) | library_mask(domains))


@dataclass(frozen=True)
class Rule:
    id: str
    source: str                     # "systems" | "compute" | "ranks"
    severity: Severity              # the usual severity (a rule may lower it, and says so)
    doc: str                        # one line: when it fires
    thresholds: dict[str, float]
    fn: Callable[[Rule, Context], list[Finding]]
    change: str = ""                # the step model's change that prices them (loops/changes.py)
    unpriced: str = ""              # without a change: why the model cannot price its cause

    def finding(self, **fields: Any) -> Finding:
        """A Finding of this rule (keyword fields; severity defaults to the rule's)."""
        fields.setdefault("severity", self.severity)
        fields.setdefault("kernel", None)
        return Finding(rule=self.id, **fields)


ONCE = ("a cost paid once (compilation, autotuning, first calls), before the steady steps "
        "the loop model replays")
RANKS = "ranks are modeled one at a time: one rank's loop cannot wait on another's"
KERNELS = ("Compute measures kernel time, not the loop's: the speed-up is replayed on the "
           "Systems step model of the range that launched the kernels when make profile "
           "puts both reports in one folder")
"""Why the rules without a change of the loop model (Rule.unpriced) cannot be priced. Plain
text: pages escape it (a finding's not_priced), so no code spans."""

REGISTRY: dict[str, Rule] = {}
SHARE_OF = {"systems": "wall time", "ranks": "step time",
            "compute": "profiled kernel time"}
"""What a finding's share_pct is a share of, per source (Context.analyzed_ns)."""


def rule(id: str, source: str, severity: Severity, doc: str,
         thresholds: dict[str, float] | None = None, change: str = "",
         unpriced: str = "") -> Callable:
    """Register the decorated function as the rule `id` (ids are unique); `change` says
    which change of the step model prices its findings (changes.CHANGES), and a rule
    without one says in `unpriced` why the model cannot express its cause (each rule has
    one or the other)."""
    def register(fn: Callable[[Rule, Context], list[Finding]]) -> Callable:
        if id in REGISTRY:
            raise ValueError(f"rule {id!r} registered twice")
        if not (change or unpriced):
            raise ValueError(f"rule {id!r} has neither a change nor why it has none")
        REGISTRY[id] = Rule(id, source, severity, doc, dict(thresholds or {}), fn, change,
                            unpriced)
        return fn
    return register


def sort_key(f: Finding) -> tuple:
    """findings.rank_key, then launch order."""
    launch = f.evidence.get("launch") if isinstance(f.evidence, dict) else None
    return (*rank_key(f), launch if launch is not None else float("inf"))


def run(source: str, ctx: Context) -> list[Finding]:
    """Every registered rule of `source`, in registration order, then sorted."""
    found = superseded([f for r in REGISTRY.values() if r.source == source
                        for f in r.fn(r, ctx)])
    if source == "systems" and ctx.library_paths:     # a library's range is not the user's
        found = [f for f in found if not f.range or steady_path(f.range)
                 not in ctx.library_paths]
    total = ctx.analyzed_ns()
    for f in found:
        _priced(f, REGISTRY[f.rule], ctx)
        f.saving_ns = float(f.saving_per_instance_ns * f.iterations)
        cap = ctx.loop_cost(f.range, own=f.change not in WHOLE_STEP)
        if cap is not None and f.saving_ns > cap:
            f.saving_ns = float(cap)
            f.saving_per_instance_ns = f.saving_ns / max(f.iterations, 1)
        f.share_pct = share_pct(f.saving_ns, total)
        f.share_of = SHARE_OF[source]
    if source == "systems":
        locate(found, ctx.systems, ctx.entries, ctx.blocked, ctx.backtraced, ctx.sampled_in)
    return sorted(found, key=sort_key)


SUPERSEDES = {"input_wait": ("host_bound", "launch_bound", "slow_step"),
              "gil_contention": ("host_bound", "launch_bound", "slow_step"),
              "batch_in_python": ("host_bound", "input_starved"),
              "per_tensor_ops": ("host_bound", "launch_bound")}
"""A cause that explains a symptom on the same range: the symptom's finding is left out
(a loop waiting for its DataLoader, or for the GIL, is host-bound because of it, and its
steps are slow where the workers or the other thread fall behind; a range that builds its
batch from Python data is the input that starves the loop, named by its lines; one that
updates tensors one by one is launch-bound because of that line)."""


def own_cpu_work(f: Finding) -> bool:
    """Whether a host-bound finding's loop spends HOST_OUTSIDE_PCT of its wall time in
    its thread's own CPU work, its OS calls aside (a wait for the GIL is one: the waiting
    thread sleeps in pthread_cond_timedwait): a cause of its own beside the GIL's holder,
    the input built on the loop's thread among them."""
    ev = f.evidence if isinstance(f.evidence, dict) else {}
    return ev.get("host_cpu_ns", 0) * 100 >= HOST_OUTSIDE_PCT * ev.get("wall_ns", float("inf"))


def saves(f: Finding) -> bool:
    """Whether a slow-step finding is torch.save's, named by the call sampled on the
    loop's thread: a cause of its own beside a GIL holder, whose waits lengthen the save
    (seed 79's g05 and g34: a checkpoint every 8 steps saved 3.5 and 3.0 ms a step beside
    a spinning thread, and got no finding)."""
    ev = f.evidence if isinstance(f.evidence, dict) else {}
    return bool(ev.get("torch_save"))


STILL = {("gil_contention", "host_bound"): own_cpu_work,
         ("gil_contention", "slow_step"): saves}
"""A symptom a cause does not explain, though SUPERSEDES names it: the finding stays
where the test holds."""

OWN_CPU = {("gil_contention", "host_bound")}
"""Of STILL, the findings priced by their own CPU time only: a host-bound loop beside a
GIL holder waits for it whatever its own work; a torch.save's waits for the GIL are the
save's (each blocking copy of it lets the GIL go, and the holder keeps it a switch
interval), gone with the save."""


def superseded(found: list[Finding]) -> list[Finding]:
    """The findings less those a more specific cause on the same range explains."""
    gone = {(s, f.range): f.rule for f in found for s in SUPERSEDES.get(f.rule, ())}
    out = []
    for f in found:
        by = gone.get((f.rule, f.range))
        if by is None:
            out.append(f)
        elif STILL.get((by, f.rule), lambda _: False)(f):
            if (by, f.rule) in OWN_CPU:        # its waits are the GIL's holder's
                f.evidence = {**f.evidence, "beside_gil": True}    # (host_ahead's own_cpu)
            out.append(f)
    return out


def _priced(f: Finding, r: Rule, ctx: Context) -> None:
    """The finding's saving replayed on the step model with its rule's change, where
    the model has its range; else no saving, and why (Finding.not_priced): no formula
    stands in for the model."""
    f.change = f.change or r.change or None
    total = ctx.price(f) if f.change and ctx.price is not None else None
    if total is None:
        if r.source == "compute":       # Compute's measure, for the wall replay to scale
            f.evidence = {**f.evidence, "kernel_saving_ns": float(
                f.saving_per_instance_ns * f.iterations)}
        f.not_priced = f.not_priced or _why_not(f, r, ctx)
        f.saving_per_instance_ns, f.saving_model = 0.0, ""
        return
    f.saving_per_instance_ns = total / max(f.iterations, 1)
    f.saving_model = CHANGE_SAID.get(f.change, f.change)
    wall = ctx.wall_of(f.range)
    if wall and total < OFF_PATH_PCT / 100 * wall and f.severity == "warning":
        f.severity = "info"
        f.message += (f" Off the critical path: the step model replays the fix to a saving "
                      f"under {OFF_PATH_PCT:g}% of the range's wall time, so it waits on "
                      "something else.")


def _why_not(f: Finding, r: Rule, ctx: Context) -> str:
    """Why the model did not price `f`: its rule's cause is no change of it, or its
    range has no step model (ctx.why_not says which)."""
    if not f.change:
        return r.unpriced or "its cause is no change of the loop model"
    if ctx.price is None:
        return ("no step model: the export's calls were not readable (a SQLite export "
                "kept beside the report is)")
    return ctx.why_not(f) if ctx.why_not is not None else "its range has no step model"


def markdown_table() -> list[str]:
    """docs/rules.md's table, generated from the registry: systems, ranks, then compute
    rules, each source in registration order; with how each estimates its saving."""
    out = ["| rule | source | severity | fires when | thresholds | saving |",
           "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(REGISTRY.values(), key=lambda r: list(SHARE_OF).index(r.source)):
        th = ", ".join(f"`{k}` = {v:g}" for k, v in r.thresholds.items()) or "–"
        saving = (f"`{r.change}`: {CHANGE_SAID[r.change]}" if r.change
                  else f"not priced: {r.unpriced}")
        out.append(f"| `{r.id}` | {r.source} | {r.severity} | {r.doc} | {th} | {saving} |")
    return out
