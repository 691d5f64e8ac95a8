"""Each finding's saving from the step model: its rule names the change (loops/changes.py), the
pricer replays the loop that holds the finding's range with that change, and the
difference, over every modeled step weighted by the share of the loop's run time it stands
for (loops/model.py), is the saving.

The loop replayed is the outermost repeated range around the finding's range that has
modeled steps (one past loops.MODEL_CALLS has none; the finding's own range where no loop
encloses it), so a fix inside a step is priced at the step's wall:
removing host work the GPU overlaps saves nothing, removing a wait the next steps
depend on saves what they gain.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..common.intervals import minus
from ..common.settings import LOOP_MIN_INSTANCES
from ..documents.types import Finding
from ..load.nsys_sqlite import PID_MASK
from ..loops.chains import chains, grid_of, host_span
from ..loops.changes import WHOLE_STEP, Change, saving
from ..loops.edits import overlap
from ..loops.model import MODEL_CALLS, StepModels
from ..trace.pylines import (
    line_counts,
    line_windows,
    lines_inside,
    module_windows,
    steady_line,
    top_line,
    top_of,
)
from .graph_reads import growth_of, h2d_spans, kernel_time, read_back, started_in, sync_kinds
from .sampled_calls import SampledCalls
from .sync_sites import SyncSite
from .sync_sites import sync_sites as find_sites

FP32_GEMM = r"sgemm|gemm.*f32f32_f32f32.*ffma|ffma.*gemm"

SYNC_REMOVED = ("no_sync", "readback_on_device", "size_given", "fixed_shape", "unique_mask",
                "index_on_device", "no_break")
"""The changes that take syncs out of a step (sync_split.change_for's, and a graph break's):
none of them acts on a torch.save on the loop's thread, whose copies wait for the GPU as
before (slow_step's cause, with its own change). A `repeat_interleave` beside a
checkpoint: size_given took the save's waits too, and the checkpoint's step absorbed none
of the GPU work queued ahead of it."""


@dataclass
class ChainStat:
    """A range's chains of elementwise kernels of one launch configuration, per step."""

    chains: float
    kernels: float
    kernel_ns: float
    fused_away_ns: float                   # their kernels' time but the shortest of each
    host_ns: float                         # from each chain's first launch to its last
    lines: Counter                         # (function, line) sampled while launching them


@dataclass
class Pricer(SampledCalls):
    """Prices findings on one export's step models (`price(finding) -> total ns`)."""

    models: StepModels
    loops: set[str]                        # the loop ranges' paths (3+ steady instances)
    cache: dict[tuple, Any] = field(default_factory=dict)   # savings; save windows

    def price(self, f: Finding, pid: int | None = None) -> float | None:
        """The whole trace's saving (ns) of removing the finding's cause (its range in
        process `pid`), or None where its range has no model (no file, no instance)."""
        if not f.change or not f.range:
            return None
        key = self.modeled_key(f.range, pid)
        if key is None:
            return None
        change = self.change_of(f, pid)
        memo = (key, change)
        if memo not in self.cache:
            done = [saving(g, change) for g in self.models.graphs(key)]
            self.cache[memo] = float(np.dot(done, self.models.weights(key)))
        return self.cache[memo]

    def why_not(self, f: Finding, pid: int | None = None) -> str:
        """Why `price(f)` is None, in a sentence a user can act on."""
        if not f.range:
            return "it names no range, and the model replays a range's steps"
        if self.modeled_key(f.range, pid) is None:
            return (f"no loop around {f.range} has modeled steps (a loop is a range run "
                    f"{LOOP_MIN_INSTANCES} times or more; at most {MODEL_CALLS:,} of its calls are "
                    "modeled)")
        return "its change has no effect the model can replay here"

    def threads(self, path: str, pid: int | None) -> set[int]:
        """The threads the range's instances ran on."""
        r = self.models.trace.ranges
        mine = np.isin(r["key"].to_numpy(), self.models.keys_of(path, pid))
        return set(r["global_tid"].to_numpy()[mine].tolist())

    def syncs(self, path: str, pid: int | None = None) -> Counter:
        """What the blocking calls of a range's steps are (sync_kinds over its loop's
        modeled steps)."""
        key = self.modeled_key(path, pid)
        return sum((sync_kinds(g) for g in self.models.graphs(key)), Counter()) \
            if key is not None else Counter()

    def sync_sites(self, path: str, pid: int | None = None) -> list[SyncSite]:
        """The range's syncs by the user's line that makes them (sync_sites.py)."""
        return find_sites(self, path, pid)

    def kernels(self, path: str, pattern: str, pid: int | None = None
                ) -> tuple[float, float, float]:
        """Per modeled step of the loop around `path` (its finding's scope: the range's
        windows): the kernels whose short or demangled name matches `pattern`, how many
        and their time, and the time of all its kernels (ns)."""
        key = self.modeled_key(path, pid)
        graphs = self.models.graphs(key) if key is not None else []
        if not graphs:
            return 0.0, 0.0, 0.0
        w, scope = self.models.weights(key), self.models.windows(path, pid)
        per = np.array([kernel_time(g, pattern, scope) for g in graphs])
        n, ns, total = (per * w[:, None]).sum(0) / max(w.sum(), 1e-12)
        # a weighted mean of whole counts: one fill a step is 1, not 0.9999999999999999
        # (seed 62 g14's torch.zeros, under fill_overwritten's one a step before)
        return round(float(n), 6), float(ns), float(total)

    def growth(self, path: str, pattern: str, least: int, pid: int | None = None
               ) -> float | None:
        """How the range's kernels matching `pattern` grow through a step: the median over
        its loop's modeled steps of _growth (the rank correlation of their durations, or
        grids, with their order), steps with fewer than `least` of them left out; None
        without any."""
        key = self.modeled_key(path, pid)
        graphs = self.models.graphs(key) if key is not None else []
        scope = self.models.windows(path, pid)
        found = [x for g in graphs if (x := growth_of(g, pattern, scope, least)) is not None]
        return float(np.median(found)) if found else None

    def slow_steps(self, path: str, factor: float, pid: int | None = None
                   ) -> tuple[tuple[tuple[int, int], ...], str, bool | None]:
        """The range's slow steps as (start, end) windows, the user's line most of them
        fell on (pylines.top_line of each, as a tail step's; "" without samples), and
        whether the call named them: where its threads were sampled in torch.save inside
        its instances, those spans (save_windows), whatever the steps' lengths; else its
        steps as they run `factor` times its median step or longer, and None for whether
        where their line is the one the other steps were sampled on most (the loop's own
        work, run slower: no periodic work to move)."""
        key = self.models.key_of(path, pid)
        if key is None:
            return (), "", False
        r = self.models.trace.ranges
        start, tid = r["start_ns"].to_numpy(), r["global_tid"].to_numpy()
        py, cwd = self.models.py_samples(), self.models.trace.export.working_dir
        saves = self.save_windows(path, pid)
        if saves:
            lines = Counter(x for t in self.threads(path, pid) for a, b in saves
                            if (x := top_line(py, t, a, b, cwd)))
            return saves, lines.most_common(1)[0][0] if lines else "", True
        step, _, median = self.models.steps_of(key)
        rows = [row for row, ns in step.items() if median > 0 and ns >= factor * median]
        found = tuple((int(start[row]), int(start[row]) + int(step[row])) for row in rows)
        counts = [line_counts(py, int(tid[row]), a, b, cwd) if len(py) else {}
                  for row, (a, b) in zip(rows, found, strict=True)]
        lines = Counter(x for c in counts if (x := top_of(c)))
        line = lines.most_common(1)[0][0] if lines else ""
        if not line:
            return found, "", False
        t = int(tid[rows[0]])           # the other steps' line on the first slow one's thread
        mine = [c if int(tid[row]) == t else line_counts(py, t, a, b, cwd)
                for row, (a, b), c in zip(rows, found, counts, strict=True)]
        span = (min(int(start[r]) for r in step), max(int(start[r]) + n for r, n in step.items()))
        return found, line, None if line == steady_line(py, t, span, mine, cwd) else False

    def readback_share(self, path: str, least: int, pid: int | None = None
                       ) -> float | None:
        """The share of the loop's modeled steps (weighted) whose device-to-host copies in
        the range's windows, outside torch.save's (a checkpoint's copies are slow_step's:
        save_windows), hold `least` bytes or more; None without a model."""
        key = self.modeled_key(path, pid)
        graphs = self.models.graphs(key) if key is not None else []
        if not graphs:
            return None
        scope = minus(self.models.windows(path, pid), self.save_windows(path, pid))
        w = self.models.weights(key)
        hit = np.array([read_back(g, scope) >= least for g in graphs], dtype=float)
        return float((hit * w).sum() / max(w.sum(), 1e-12))

    def save_windows(self, path: str, pid: int | None = None) -> tuple[tuple[int, int], ...]:
        """Where the range's threads were sampled in torch.save (SAVE_MODULES below the
        user's line: pylines.module_windows) within its instances: a checkpoint written
        on the loop's thread."""
        threads = frozenset(self.threads(path, pid))
        memo = ("saves", threads)          # every stack read once per thread set, not
        if memo not in self.cache:         # once per loop the rule asks about
            self.cache[memo] = module_windows(self.models.py_samples(), set(threads),
                                              SAVE_MODULES)
        saves = self.cache[memo]
        inside = self.models.windows(path, pid)
        return minus(inside, minus(inside, saves)) if saves else ()

    def chains(self, path: str, pid: int | None = None) -> dict[int, ChainStat]:
        """The range's chains of elementwise kernels (loops/chains.py) in its loop's
        modeled steps, by launch configuration: per step (weighted as `kernels`), how
        many, their kernels and time, and the lines sampled while the host launched them."""
        sums, spans = self._chain_spans(path, pid)
        if not sums:
            return {}
        w = self.models.weights(self.modeled_key(path, pid))
        threads, samples = self.threads(path, pid), self.models.py_samples()
        return {grid: ChainStat(*(a / max(w.sum(), 1e-12)).tolist(), lines=lines_inside(
            samples, threads, np.array(sorted(spans[grid]), dtype=np.int64).reshape(-1, 2)))
            for grid, a in sums.items()}

    def chain_windows(self, path: str, lines: set[tuple[str, int]],
                      pid: int | None = None) -> tuple[tuple[int, int], ...]:
        """The host spans (first launch to last) of the range's chains of a launch
        configuration the `lines` were sampled launching: where a loop over tensors ran,
        in every modeled step, read off its launches rather than off the few samples."""
        _, spans = self._chain_spans(path, pid)
        threads, samples = self.threads(path, pid), self.models.py_samples()
        return tuple(sorted(w for sp in spans.values() if set(lines_inside(
            samples, threads, np.array(sorted(sp), dtype=np.int64).reshape(-1, 2))) & lines
            for w in sp))

    def copy_windows(self, path: str, windows: tuple[tuple[int, int], ...],
                     pid: int | None = None) -> tuple[tuple[int, int], ...]:
        """Where a batch built in Python ran, read off its copy rather than the few
        samples: in every modeled step, each host-to-device copy of the range's thread
        spans from the end of the thread's launch or sync before it to the end of its own
        call (the list built, converted and copied: h2d_spans); those of the sizes whose
        spans the sampled `windows` meet are the batch's."""
        key = self.modeled_key(path, pid)
        if key is None or not windows:
            return ()
        sampled = np.array(windows, dtype=np.int64).reshape(-1, 2)
        spans = [x for g in self.models.graphs(key) for x in h2d_spans(g)]
        sizes = {b for lo, hi, b in spans if overlap(np.array([lo]), np.array([hi]),
                                                    sampled)[0] > 0}
        return tuple(sorted((lo, hi) for lo, hi, b in spans if b in sizes))

    def _chain_spans(self, path: str, pid: int | None) -> tuple[dict, dict]:
        """Per launch configuration, the range's chains' weighted sums (count, kernels,
        time, time but the shortest, host span) and host spans, over its loop's modeled
        steps."""
        key = self.modeled_key(path, pid)
        if key is None:
            return {}, {}
        scope = np.array(self.models.windows(path, pid), dtype=np.int64).reshape(-1, 2)
        sums: dict[int, np.ndarray] = {}
        spans: dict[int, list[tuple[int, int]]] = {}
        for g, weight in zip(self.models.graphs(key), self.models.weights(key).tolist(),
                             strict=True):
            for c in chains(g):
                lo, hi = host_span(g, c)
                if len(scope) and not started_in(np.array([lo]), scope)[0]:
                    continue
                grid = grid_of(g, c)
                ns = g.end[c] - g.start[c]
                sums[grid] = sums.get(grid, np.zeros(5)) + weight * np.array(
                    [1, len(c), ns.sum(), ns.sum() - ns.min(), hi - lo])
                spans.setdefault(grid, []).append((lo, hi))
        return sums, spans

    def candidates(self, path: str) -> list[str]:
        """The loop ranges enclosing `path` (itself included), outermost first, then
        `path` itself."""
        parts = path.split("/")
        loops = [p for p in ("/".join(parts[:i]) for i in range(1, len(parts) + 1))
                 if p in self.loops]
        return loops + ([path] if path not in loops else [])

    def modeled_key(self, path: str, pid: int | None) -> int | None:
        """The key of the first of `candidates(path)` with modeled steps (an outer loop
        past the budget of calls has none), else None."""
        for where in self.candidates(path):
            key = self.models.key_of(where, pid)
            if key is not None and self.models.graphs(key):
                return key
        return None

    def change_of(self, f: Finding, pid: int | None) -> Change:
        """The finding's change with the parameters its evidence gives, scoped to the
        finding's range (loops/changes.py), or unscoped where it acts on the whole step."""
        if f.change in WHOLE_STEP:             # every wait of the step as it runs
            return Change(f.change)
        ev: dict[str, Any] = f.evidence if isinstance(f.evidence, dict) else {}
        scope = tuple((int(a), int(b)) for a, b in ev["site_windows"]) \
            if ev.get("site_windows") else self.models.windows(f.range, pid)
        if ev.get("ranges_apart"):        # nested ranges with findings of their own
            scope = minus(scope, [w for p in ev["ranges_apart"]
                                  for w in self.models.windows(p, pid)])
        if f.change in SYNC_REMOVED:           # a checkpoint's copies, and waits:
            scope = minus(scope, self.save_windows(f.range, pid))   # slow_step's
        if f.change == "host_ahead":           # the slow steps' windows, or the range's
            given = tuple((int(a), int(b)) for a, b in ev.get("windows") or ())
            return Change("host_ahead", windows=given or scope, scope=given or scope,
                          own_cpu=bool(ev.get("beside_gil")))
        if f.change == "input_ahead":
            return Change("input_ahead", windows=self.input_waits(f.range, pid), scope=scope)
        if f.change in ("batch_on_device", "foreach"):   # where the samples ran the lines
            lines = {(x["function"], int(x["line"])) for x in ev.get("lines_named") or ()}
            sampled = line_windows(self.models.py_samples(), self.threads(f.range, pid),
                                   lines)
            ran = self.chain_windows(f.range, lines, pid) if f.change == "foreach" else \
                self.copy_windows(f.range, sampled, pid)
            return Change(f.change, windows=ran or sampled, scope=scope)
        if f.change == "one_pass":                 # the chains of its launch configuration
            return Change("one_pass", grids=(int(ev.get("grid") or 0),), scope=scope)
        if f.change == "pinned_async":
            return Change("pinned_async", pinned_bps=float(ev.get("pinned_bps") or 0.0),
                          scope=scope)
        if f.change in ("fused", "one_cat"):       # the kernels the change removes, named
            names = ev.get("unfused") or ev.get("kernels") or []
            return Change(f.change, kernels=((exact_names(names), 0.0),), scope=scope)
        if f.change == "no_fill":                  # by a pattern of their demangled names
            return Change(f.change, kernels=((ev.get("pattern") or "(?!)", 0.0),), scope=scope)
        if f.change == "faster_kernels":
            fp32, tf32 = ev.get("fp32_peak_flops"), ev.get("tf32_peak_flops")
            factor = fp32 / tf32 if fp32 and tf32 else float(ev.get("speed_factor", 0.5))
            return Change("faster_kernels", kernels=((ev.get("pattern", FP32_GEMM), factor),),
                          scope=scope)
        if f.change == "no_sync":                  # torch.cuda.synchronize() named: the
            syncs = ev.get("syncs") or {}          # line goes, not only its wait
            return Change(f.change, scope=scope, whole=bool(syncs) and max(
                syncs, key=syncs.get) == "synchronize")
        return Change(f.change, scope=scope)


def exact_names(names: list[str] | set[str]) -> str:
    """A pattern (Change.kernels) matching these kernel names and no other; none: one
    that matches nothing."""
    if not names:
        return "(?!)"
    return "^(?:" + "|".join(sorted({re.escape(n) for n in names})) + ")$"


def pid_of(global_tid: int) -> int:
    return int(global_tid) & int(PID_MASK)


SAVE_MODULES = re.compile(r"torch\.serialization$")
"""The library module a checkpoint's samples pass through (torch.save's pickling, the
copy of each tensor to the host, the write), whatever it calls below."""

SYNC_SAID = {"item": "`.item()` (a scalar read back)", "cpu": "`.cpu()` of a tensor",
             "nonzero": "`nonzero` / boolean-mask indexing (a count read back)",
             "size": "a total read back after a scan (`repeat_interleave` without "
                     "output_size)",
             "synchronize": "`torch.cuda.synchronize()`",
             "unique": "`torch.unique` (its output's size read back)",
             "event": "an event synchronize", "other": "a synchronize call",
             "index": "indexing with a CPU index tensor (the index copied to the GPU and "
                      "waited for)",
             "upload": "a blocking host-to-device copy (`Tensor.to` from pageable memory)"}
"""What a step's blocking calls are, as the user wrote them."""
