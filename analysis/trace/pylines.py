"""The user's own lines, from Python samples (load/nsys_pysamples.py): per range, where in
the user's code its thread was when sampled, and the library call it was in.

A sample counts in every range instance open on its own thread at its time (as a kernel
counts in every enclosing range). Its stack (innermost frame first) splits in three:
- the user's line: the innermost frame of the user's code (anything outside
  site-packages, the standard library and this toolkit's own runner);
- the library call below it: the innermost library frame under that line, named by its
  module and function (`torch.cuda.memory.empty_cache`,
  `torch.optim.adam._single_tensor_adam`): the call that spends the time; where the line
  calls compiled code directly (`.item()`, `torch.tensor`, `nonzero`,
  `scaled_dot_product_attention` have no Python frame), the call its source text names
  (CALLS, else its leftmost call by a dotted name: `np.tanh`), when the file is readable;
- the rest (interpreter start-up, imports) stays in the range's total.

`py_lines(trace, samples, cwd) -> (samples per key, lines frame)`: the lines frame holds
per range key its LINES hottest user lines: file, line, function, call, code (the line's
source text, "" where the file is not readable here), samples, pct (of the range's
samples).
"""

from __future__ import annotations

import ast
import builtins
import linecache
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.paths import relative
from ..load.nsys_pysamples import Frame, PySamples
from .host import sample_hits

if TYPE_CHECKING:
    from .types import Trace

LINES = 8
"""User lines kept per range (most samples first)."""

LIBRARY = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
STDLIB = re.compile(r"[/\\]lib(?:64)?[/\\]python\d+(?:\.\d+)?[/\\]")
TOOLKIT = re.compile(r"(?:^|[/\\])workflows[/\\](?:runner|nsys)\.py$"
                     r"|[/\\]nvtx[/\\](?:nvtx|__init__)\.py$")
"""This toolkit's runner, and the NVTX package that draws the user's ranges
(`nvtx.push_range`, `nvtx.annotate`) wherever it is installed: on the H200 kit it sits in a
folder on PYTHONPATH, not site-packages, and a sync site sampled while its thread waited
in a range push was named at nvtx.py:361 (battery seed 86's g28)."""

CALLS = (("scaled_dot_product_attention", r"scaled_dot_product_attention"),
         ("empty_cache", r"\bempty_cache\s*\("),
         ("synchronize", r"\bsynchronize\s*\("),
         ("Tensor.item", r"\.item\s*\("),
         ("Tensor.cpu", r"\.cpu\s*\("),
         ("Tensor.tolist", r"\.tolist\s*\("),
         ("Tensor.numpy", r"\.numpy\s*\("),
         ("torch.tensor", r"\btorch\.(?:as_)?tensor\s*\("),
         ("nonzero", r"\bnonzero\s*\(|\w\[[^][]*(?:[<>]=?|[=!]=)[^][]*\]"),
         ("Tensor.to", r"\.to\s*\("))
"""Compiled calls a line may make, named from its source text (first match)."""

COLUMNS = ["key", "file", "line", "function", "call", "code", "samples", "pct"]


def frame_kind(file: str) -> str:
    """user, library (site-packages), stdlib (the interpreter's own modules and frozen
    ones) or toolkit (this toolkit's runner, which starts the user's script, and the NVTX
    package that draws the ranges)."""
    if LIBRARY.search(file):
        return "library"
    if file.startswith("<") or STDLIB.search(file):
        return "stdlib"
    if TOOLKIT.search(file):
        return "toolkit"
    return "user"


def module_of(file: str) -> str:
    """A library or standard-library file as its module path (torch/cuda/memory.py ->
    torch.cuda.memory; <frozen os> -> os)."""
    if file.startswith("<"):
        return file.strip("<>").split()[-1]
    cut = LIBRARY.split(file)[-1] if LIBRARY.search(file) else STDLIB.split(file)[-1]
    parts = cut.removesuffix(".py").replace("\\", "/").split("/")
    return ".".join(p for p in parts if p and p != "__init__")


def user_frame(stack: Sequence[Frame]) -> int | None:
    """The index of the innermost frame of the user's code, or None."""
    return next((i for i, f in enumerate(stack) if frame_kind(f[0]) == "user"), None)


def site(stack: Sequence[Frame], source: str = "") -> tuple[int, str] | None:
    """(index of the innermost user frame, the library call below it) of one stack, or
    None where no frame is the user's. `source`: that line's text, for CALLS."""
    user = user_frame(stack)
    if user is None:
        return None
    below = next((f for f in stack[:user] if frame_kind(f[0]) in ("library", "stdlib")),
                 None)
    if below is not None:
        return user, f"{module_of(below[0])}.{below[1]}"
    return user, named_call(source)


def named_call(source: str) -> str:
    """The compiled call a line of source makes: one of CALLS, else "nonzero" where it
    indexes with a comparison (a boolean mask: `s["x"][s["x"] > 0]`, which CALLS' pattern
    misses), else its first call by a dotted name (`np.tanh`, `rng.standard_normal`;
    Python's builtins left out), else ""."""
    known = next((name for name, pattern in CALLS if re.search(pattern, source)), "")
    if known:
        return known
    tree = _parsed(source)
    if tree is None:
        return ""
    return "nonzero" if _masked(tree) else _first_call(tree)


BUILTINS = frozenset(dir(builtins))


def _parsed(source: str) -> ast.AST | None:
    """A line's syntax tree (a block's head completed, a `return` dropped), or None."""
    for text in (source, source + "\n    pass", source.removeprefix("return ")):
        try:
            return ast.parse(text.strip())
        except SyntaxError:
            continue
    return None


def _masked(tree: ast.AST) -> bool:
    """Whether the line indexes with a comparison (`x[x > 0]`, `x[~(m == 1)]`,
    `x[(a > 0) & (b < 1)]`; not a slice's bound, `x[: n if n > 0 else None]`)."""
    return any(isinstance(n, ast.Subscript) and _mask(n.slice) for n in ast.walk(tree))


def _mask(node: ast.expr) -> bool:
    """A comparison, its negation or inversion, or their `&` / `|` / tuple."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        return _mask(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        return _mask(node.left) or _mask(node.right)
    if isinstance(node, ast.Tuple):
        return any(_mask(x) for x in node.elts)
    return False


def _first_call(tree: ast.AST) -> str:
    """The leftmost call of a line whose function is a dotted name, not a builtin (of a
    chain starting at one column, `x.new_zeros(n).index_fill_(...)`, the inner one, which
    runs first)."""
    calls = sorted((n.col_offset, n.end_col_offset or 0, name) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and (name := _dotted(n.func))
                   and name not in BUILTINS)
    return calls[0][2] if calls else ""


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for a chain of names and attributes; a method of an indexed object as the
    code writes it (`s['y'].new_zeros`: the method's name is what rules match); else ""."""
    if isinstance(node, ast.Name):
        return node.id
    if not isinstance(node, ast.Attribute):
        return ""
    if base := _dotted(node.value):
        return f"{base}.{node.attr}"
    return f"{ast.unparse(node.value)}.{node.attr}" \
        if isinstance(node.value, ast.Subscript) and _dotted(node.value.value) else ""


def source_line(file: str, line: int, cwd: str | None,
                carried: Mapping[tuple[str, int], str] | None = None) -> str:
    """A line's text, stripped, from the file as recorded or under the program's working
    directory, else as the export carries it (`carried`: PySamples.code, which a scrubbed
    export holds); "" where none has it."""
    for path in [Path(file)] + ([Path(cwd) / file] if cwd else []):
        if path.is_file():
            return linecache.getline(str(path), line).strip()
    return (carried or {}).get((file, line), "").strip()


def py_lines(trace: Trace, py: PySamples, cwd: str | None = None
             ) -> tuple[pd.Series, pd.DataFrame]:
    """Per range key: its Python samples (own thread, inside its instances; a Series by
    key) and its LINES hottest user lines (the module doc's frame)."""
    empty = pd.DataFrame({c: pd.Series(dtype=object if c in ("file", "function", "call",
                                                             "code") else
                                       "float64" if c == "pct" else "int64")
                          for c in COLUMNS})
    if not len(py):
        return pd.Series(dtype="int64"), empty
    key, row = sample_hits(trace, py.samples)
    stack = py.samples["stack"].to_numpy()[row]
    hits = pd.DataFrame({"key": key, "stack": stack})
    totals = hits.groupby("key").size()
    sites = _sites(py.stacks, cwd, py.code)
    hits["site"] = np.array([sites[s][0] for s in stack.tolist()], dtype=np.int64)
    named = hits[hits["site"] >= 0].groupby(["key", "site"]).size().rename("samples")
    if named.empty:
        return totals.astype("int64"), empty
    top = named.reset_index().sort_values(["key", "samples", "site"],
                                          ascending=[True, False, True])
    top = top.groupby("key", sort=False).head(LINES)
    info = _site_table(sites)
    out = top.join(info, on="site")
    out["pct"] = (100.0 * out["samples"] / totals.reindex(out["key"]).to_numpy()).round(1)
    return totals.astype("int64"), out[COLUMNS].reset_index(drop=True).astype(
        {c: object for c in ("file", "function", "call", "code")})


def top_line(py: PySamples, tid: int, lo: int, hi: int, cwd: str | None = None) -> str:
    """The user's line most Python samples of thread `tid` fell on in [lo, hi), as
    `file:line in function, call` ('' where none fell on a user line): what one slow
    step of a loop did (loops/runs.py), read from the samples alone."""
    return top_of(line_counts(py, tid, lo, hi, cwd))


def top_of(said: dict[str, int]) -> str:
    """The line of line_counts' counts with the most samples ('' for none)."""
    return max(said, key=lambda k: (said[k], k)) if said else ""


def steady_line(py: PySamples, tid: int, span: tuple[int, int],
                slow: list[dict[str, int]], cwd: str | None = None) -> str:
    """The user's line thread `tid`'s Python samples in `span` (a loop's steps) fell on
    most outside its slow steps (`slow`: their line_counts on that thread): what the
    other steps did."""
    said = Counter(line_counts(py, tid, *span, cwd))
    for counts in slow:
        said.subtract(counts)
    return top_of(+said)


def line_counts(py: PySamples, tid: int, lo: int, hi: int, cwd: str | None = None
                ) -> dict[str, int]:
    """Of thread `tid`'s Python samples in [lo, hi), how many fell on each user line
    (named as top_line names it)."""
    s = py.samples
    t = s["time_ns"].to_numpy(dtype="int64")
    at = (s["global_tid"].to_numpy(dtype="int64") == tid) & (t >= lo) & (t < hi)
    said: dict[str, int] = {}
    for (file, line, function, call, _), n in _site_counts(
            py, s["stack"].to_numpy()[at], cwd).items():
        name = f"{file}:{line} in {function}" + (f", {call}" if call else "")
        said[name] = said.get(name, 0) + n
    return said


def _site_counts(py: PySamples, stack: np.ndarray, cwd: str | None) -> Counter:
    """Samples per site (file, line, function, call, code) of the samples whose stack
    numbers are `stack` (those with a user frame)."""
    stacks, counts = np.unique(stack, return_counts=True)
    found: Counter = Counter()
    for (number, key), n in zip(_sites([py.stacks[i] for i in stacks.tolist()], cwd,
                                       py.code), counts.tolist(), strict=True):
        if number >= 0:
            found[key] += n
    return found


def _sites(stacks: list[tuple[Frame, ...]], cwd: str | None,
           carried: Mapping[tuple[str, int], str] | None = None
           ) -> list[tuple[int, tuple[str, int, str, str, str]]]:
    """Per stack: its site number (-1: no user frame) and the site (file, line,
    function, call, code); a site is one user line with one library call (`carried`:
    the export's own source lines, source_line's)."""
    number: dict[tuple, int] = {}
    out = []
    for stack in stacks:
        user = user_frame(stack)
        if user is None:
            out.append((-1, ("", 0, "", "", "")))
            continue
        file, function, line = stack[user]
        code = source_line(file, line, cwd, carried)
        _, call = site(stack, code)
        key = (shown(file, cwd), line, function, call, code)
        out.append((number.setdefault(key, len(number)), key))
    return out


def shown(file: str, cwd: str | None) -> str:
    """A user's file as messages name it: relative to the program's working directory
    when inside it, without a leading ./"""
    named = relative(file, cwd) or file
    return named[2:] if named.startswith("./") else named


def notes(py: PySamples) -> list[str]:
    """What the document should say of the Python samples: those the export holds
    without their stacks."""
    if not py.undecoded:
        return []
    return [f"{py.undecoded:,} Python samples were exported without their stacks: export "
            "with `nsys export --type=sqlite --include-json=true` (make systems SAMPLE=cpu "
            "does) and the host-side findings name the lines of your code."]


def _site_table(sites: list[tuple[int, tuple]]) -> pd.DataFrame:
    """The sites by number: file, line, function, call, code."""
    rows = {n: s for n, s in sites if n >= 0}
    return pd.DataFrame([rows[n] for n in sorted(rows)], index=sorted(rows),
                        columns=["file", "line", "function", "call", "code"])


LOADER_CALLS = re.compile(r"^(multiprocessing\.|selectors\.|queue\.|threading\.|"
                          r"torch\.utils\.data\.)")
"""The library calls below the user's line (site) a thread waits in for a DataLoader's
next batch (its worker queue: a pipe read, a select, a queue get)."""
WAIT_GAP_NS = 3_000_000
"""Samples of a wait further apart than this start a new wait (a sample every ms or so)."""


def wait_windows(py: PySamples, tids: set[int], calls: re.Pattern = LOADER_CALLS
                 ) -> tuple[tuple[int, int], ...]:
    """The spans the threads `tids` were sampled with a library call matching `calls`
    below the user's line (by default: waiting for a DataLoader's next batch, as the
    input_wait rule reads the lines), each from its first such sample to its last plus
    one sampling interval: consecutive samples WAIT_GAP_NS apart at most are one wait."""
    t, step = _sampled(py, tids, lambda stack: bool((at := site(stack)) and
                                                    calls.match(at[1])))
    return _spans(t, step, 0.0)


def module_windows(py: PySamples, tids: set[int], modules: re.Pattern
                   ) -> tuple[tuple[int, int], ...]:
    """The spans the threads `tids` were sampled with a frame of a library module
    matching `modules` below the user's line (torch.serialization: a torch.save, whatever
    it calls below), each from half a sampling interval before its first such sample to
    half one after its last (a call's span as sampling sees it, unshifted); samples
    WAIT_GAP_NS apart at most are one call."""
    def hit(stack: Sequence[Frame]) -> bool:
        user = user_frame(stack)
        return user is not None and any(
            frame_kind(f[0]) == "library" and modules.match(module_of(f[0]))
            for f in stack[:user])
    t, step = _sampled(py, tids, hit)
    return _spans(t, step, step / 2)


def _spans(t: np.ndarray, step: float, lead: float) -> tuple[tuple[int, int], ...]:
    """Sample times cut where WAIT_GAP_NS pass without one, each run as (first - lead,
    last + step - lead)."""
    if not len(t):
        return ()
    runs = np.split(t, np.flatnonzero(np.diff(t) > WAIT_GAP_NS) + 1)
    return tuple((int(x[0] - lead), int(x[-1] + step - lead)) for x in runs)


def line_windows(py: PySamples, tids: set[int], lines: set[tuple[str, int]]
                 ) -> tuple[tuple[int, int], ...]:
    """The sampling intervals centred on the samples of the threads `tids` whose user
    frame is one of `lines` ((function, line number)): where the threads ran those lines,
    as sampling sees it (each sample stands for one interval, so the windows sum to the
    time in the lines, over many steps)."""
    t, step = _sampled(py, tids, lambda stack: _user_line(stack) in lines)
    half = int(step // 2)
    return tuple((int(x) - half, int(x) + half) for x in t.tolist())


def lines_inside(py: PySamples, tids: set[int], spans: np.ndarray) -> Counter:
    """The user's lines ((function, line number)) the threads `tids` were sampled on inside
    the spans ((start, end) rows: the calls where the thread blocked), by samples: the
    line that made the call, whatever CUDA pattern the call shows."""
    return Counter((f[1], f[2]) for found in lines_before(py, tids, spans)
                   for f, _ in found)


def lines_before(py: PySamples, tids: set[int], spans: np.ndarray
                 ) -> list[list[tuple[Frame, int]]]:
    """Per span ((start, end) rows), the user's frames ((file, function, line number))
    the threads `tids` were sampled on inside it, each with how long before the span's
    end (ns): the line nearest a blocking call's end is the one that made it."""
    s = _thread_samples(py, tids)
    if not len(s) or not len(spans):
        return [[] for _ in range(len(spans))]
    times, stacks = s["time_ns"].to_numpy(), s["stack"].to_numpy()
    lo = np.searchsorted(times, spans[:, 0], side="left")
    hi = np.searchsorted(times, spans[:, 1], side="right")
    out = []
    for (a, b), end in zip(zip(lo.tolist(), hi.tolist(), strict=True),
                           spans[:, 1].tolist(), strict=True):
        found = ((_user_frame_of(py.stacks[k]), end - t) for k, t in
                 zip(stacks[a:b].tolist(), times[a:b].tolist(), strict=True))
        out.append([(x, d) for x, d in found if x is not None])
    return out


def lines_of(py: PySamples, tids: set[int], functions: set[tuple[str, str]],
             cwd: str | None = None) -> list[tuple[tuple[str, int, str, str, str], int]]:
    """The user's lines in `functions` ((file as shown, function)) the threads `tids` were
    sampled on anywhere in the capture, as sites (file, line, function, call, code) with
    their samples, most first: where a short call a range makes (a fill's `torch.zeros`,
    a few µs a step) fell between its own samples, the same function sampled under
    another range, or outside every range, names its line."""
    found = _site_counts(py, _thread_samples(py, tids)["stack"].to_numpy(), cwd)
    return [(key, n) for key, n in found.most_common() if (key[0], key[2]) in functions]


def _user_frame_of(stack: tuple[Frame, ...]) -> Frame | None:
    """The stack's innermost user frame (file, function, line), or None."""
    user = user_frame(stack)
    return None if user is None else stack[user]


def _user_line(stack: tuple[Frame, ...]) -> tuple[str, int] | None:
    """(function, line number) of the stack's innermost user frame, or None."""
    frame = _user_frame_of(stack)
    return None if frame is None else (frame[1], frame[2])


def _thread_samples(py: PySamples, tids: set[int]) -> pd.DataFrame:
    """The samples of the threads `tids`, in time order."""
    s = py.samples
    if not len(s) or not tids:
        return s[:0]
    return s[s["global_tid"].isin(list(tids)).to_numpy()].sort_values("time_ns", kind="stable")


def _sampled(py: PySamples, tids: set[int], hit: Callable[[tuple[Frame, ...]], bool]
             ) -> tuple[np.ndarray, float]:
    """The times of the samples of the threads `tids` whose stack `hit` holds for, in
    order, and the threads' sampling interval (the median time between samples)."""
    s = _thread_samples(py, tids)
    if not len(s):
        return np.zeros(0, dtype=np.int64), 0.0
    step = float(np.median(np.diff(s["time_ns"].to_numpy()))) if len(s) > 1 else 0.0
    hits = np.array([hit(stack) for stack in py.stacks], dtype=bool)
    chosen = hits[s["stack"].to_numpy()] if len(hits) else np.zeros(len(s), dtype=bool)
    return s["time_ns"].to_numpy()[chosen], step
