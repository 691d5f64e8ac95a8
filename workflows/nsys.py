"""Nsight Systems driver: run a workload under `nsys profile`, export SQLite.

    python -m workflows.nsys WORKLOAD [--size S] [--iters N] [--runs DIR]

writes `DIR/<workload>/<timestamp>/{trace.nsys-rep, trace.sqlite, meta.json,
torch_logs.txt}` and points `DIR/<workload>/latest` at it. Exit 3 when nsys, a GPU or
the nsys importer is missing, with what to do.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import workloads as registry
from .siblings import module_name, sibling
from .tools import ToolError, gpu_present, new_run_dir, run_tool, tool_main

export_argv, find_nsys = sibling("analysis.tools").export_argv, sibling("analysis.tools").find_nsys

IMPORTER_HINT = ("nsys captured but could not import the raw data (.qdstrm): its "
                 "QdstrmImporter needs libdw.so.1/libelf.so.1 on LD_LIBRARY_PATH "
                 "(on the H200 test machine: source .gpu-kit/env.sh)")


def profile_argv(nsys: Path | str, output_base: Path | str, command: list[str]) -> list[str]:
    """`nsys profile` with CUDA + NVTX + OS runtime trace, graphs per node, no sampling."""
    return [str(nsys), "profile",
            "--trace=cuda,nvtx,osrt",
            "--cuda-graph-trace=node",
            "--sample=none",
            "--cpuctxsw=none",
            "--force-overwrite=true",
            f"--output={output_base}",
            *command]


def runner_command(workload: str, size: str, iters: int, out: Path) -> list[str]:
    """The profiled program: this Python running the workload runner."""
    return [sys.executable, "-m", module_name("workflows.runner"), workload, "--size", size,
            "--iters", str(iters), "--out", str(out)]


def capture(workload: str, size: str, iters: int, runs: Path) -> Path:
    """Profile, export, and return the path of trace.sqlite."""
    nsys = find_nsys()
    if not gpu_present():
        raise ToolError("no NVIDIA GPU found (nvidia-smi -L lists none); run on a GPU machine")
    run_dir = new_run_dir(runs, workload, time.strftime("%Y%m%d-%H%M%S"))
    base = run_dir / "trace"
    run_tool(profile_argv(nsys, base, runner_command(workload, size, iters, run_dir)),
             "nsys profile", stream=True)
    report = base.with_suffix(".nsys-rep")
    if not report.exists():
        raise ToolError(IMPORTER_HINT)
    sqlite = base.with_suffix(".sqlite")
    run_tool(export_argv(nsys, report, sqlite), "nsys export")
    return sqlite


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", choices=sorted(registry.REGISTRY))
    p.add_argument("--size", default="default", choices=registry.SIZES)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--runs", type=Path, default=Path("runs"))


def main(argv: list[str] | None = None) -> int:
    return tool_main("workflows.nsys", argv, _arguments,
                     lambda a: capture(a.workload, a.size, a.iters, a.runs), "trace", __doc__)


if __name__ == "__main__":
    sys.exit(main())
