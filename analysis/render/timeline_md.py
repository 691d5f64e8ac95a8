"""The loops' critical paths on a page: one sentence per loop range and a table of what
held each step (the step model, analysis/timeline/)."""

from __future__ import annotations

from ..documents.entries import SAID
from ..documents.types import RangeEntry, SystemsDoc, entry_column, entry_pick
from .text import code, dur, esc, pct, short, table

CATEGORY_SAID = SAID
"""What each critical-path category is called on a page (loops.replay.CATEGORIES)."""
SAID_MIN_PCT = 5.0
"""A category is named in a loop's sentence from this share of its wall time."""
ERROR_PCT = 5.0
"""A replay further than this from the measured wall time is said on the page."""
MAX_LOOPS = 12
SENTENCES = 4
"""Loops said in a sentence (most wall time first); the table lists MAX_LOOPS."""


def loop_entries(doc: SystemsDoc) -> list[RangeEntry]:
    """The modeled loop ranges, most wall time first."""
    n = entry_column(doc.ranges, "modeled_instances")
    walls = entry_column(doc.ranges, "wall_ns")
    rows = sorted((i for i, k in enumerate(n) if k), key=lambda i: -walls[i])
    return entry_pick(doc.ranges, rows[:MAX_LOOPS])


def shares(e: RangeEntry) -> list[tuple[str, float]]:
    """(category, % of the loop's time as it runs), largest first."""
    total = e.run_ns
    return sorted(((c, 100.0 * ns / total) for c, ns in e.critical_path_ns.items()
                   if ns > 0 and total), key=lambda kv: -kv[1])


HOST_APART_PCT = 20.0
"""The host range's median goes beside the cost as it runs where they differ by more."""


def as_it_runs(e: RangeEntry) -> str:
    """`17.53 ms an instance as it runs (median step 1.79 ms, tail +15.74 ms in 10 slow
    steps; host range median 1.79 ms)`: the host range's median said where it differs
    from the cost as it runs by more than HOST_APART_PCT."""
    if not e.runs:
        return ""
    said = f"{dur(e.run_per_instance_ns)} an instance as it runs (median step " \
        f"{dur(e.step_median_ns)}"
    if e.tail_ns:
        n = len(e.tail_steps)
        said += f", tail +{dur(e.tail_ns)}" + (
            f" in {n} slow step{'s' if n > 1 else ''}" if n else "")
    host = e.wall_median_ns
    if e.run_per_instance_ns and abs(host - e.run_per_instance_ns) > \
            HOST_APART_PCT / 100 * e.run_per_instance_ns:
        said += f"; host range median {dur(host)}"
    return said + ")"


def sentence(e: RangeEntry) -> str:
    """`step: 0.99 ms an instance as it runs (...); 55% GPU work, 44% CPU between calls on
    the critical path`: the loop as it runs first (as_it_runs), then its critical path."""
    named = [(c, s) for c, s in shares(e) if s >= SAID_MIN_PCT][:4] or shares(e)[:1]
    said = ", ".join(f"{s:.0f}% {CATEGORY_SAID.get(c, c)}{_whose(e, c)}" for c, s in named)
    runs = as_it_runs(e)
    return f"{code(short(e.name))}: " + (f"{runs}; " if runs else "") + \
        f"{said} on the critical path"


def _whose(e: RangeEntry, category: str) -> str:
    """The thread that held the most of an other-thread or GIL share: ` (pt_autograd_0 ...)`,
    ` (held by python3 (thread 698))`."""
    held = [(k, v) for k, v in (e.critical_threads_ns or {}).items()
            if k.endswith("(holding the GIL)") == (category == "gil")]
    if category not in ("other_thread", "gil") or not held:
        return ""
    name = max(held, key=lambda kv: kv[1])[0].removesuffix(" (holding the GIL)")
    return f" ({'held by ' if category == 'gil' else ''}{esc(name)})"


def replay_error_pct(e: RangeEntry) -> float:
    """The replayed run time against the measured one, in % (0 without a replay)."""
    total = e.run_ns
    return 100.0 * (e.replayed_run_ns - total) / total if total and e.replayed_run_ns \
        else 0.0


def critical_path_section(doc: SystemsDoc, image: str | None = None) -> list[str]:
    """The loops' critical paths: a sentence each, the plot, and the table."""
    loops = loop_entries(doc)
    if not loops:
        return []
    lines = ["## Loops: as they run, and what held each step", "",
             "Each loop as it runs (per instance, from its first start to the end of the GPU "
             "work it queued; the median step and the tail the slow steps add), then what "
             "held its critical path (its steps replayed from the trace's own edges).", ""]
    lines += [f"- {sentence(e)}." for e in loops[:SENTENCES]]
    if len(loops) > SENTENCES:
        lines.append(f"- and {len(loops) - SENTENCES} more in the table.")
    lines += [""] + tail_lines(loops)
    if image:
        lines += [f"![critical path per loop]({image})", ""]
    body = []
    for e in loops:
        err = replay_error_pct(e)
        top = ", ".join(f"{esc(CATEGORY_SAID.get(c, c))} {pct(s)}" for c, s in shares(e)[:4])
        body.append([code(short(e.name), cell=True), dur(e.run_per_instance_ns),
                     dur(e.step_median_ns), dur(e.tail_ns), f"{e.modeled_instances} of "
                     f"{e.wall_instances}", dur(e.wall_ns / max(e.wall_instances, 1)),
                     f"{err:+.1f}%" + (" **over 5%**" if abs(err) > ERROR_PCT else ""), top])
    lines += table(["loop", "as it runs / instance", "median step", "tail", "steps modeled",
                    "host wall / instance", "replay error", "critical path"],
                   body, "lrrrrrrl")
    return lines + [""] + host_lines_section(loops)


def tail_lines(loops: list[RangeEntry]) -> list[str]:
    """Per loop with tail steps (SENTENCES at most), its longest: when, how long, where
    its thread spent the host time, and the user's line from the samples."""
    out = []
    for e in [x for x in loops if x.tail_steps][:SENTENCES]:
        t = e.tail_steps[0]
        spent = ", ".join(f"{k} {dur(v)}" for k, v in (("sync", t.sync_ns),
                          ("memory calls", t.memory_ns), ("launches", t.launch_ns),
                          ("OS calls", t.os_ns)) if v >= 0.05 * t.step_ns)
        out.append(f"- {code(short(e.name))}: {len(e.tail_steps)} slow step(s); the longest, "
                   f"instance {t.instance}, took {dur(t.step_ns)} as it ran (host range "
                   f"{dur(t.wall_ns)}" + (f"; {spent}" if spent else "") + ")"
                   + (f", {dur(t.backlog_ns)} of it the GPU work it queued, after its range"
                      if t.backlog_ns >= 0.5 * t.step_ns else "")
                   + (f", mostly on {code(short(t.line, 90))}" if t.line else "") + ".")
    return (["Slow steps (3x the median or longer):", "", *out, ""] if out else [])


HOST_LINES = 3
"""User lines per loop in "where the host time goes"."""


def host_lines_section(loops: list[RangeEntry]) -> list[str]:
    """Per loop with Python samples, its HOST_LINES hottest lines of the user's code with
    the library call each was in and its share of the loop's samples."""
    sampled = [e for e in loops if e.py_samples and e.lines]
    if not sampled:
        return []
    out = ["### Where the host time goes", "",
           "The user's lines the loop's thread was sampled on (Python samples, every "
           "enclosing range counting them), with the library call below each:", ""]
    for e in sampled:
        said = "; ".join(
            f"{x.pct:.0f}% {code(f'{x.file}:{x.line}')} in {code(x.function)}"
            + (f" ({code(short(x.code, 60))})" if x.code else "")
            + (f", in {code(x.call)}" if x.call else "") for x in e.lines[:HOST_LINES])
        out.append(f"- {code(short(e.name))} ({e.py_samples:,} samples): {said}.")
    return out + [""]
