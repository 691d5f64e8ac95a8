"""Host-side findings name the user's line (pylines.py: Python samples decoded).

After the rules ran, each finding of LINE_RULES gets the line of the user's code its
range's thread was sampled on most (of the lines whose library call fits the rule, when
one does: a sync finding names the `.item()` line, not the forward's, or none; a finding
on calls the thread blocks in, first the line sampled inside those calls, whatever its
call: a boolean mask's `x[x > 0]` names no library call; a sync site's finding, its
site's line), with its share
of the range's Python samples and the call; where that call has a remedy of its own
(REMEDIES), it leads the suggestion. Where none of the range's lines fits, an allocation
finding names the line sampled inside its cudaMalloc and cudaFree calls (CALLED_IN), and
any finding the line of the range's own functions whose call fits, sampled elsewhere in
the capture (a fill's `torch.zeros`, a few µs a step, falls between a range's samples).
(A range's one sampled line is no such fallback: in a host-bound step all of 23 samples
fell on the step's own elementwise line, and the fill came from a nested `torch.zeros`
none reached, battery seed 38's g06.) A capture without Python samples says how to get
them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping

from ...documents.types import Finding, PyLine, RangeEntry, SystemsDoc, entry_column

READBACK = r"Tensor\.(?:item|cpu|tolist|numpy)$|nonzero|_local_scalar"
UPLOAD = r"Tensor\.to$|\.cuda$"
SIZE_CALL = r"repeat_interleave$"
"""A library call that reads back the size of its output, which the caller can give
(`output_size=`)."""
UNIQUE_CALL = r"unique(?:_impl|_consecutive)?$|_unique2?$"
"""torch.unique, as the samples name it (torch.functional._unique_impl under it)."""
SYNCING = rf"{SIZE_CALL}|{UNIQUE_CALL}|Tensor\.__bool__$|masked_select$"
"""Library calls that read back a size or a value inside (the line of a sync they make)."""
SYNC_CALLS = rf"{READBACK}|{UPLOAD}|{SYNCING}|synchronize"
LINE_RULES = {
    "host_bound": "", "input_starved": "", "launch_bound": "",
    "sync_in_loop": SYNC_CALLS, "readback_in_loop": SYNC_CALLS,
    "pageable_copy": SYNC_CALLS + r"|copy_", "copy_on_compute_stream": SYNC_CALLS + r"|copy_",
    "alloc_in_loop": r"empty_cache|memory|alloc|empty",
    "kernel_loads_per_call": r"scaled_dot_product_attention|cudnn|compile|jit",
    "fill_overwritten": r"zeros|full|fill_|ones",
    "cat_in_loop": r"\bcat$|concat",
}
"""Rule id -> the library calls that fit it (its line is the first line whose call
matches; "" or no match: the range's hottest line)."""

MASK_REMEDY = ("replace boolean-mask indexing (x[mask], nonzero, masked_select) with a "
               "fixed-shape torch.where / masked reduction: the output size needs no "
               "readback")
UPLOAD_REMEDY = ("pin the source once (tensor.pin_memory(), DataLoader(pin_memory=True)) "
                 "and copy with .to(device, non_blocking=True)")
SIZE_REMEDY = ("give the size the call reads back: repeat_interleave(..., output_size=n), "
               "with n known on the host or computed once before the loop")
UNIQUE_REMEDY = ("torch.unique reads its output's size back: mark what occurs in a "
                 "fixed-size mask (seen = x.new_zeros(n, dtype=torch.bool).index_fill_(0, "
                 "x, True); torch.bincount reads its size back too), or call it outside "
                 "the loop")
"""Remedies said by the call (REMEDIES) and by the kind of sync (host_rules.SYNC_REMEDY)."""

REMEDIES = (
    (SIZE_CALL, {"sync_in_loop"}, SIZE_REMEDY),
    (UNIQUE_CALL, {"sync_in_loop"}, UNIQUE_REMEDY),
    (r"Tensor\.__bool__$", {"sync_in_loop"},
     "an `if` on a tensor reads it back: check on the device (torch._assert_async) or "
     "every N steps"),
    (r"nonzero|masked_select$", {"sync_in_loop"}, MASK_REMEDY),
    (READBACK, {"sync_in_loop", "readback_in_loop", "pageable_copy", "host_bound"},
     "keep the value on the device (accumulate on the GPU, read it once after the loop)"),
    (r"^torch\.(serialization|storage)\.", {"sync_in_loop", "readback_in_loop",
                                             "pageable_copy", "host_bound", "slow_step"},
     "checkpoint off the loop's thread: torch.distributed.checkpoint.async_save, or copy "
     "the state to pinned host buffers with non_blocking=True and save it from another "
     "thread; or checkpoint less often"),
    (UPLOAD, {"sync_in_loop", "pageable_copy"}, UPLOAD_REMEDY),
    (r"synchronize", {"sync_in_loop"},
     "time with CUDA events (torch.cuda.Event(enable_timing=True)) rather than "
     "synchronizing every step"),
    (r"_single_tensor_|_foreach_", {"host_bound", "launch_bound"},
     "use the multi-tensor or fused optimizer step: torch.optim.Adam(..., foreach=True) "
     "or fused=True"),
    (r"empty_cache", {"alloc_in_loop", "host_bound", "launch_bound"},
     "remove the call: the caching allocator reuses its blocks, and empty_cache hands them "
     "back to the driver only to allocate them again next step"),
    (r"torch\.tensor|as_tensor", {"input_starved", "host_bound", "launch_bound"},
     "build the batch on the GPU, or in DataLoader workers (num_workers=N, "
     "pin_memory=True), not element by element in Python"),
    (r"scaled_dot_product_attention", {"kernel_loads_per_call", "host_bound"},
     "pick another SDPA backend (torch.nn.attention.sdpa_kernel(SDPBackend."
     "FLASH_ATTENTION)) or keep shapes static"),
)
"""(call pattern, the rules it answers, remedy)."""

HOW = ("Python samples (make systems SAMPLE=cpu) would name the line of your code that "
       "spends it.")


BLOCKING_RULES = {"sync_in_loop": "sync", "readback_in_loop": "d2h", "pageable_copy": "h2d",
                  "copy_on_compute_stream": "h2d"}
"""Rules whose cause is a call the thread blocks in (Pricer.blocked's kinds: synchronize
calls, copy calls of the rule's direction): their line is first the one the thread was
sampled on inside those calls (`blocked`), then the one whose call fits."""
CALLED_IN = {"alloc_in_loop": "memory"}
"""Rules whose calls (Pricer.blocked's kinds: cudaMalloc and cudaFree) name the line
where none of the range's lines makes a call that fits: the line sampled inside them
allocates (a tensor asked for again after `empty_cache` beside the range)."""


def locate(found: list[Finding], systems: SystemsDoc | None,
           entries: Mapping[str, RangeEntry],
           blocked: Callable[[str, str], Counter] | None = None,
           backtraced: Callable[[str, str], Counter] | None = None,
           sampled_in: Callable[[str, set], list[PyLine]] | None = None) -> None:
    """Name the user's line in each host-side finding (see the module doc): `entries` are
    the systems document's ranges by path; `blocked(path)`: the lines sampled inside the
    range's blocking calls of a kind (Pricer.blocked), for BLOCKING_RULES; `backtraced`:
    those calls' Python calls from CUDA backtraces (Pricer.backtraced), which name the
    call of a finding whose line names none; `sampled_in(path, functions)`: the lines of
    the range's functions sampled anywhere in the capture (Pricer.sampled_in), where none
    of the range's own samples fell in the call that fits."""
    if not any(f.rule in LINE_RULES and f.range for f in found):
        return
    sampled = any(entry_column(systems.ranges, "py_samples")) if systems else False
    for f in found:
        e = entries.get(f.range) if f.rule in LINE_RULES and f.range else None
        if e is None:
            continue
        calls = backtraced(f.range, BLOCKING_RULES[f.rule]) \
            if backtraced is not None and f.rule in BLOCKING_RULES else Counter()
        _called(f, calls)
        if not sampled:
            f.message += " " + HOW
            continue
        if unreached(f):
            continue
        line = _line_of(f, e, blocked, calls)
        if line is None and not (f.evidence or {}).get("lines_named"):   # none of its own
            line = _line_elsewhere(f, e, sampled_in)
        if line is None:
            f.message += unsampled(e)
            continue
        f.message += " " + said(e, line)
        f.evidence = {**f.evidence, "lines": [_brief(x) for x in e.lines[:3]],
                      "lines_named": f.evidence.get("lines_named") or named_lines([line])}
        remedy = remedy_for(line.call, f.rule)
        where = f"{line.file}:{line.line}" + (f" (`{line.code}`)" if line.code else "")
        f.suggestion = f"at {where}: {remedy or f.suggestion}"


def unreached(f: Finding) -> bool:
    """A sync site's finding whose syncs no Python sample reached (sync_split: its message
    says so): it names no line, not another site's (the range's first line that syncs is
    a site with a finding of its own: seed 86's g19, ten mask reads and an `.item()` beside
    a torch.unique, named the unique's line)."""
    ev = f.evidence or {}
    return f.rule == "sync_in_loop" and "site_windows" in ev and not ev.get("lines_named")


def _line_of(f: Finding, e: RangeEntry, blocked: Callable[[str, str], Counter] | None,
             calls: Counter) -> PyLine | None:
    """The finding's line among its range's sampled lines (the module doc's order), or
    None."""
    named = (f.evidence or {}).get("lines_named") if f.rule == "sync_in_loop" else None
    if named:                      # one sync site's finding: its own line
        return next((x for x in e.lines if (x.function, x.line) ==
                     (named[0]["function"], named[0]["line"])), None)
    line = pick(e.lines, LINE_RULES[f.rule])
    if f.rule in BLOCKING_RULES and blocked is not None:
        line = inside(e.lines, blocked(f.range, BLOCKING_RULES[f.rule])) or line
    if line is None and f.rule in CALLED_IN and blocked is not None:
        line = inside(e.lines, blocked(f.range, CALLED_IN[f.rule]))
    return line or backtraced_line(e, calls)


def _line_elsewhere(f: Finding, e: RangeEntry,
                    sampled_in: Callable[[str, set], list[PyLine]] | None) -> PyLine | None:
    """The line of the range's own functions whose call fits the finding's rule, sampled
    anywhere in the capture (`sampled_in`), or None."""
    if sampled_in is None or not LINE_RULES[f.rule] or not e.lines:
        return None
    return pick(sampled_in(f.range, {(x.file, x.function) for x in e.lines}),
                LINE_RULES[f.rule])


def backtraced_line(e: RangeEntry, calls: Counter) -> PyLine | None:
    """For a finding none of whose range's lines makes a call that fits its rule, the
    line that makes the call its CUDA backtraces name most (`torch.tensor(rows,
    device="cuda")`: an upload the rule's patterns do not list, seed 81's g26), else
    None. (A range's hottest line is no such fallback: in a step range it is the step's
    own work, not the fill or copy the finding is about.)"""
    for call, _ in calls.most_common():
        line = next((x for x in e.lines if x.call == call), None)
        if line is not None:
            return line
    return None


def unsampled(e: RangeEntry) -> str:
    """Why a sampled capture names no line for the range: none of its Python samples fell
    in it ("" where some did: none of its lines makes the call)."""
    if e.py_samples:
        return ""
    return (f" No Python sample fell in its {e.wall_instances:,} instances "
            f"({e.wall_ns / 1e6:,.2f} ms in all): more steps, or a higher "
            "--python-sampling-frequency (2000 Hz: `--sample cpu`'s), would name its line.")


def _called(f: Finding, calls: Counter) -> None:
    """The Python call the finding's blocking calls came through, from their CUDA
    backtraces (the most frequent): said in the message, kept in the evidence, its
    remedy leading the suggestion where it has one."""
    if not calls:
        return
    call, n = calls.most_common(1)[0]
    f.message += (f" Its blocking calls come from `{call}` ({n} of "
                  f"{sum(calls.values())} with a CUDA backtrace).")
    f.evidence = {**f.evidence, "backtraced_calls": dict(calls)}
    remedy = remedy_for(call, f.rule)
    if remedy and remedy not in f.suggestion:
        f.suggestion = remedy


def pick(lines: list[PyLine], fits: str) -> PyLine | None:
    """The first line whose call matches `fits` (none: the rule's cause is on no line
    kept), or the first line where any fits."""
    if not fits:
        return lines[0] if lines else None
    return next((x for x in lines if x.call and re.search(fits, x.call)), None)


def inside(lines: list[PyLine], sampled: Counter) -> PyLine | None:
    """The range's line sampled most inside its blocking calls (one of its kept lines),
    or None."""
    mine = {(x.function, x.line): x for x in lines}
    return next((mine[k] for k, _ in sampled.most_common() if k in mine), None)


def said(e: RangeEntry, line: PyLine) -> str:
    """One sentence: where in the user's code the range's samples fell (a line not among
    its own: its function's, sampled outside the range)."""
    call = f", in {line.call}" if line.call else ""
    code = f" (`{line.code}`)" if line.code else ""
    if line not in e.lines:
        return (f"In your code: on {line.file}:{line.line} in {line.function}{code}{call}. "
                f"None of its {e.py_samples:,} Python samples fell in that call; "
                f"{line.samples:,} did elsewhere in the capture, in the function of its "
                "own lines.")
    return (f"In your code: {line.pct:.0f}% of its {e.py_samples:,} Python samples on "
            f"{line.file}:{line.line} in {line.function}{code}{call}.")


def remedy_for(call: str, rule: str) -> str | None:
    """The remedy of the library call, where it answers this rule."""
    return next((fix for pattern, rules, fix in REMEDIES
                 if call and rule in rules and re.search(pattern, call)), None)


def named_lines(lines: list[PyLine]) -> list[dict]:
    """The lines a finding's change acts on (Pricer.change_of reads function and line)."""
    return [{"file": ln.file, "line": ln.line, "function": ln.function, "call": ln.call,
             "pct": ln.pct} for ln in lines]


def _brief(x: PyLine) -> dict:
    return {"file": x.file, "line": x.line, "call": x.call, "pct": x.pct}
