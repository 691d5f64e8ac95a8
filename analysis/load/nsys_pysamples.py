"""Python samples of a capture made with `nsys profile --python-sampling=true`
(`make systems SAMPLE=cpu`), exported with `nsys export --include-json=true`.

Each sample is an NVTX_EVENTS row of eventType 34 in the "Python Periodic Sampling"
domain, on the sampled thread, at its time; its `jsonText` holds the Python stack:
`{"Python Periodic Sampling": {"Thread state": ..., "Frames count": n, "Frames":
[{"Function": id, "File": id, "Line": n}, ...]}}`, innermost frame first, the function
and file as StringIds ids, names such as `<module>` HTML-escaped. A default export
writes the payload as NULL: the rows are there, their stacks are not (`undecoded`).

`load_py_samples(path) -> PySamples`: per sample its thread, time and stack number; per
stack its frames (file, function, line), innermost first. Identical payloads are parsed
once (a loop's samples repeat a few stacks). A scrubbed export carries the text of the
user's sampled lines (SOURCE_TABLE, written by `analysis scrub` where the code is), so
that a report made elsewhere names each line's call as one made beside the code does.
"""

from __future__ import annotations

import html
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import sqlite_utils

from ..common.errors import InputError
from .export import shared, view
from .nsys_meta import table_columns

DOMAIN = "Python Periodic Sampling"
SAMPLE_EVENT = 34
DOMAIN_CREATE = 75

Frame = tuple[str, str, int]   # file, function, line
SOURCE_TABLE = "ANALYSIS_SOURCE_LINES"
"""(file TEXT, line INTEGER, code TEXT): a sampled user line's source text, its file named
as the samples name it."""


@dataclass
class PySamples:
    """The decoded Python samples of one export (see the module doc)."""

    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"global_tid": pd.Series(dtype="int64"), "time_ns": pd.Series(dtype="int64"),
         "stack": pd.Series(dtype="int64")}))
    stacks: list[tuple[Frame, ...]] = field(default_factory=list)
    undecoded: int = 0          # samples whose payload the export left out
    code: dict[tuple[str, int], str] = field(default_factory=dict)   # SOURCE_TABLE's

    def __len__(self) -> int:
        return len(self.samples)


def load_py_samples(path: Path) -> PySamples:
    """The export's Python samples (an empty PySamples where it has none)."""
    if not Path(path).is_file():
        return PySamples()
    conn = shared(Path(path)).conn
    try:
        db = view(conn)
        cols = table_columns(db, "NVTX_EVENTS")
        if not {"eventType", "domainId", "globalTid", "start", "text"} <= cols:
            return PySamples()
        domains = [d for (d,) in conn.execute(
            "SELECT DISTINCT domainId FROM NVTX_EVENTS WHERE eventType = ? AND text = ?",
            (DOMAIN_CREATE, DOMAIN))]
        if not domains:
            return PySamples()
        payload = "jsonText" if "jsonText" in cols else "NULL"
        rows = conn.execute(
            f"SELECT globalTid, start, {payload} FROM NVTX_EVENTS WHERE eventType = ? AND "
            f"domainId IN ({','.join(map(str, domains))}) ORDER BY globalTid, start",
            (SAMPLE_EVENT,)).fetchall()
        strings = _unescaped(conn, Path(path), rows)
        code = _source_lines(conn, db)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read Python samples ({exc})") from exc
    out = _decoded(rows, strings)
    out.code = code
    return out


def _source_lines(conn: sqlite3.Connection, db: sqlite_utils.Database
                  ) -> dict[tuple[str, int], str]:
    """The source text the export carries for sampled lines ({} where it has none)."""
    if not db[SOURCE_TABLE].exists():
        return {}
    return {(str(f), int(n)): str(c or "") for f, n, c in
            conn.execute(f"SELECT file, line, code FROM {SOURCE_TABLE}")}


def _unescaped(conn: sqlite3.Connection, path: Path, rows: list[tuple]) -> dict[int, str]:
    """StringIds values, unescaped (only when some sample carries a stack)."""
    if not any(r[2] for r in rows):
        return {}
    return {int(i): html.unescape(str(v)) for i, v in shared(path).strings().items()}


def _decoded(rows: list[tuple], strings: dict[int, str]) -> PySamples:
    """Samples with a stack, numbered by distinct payload; those without one counted."""
    number: dict[str, int] = {}
    stacks: list[tuple[Frame, ...]] = []
    keep, stack_of = [], []
    for i, (_, _, text) in enumerate(rows):
        if not text:
            continue
        k = number.get(text)
        if k is None:
            k = number[text] = len(stacks)
            stacks.append(_frames(text, strings))
        keep.append(i)
        stack_of.append(k)
    tid = np.array([rows[i][0] for i in keep], dtype=np.int64)
    time = np.array([rows[i][1] for i in keep], dtype=np.int64)
    frame = pd.DataFrame({"global_tid": tid, "time_ns": time,
                          "stack": np.array(stack_of, dtype=np.int64)})
    return PySamples(frame, stacks, len(rows) - len(keep))


def _frames(text: str, strings: dict[int, str]) -> tuple[Frame, ...]:
    """One payload's frames, innermost first (file, function, line)."""
    try:
        body = json.loads(text)
    except ValueError:
        return ()
    inner = body.get(DOMAIN, body) if isinstance(body, dict) else {}
    out = []
    for f in inner.get("Frames", []) if isinstance(inner, dict) else []:
        out.append((strings.get(int(f.get("File", -1)), "?"),
                    strings.get(int(f.get("Function", -1)), "?"), int(f.get("Line", 0))))
    return tuple(out)
