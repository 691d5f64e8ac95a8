"""Which steps are modeled, and what each loop's model says: the loop as it runs.

A loop range is a user range (not an emit_nvtx op range, not a library's domain, not
warm-up) repeated at least LOOP_MIN_INSTANCES times in its process. Each instance is
modeled as it runs (loops/runs.py): from its start to the next instance's start in its
run, or, for a run's last, to the run's end (its GPU backlog included), so that step *i*'s
backlog meets step *i+1* where the host waits for it and the host's time between
instances is part of the step. Its steady instances are those not set apart and not first
calls (apart.first_calls). All of them are modeled, or one step of each of
SAMPLE_INSTANCES strata of the steps by length (its stratum's median step: a loop whose
steps spread between the median and the tail, a batch that waits for a slow DataLoader
every other step, is modeled across that spread), plus the tail steps (runs.TAIL_FACTOR
times the median or more, the TAIL_KEEP longest), within MODEL_CALLS (steps nearest the
median first); a loop nested in another (a step's
forward in the step) is sampled inside the enclosing loop's sampled instances, so the
levels model the same steps.
Each step is one window of the export (load/nsys_steps.py; a window inside another is
cut from its rows) built into a graph (graph.py), kept for the what-ifs that price the
findings (pricing.py); each loop's graphs are replayed unchanged and walked back
(replay.py).

Weights (`StepModels.weights`): the modeled tail steps stand for every tail step (each
for itself where all are modeled); the other modeled steps stand for the rest of the
runs' time, each in proportion to its stratum's time. So the loop's
`critical_path_ns` (category -> ns: the weighted paths) sums to its run time (the runs'
spans) as closely as the replay reproduces it, a periodic slow step keeps its own causes,
and `replayed_run_ns` is the weighted replayed steps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..common.names import is_library
from ..common.settings import LOOP_MIN_INSTANCES
from ..load.nsys_pysamples import PySamples, load_py_samples
from ..load.nsys_samples import load_samples
from ..load.nsys_sqlite import PID_MASK
from ..load.nsys_steps import read_steps
from ..trace.apart import first_calls
from .edges import build
from .gil import interpreter_samples, mark_gil, thread_label
from .graph import Graph
from .replay import CATEGORIES, CycleError, critical_path, unchanged
from .runs import TAIL_FACTOR, TAIL_KEEP, Runs, gpu_ends, gpu_reach, key_context, key_runs

SAMPLE_INSTANCES = 16
"""Steady instances modeled per loop besides its tail steps (one per stratum of its steps
by length). Against every instance modeled, on loops_ab, queue_ab and four sampled twins
(20 to 80 instances a loop): the replay's error is the same (0.0%), the critical path's
categories move by 1.5% of the run at most (7% on one nested phase of 24 steps), and the
savings of findings worth 5% of their loop by 0.3% at most (test_as_it_runs)."""
MODEL_CALLS = 50_000
"""CUDA calls (rows of the export in the steps' windows) a loop's modeled steps hold at
most: steps are taken closest to the median first while they fit, so a loop of loops (an
epoch of steps, a phase of a benchmark) is modeled by one or a few of its instances, and
one larger than this not at all (its inner loops are). About 0.3 s of model work on the
2-core machine."""
MAX_LOOPS = 256
"""Loop ranges modeled per export at most (those with most wall time): each loop's work is
bounded by MODEL_CALLS. At 32, the generated battery's captures (40 loops, each with its
fix variants: 120 step loops and more) left most loops without a model, their causes
unpriced; at 256 the seed-14 capture analyzes in the same 30 s on the 2-core machine."""


class StepModels:
    """The graphs of one export's range instances, built on demand (all the ranges asked
    for at once read in one pass) and kept: the loops' critical paths and every
    finding's what-if read the same graphs."""

    def __init__(self, trace, db: Path, cpu_samples: pd.DataFrame | None = None,
                 py: PySamples | None = None) -> None:
        """`cpu_samples`, `py`: the export's CPU and Python samples where the caller has
        read them already (else read here when first needed)."""
        self.trace, self.db = trace, Path(db)
        self.built: dict[int, list[Graph]] = {}
        self.skipped: dict[int, int] = {}
        self._runs: dict[int, Runs] = {}
        self._run_ctx: tuple | None = None
        self._first: set[int] | None = None
        self._paths: pd.Index | None = None
        self._cpu, self._py = cpu_samples, py
        self._running: pd.DataFrame | None = None
        self._by_thread: tuple[np.ndarray, ...] | None = None
        self._stratum: dict[tuple[int, int], float] = {}   # (key, row) -> its stratum's
                                                            # ns (none: a tail step)
        self.rows: dict[int, list[int]] = {}                # per built graph: its range row

    @property
    def readable(self) -> bool:
        return self.db.is_file()

    def key_of(self, path: str, pid: int | None = None) -> int | None:
        """The range key of a path (in process `pid`, when given; else its first)."""
        keys = self.keys_of(path, pid)
        return int(keys[0]) if len(keys) else None

    def keys_of(self, path: str, pid: int | None = None) -> np.ndarray:
        """The range keys of a path (in process `pid`, when given; else in any), first
        seen first: a hash index over the paths, made once (a dict of 110k keys cost
        0.17 s, comparing the 110k paths once per finding 0.01 s)."""
        keys = self.trace.keys
        if self._paths is None:
            self._paths = pd.Index(keys["path"].to_numpy(dtype=object))
        pos = np.sort(self._paths.get_indexer_for([path]))
        pos = pos[pos >= 0]
        if pid is not None:
            pos = pos[keys["pid"].to_numpy()[pos] == pid]
        return keys.index.to_numpy()[pos]

    def steady(self, key: int) -> np.ndarray:
        """Rows of trace.ranges of the key's steady instances (first calls left out)."""
        if self._first is None:
            self._first = set(first_calls(self.trace))
        rows = np.flatnonzero(self.trace.ranges["key"].to_numpy() == key)
        return np.array([i for i in rows.tolist() if i not in self._first], dtype=np.int64)

    def runs(self, key: int) -> Runs:
        """The key's runs and its steps as they run (loops/runs.py), made once."""
        if key not in self._runs:
            self._runs[key] = key_runs(self.trace, key, *self.run_context())
        return self._runs[key]

    def run_context(self) -> tuple[np.ndarray, dict[str, Any]]:
        """gpu_ends and key_context of the trace (loops/runs.py), made once for every
        loop: the range table's run columns and the pricing read the same."""
        if self._run_ctx is None:
            self._run_ctx = (gpu_ends(self.trace), key_context(self.trace))
        return self._run_ctx

    def steps_of(self, key: int) -> tuple[dict[int, int], dict[int, bool], float]:
        """Per range row of the key: its step as it runs, whether it is its run's last;
        and the median step."""
        runs = self.runs(key)
        rows = runs.rows.tolist()
        last = np.r_[runs.run[1:] != runs.run[:-1], True].tolist()
        return (dict(zip(rows, runs.step_ns.tolist(), strict=True)),
                dict(zip(rows, last, strict=True)),
                float(np.median(runs.step_ns)) if len(rows) else 0.0)

    def sample(self, key: int, within: np.ndarray | None = None) -> np.ndarray:
        """The steady instances modeled: one of each stratum of the steps by length
        (_strata), then the tail steps (the TAIL_KEEP longest); those inside `within` (rows
        of an enclosing loop's sample) where any are."""
        at = self.steady(key)
        if within is not None and len(within):
            inside = self._inside(at, within)
            at = inside if len(inside) else at
        step, _, median = self.steps_of(key)
        ns = np.array([step.get(i, 0) for i in at.tolist()], dtype=np.float64)
        slow = (ns >= TAIL_FACTOR * median) & (median > 0)
        tail = at[slow][np.argsort(-ns[slow], kind="stable")][:TAIL_KEEP]
        core = self._strata(key, at[~slow], ns[~slow], median)
        return np.r_[core, tail].astype(np.int64)

    def _strata(self, key: int, rows: np.ndarray, ns: np.ndarray, median: float
                ) -> np.ndarray:
        """SAMPLE_INSTANCES strata of the steps by length, each step its stratum's median
        (every step where there are no more), nearest the median step first; each picked
        row's stratum's time kept for its weight."""
        order = np.argsort(ns, kind="stable")
        if not len(order):                 # every step kept is a tail step
            return np.zeros(0, dtype=np.int64)
        strata = [s for s in np.array_split(order, min(SAMPLE_INSTANCES, len(order))) if len(s)]
        picked = np.array([s[len(s) // 2] for s in strata], dtype=np.int64)
        for s, p in zip(strata, picked.tolist(), strict=True):
            self._stratum[(key, int(rows[p]))] = float(ns[s].sum())
        picked = picked[np.argsort(np.abs(ns[picked] - median), kind="stable")]
        return rows[picked]

    def weights(self, key: int) -> np.ndarray:
        """Per built graph of the key, how much of the runs' time it stands for (see the
        module doc): its replayed step times this is the loop's replayed run time."""
        gs = self.graphs(key)
        if not gs:
            return np.zeros(0)
        tail = np.array([(key, r) not in self._stratum for r in self.rows[key]], dtype=bool)
        share = np.array([self._stratum.get((key, r), 0.0) for r in self.rows[key]])
        ns = np.array([g.hi - g.lo for g in gs], dtype=np.float64)
        total = float(self.runs(key).spans.sum())
        step, _, median = self.steps_of(key)
        slow = sum(v for v in step.values() if v >= TAIL_FACTOR * median > 0)
        w = np.ones(len(gs))
        if tail.any() and slow > ns[tail].sum() > 0:      # past TAIL_KEEP: the kept stand
            w[tail] = min(slow, total) / ns[tail].sum()    # for every slow step
        rest = ~tail
        share = np.where(tail, ns, share) / np.maximum(ns, 1.0)
        if rest.any() and (share * ns)[rest].sum() > 0:
            w[rest] = share[rest] * max(total - (w * ns)[tail].sum(), 0.0) / \
                (share * ns)[rest].sum()
        elif ns.sum() > 0:
            w[:] = total / ns.sum()
        return w

    def _inside(self, rows: np.ndarray, outer: np.ndarray) -> np.ndarray:
        """The rows that lie inside one of the `outer` rows (same thread)."""
        r = self.trace.ranges
        lo, hi = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
        tid = r["global_tid"].to_numpy()
        outer = outer[np.argsort(lo[outer], kind="stable")]
        k = np.searchsorted(lo[outer], lo[rows], side="right") - 1
        j = outer[np.maximum(k, 0)]
        return rows[(k >= 0) & (hi[rows] <= hi[j]) & (tid[rows] == tid[j])]

    def samples(self, keys: list[int]) -> dict[int, np.ndarray]:
        """Each key's sample; a loop nested in another of `keys` (its path under the
        other's, same process) sampled inside the enclosing loop's sampled instances, so
        that the levels model the same steps and the export is read once for them."""
        info = self.trace.keys
        out: dict[int, np.ndarray] = {}
        for k in sorted(keys, key=lambda k: info.at[k, "path"].count("/")):
            path, pid = info.at[k, "path"], info.at[k, "pid"]
            outer = [o for o in out if info.at[o, "pid"] == pid
                     and path.startswith(info.at[o, "path"] + "/")]
            near = max(outer, key=lambda o: len(info.at[o, "path"]), default=None)
            out[k] = self.sample(k, out[near] if near is not None else None)
        return out

    def prefetch(self, keys: list[int]) -> None:
        """Build the graphs of these keys' sampled instances, in one read of the export."""
        keys = [k for k in keys if k not in self.built]
        if not keys or not self.readable:
            return
        r = self.trace.ranges
        tid = r["global_tid"].to_numpy(dtype="int64")
        lo = r["start_ns"].to_numpy(dtype="int64")
        picked = self.samples(keys)
        windows = [(k, int(i)) for k in keys for i in picked[k]]
        steps = {k: self.steps_of(k) for k in keys}
        hi = [int(lo[i]) + int(steps[k][0][i]) for k, i in windows]
        spans = [(int(tid[i] & PID_MASK), int(lo[i]), h)
                 for (_, i), h in zip(windows, hi, strict=True)]
        read = read_steps(self.db, spans, gpu_reach(self.trace, self.run_context()[0], spans),
                          [k for k, _ in windows], MODEL_CALLS)
        for k in keys:
            self.built[k], self.skipped[k], self.rows[k] = [], 0, []
        for (k, i), h, step in zip(windows, hi, read, strict=False):
            if step is None:            # past the loop's budget of calls
                continue
            try:
                g = build(step, int(tid[i]), int(lo[i]), h, gpu_end=steps[k][1][i])
                g.entered = self.entered(int(tid[i]), int(lo[i]), h)
                mark_gil(g, self.running())
                unchanged(g)
            except CycleError:
                self.skipped[k] += 1
                continue
            self.built[k].append(g)
            self.rows[k].append(int(i))

    def entered(self, tid: int, lo: int, hi: int) -> np.ndarray:
        """(start, end) of the ranges of thread `tid` that start inside (lo, hi): the
        thread's ranges sorted by start once (Graph.entered)."""
        if self._by_thread is None:
            r = self.trace.ranges
            order = np.lexsort((r["start_ns"].to_numpy(), r["global_tid"].to_numpy()))
            self._by_thread = tuple(r[k].to_numpy(dtype="int64")[order]
                                    for k in ("global_tid", "start_ns", "end_ns"))
        t, s, e = self._by_thread
        a, b = np.searchsorted(t, tid, "left"), np.searchsorted(t, tid, "right")
        i, j = a + np.searchsorted(s[a:b], lo, "right"), a + np.searchsorted(s[a:b], hi, "left")
        return np.stack([s[i:j], e[i:j]], axis=1)

    def running(self) -> pd.DataFrame:
        """The export's CPU samples in the Python interpreter (gil.py), read once."""
        if self._running is None:
            self._running = interpreter_samples(
                self._cpu if self._cpu is not None else load_samples(self.db))
        return self._running

    def py_samples(self) -> PySamples:
        """The export's Python samples, read once."""
        if self._py is None:
            self._py = load_py_samples(self.db)
        return self._py

    def graphs(self, key: int) -> list[Graph]:
        self.prefetch([key])
        return self.built.get(key, [])

    def windows(self, path: str, pid: int | None = None) -> tuple[tuple[int, int], ...]:
        """Every instance of a range path (of process `pid`) as (start, end)."""
        r = self.trace.ranges
        mine = np.isin(r["key"].to_numpy(), self.keys_of(path, pid))
        return tuple(zip(r["start_ns"].to_numpy()[mine].tolist(),
                         r["end_ns"].to_numpy()[mine].tolist(), strict=True))


@dataclass
class LoopModel:
    """One loop's model: per modeled step its measured and replayed time as it runs, its
    critical path, and the share of the runs' time it stands for (StepModels.weights)."""

    row: int
    steps: list[int] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)
    paths: list[Counter[str]] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def weighted(self) -> Counter[str]:
        """The modeled steps' paths, each weighted (categories, threads and GIL holders)."""
        path: Counter[str] = Counter()
        for p, w in zip(self.paths, self.weights, strict=True):
            for c, ns in p.items():
                path[c] += ns * w
        return path

    def scaled(self) -> tuple[dict[str, int], int]:
        """(critical_path_ns, replayed_run_ns): the weighted paths and replayed steps."""
        path = self.weighted()
        return ({c: round(path[c]) for c in CATEGORIES if path.get(c)},
                round(float(np.dot(self.replayed, self.weights))))

    def _by_thread(self) -> list[tuple[str, int, float]]:
        """The weighted path's stretches of other threads and GIL waits: (kind, global
        tid (-1: the GIL holder is not known), ns)."""
        out = []
        for key, ns in self.weighted().items():
            kind, _, tid = key.partition(":")
            if kind in ("thread", "gil") and tid.lstrip("-").isdigit():
                out.append((kind, int(tid), ns))
        return out

    def thread_ids(self) -> set[int]:
        """The other threads on the weighted path and the GIL holders: global tids."""
        return {tid for _, tid, _ in self._by_thread() if tid >= 0}

    def threads(self, names: dict[int, str], starts: dict[int, str] | None = None
                ) -> dict[str, int]:
        """critical_threads_ns: the other threads on the weighted path by name (and the
        line that started them: gil.thread_starts), and the GIL waits by the thread that
        held the GIL ("<name> (holding the GIL)"), most first."""
        out: Counter[str] = Counter()
        for kind, tid, ns in self._by_thread():
            if round(ns):
                label = thread_label(tid, names, starts) if tid >= 0 else "unknown"
                out[label + (" (holding the GIL)" if kind == "gil" else "")] += round(ns)
        return dict(out.most_common())


def loop_rows(table_cols: dict[str, list], is_op: object) -> list[int]:
    """The rows of the range table that are loops (see the module doc), most wall time
    first, at most MAX_LOOPS."""
    repeated = np.flatnonzero(np.asarray(table_cols["wall_instances"], dtype=np.int64)
                              >= LOOP_MIN_INSTANCES).tolist()   # few of 110k op ranges
    name, warm, dom = table_cols["name"], table_cols["warmup"], table_cols["domain"]
    rows = [i for i in repeated
            if not warm[i] and not is_library(dom[i]) and not is_op(name[i])]
    walls = table_cols["wall_ns"]
    return sorted(rows, key=lambda i: -walls[i])[:MAX_LOOPS]


def model_loops(models: StepModels, keys: np.ndarray, table_cols: dict[str, list],
                is_op: object) -> list[LoopModel]:
    """Each loop's model (see the module doc); none where the export has no CUDA calls or
    no file to read its steps from (an export built in memory)."""
    rows = loop_rows(table_cols, is_op)
    if not rows or not models.readable:
        return []
    models.prefetch([int(keys[row]) for row in rows])
    out = []
    for row in rows:
        m = LoopModel(row)
        key = int(keys[row])
        for g, w in zip(models.graphs(key), models.weights(key).tolist(), strict=True):
            m.steps.append(g.hi - g.lo)
            m.replayed.append(g.replayed.wall(g))
            if "path" not in g.cache:
                g.cache["path"] = critical_path(g, g.replayed)
            m.paths.append(g.cache["path"])
            m.weights.append(w)
        if m.steps:
            out.append(m)
    return out


def model_columns(models: list[LoopModel], names: dict[int, str] | None = None,
                  starts: dict[int, str] | None = None) -> pd.DataFrame:
    """The loops' fields by table row: critical_path_ns, critical_threads_ns (threads
    named from `names`: global tid -> name, and `starts`: where they were started),
    replayed_run_ns, modeled_instances."""
    rows, paths, threads, replayed, n = [], [], [], [], []
    for m in models:
        path, again = m.scaled()
        rows.append(m.row)
        paths.append(path)
        threads.append(m.threads(names or {}, starts))
        replayed.append(again)
        n.append(len(m.steps))
    return pd.DataFrame({"critical_path_ns": pd.Series(paths, index=rows, dtype=object),
                         "critical_threads_ns": pd.Series(threads, index=rows,
                                                          dtype=object),
                         "replayed_run_ns": np.array(replayed, dtype="int64"),
                         "modeled_instances": np.array(n, dtype="int64")},
                        index=pd.Index(rows, dtype="int64"))
