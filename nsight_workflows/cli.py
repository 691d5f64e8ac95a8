"""`nsight-workflows`: the toolkit's one command.

    nsight-workflows profile [--name N] [--sample cpu] -- python train.py ...  (all of it)
    nsight-workflows systems -- python train.py ...                   (the timeline alone)
    nsight-workflows systems|compute|page|diff|scrub|rules|demo ...   (the analysis, no GPU)
    nsight-workflows nsys|ncu|runner|bench|sweep ...                  (the GPU drivers)

The analysis subcommands are those of `python -m analysis`; the drivers are those of
`python -m workflows.<driver>` (they need torch, and a GPU with the Nsight tools).
Exit codes as everywhere in the toolkit (analysis/common/errors.py).
"""

from __future__ import annotations

import importlib
import sys

from . import profile

DRIVERS = {"nsys": "Nsight Systems capture of a workload or a command",
           "ncu": "Nsight Compute capture of a workload's kernels",
           "runner": "run a workload's variants inside NVTX ranges",
           "bench": "time every variant against the measured ceilings",
           "sweep": "time every config of a Triton kernel"}


def _driver_help() -> str:
    lines = ["", "One command, end to end (Systems, report, Compute plan, Compute, page):",
             "  profile  [--name N] [--sample cpu] -- python train.py ...",
             "  systems  [--name N] [--sample cpu] -- python train.py ...  (no Compute)",
             "", "GPU drivers (need torch, a GPU and the Nsight tools):"]
    lines += [f"  {name:<8} {what}" for name, what in DRIVERS.items()]
    return "\n".join(lines)


def _captures(argv: list[str]) -> bool:
    """`profile ...`, or `systems ... -- COMMAND` (a program to capture, not an export)."""
    return bool(argv) and (argv[0] == "profile" or (argv[0] == "systems" and "--" in argv))


def _analysis(argv: list[str]) -> int:
    analysis_main = importlib.import_module(f"{__package__}.analysis.__main__").main
    return analysis_main(argv, prog="nsight-workflows", epilog=_driver_help())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DRIVERS:
        return _driver(argv[0], argv[1:])
    if _captures(argv):
        runners = {"nsys": lambda a: _driver("nsys", a), "ncu": lambda a: _driver("ncu", a),
                   "analysis": _analysis}
        return profile.main(argv[1:], argv[0] == "profile", runners,
                            prog=f"nsight-workflows {argv[0]}")
    return _analysis(argv)


def _driver(name: str, argv: list[str]) -> int:
    try:
        driver = importlib.import_module(f"{__package__}.workflows.{name}")
    except ImportError as exc:
        print(f"nsight-workflows {name}: needs the GPU extras ({exc}); "
              "pip install 'nsight-workflows[gpu]'", file=sys.stderr)
        return 3
    return driver.main(argv)


def run() -> None:
    """The console script. The analysis subcommands run without the cyclic collector and
    end with a fast exit (analysis.__main__.run_and_exit); the GPU drivers exit normally
    (their children, files and CUDA context are torn down as usual)."""
    argv = sys.argv[1:]
    if argv and (argv[0] in DRIVERS or _captures(argv)):
        sys.exit(main(argv))
    entry = importlib.import_module(f"{__package__}.analysis.__main__")
    entry.run_and_exit(argv, prog="nsight-workflows", epilog=_driver_help())


if __name__ == "__main__":
    run()
