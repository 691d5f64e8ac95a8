"""What `torch.compile` did to a workload: graphs, graph breaks (reason, user file:line),
recompiles, and the raw `TORCH_LOGS=graph_breaks,recompiles` output in a file.

Used by the runner before any NVTX range opens, so compilation stays out of the
measured ranges.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import settings

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


def route_torch_logs(path: Path) -> None:
    """Send TORCH_LOGS=graph_breaks,recompiles to `path` (TORCH_LOGS_OUT).

    torch reads these variables when it is imported: call this before `import torch`.
    Artifacts the user already asked for in TORCH_LOGS are kept.
    """
    if "torch" in sys.modules:
        raise RuntimeError("route_torch_logs must run before torch is imported")
    os.environ["TORCH_LOGS"] = ",".join(settings.torch_log_artifacts())
    os.environ["TORCH_LOGS_OUT"] = str(path)


@contextmanager
def torch_logs(path: Path) -> Iterator[dict[str, Any]]:
    """Yield a dict that, on exit, summarizes the TORCH_LOGS file `path`.

    It then holds `recompiles` (records that say a function was recompiled),
    `dynamo_counters` (a snapshot of `torch._dynamo.utils.counters`) and the file name.
    """
    from torch._dynamo.utils import counters

    result: dict[str, Any] = {}
    try:
        yield result
    finally:
        for handler in logging.getLogger("torch").handlers:
            handler.flush()
        text = path.read_text(errors="replace") if path.exists() else ""
        result["recompiles"] = text.count(RECOMPILE_MARKER)
        result["dynamo_counters"] = {k: dict(v) for k, v in counters.items()}
        result["torch_logs"] = path.name
