"""Nsight Systems driver: profile a workload or any command, export SQLite.

    python -m workflows.nsys WORKLOAD [--size S] [--iters N] [--runs DIR] [--name NAME]
    python -m workflows.nsys --name NAME [--runs DIR] -- COMMAND [ARG ...]
    python -m workflows.nsys ddp_step --nproc 2 [--straggler 1]     # one export per rank

WORKLOAD is a registered name, a workload file (`examples/rmsnorm.py`) or `FILE.py:NAME`;
it runs under the toolkit's runner, which writes meta.json. A COMMAND (after `--`, run as
an argv list, no shell) is any program, e.g. `python train.py --steps 5`; its meta.json
records the command, and its TORCH_LOGS (graph breaks, recompiles) go to torch_logs.txt.
Writes `DIR/<name>/<timestamp>/{trace.nsys-rep, trace.sqlite, meta.json,
torch_logs.txt}` and moves `DIR/<name>/latest` to it only when the capture completed; a
failed run stays under its timestamp, marked FAILED. Exit 3 when nsys, a GPU or the nsys
importer is missing, with what to do.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
from pathlib import Path

from . import settings
from . import workloads as registry
from .siblings import module_name, sibling
from .tools import (
    ToolError,
    code_version,
    gpu_present,
    run_folder,
    run_tool,
    started,
    tool_main,
)

_types = sibling("analysis.documents.types")
Meta, to_json = _types.Meta, _types.to_json
write_atomic = sibling("analysis.documents.io").write_atomic

_tools = sibling("analysis.common.tools")
export_argv, find_nsys = _tools.export_argv, _tools.find_nsys

IMPORTER_HINT = ("nsys captured but could not import the raw data (.qdstrm): its "
                 "QdstrmImporter needs libdw.so.1/libelf.so.1 on LD_LIBRARY_PATH "
                 "(on the H200 test machine: source .gpu-kit/env.sh)")


SAMPLING = {"none": ["--sample=none"],
            "cpu": ["--sample=process-tree", "--python-sampling=true",
                    "--python-sampling-frequency=2000"]}
"""`--sample`: no CPU sampling, or CPU samples with native backtraces of the process tree
and Python backtraces (both seen recording on the H200 test machine with Nsight Systems
2025.3: COMPOSITE_EVENTS / SAMPLING_CALLCHAINS, and NVTX events of the Python sampler),
Python's at 2 kHz (nsys 2025.3 took it on the H100 test machine): at its default 1 kHz
a short range beside the step (a synchronize, a `.tolist()`) often got no sample in 64
instances, and of the generated battery's host-side causes 92.5% were named by their
line (seeds 11-71); at 2 kHz all 40 of seed 73 were."""


def profile_argv(nsys: Path | str, output_base: Path | str, command: list[str],
                 sample: str = "none") -> list[str]:
    """`nsys profile` with CUDA + NVTX + OS runtime trace, graphs per node, and CPU
    sampling as `sample` says (SAMPLING)."""
    return [str(nsys), "profile",
            "--trace=cuda,nvtx,osrt",
            "--cuda-graph-trace=node",
            *SAMPLING[sample],
            "--cpuctxsw=none",
            "--force-overwrite=true",
            f"--output={output_base}",
            *command]


def runner_command(workload: str, size: str, iters: int, out: Path) -> list[str]:
    """The profiled program: this Python running the workload runner."""
    return [sys.executable, "-m", module_name("workflows.runner"), workload, "--size", size,
            "--iters", str(iters), "--out", str(out)]


def script_meta(name: str, command: list[str]) -> str:
    """meta.json of a profiled command: what ran (no ranges, no cost model)."""
    meta = Meta(workload=name, description=f"command: {shlex.join(command)}",
                command=command, versions={"python": platform.python_version()},
                started=started(), code_version=code_version(), cwd=os.getcwd())
    return to_json(meta)


def capture(args: argparse.Namespace) -> Path:
    """Profile, export, and return the path of trace.sqlite."""
    nsys = find_nsys()
    if not gpu_present():
        raise ToolError("no NVIDIA GPU found (nvidia-smi -L lists none); run on a GPU machine")
    if args.nproc > 1:
        return capture_ranks(nsys, args)
    with run_folder(args.runs, args.name, "latest", ["trace.sqlite", "meta.json"]) as run_dir:
        base = run_dir / "trace"
        env = None
        if args.command:
            command = args.command
            env = {**os.environ, **torch_logs_env(run_dir / "torch_logs.txt")}
        else:
            command = runner_command(args.workload, args.size, args.iters, run_dir)
        run_tool(profile_argv(nsys, base, command, args.sample), "nsys profile", env=env,
                 stream=True)
        report = base.with_suffix(".nsys-rep")
        if not report.exists():
            raise ToolError(IMPORTER_HINT)
        sqlite = base.with_suffix(".sqlite")
        run_tool(export_argv(nsys, report, sqlite, args.sample == "cpu"), "nsys export")
        if args.command:
            write_atomic(run_dir / "meta.json", script_meta(args.name, args.command))
    return sqlite


def ranks_argv(nsys: Path | str, nproc: int, run_dir: Path, command: list[str]) -> list[str]:
    """torchrun starting `nproc` processes, each profiled by its own nsys into
    run_dir/rank<RANK> (nsys expands %q{RANK} from each process's environment)."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--no-python", *profile_argv(nsys, run_dir / "rank%q{RANK}", command)]


def capture_ranks(nsys: Path, args: argparse.Namespace) -> Path:
    """One export per rank (rank<k>.sqlite, rank<k>/meta.json); returns rank0.sqlite."""
    needed = [f"rank{k}.sqlite" for k in range(args.nproc)] + [
        f"rank{k}/meta.json" for k in range(args.nproc)]
    with run_folder(args.runs, args.name, "latest", needed) as run_dir:
        command = runner_command(args.workload, args.size, args.iters, run_dir)
        if args.straggler is not None:
            command += ["--straggler", str(args.straggler)]
        run_tool(ranks_argv(nsys, args.nproc, run_dir, command), "torchrun nsys profile",
                 stream=True)
        for k in range(args.nproc):
            report = run_dir / f"rank{k}.nsys-rep"
            if not report.exists():
                raise ToolError(IMPORTER_HINT)
            run_tool(export_argv(nsys, report, run_dir / f"rank{k}.sqlite"), "nsys export")
    return run_dir / "rank0.sqlite"


def torch_logs_env(path: Path) -> dict[str, str]:
    """Have a profiled PyTorch program log its graph breaks and recompiles to `path`."""
    return {"TORCH_LOGS": ",".join(settings.torch_log_artifacts()),
            "TORCH_LOGS_OUT": str(path)}


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """WORKLOAD or `--name NAME -- COMMAND`, shared by the nsys and ncu drivers."""
    p.add_argument("workload", nargs="?",
                   help="registered workload, workload file (x.py) or x.py:NAME")
    p.add_argument("--name", help="run and report name (default: the workload's; "
                   "required with a COMMAND)")
    p.add_argument("--size", default="default", choices=registry.SIZES)
    p.add_argument("--runs", type=Path, default=Path("runs"))


def parse_target(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse driver arguments; everything after `--` is the command to profile."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.command = command
    if command:
        if args.workload:
            p.error("give a WORKLOAD or a COMMAND after --, not both")
        if not args.name:
            p.error("a COMMAND needs --name NAME (the run and report folder)")
    elif not args.workload:
        p.error("give a WORKLOAD (name or file) or --name NAME -- COMMAND")
    else:
        try:
            registry.resolve(args.workload)
        except KeyError as exc:
            p.error(str(exc.args[0]))
        args.name = args.name or registry.run_name(args.workload)
    return args


def _arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    p.add_argument("--iters", type=int, default=20, help="timed iterations per variant")
    p.add_argument("--nproc", type=int, default=1, help="ranks under torchrun, one GPU and "
                   "one export each (rank<k>.sqlite) for a workload such as ddp_step")
    p.add_argument("--straggler", type=int, help="with --nproc: the rank given extra work")
    p.add_argument("--sample", choices=sorted(SAMPLING), default="none",
                   help="cpu: CPU samples with native and Python backtraces (the host-side "
                   "findings then name the hot libraries); a larger export")


def main(argv: list[str] | None = None) -> int:
    return tool_main("workflows.nsys", argv, _arguments, capture, "trace", __doc__,
                     parse=parse_target)


if __name__ == "__main__":
    sys.exit(main())
