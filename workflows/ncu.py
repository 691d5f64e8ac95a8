"""Nsight Compute driver: profile the kernels inside a workload's NVTX ranges, or any
command's kernels.

    python -m workflows.ncu WORKLOAD [--variant V] [--size S] [--iters N]
                            [--clock-control none|base] [--launch-count N] [--runs DIR]
    python -m workflows.ncu --name NAME [--nvtx-include FILTER] [--launch-count N] -- COMMAND

WORKLOAD is a registered name, a workload file or `FILE.py:NAME`. Writes
`DIR/<name>/<timestamp>-ncu/{profile.ncu-rep, ncu_raw.csv, meta.json}` and moves
`DIR/<name>/latest-ncu` to it once complete. A workload's NVTX filter is
`profkit@<workload>/` (or `profkit@<workload>/<variant>/`): ranges are nested push/pop
ranges in the toolkit domain, and ncu reads `/` as nesting and needs the domain named
(checked on the H200, tests/data/ncu/nvtx_filter_probe.txt). A command is profiled with
the `--nvtx-include` filter you give (e.g. `step/fwd/`); else, when a Systems run of the
same name left reports/<name>/systems.json, the plan made from it (analysis/commands/picks.py: the
names holding 90% of the steady-state GPU time on every thread, each in its `--instances`
launch configurations with the most GPU time, one steady launch each by kernel name and
invocation number, in as few ncu runs as the invocation numbers allow; their reports are
merged into one CSV); else its first SCRIPT_LAUNCH_CAP launches. The report says which,
and with a plan the time ncu took against the plan's estimate. Exit 3 when ncu or counter
permission is missing.

Triton autotuning is done before profiling, in one plain run of the workload with
TRITON_CACHE_AUTOTUNING=1, and the profiled run reads the cached choices: tuned under
ncu, every candidate pays ncu's per-launch overhead, and on the H200 the matmul_relu
autotuner then picked a 4-warp tile that ran 311 us in the replay where its normal choice
runs in about 195 us. Triton caches only configs without a pre_hook: kernels whose
configs carry one (host-side TMA descriptors, kernels/attention.py) still tune under ncu,
and TRITON_PRINT_AUTOTUNING=1 makes the log say so ("Triton autotuning for function ..."
in the profiled run). `--no-pretune` skips this (the profiled run then tunes itself).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shlex
import sys
import time
from pathlib import Path

from . import NVTX_DOMAIN
from . import workloads as registry
from .nsys import add_target_arguments, parse_target, runner_command
from .siblings import sibling
from .tools import (
    ToolError,
    code_version,
    gpu_present,
    run_folder,
    run_tool,
    started,
    tool_main,
)

find_ncu, import_csv_argv = (sibling("analysis.common.tools").find_ncu,
                             sibling("analysis.common.tools").import_csv_argv)
_types = sibling("analysis.documents.types")
Meta, to_json = _types.Meta, _types.to_json
NCU_INSTANCES = sibling("analysis.common.settings").NCU_INSTANCES
NCU_MAX_RUNS = sibling("analysis.common.settings").NCU_MAX_RUNS
write_atomic = sibling("analysis.documents.io").write_atomic
picks = sibling("analysis.commands.picks")
compute_plan = sibling("analysis.commands.reports").compute_plan

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis",
            "SpeedOfLight_RooflineChart")
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "launch__waves_per_multiprocessor")
PERMISSION_HINT = (
    "ncu has no permission to read GPU performance counters (ERR_NVGPUCTRPERM). Run as "
    "root, or have an administrator set the driver option "
    "NVreg_RestrictProfilingToAdminUsers=0 (modprobe options, then reload the driver); in "
    "a container add --cap-add SYS_ADMIN.")


def nvtx_filter(workload: str, variant: str | None = None) -> str:
    """The --nvtx-include expression selecting the kernels of one workload or variant."""
    return f"{NVTX_DOMAIN}@{workload}/{variant}/" if variant else f"{NVTX_DOMAIN}@{workload}/"


def profile_argv(ncu: Path | str, output_base: Path | str, nvtx_include: str | None,
                 command: list[str], clock_control: str = "none",
                 launch_count: int | None = None, picked: list[str] | None = None
                 ) -> list[str]:
    """`ncu` with the NVTX filter (if any) or the picked kernels' filter, the report's
    sections and metrics, exporting a report."""
    argv = [str(ncu), "--clock-control", clock_control, "--nvtx", *(picked or [])]
    if nvtx_include:
        argv += ["--nvtx-include", nvtx_include]
    for section in SECTIONS:
        argv += ["--section", section]
    argv += ["--metrics", ",".join(METRICS)]
    if launch_count:
        argv += ["--launch-count", str(launch_count)]
    return argv + ["--force-overwrite", "--export", str(output_base), *command]


def check_output(output: str, nvtx_include: str, meta_path: Path) -> None:
    """Turn ncu's known complaints into clear errors (permission, nothing profiled)."""
    if "ERR_NVGPUCTRPERM" in output:
        raise ToolError(PERMISSION_HINT)
    if "No kernels were profiled" in output:
        ranges = "unknown (no meta.json)"
        if meta_path.is_file():
            ranges = ", ".join(json.loads(meta_path.read_text()).get("ranges", {}).values())
        raise ToolError(f"ncu profiled no kernel with --nvtx-include {nvtx_include!r}; "
                        f"ranges this run opened: {ranges}", exit_code=2)


PRETUNE_ENV = {"TRITON_CACHE_AUTOTUNING": "1", "TRITON_PRINT_AUTOTUNING": "1"}


def pretune(command: list[str]) -> dict[str, str]:
    """Run the workload once without the profiler, caching Triton's autotuning choices on
    disk; return the environment under which the profiled run reuses them."""
    env = {**os.environ, **PRETUNE_ENV}
    run_tool(command, "autotune outside ncu", env=env, stream=True)
    return env


SCRIPT_LAUNCH_CAP = 100
"""Kernel launches profiled in a command run without an NVTX filter (each costs ncu
replay passes); the report says so."""


def systems_of(args: argparse.Namespace) -> Path | None:
    """The systems document the kernels are picked from: --systems, else the report of a
    Systems run of the same name (reports/<name>/systems.json), else None."""
    if args.systems:
        return Path(args.systems)
    mine = Path("reports") / args.name / "systems.json"
    return mine if mine.is_file() else None


def _picked(args: argparse.Namespace) -> tuple[list[list[str]], list[str], float] | None:
    """(ncu filter arguments per run, notes, estimated seconds) of the plan made from the
    Systems run (analysis/commands/picks.py), or None; the plan's JSON in `args.plan_json` (written
    beside the CSV: the compute report reads each launch's Systems range from it)."""
    source = systems_of(args)
    if source is None:
        return None
    plan, export = compute_plan(source, None, args.instances,
                                getattr(args, "max_runs", None) or NCU_MAX_RUNS)
    if not plan.runs:
        return None
    args.plan_json = to_json(picks.plan_dict(plan, str(export)))
    return ([r.argv() for r in plan.runs], [picks.said(plan) + f" (from {source}, "
                                                               f"{export})"], plan.estimate_s)


def _plan(args: argparse.Namespace, run_dir: Path) -> tuple[list[str], str | None, list[str]]:
    """(command to profile, NVTX filter or None, notes for the report)."""
    if args.command:
        if args.nvtx_include:
            return args.command, args.nvtx_include, [
                f"kernels inside NVTX ranges matching --nvtx-include {args.nvtx_include!r}"]
        picked = None if args.launch_count else _picked(args)
        if picked is not None:
            args.filter_runs, args.estimate_s = picked[0], picked[2]
            return args.command, None, picked[1]
        args.launch_count = args.launch_count or SCRIPT_LAUNCH_CAP
        return args.command, None, [
            f"no Systems run of {args.name} to pick kernels from (make systems first) and "
            f"no NVTX filter: the first {args.launch_count} kernel launches of the command "
            "were profiled (NVTX_INCLUDE=\"range/\" selects a range; LAUNCH_COUNT=N more)"]
    workload = registry.resolve(args.workload)
    only = ["--variants", args.variant] if args.variant else []
    command = runner_command(args.workload, args.size, args.iters, run_dir) + only
    return command, args.nvtx_include or nvtx_filter(workload.name, args.variant), []


def capture(args: argparse.Namespace) -> Path:
    """Profile, check, export the raw CSV; return its path."""
    ncu = find_ncu()
    if not gpu_present():
        raise ToolError("no NVIDIA GPU found (nvidia-smi -L lists none); run on a GPU machine")
    with run_folder(args.runs, args.name, "latest-ncu", ["ncu_raw.csv", "meta.json"],
                    suffix="-ncu") as run_dir:
        command, flt, notes = _plan(args, run_dir)
        env = None
        if args.pretune and not args.command:
            pre = runner_command(args.workload, args.size, 1, run_dir / "pretune")
            env = pretune(pre + (["--variants", args.variant] if args.variant else []))
        runs = getattr(args, "filter_runs", None) or [None]
        t0 = time.monotonic()
        bases = [run_dir / f"profile{i if len(runs) > 1 else ''}" for i in range(len(runs))]
        logs = [_profile(ncu, base, flt, command, args, picked, env)
                for base, picked in zip(bases, runs, strict=True)]
        took = time.monotonic() - t0
        write_atomic(run_dir / "ncu_log.txt", "".join(logs))
        if getattr(args, "estimate_s", None) is not None:
            notes.append(f"ncu took {took:.1f} s in {len(runs)} run(s) against the plan's "
                         f"estimate of {args.estimate_s:.1f} s")
        if args.command:
            meta = Meta(workload=args.name, description=f"command: {shlex.join(command)}",
                        command=command, notes=notes, started=started(),
                        code_version=code_version(), cwd=os.getcwd())
            write_atomic(run_dir / "meta.json", to_json(meta))
        if getattr(args, "plan_json", None):
            write_atomic(run_dir / "plan.json", args.plan_json)
        csv = run_dir / "ncu_raw.csv"
        write_atomic(csv, merged_csv([run_tool(import_csv_argv(
            ncu, base.with_name(base.name + ".ncu-rep")), "ncu --import", stdout_only=True)
            for base in bases]))
    return csv


def _profile(ncu: Path | str, output_base: Path, flt: str | None, command: list[str],
             args: argparse.Namespace, picked: list[str] | None,
             env: dict[str, str] | None) -> str:
    """One ncu run (of the plan's runs, or the only one), checked; its output. A run that
    followed the launched process alone (`--target-processes application-only`, the plan's
    choice for a Python program) and profiled nothing runs again over every process."""
    argv = profile_argv(ncu, output_base, flt, command, args.clock_control,
                        args.launch_count, picked)
    try:
        try:
            output = run_tool(argv, "ncu profile", env=env, stream=True)
        except ToolError as exc:
            check_output(str(exc), flt or "", output_base.parent / "meta.json")
            raise
        check_output(output, flt or "", output_base.parent / "meta.json")
    except ToolError as exc:
        if "profiled no kernel" not in str(exc) or not picked or ONLY_APP[0] not in picked:
            raise
        at = picked.index(ONLY_APP[0])
        print("workflows: ncu profiled nothing in the launched process alone; again over "
              "every process", file=sys.stderr)
        return _profile(ncu, output_base, flt, command, args,
                        picked[:at] + picked[at + 2:], env)
    return output


ONLY_APP = ("--target-processes", "application-only")


def merged_csv(texts: list[str]) -> str:
    """Raw-page CSVs of several runs as one: the first's header and units row, every run's
    profiled launches after it in run order, IDs numbered again, columns by name."""
    kept = [t for t in texts if t.strip()]
    if len(kept) <= 1:                      # one run's CSV (or none) as it is
        return kept[0] if kept else ""
    tables = [list(csv.reader(io.StringIO(t))) for t in kept]
    header, units = tables[0][0], tables[0][1]
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerows([header, units])
    n = 0
    for t in tables:
        at = {c: i for i, c in enumerate(t[0])}
        for row in t[2:]:
            cells = [row[at[c]] if c in at and at[c] < len(row) else "" for c in header]
            cells[header.index("ID")] = str(n)
            w.writerow(cells)
            n += 1
    return out.getvalue()


def _arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--variant", help="profile only this variant's range")
    p.add_argument("--nvtx-include", help="ncu NVTX filter (default for a workload: "
                   f"{NVTX_DOMAIN}@<workload>/[<variant>/]; for a command: none, and at most "
                   f"{SCRIPT_LAUNCH_CAP} launches)")
    p.add_argument("--iters", type=int, default=1, help="iterations per range (each profiled)")
    p.add_argument("--clock-control", default="none", choices=["none", "base"])
    p.add_argument("--launch-count", type=int, help="stop after this many profiled kernels")
    p.add_argument("--systems", help="a command's systems.json to pick the kernels from "
                   "(default: reports/<name>/systems.json of a Systems run of that name)")
    p.add_argument("--instances", type=int, default=NCU_INSTANCES, help="with picked "
                   "kernels: launch configurations profiled per kernel name, those with the "
                   f"most GPU time (default {NCU_INSTANCES})")
    p.add_argument("--max-runs", type=int, default=NCU_MAX_RUNS, help="with picked "
                   "kernels: ncu runs at most, each the whole program again (default "
                   f"{NCU_MAX_RUNS})")
    p.add_argument("--no-pretune", dest="pretune", action="store_false",
                   help="let the profiled run autotune Triton kernels itself (under ncu)")


def main(argv: list[str] | None = None) -> int:
    return tool_main("workflows.ncu", argv, _arguments, capture, "ncu csv", __doc__,
                     parse=parse_target)


if __name__ == "__main__":
    sys.exit(main())
