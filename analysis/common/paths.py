"""Source paths as the user wrote them: relative to the directory the program ran in.

TORCH_LOGS and torch._dynamo name the user's files by absolute path on the capturing
machine (`/home/alice/proj/train.py:95`); messages and pages name them relative to the
program's working directory (`train.py:95`), from meta.json's `cwd`, else the export's
own record of it. Only the documents' `source` keeps an absolute path (the export's).
"""

from __future__ import annotations

import posixpath
from typing import Any


def relative(path: str | None, cwd: str | None) -> str | None:
    """`path` relative to `cwd` when it lies inside it (as it is otherwise: a library's
    file, a relative path already, or no working directory known)."""
    if not path or not cwd or not path.startswith("/") or not cwd.startswith("/"):
        return path
    base = cwd.rstrip("/") or "/"
    if path != base and not path.startswith(base + "/"):
        return path
    return posixpath.relpath(path, base)


def relative_events(events: list[dict[str, Any]] | None, cwd: str | None
                    ) -> list[dict[str, Any]] | None:
    """TORCH_LOGS events (graph breaks, recompiles) with their `file` made relative."""
    if events is None or not cwd:
        return events
    return [{**ev, "file": relative(ev.get("file"), cwd)} for ev in events]


def relative_compiled(compiled: dict[str, Any] | None, cwd: str | None
                      ) -> dict[str, Any] | None:
    """meta.json's `compiled` (torch._dynamo.explain) with its graph breaks' files made
    relative."""
    if not compiled or not cwd or not compiled.get("graph_breaks"):
        return compiled
    return {**compiled, "graph_breaks": [{**b, "file": relative(b.get("file"), cwd)}
                                         for b in compiled["graph_breaks"]]}
