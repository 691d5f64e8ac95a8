"""torch.compile's graph breaks and recompiles placed on the trace's clock.

TORCH_LOGS lines carry the wall-clock time they were logged ("V1130 08:23:48.863000": month,
day, time of day), and an Nsight Systems export the UTC wall clock of its timestamp 0
(TARGET_INFO_SESSION_START_TIME). So each event gets a trace timestamp, and the range
instance open at that moment (the innermost, on any thread) is where it happened: where
compilation held the GPU idle. The log has no year or time zone: the year is the
session's, and when the events fall outside the trace the offset is taken to the whole hour
that brings them inside (a log written in another zone than UTC).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .types import Trace

HOUR_NS = 3_600 * 10**9


def _wall_ns(stamp: str, year: int) -> int | None:
    """ns since the epoch of a "MMDD HH:MM:SS.ffffff" log stamp read as UTC."""
    try:
        md, clock = stamp.split()
        when = dt.datetime.strptime(f"{year}{md} {clock}", "%Y%m%d %H:%M:%S.%f")
    except ValueError:
        return None
    return int(when.replace(tzinfo=dt.timezone.utc).timestamp() * 10**6) * 1000


def times_on(ranges: Any, start: int | None, events: list[dict[str, Any]]
             ) -> list[int | None]:
    """Each event's time on the clock of an export whose timestamp 0 is `start` (UTC ns)
    and whose ranges are `ranges`, or None when it cannot be placed."""
    if start is None or not events:
        return [None] * len(events)
    year = dt.datetime.fromtimestamp(start / 1e9, dt.timezone.utc).year
    walls = [_wall_ns(e.get("logged_at") or "", year) for e in events]
    rel = [w - start if w is not None else None for w in walls]
    ends = ranges["end_ns"]
    last = int(ends.max()) if len(ends) else 0
    known = [t for t in rel if t is not None]
    if known and not 0 <= known[0] <= last:
        shift = -round(known[0] / HOUR_NS) * HOUR_NS          # a log in another time zone
        if 0 <= known[0] + shift <= last:
            rel = [t + shift if t is not None else None for t in rel]
    return [t if t is not None and 0 <= t <= last else None for t in rel]


def place(trace: Trace, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with `at_ns` (trace clock), `range` (the innermost range path open then)
    and `range_row` (that instance's row in trace.ranges), None where unknown."""
    return place_on(trace.ranges, trace.export.session_start_utc_ns, events)


def place_on(r: Any, start: int | None, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """place() on keyed ranges `r` of an export whose timestamp 0 is `start` (UTC ns)."""
    lo, hi = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    depth = r["path"].str.count("/").to_numpy() if len(r) else np.zeros(0)
    out = []
    for event, at in zip(events, times_on(r, start, events), strict=True):
        row = None
        if at is not None:
            inside = np.flatnonzero((lo <= at) & (at < hi))
            if len(inside):
                row = int(inside[np.lexsort((lo[inside], depth[inside]))[-1]])
        out.append({**event, "at_ns": at, "range_row": row,
                    "range": str(r["path"].iat[row]) if row is not None else None})
    return out
