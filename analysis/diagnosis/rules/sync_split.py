"""sync_in_loop's finding per sync site: where a loop's syncs come from two or more lines
of the user's code (diagnosis/sync_sites.py), each line is its own cause, priced alone:
its change acts on its site's segments only (`site_windows`), so removing one read
leaves the others waiting."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ...documents.types import Finding, PyLine, RangeEntry
from ..pricing import SYNC_SAID
from ..sync_sites import SyncSite

HOST_COPY = re.compile(r"Tensor\.(?:tolist|numpy|cpu)$")
"""Readbacks the host then works on (a list or array built from the copy)."""


def split(sites: list[SyncSite]) -> bool:
    """Whether the sites name two or more lines (else one finding for the loop)."""
    return len({s.line for s in sites if s.line is not None}) > 1


def site_finding(r: Any, e: RangeEntry, site: SyncSite, evidence: dict,
                 remedies: dict[str, str]) -> Finding:
    """The finding of one site: its line, its syncs, its remedy and its change."""
    kinds = Counter(site.kinds)
    top = max(kinds, key=kinds.get)
    said = ", ".join(f"{SYNC_SAID[k]} ({n})" for k, n in kinds.most_common())
    line = _line_of(e, site)
    where = f"{line['file']}:{line['line']} in {line['function']}" if line else \
        "a line the Python samples did not reach"
    call = f" in `{line['call']}`" if line and line["call"] else ""
    return r.finding(
        range=e.name, iterations=e.wall_instances, change=_change(top, line),
        message=f"{e.name} waits for the GPU at {where}{call}, {len(site.kinds)} sync(s) a "
        f"step ({said}), one of the loop's sync sites; its saving is that line's alone.",
        evidence={**evidence, "syncs": dict(kinds), "site_windows": [list(w) for w in
                                                                     site.windows],
                  "lines_named": [line] if line else []},
        suggestion=remedies.get(top, remedies["item"]))


def _line_of(e: RangeEntry, site: SyncSite) -> dict | None:
    """The site's line as lines_named holds it: the range's sampled line where kept."""
    if site.line is None:
        return None
    kept: PyLine | None = next((x for x in e.lines
                                if (x.function, x.line) == site.line), None)
    if kept is None:
        return {"file": site.file, "line": site.line[1], "function": site.line[0],
                "call": "", "pct": 0.0}
    return {"file": kept.file, "line": kept.line, "function": kept.function,
            "call": kept.call, "pct": kept.pct}


def _change(top: str, line: dict | None) -> str:
    """A count read back made fixed-shape; a readback the host converts kept on the
    device; any other sync only stops waiting."""
    if top == "nonzero":
        return "fixed_shape"
    return "readback_on_device" if line and HOST_COPY.search(line["call"] or "") \
        else "no_sync"
