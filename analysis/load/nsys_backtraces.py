"""The Python call each backtraced CUDA call came from (`nsys profile --cudabacktrace`).

A capture with CUDA backtraces holds, for each call over the threshold of its kind, a row
of event class 67 in CUPTI_ACTIVITY_KIND_RUNTIME (the call's thread and correlation id,
nsys_meta.CALLS leaves it out of the calls) whose callchainId names its native frames in
CUDA_CALLCHAINS, innermost first: CUPTI, the driver, libcudart, ATen (`at::native::item`,
`copy_kernel_cuda`), then torch's Python bindings, then the interpreter. The outermost
frame in the bindings (libtorch_python) is the Python-level call the user's line made:
`THPVariable_cpu` is `Tensor.cpu`, `THPVariable__unique2` torch.unique,
`THCPModule_cudaSynchronize` torch.cuda.synchronize (seen on Nsight Systems 2025.3, where
`--python-backtrace=cuda` added no Python frame: the line itself is the Python samples').

`bindings(path) -> {(global pid, correlation id): frame}`, read once per export; empty for
an export without backtraces (no CUDA_CALLCHAINS: nothing is read).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..common.errors import InputError
from .export import Reader, shared
from .nsys_meta import table_columns
from .nsys_sqlite import PID_MASK

BINDINGS_MODULE = "libtorch_python"
"""The module of torch's Python bindings, as the frames' module paths name it."""

_SQL = f"""
SELECT r.globalTid, r.correlationId, s.value
FROM CUPTI_ACTIVITY_KIND_RUNTIME r
JOIN CUDA_CALLCHAINS c ON c.id = r.callchainId
JOIN StringIds m ON m.id = c.module
JOIN StringIds s ON s.id = c.symbol
WHERE r.callchainId IS NOT NULL AND m.value LIKE '%{BINDINGS_MODULE}%'
ORDER BY r.rowid, c.stackDepth"""


def bindings(path: str | Path) -> dict[tuple[int, int], str]:
    """(global pid, correlation id) -> the outermost bindings frame of the call's
    backtrace, its arguments cut (`torch::autograd::THPVariable_cpu`); read once."""
    reader = shared(path)
    return reader.once("bindings", lambda: _read(reader, Path(path)))


def _read(reader: Reader, path: Path) -> dict[tuple[int, int], str]:
    if "callchainId" not in table_columns(reader.db, "CUPTI_ACTIVITY_KIND_RUNTIME") \
            or not table_columns(reader.db, "CUDA_CALLCHAINS"):
        return {}
    conn = reader.conn
    out: dict[tuple[int, int], str] = {}
    try:
        for tid, corr, symbol in conn.execute(_SQL):    # deeper frames later: the last wins
            out[(int(tid) & int(PID_MASK), int(corr))] = str(symbol).split("(")[0]
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: cannot read CUDA backtraces ({exc})") from exc
    return out
