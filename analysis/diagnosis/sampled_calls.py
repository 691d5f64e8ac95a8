"""What a range's Python samples and CUDA backtraces say of its calls, read on its loop's
step models: the user's lines sampled inside its blocking calls (or its memory calls), the
Python calls its blocking calls came through, its functions' lines sampled anywhere, the
windows of its DataLoader waits. Pricer's (pricing.py) for the rules that name a line
(rules/lines.py).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from ..documents.types import PyLine
from ..loops.edits import calls_labelled, calls_named, launcher, on_thread
from ..loops.graph import Graph
from ..loops.sync_changes import synced_after
from ..trace.pylines import lines_inside, lines_of, wait_windows
from .graph_reads import started_in
from .sync_sites import binding_calls

if TYPE_CHECKING:
    from ..loops.model import StepModels

MEMORY_CALLS = r"cudaMalloc|cudaFree"
"""The allocator's calls to the driver, whose samples name the line that allocates."""
COPY_KINDS = {"h2d": 1, "d2h": 2}
"""blocked's copy kinds by direction: the export's copyKind of the copies the calls
launched (a loop that reads back and uploads: its readback's call waits for the GPU, and
its samples would name the readback's line for an upload's finding, seed 83's g14)."""


def _calls_of(g: Graph, kind: str) -> np.ndarray:
    """The step's call nodes of blocked's `kind`: "sync", the synchronize calls and
    blocking copies (their label); "memory", MEMORY_CALLS; "copy", the copy calls; "h2d"
    and "d2h", the copy calls that launched a copy of that direction."""
    if kind == "sync":
        return calls_labelled(g, "sync")
    if kind == "memory":
        return calls_named(g, MEMORY_CALLS)
    copies = calls_named(g, "Memcpy")
    if kind not in COPY_KINDS or "copy_kind" not in g.ops or not len(g.ops):
        return copies
    ops = np.flatnonzero((g.ops["kind"].to_numpy() == 1)
                         & (g.ops["copy_kind"].to_numpy() == COPY_KINDS[kind]))
    return np.intersect1d(copies, launcher(g, ops + len(g.calls)))


def _spans(found: list[tuple[Graph, np.ndarray]], synced: bool) -> np.ndarray:
    """The blocking calls' (start, end) rows, sorted; with `synced`, a copy's end that of
    the synchronize right after it on its thread, where one follows (_synced_ends)."""
    spans = [(int(a), int(b)) for g, calls in found
             for a, b in zip(g.start[calls], _synced_ends(g, calls, synced), strict=True)]
    return np.array(sorted(spans), dtype=np.int64).reshape(-1, 2)


def _synced_ends(g: Graph, calls: np.ndarray, synced: bool) -> np.ndarray:
    """Each call's end; with `synced`, for one followed on its thread by a synchronize
    (synced_after), that synchronize's end."""
    ends = g.end[calls].copy()
    if synced and len(calls):
        after = dict(synced_after(g, calls))
        ends = np.array([g.end[after.get(int(c), int(c))] for c in calls.tolist()],
                        dtype=ends.dtype)
    return ends


def _called_through(g: Graph, calls: np.ndarray, named: dict[int, str]) -> list[str]:
    """Each blocking call's Python call (`named`: binding_calls): its own backtrace's, else
    that of the synchronize right after it on its thread (synced_after: a pageable
    upload's backtrace is on the synchronize after its copy); "" for neither."""
    after = dict(synced_after(g, calls))
    return [named.get(i) or named.get(after.get(i, -1), "") for i in calls.tolist()]


class SampledCalls:
    """The sample and backtrace reads of a Pricer (its `models`, `cache`, `threads` and
    `modeled_key`)."""

    models: StepModels
    cache: dict[tuple, Any]

    def input_waits(self, path: str, pid: int | None) -> tuple[tuple[int, int], ...]:
        """When the range's threads waited for a DataLoader's next batch (Python samples,
        pylines.wait_windows)."""
        return wait_windows(self.models.py_samples(), self.threads(path, pid))

    def blocked(self, path: str, kind: str, pid: int | None = None) -> Counter:
        """The user's lines ((function, line)) the range's thread was sampled on inside its
        blocking calls of a `kind` (_calls_of's: synchronize calls and blocking copies;
        the copy calls, a pageable one blocking in the call itself, or those of one
        direction; cudaMalloc and cudaFree) in its loop's modeled steps, within the
        range's instances: where the user's code waits, whatever call it made. Where no
        sample fell in its copies, their spans run to the end of the synchronize right
        after each on its thread (PyTorch's copy from pageable memory, or back to the
        host, waits there: a CPU index's short upload is sampled in its wait, not its
        call)."""
        found = self._blocking(path, kind, pid)
        threads, samples = self.threads(path, pid), self.models.py_samples()
        lines = lines_inside(samples, threads, _spans(found, synced=False))
        if not lines and kind in ("copy", *COPY_KINDS):
            lines = lines_inside(samples, threads, _spans(found, synced=True))
        return lines

    def sampled_in(self, path: str, functions: set[tuple[str, str]],
                   pid: int | None = None) -> list[PyLine]:
        """The user's lines in `functions` ((file, function), as a range's lines name
        them) the range's threads were sampled on anywhere in the capture (pylines.lines_of;
        pct: 0, of none of the range's samples)."""
        found = lines_of(self.models.py_samples(), self.threads(path, pid), functions,
                         self.models.trace.export.working_dir)
        return [PyLine(file=f, line=n, function=fn, call=call, code=code, samples=k, pct=0.0)
                for (f, n, fn, call, code), k in found]

    def backtraced(self, path: str, kind: str, pid: int | None = None) -> Counter:
        """The Python calls (from CUDA backtraces, where the capture took them) of the
        same blocking calls as `blocked`: `torch.tensor`, `Tensor.cpu`."""
        found = Counter()
        for g, calls in self._blocking(path, kind, pid):
            named = binding_calls(g)
            if named:
                found.update(_called_through(g, calls, named))
        found.pop("", None)
        return found

    def _blocking(self, path: str, kind: str, pid: int | None
                  ) -> list[tuple[Graph, np.ndarray]]:
        """Per modeled step of the range's loop, its graph and the range thread's blocking
        calls of a `kind` (blocked's) that start within the range's instances; kept, as
        blocked and backtraced both ask for a finding's range."""
        memo = ("blocking", path, kind, pid)
        if memo in self.cache:
            return self.cache[memo]
        key = self.modeled_key(path, pid)
        out = []
        if key is not None:
            w = np.array(self.models.windows(path, pid), dtype=np.int64).reshape(-1, 2)
            for g in self.models.graphs(key):
                calls = on_thread(g, _calls_of(g, kind))
                out.append((g, calls[started_in(g.start[calls], w)]))
        self.cache[memo] = out
        return out
