"""Loader for `TORCH_LOGS=graph_breaks,recompiles` output (any log format prefix).

`load(path) -> DataFrame` with one row per distinct event. Columns:
kind ("graph_break"|"recompile"), function (recompiles only, else None), file, line
(int), reason (first reason / guard-failure line, or "" when the log gives none),
logged_at ("MMDD HH:MM:SS.ffffff" of the log line's prefix, the first occurrence; None when
the line has no prefix): places the event on the trace's clock (analysis/trace/compile_events.py).

Recognized forms (torch 2.1 to 2.11):
  Graph break in user code at FILE:LINE            (then "Graph Break Reason: ..." or
  Graph break (user stack suppressed ...) in user code at FILE:LINE   "Reason: ...")
  Graph break: REASON from user code at  File "FILE", line LINE      (older torch)
  Recompiling function NAME in FILE:LINE           (then "triggered by the following
                                                    guard failure(s):" and "- ...")
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..common.errors import InputError

COLUMNS = ["kind", "function", "file", "line", "reason", "logged_at"]
_STAMP = re.compile(r"^[A-Z](?P<md>\d{4}) (?P<t>\d\d:\d\d:\d\d(?:\.\d+)?) ")
_BREAK = re.compile(r"Graph break(?: \([^)]*\))? in user code at (?P<file>\S+?):(?P<line>\d+)")
_BREAK_OLD = re.compile(r"Graph break: (?P<reason>.+?) from user code at\s+File "
                        r"\"(?P<file>[^\"]+)\", line (?P<line>\d+)")
_REASON = re.compile(r"(?:Graph Break Reason|Reason):\s*(?P<reason>.+)")
_RECOMPILE = re.compile(r"Recompiling function (?P<function>\S+) in (?P<file>\S+?):(?P<line>\d+)")
_GUARD = re.compile(r"^\s*-\s*(?P<reason>\S.*)")
_LOOKAHEAD = 8
# "V1129 11:19:18.552000 6379 torch/_dynamo/x.py:5124] [0/0] [__graph_breaks] " and the like
_PREFIX = re.compile(r"^[A-Z]\d{4} [\d:.]+ +\d+ \S+\] (?:\[[^\]]*\] )*")


def _reason_after(lines: list[str], i: int, pattern: re.Pattern[str]) -> str:
    """First reason after line i; a reason that ends in ':' continues on the next text."""
    for j in range(i + 1, min(i + 1 + _LOOKAHEAD, len(lines))):
        m = pattern.search(lines[j])
        if not m:
            continue
        reason = m.group("reason").strip()
        if reason.endswith(":"):
            more = next((ln.strip() for ln in lines[j + 1:j + 1 + _LOOKAHEAD] if ln.strip()),
                        "")
            reason = more or reason
        return reason
    return ""


def parse(text: str) -> pd.DataFrame:
    """Events in `text`, duplicates (same kind, place and reason) dropped, in log order."""
    raw = text.splitlines()
    stamps = [f"{m['md']} {m['t']}" if (m := _STAMP.match(ln)) else None for ln in raw]
    lines = [_PREFIX.sub("", ln) for ln in raw]
    rows = []
    for i, line in enumerate(lines):
        if m := _BREAK.search(line):
            rows.append(("graph_break", None, m["file"], int(m["line"]),
                         _reason_after(lines, i, _REASON), stamps[i]))
        elif m := _BREAK_OLD.search(line):
            rows.append(("graph_break", None, m["file"], int(m["line"]), m["reason"].strip(),
                         stamps[i]))
        elif m := _RECOMPILE.search(line):
            rows.append(("recompile", m["function"], m["file"], int(m["line"]),
                         _reason_after(lines, i, _GUARD), stamps[i]))
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.drop_duplicates(["kind", "file", "line", "reason"]).reset_index(drop=True)


def load(path: str | Path) -> pd.DataFrame:
    """Parse a TORCH_LOGS file; InputError when it is missing, a folder or binary."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such TORCH_LOGS file")
    data = path.read_bytes()
    if b"\x00" in data[:4096]:
        raise InputError(f"{path}: binary data, not a TORCH_LOGS text log")
    return parse(data.decode("utf-8", errors="replace"))
