"""A loop's syncs by the line of the user's code that makes each: one finding per site.

A step that reads back twice (a `.tolist()`, then a boolean mask's count) has two causes,
each with its own remedy and its own saving: removing one sync leaves the other waiting
for the GPU. The step model holds the syncs in order; the k-th sync of a range's
instance is the same line of code in every step where the steps sync alike (the same
number of syncs in most modeled steps). Its *segment* is the time from the sync before
it (or the instance's start) to its end; the line is the one the Python samples of the
segments fell on nearest the syncs' ends (the smallest median distance: the step's own
work before the read lies further back). Ordinals of one line are one site
(`repeat_interleave` syncs twice: a total read back after a scan and the read after it
are named together, from both segments' samples). In a loop's range, whose modeled unit
is an instance holding many steps (a range inside that repeats), the k-th sync of every
step is one line too, named from all its steps' samples.

Each site's scope (what its change acts on) is its segments, through to the next call
after each sync: the host's work on the value read back belongs to it. A step that syncs
once is one site: the loop's one finding names its line where no line's call says it
syncs (an `if` on a tensor; indexing with a CPU tensor).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..loops.edits import COUNTING
from ..loops.graph import CALL, Graph
from ..loops.sync_changes import SCALAR_BYTES, index_uploads
from ..trace.pylines import lines_before, named_call, source_line

SAME_SHARE = 0.8
"""The share of modeled steps that must sync the same number of times for the k-th sync
to be one site."""

Line = tuple[str, int]
Frame = tuple[str, str, int]


@dataclass(frozen=True)
class SyncSite:
    """One line's syncs in a loop range: what they are, where they run, its line."""

    line: Line | None                      # (function, line number); None: not sampled
    kinds: tuple[str, ...]                 # pricing.SYNC_SAID's keys, one per sync a step
    windows: tuple[tuple[int, int], ...]   # its segments in the modeled steps
    file: str = ""                         # the line's file, as sampled
    calls: tuple[str, ...] = ()            # the Python call of each sync, where backtraced
    said: str = ""                         # the sync call its line's text makes (named_call)


def sync_sites(pricer, path: str, pid: int | None = None) -> list[SyncSite]:
    """The sites of the syncs in a range's instances over its loop's modeled steps (see
    the module doc); [] where the steps do not sync alike or the capture has no Python
    samples."""
    key = pricer.modeled_key(path, pid)
    if key is None:
        return []
    scope = np.array(pricer.models.windows(path, pid), dtype=np.int64).reshape(-1, 2)
    per_step = [_segments(g, scope) for g in pricer.models.graphs(key)]
    counts = Counter(len(x) for x in per_step)
    n, seen = counts.most_common(1)[0] if counts else (0, 0)
    if n < 1 or seen < SAME_SHARE * len(per_step):
        return []
    alike = [x for x in per_step if len(x) == n]
    graphs = [g for g, x in zip(pricer.models.graphs(key), per_step, strict=True)
              if len(x) == n]
    frames, called = _named(pricer, path, pid, graphs, alike, scope)
    files = {(f[1], f[2]): f[0] for f in frames if f is not None}
    lines = [(f[1], f[2]) if f is not None else None for f in frames]
    cwd, code = pricer.models.trace.export.working_dir, pricer.models.py_samples().code
    return [SyncSite(line, tuple(alike[0][k][2] for k in ks),
                     tuple((x[k][0], x[k][3]) for x in alike for k in ks),
                     files.get(line, "") if line else "",
                     tuple(called[k] for k in ks) if any(called[k] for k in ks) else (),
                     _text_call(files[line], line[1], cwd, code) if line else "")
            for line, ks in _grouped(lines).items()]


TEXT_CALLS = re.compile(r"^(?:Tensor\.(?:item|cpu|tolist|numpy)|synchronize|nonzero)$")
"""The calls a line's text names (pylines.named_call) that are a sync of their own: what
a site without backtraces says it waits in (an `.item()` after a mask's count, whose
pattern reads as the count's)."""


def _text_call(file: str, line: int, cwd: str | None, code) -> str:
    """The sync call the line's text makes (TEXT_CALLS), else ""."""
    call = named_call(source_line(file, line, cwd, code))
    return call if TEXT_CALLS.match(call) else ""


def _named(pricer, path: str, pid: int | None, graphs: list[Graph], alike: list[list],
           scope: np.ndarray) -> tuple[list[Frame | None], list[str]]:
    """Each sync ordinal's frame and Python call over the modeled steps that sync alike
    (`graphs`, and `alike`: their _segments): the frame sampled nearest the ends of its
    call's segments (_calls, merged over a loop range's steps by _periodic), set right by
    the call (by_call)."""
    n = len(alike[0])
    spans = np.array([x[:2] for step in alike for x in step], dtype=np.int64)
    py, cwd = pricer.models.py_samples(), pricer.models.trace.export.working_dir
    near = lines_before(py, pricer.threads(path, pid), spans)
    groups = _calls([x[2] for x in alike[0]])
    kind_of = [alike[0][ks[0]][2] for ks in groups for _ in ks]
    calls = [Counter(x[k][4] for x in alike if x[k][4]).most_common(1) for k in range(n)]
    called = [c[0][0] if c else KIND_CALLS.get(kind_of[k], "") for k, c in enumerate(calls)]
    frames: list[Frame | None] = [None] * n
    merged = _periodic(groups, list(zip(kind_of, called, strict=True)),
                       _repeats(pricer.models, path, pid, graphs))
    for ks in merged:     # over a loop range's steps, the frame sampled nearest of all
        found = _nearest([d for i, d in enumerate(near) if i % n in ks],
                         np.median if merged is groups else np.min)
        for k in ks:
            frames[k] = found
    heard = (f for found in lines_before(py, pricer.threads(path, pid), scope)
             for f, _ in found)
    return by_call(frames, called, lambda f, c: says(source_line(f[0], f[2], cwd, py.code),
                                                     c), heard), called


KIND_CALLS = {"size": "repeat_interleave", "unique": "torch.unique",
              "synchronize": "torch.cuda.synchronize"}
"""The call a sync's kind names where no backtrace did (a capture without them): kinds
only one library call makes, under the name a backtrace gives it (binding_call)."""


def by_call(frames: list[Frame | None], calls: list[str],
            said: Callable[[Frame, str], bool], heard: Iterable[Frame] = ()
            ) -> list[Frame | None]:
    """Each sync ordinal's line, set right by its backtraced Python call (`calls`, "" where
    none). A short wait no sample fell in takes the line of the host work before it (seed
    86 g19's `.tolist()` named five times by the `torch.unique` before it, and priced with
    its conversion; g39's `torch.cuda.synchronize()` by the `empty_cache` lines of the
    step before). So an ordinal whose line makes its call (`said(line, call)`) keeps it;
    the call's other ordinals take the one line of the range's samples (`heard`) that
    makes the call and no ordinal was found on (seed 87 g36's `torch.cuda.synchronize()`
    a step, whose waits no sample reached, beside the one that ends the range), else the
    one line of theirs that makes it, else their one line; a line found for two calls'
    syncs, without text, the call most of them make. Two lines that make the same call
    (two `.item()`) stay apart, and unreached where so."""
    pairs = [(f, c) for f, c in zip(frames, calls, strict=True) if f is not None and c]
    made: dict[Frame, Counter] = {}
    for f, c in pairs:
        made.setdefault(f, Counter())[c] += 1
    owner = {f: n.most_common(1)[0][0] for f, n in made.items()}   # its most frequent call
    heard = list(dict.fromkeys(heard))
    line: dict[str, Frame] = {}
    for c in dict.fromkeys(c for c in calls if c):
        lines = list(dict.fromkeys(f for f, c2 in pairs if c2 == c))
        unfound = [f for f in heard if f not in lines and said(f, c)]
        pick = unfound if len(unfound) == 1 else [f for f in lines if said(f, c)] or \
            [f for f in lines if owner[f] == c]
        if len(pick) == 1:
            line[c] = pick[0]
    return [f if not c or (f is not None and said(f, c)) else
            line.get(c, None if f is not None and owner[f] != c else f)
            for f, c in zip(frames, calls, strict=True)]


def says(text: str, call: str) -> bool:
    """Whether a line's source text makes the call a backtrace named (`Tensor.tolist`:
    `.tolist(`; `torch.cuda.synchronize`: `synchronize(`); never for an operator's
    (`Tensor.__getitem__`), which no name in the text shows."""
    name = call.rsplit(".", 1)[-1]
    return not name.startswith("__") and re.search(rf"\b{re.escape(name)}\s*\(", text) \
        is not None


NONZERO = re.compile(COUNTING, re.I)
SCAN = re.compile(r"Scan", re.I)
"""A scan launched right before a scalar read back: the read is a total a library call
sizes its output by (`repeat_interleave` without output_size sums its repeats so)."""


def call_kinds(g: Graph, named: dict[int, str] | None = None) -> dict[int, str]:
    """Each blocking call (label "sync") on the step's range thread -> what caused it
    (SYNC_SAID's keys), in call order; `named`: binding_calls(g), where the caller has it.
    A read back is a count's where a counting kernel was launched since the sync before
    it (not anywhere earlier in the step: seed 86 g19's `.tolist()` after a
    `torch.unique` of the iteration before read as a mask's count)."""
    out: dict[int, str] = {}
    names = g.calls["name"].tolist()
    none = [0] * len(g.ops)
    copy_of = {g.corr_of.get(int(c)): (int(b), int(ck) == 1) for c, k, b, ck in zip(
        g.ops["corr"].tolist(), g.ops["kind"].tolist(),
        g.ops["bytes"].tolist() if "bytes" in g.ops else none,
        g.ops["copy_kind"].tolist() if "copy_kind" in g.ops else none, strict=True)
        if int(k) == 1}                       # call -> (bytes, host to device)
    index = {sync for _, sync in index_uploads(g)}
    kernels = launch_order(g)
    mine = sorted((i for i in range(len(names)) if g.thread[i] == g.tid),
                  key=lambda i: g.start[i])
    last_copy, since = None, -np.inf
    for i in mine:
        name = names[i]
        if i in copy_of:
            last_copy = (i, *copy_of[i])
        if g.label[i] != "sync":
            continue
        synced, since = since, g.end[i]
        if "DeviceSynchronize" in name or "CtxSynchronize" in name:
            out[i] = "synchronize"
        elif "EventSynchronize" in name:
            out[i] = "event"
        elif last_copy is not None and last_copy[2]:
            out[i] = "index" if i in index else "upload"
            last_copy = None
        elif last_copy is not None:
            at, size, _ = last_copy
            before = [n for t, n in kernels if synced < t < g.start[at]]
            nonzero = any(NONZERO.search(n) for n in before)
            out[i] = "cpu" if size > SCALAR_BYTES else \
                "size" if before and SCAN.search(before[-1]) else \
                "nonzero" if nonzero else "item"
            last_copy = None
        else:
            out[i] = "other"
    named = binding_calls(g) if named is None else named
    for i, call in named.items():                # what the pattern cannot tell apart
        if i in out and call in BINDING_KINDS:
            out[i] = BINDING_KINDS[call]
    return out


BINDING_CALLS = {"tensor": "torch.tensor", "as_tensor": "torch.as_tensor",
                 "_unique2": "torch.unique", "_unique": "torch.unique",
                 "unique_consecutive": "torch.unique_consecutive",
                 "bool_scalar": "Tensor.__bool__", "is_nonzero": "Tensor.__bool__",
                 "getitem": "Tensor.__getitem__",
                 "setitem": "Tensor.__setitem__", "repeat_interleave": "repeat_interleave",
                 "integral_scalar": "Tensor.__int__"}
"""torch's Python bindings (`torch::autograd::THPVariable_<name>`) that are not the
method `Tensor.<name>`, by name: the call the user wrote."""
BINDING_KINDS = {"torch.unique": "unique", "torch.unique_consecutive": "unique",
                 "torch.cuda.synchronize": "synchronize"}
"""Syncs whose kind (SYNC_SAID) a backtrace tells where the CUDA calls cannot: torch.unique
reads back its output's size as a boolean mask's count does."""


def binding_call(frame: str) -> str:
    """The Python call a bindings frame (nsys_backtraces) is: `THPVariable_cpu` ->
    `Tensor.cpu`, `THCPModule_cudaSynchronize` -> `torch.cuda.synchronize`,
    `THPStorage_copy_` -> `UntypedStorage.copy_`; "" for any other."""
    name = frame.rsplit("::", 1)[-1]
    if name.startswith("THCPModule_cuda") and len(name) > 15:
        return f"torch.cuda.{name[15].lower()}{name[16:]}"
    if name.startswith("THPVariable_"):
        base = name.removeprefix("THPVariable_")
        return BINDING_CALLS.get(base, f"Tensor.{base}")
    if name.startswith("THPStorage_"):          # torch.save copies each storage to the host
        return f"UntypedStorage.{name.removeprefix('THPStorage_')}"
    return ""


def binding_calls(g: Graph) -> dict[int, str]:
    """Each call of the step whose backtrace was captured -> its Python call."""
    if "binding" not in g.calls:
        return {}
    return {i: call for i, b in enumerate(g.calls["binding"].tolist())
            if b and (call := binding_call(b))}


def launch_order(g: Graph) -> list[tuple[int, str]]:
    """The window's kernels as (launch, name) in launch order: the start of the call that
    launched each, -1 for earlier steps' (launched before the step). Not their GPU start:
    in a GPU-bound loop a count kernel launched before its read back runs after the read
    was called, and the read would not be seen as a count's (seed 62 g26's boolean mask
    was an `.item()` in 12 of its 16 steps, and priced as one)."""
    launched = g.op_launched()
    names = g.ops["name"].tolist() if "name" in g.ops else []
    found = [(int(launched[j]), str(n)) for j, (n, kind) in enumerate(zip(
        names, g.ops["kind"].tolist(), strict=False)) if kind == 0]
    return sorted(found, key=lambda x: x[0])


def _segments(g, scope: np.ndarray) -> list[tuple[int, int, str, int, str]]:
    """(segment start, sync end, kind, next call's start, Python call or "") of each sync
    on the range's thread in one step, inside the range's instances."""
    calls = binding_calls(g)
    kinds = call_kinds(g, calls)
    mine = np.flatnonzero((g.kind == CALL) & (g.thread == g.tid))
    mine = mine[np.argsort(g.start[mine], kind="stable")]
    out: list[tuple[int, int, str, int, str]] = []
    for w0, w1 in scope[(scope[:, 1] > g.lo) & (scope[:, 0] < g.hi)].tolist():
        at = mine[(g.start[mine] >= w0) & (g.start[mine] < w1)].tolist()
        prev = w0
        for j, i in enumerate(at):
            if i in kinds:
                after = int(g.start[at[j + 1]]) if j + 1 < len(at) else w1
                out.append((prev, int(g.end[i]), kinds[i], after + 1, calls.get(i, "")))
                prev = int(g.end[i])
    return out


def _nearest(spans: list[list[tuple[Frame, int]]],
             stat: Callable[[list[int]], float] = np.median) -> Frame | None:
    """The frame sampled nearest the spans' ends: the smallest median distance for one
    ordinal over the modeled steps (a few spans each); over a loop range's steps (many
    spans pooled), the smallest distance of all: the line run last before the syncs.
    A pooled median let one sample of the cause range's push, 0.5 ms before the end,
    outrank the 107 of seed 89 g02's `if` on a tensor, spread over the GIL waits of its
    dispatch (median 2.7 ms)."""
    by: dict[Frame, list[int]] = {}
    for found in spans:
        for line, d in found:
            by.setdefault(line, []).append(d)
    return min(by, key=lambda x: (float(stat(by[x])), x)) if by else None


def _calls(kinds: list[str]) -> list[list[int]]:
    """The step's sync ordinals by the call that makes them: a total read back after a
    scan (`size`) and the read right after it are one `repeat_interleave` (its check of
    the repeats), named by one line; every other sync is a call of its own."""
    out: list[list[int]] = []
    for k in range(len(kinds)):
        if k and kinds[k - 1] == "size" and out[-1] == [k - 1]:
            out[-1].append(k)
        else:
            out.append([k])
    return out


def _repeats(models, path: str, pid: int | None, graphs: list[Graph]) -> set[int]:
    """How many instances of a range directly inside `path` each modeled instance holds,
    for each such range that repeats alike (two or more in every one): the steps of a
    loop's range."""
    keys = models.trace.keys
    paths = keys["path"].astype(str)
    inner = paths.str.startswith(path + "/") & ~paths.str[len(path) + 1:].str.contains("/")
    out: set[int] = set()
    for child in sorted(set(paths[inner.to_numpy()].tolist())):
        w = np.array(models.windows(child, pid), dtype=np.int64).reshape(-1, 2)
        counts = {int(((w[:, 0] >= g.lo) & (w[:, 1] <= g.hi)).sum()) for g in graphs}
        if len(counts) == 1 and min(counts) >= 2:
            out |= counts
    return out


def _periodic(groups: list[list[int]], seq: list, repeats: set[int]) -> list[list[int]]:
    """The groups (of _calls) merged where their first ordinals are a whole number of
    periods apart in the range's repeating body, where the body repeats as often as a
    range inside repeats (`repeats`): a loop's range, whose modeled unit is its instance,
    makes the k-th sync of each of its steps on one line, as the same ordinal of every
    modeled step is (seed 88 g09's CPU-index syncs, 32 an instance, named one by one from
    a few samples each: 17 took the line of the step's own work before them, and the site
    its half of the saving). The period is the shortest that repeats the syncs' (kind,
    call) from the first on, as many times as the range inside repeats (the syncs after
    it, such as a synchronize that closes the range, stay their own); none: as given
    (two `.item()` lines of one step)."""
    n = len(seq)
    for p in range(1, n // 2 + 1):
        body = next((k + p for k in range(n - p) if seq[k] != seq[k + p]), n)
        if body % p == 0 and body // p in repeats:
            merged: dict[int, list[int]] = {}
            for ks in groups:
                merged.setdefault(ks[0] % p if ks[-1] < body else -1 - ks[0], []).extend(ks)
            return [sorted(ks) for ks in merged.values()]
    return groups


def _grouped(lines: list[Line | None]) -> dict[Line | None, list[int]]:
    """Ordinals by line, in order of first appearance."""
    out: dict[Line | None, list[int]] = {}
    for k, line in enumerate(lines):
        out.setdefault(line, []).append(k)
    return out
