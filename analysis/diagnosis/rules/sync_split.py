"""sync_in_loop's finding per sync site: where a loop's syncs come from two or more lines
of the user's code (diagnosis/sync_sites.py), each line is its own cause, priced alone:
its change acts on its site's segments only (`site_windows`), so removing one read
leaves the others waiting."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ...documents.types import Finding, PyLine, RangeEntry
from ...trace.pylines import shown
from ..pricing import SYNC_SAID
from ..sync_sites import SyncSite
from .lines import SIZE_CALL, UNIQUE_CALL, named_lines

HOST_COPY = re.compile(r"Tensor\.(?:tolist|numpy|cpu)$")
"""Readbacks the host then works on (a list or array built from the copy)."""
SIZE_READ = re.compile(SIZE_CALL)
UNIQUE = re.compile(UNIQUE_CALL)


def split(sites: list[SyncSite]) -> bool:
    """Whether the loop's syncs are two or more sites, one of them named by its line at
    least (else one finding for the loop): a sync the samples did not reach (a short
    wait between two samples) is a site of its own beside a named one, so that the named
    one's saving is its line's alone."""
    return len(sites) > 1 and any(s.line is not None for s in sites)


def site_finding(r: Any, e: RangeEntry, site: SyncSite, evidence: dict,
                 remedies: dict[str, str]) -> Finding:
    """The finding of one site: its line, its syncs, its remedy and its change. The
    user's call comes first: the backtraced one, else the line's sampled call, else the
    sync its text makes; a call that is one kind of sync (CALL_KIND) names the syncs'
    kind, whatever their CUDA pattern."""
    line = line_of(e, site)
    called = next((c for c in site.calls if c), "") or (line["call"] if line else "") \
        or site.said
    if line and called and not line["call"]:
        line = {**line, "call": called}
    kind = next((k for pattern, k in CALL_KIND if re.search(pattern, called)), None)
    kinds = Counter([kind] * len(site.kinds) if kind else site.kinds)
    top = max(kinds, key=kinds.get)
    said = ", ".join(f"{SYNC_SAID[k]} ({n})" for k, n in kinds.most_common())
    where = f"{line['file']}:{line['line']} in {line['function']}" if line else \
        "a line the Python samples did not reach"
    call = f" in `{called}`" if called else ""
    return r.finding(
        range=e.name, iterations=e.wall_instances,
        change=change_for(top, called or None),
        message=f"{e.name} waits for the GPU at {where}{call}, {len(site.kinds)} sync(s) a "
        f"step ({said}), one of the loop's sync sites; its saving is that line's alone.",
        evidence={**evidence, "syncs": dict(kinds), "site_windows": [list(w) for w in
                                                                     site.windows],
                  "lines_named": [line] if line else []},
        suggestion=remedies.get(top, remedies["item"]))


CALL_KIND = ((r"Tensor\.item$", "item"), (r"(?:^|\.)synchronize$", "synchronize"),
             (r"^nonzero$", "nonzero"))
"""Calls that make one kind of sync each (pricing.SYNC_SAID's keys): the user's call
names it before the CUDA pattern does (the stranger program, no NVTX range: an `.item()`
after a boolean mask's backward read as the mask's count)."""


def line_of(e: RangeEntry, site: SyncSite) -> dict | None:
    """The site's line as lines_named holds it: the range's sampled line where kept."""
    if site.line is None:
        return None
    kept: PyLine | None = next((x for x in e.lines
                                if (x.function, x.line) == site.line), None)
    if kept is None:
        return {"file": shown(site.file, None), "line": site.line[1], "function": site.line[0],
                "call": "", "pct": 0.0}
    return named_lines([kept])[0]


def change_for(top: str | None, call: str | None) -> str:
    """How the loop model removes a sync's cause, from its kind (pricing.SYNC_SAID's keys)
    and the user's call (its line's, or its backtrace's: SyncSite.calls): a count read
    back made fixed-shape (fixed_shape); a readback the host converts (`.tolist()`,
    `.numpy()`, `.cpu()`) kept on the device (readback_on_device: the copy, its wait and
    the host's work on it gone); indexing with a CPU index tensor, the index kept on the
    device (index_on_device); torch.unique made a fixed-size mask, its sort gone too
    (unique_mask); any other
    sync only stops waiting (no_sync); `repeat_interleave`, or a total read back after a
    scan, given its output size (size_given: its reads and the check between them gone)."""
    if (call and SIZE_READ.search(call)) or top == "size":
        return "size_given"
    if (call and UNIQUE.search(call)) or top == "unique":
        return "unique_mask"
    if call and HOST_COPY.search(call):
        return "readback_on_device"
    if top == "nonzero":
        return "fixed_shape"
    if top == "index":
        return "index_on_device"
    return "no_sync"
