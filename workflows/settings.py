"""Every environment variable the GPU-side workflows read or set, in one place. README's
settings table lists each of them (a test keeps it complete). The analysis side has its
own (analysis/common/settings.py: NSYS, NCU and the rules' thresholds).
"""

from __future__ import annotations

import os

ENVIRONMENT: dict[str, str] = {
    "TORCH_LOGS": "PyTorch's logging artifacts; the workflows add graph_breaks,recompiles "
                  "to what is set and keep the rest",
    "TORCH_LOGS_OUT": "set by the workflows: where a profiled program writes TORCH_LOGS "
                      "(the run folder's torch_logs.txt)",
    "RANK": "under torchrun: this process's rank (its rank<RANK>/ output folder)",
    "WORLD_SIZE": "under torchrun: how many ranks (more than 1: join the NCCL group)",
    "LOCAL_RANK": "under torchrun: the GPU of this process on its host",
    "PROFKIT_STRAGGLER": "set by the runner's --straggler: the rank that does extra work "
                         "in ddp_step (a planted straggler)",
    "TRITON_CACHE_AUTOTUNING": "set by the ncu driver for the profiled run: reuse the "
                               "autotuning choices of a run outside ncu",
    "TRITON_PRINT_AUTOTUNING": "set by the ncu driver: Triton prints the configs it chose",
}
"""Environment variables the workflows read or set, and what for."""

STRAGGLER = "PROFKIT_STRAGGLER"


def env(name: str, default: str | None = None) -> str | None:
    """The value of a declared environment variable (KeyError for an undeclared one)."""
    if name not in ENVIRONMENT:
        raise KeyError(f"{name} is not a declared setting (workflows/settings.py)")
    return os.environ.get(name, default)


def world_size() -> int:
    """Ranks of this run (1 outside torchrun)."""
    return int(env("WORLD_SIZE", "1") or 1)


def torch_log_artifacts() -> list[str]:
    """TORCH_LOGS as set, with graph_breaks and recompiles added (order kept, no repeats)."""
    wanted = [a for a in (env("TORCH_LOGS") or "").split(",") if a]
    return list(dict.fromkeys(wanted + ["graph_breaks", "recompiles"]))


def straggler_rank() -> int | None:
    """The rank the runner's --straggler named (ddp_step gives it extra work), or None."""
    value = env(STRAGGLER)
    return int(value) if value not in (None, "") else None


def set_straggler(rank: int) -> None:
    """Name the straggler rank for the workload code of this process and its children."""
    os.environ[STRAGGLER] = str(rank)
