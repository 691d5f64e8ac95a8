"""What `torch.compile` did to a workload: graphs, graph breaks (reason, user file:line),
recompiles, and the raw `TORCH_LOGS=graph_breaks,recompiles` output in a file.

Used by the runner before any NVTX range opens, so compilation stays out of the
measured ranges.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RECOMPILE_MARKER = "Recompiling function"


def explain(fn: Any, inputs: tuple) -> dict[str, Any]:
    """Graph count and graph breaks of `fn` from `torch._dynamo.explain`, then reset dynamo.

    Each break keeps its reason and the innermost user frame (`file`, `line`) where it
    happened, so a finding can point at the line to change.
    """
    import torch

    result = torch._dynamo.explain(fn)(*inputs)
    breaks = []
    for reason in result.break_reasons:
        frame = reason.user_stack[-1] if reason.user_stack else None
        breaks.append({"reason": str(reason.reason).strip(),
                       "file": frame.filename if frame else None,
                       "line": frame.lineno if frame else None})
    torch._dynamo.reset()
    return {"graph_count": int(result.graph_count),
            "graph_break_count": int(result.graph_break_count), "graph_breaks": breaks}


@contextmanager
def torch_logs(path: Path) -> Iterator[dict[str, Any]]:
    """Turn on graph_breaks/recompiles logging and copy every torch log record to `path`.

    Yields a dict that, on exit, holds `recompiles` (records that say a function was
    recompiled) and `dynamo_counters` (a snapshot of `torch._dynamo.utils.counters`).
    """
    import torch
    from torch._dynamo.utils import counters

    torch._logging.set_logs(graph_breaks=True, recompiles=True)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
    logger = logging.getLogger("torch")
    logger.addHandler(handler)
    result: dict[str, Any] = {}
    try:
        yield result
    finally:
        logger.removeHandler(handler)
        handler.close()
        text = path.read_text(errors="replace")
        result["recompiles"] = text.count(RECOMPILE_MARKER)
        result["dynamo_counters"] = {k: dict(v) for k, v in counters.items()}
        result["torch_logs"] = path.name
