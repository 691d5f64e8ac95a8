"""`nsight-workflows profile -- CMD` and `nsight-workflows systems -- CMD`: what `make profile
SCRIPT=... NAME=...` does, from an installed package, with no checkout.

    nsight-workflows profile [--name N] [--sample cpu] -- python train.py --steps 20
    nsight-workflows systems [--name N] [--sample cpu] -- python train.py

`profile` runs, in the seeds' order: the Nsight Systems capture (the `nsys` driver), the
Systems report (`reports/N/systems.md`), the Compute plan made from it (which kernels, how
many launches and ncu runs), the Nsight Compute capture of that plan (the `ncu` driver),
the Compute report, and the page `reports/N/README.md`, whose path it prints last.
`systems` stops after the Systems report and its page. Each step is the same command a
user could run alone (`nsight-workflows nsys|ncu|systems|picks|compute|page`), so a
failure names the step and leaves what came before in place.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

SAMPLING = ("none", "cpu")

Step = Callable[[list[str]], int]


def parser(prog: str, whole: bool) -> argparse.ArgumentParser:
    """The options before `--`; everything after it is the program, run as given."""
    p = argparse.ArgumentParser(
        prog=prog, description=("Nsight Systems, the report, the Compute plan, Nsight Compute "
                                "and the page, for one command" if whole else
                                "Nsight Systems and the report, for one command"),
        usage=f"{prog} [--name NAME] [--sample cpu] [--runs DIR] [--reports DIR] -- "
              "COMMAND ...")
    p.add_argument("--name", help="run and report name (default: the script's stem, "
                   "`train` for python train.py)")
    p.add_argument("--sample", choices=SAMPLING, default="none",
                   help="cpu: CPU samples with native and Python backtraces (findings then "
                   "name your line); a larger export")
    p.add_argument("--runs", type=Path, default=Path("runs"),
                   help="captures go to RUNS/NAME/<timestamp>/ (default: runs)")
    p.add_argument("--reports", type=Path, default=Path("reports"),
                   help="reports go to REPORTS/NAME/ (default: reports)")
    return p


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(options, command) around the first `--`; the command may not be empty."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def default_name(command: list[str]) -> str:
    """The stem of the first script in the command (`python train.py` -> `train`), else
    the program's own name (`./serve` -> `serve`, `torchrun ... -m pkg.mod` -> `mod`)."""
    for i, arg in enumerate(command):
        if arg.endswith(".py"):
            return Path(arg).stem
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1].rsplit(".", 1)[-1]
    return Path(command[0]).name


Argv = list[str] | Callable[[], list[str]]
"""A step's arguments, or what makes them when the step runs (after the capture)."""


def systems_argv(run: Path, out: str) -> list[str]:
    """The Systems report of the capture in `run`: a run of several ranks (rank0.sqlite,
    ... beside each other) as a folder; one export with its meta.json, and its TORCH_LOGS
    where the program wrote some."""
    if (run / "rank0.sqlite").is_file():
        return ["systems", str(run), "-o", out]
    logs = run / "torch_logs.txt"
    return ["systems", str(run / "trace.sqlite"), "--meta", str(run / "meta.json"),
            *(["--torch-logs", str(logs)] if logs.is_file() else []), "-o", out]


def plan(args: argparse.Namespace, command: list[str], name: str, whole: bool
         ) -> list[tuple[str, Argv]]:
    """The steps, each (what runs it, its arguments): a GPU driver (`nsys`, `ncu`) or an
    analysis subcommand (`analysis`)."""
    run, out = args.runs / name / "latest", str(args.reports / name)
    ncu = args.runs / name / "latest-ncu"
    sample = ["--sample", args.sample] if args.sample != "none" else []
    steps: list[tuple[str, Argv]] = [
        ("nsys", ["--name", name, "--runs", str(args.runs), *sample, "--", *command]),
        ("analysis", lambda: systems_argv(run, out))]
    if whole:
        steps += [("analysis", ["picks", out]),
                  ("ncu", ["--name", name, "--runs", str(args.runs), "--systems",
                           f"{out}/systems.json", "--", *command]),
                  ("analysis", ["compute", str(ncu / "ncu_raw.csv"), "--meta",
                                str(ncu / "meta.json"), "-o", out])]
    return steps + [("analysis", ["page", out])]


def main(argv: list[str], whole: bool, runners: dict[str, Step],
         prog: str = "nsight-workflows profile") -> int:
    """Run the steps in order with `runners` (the drivers and the analysis entry point);
    stop at the first that fails, saying which."""
    options, command = split(argv)
    args = parser(prog, whole).parse_args(options)
    if not command:
        parser(prog, whole).error("give the program after --, e.g. -- python train.py")
    name = args.name or default_name(command)
    for kind, made in plan(args, command, name, whole):
        step = made() if callable(made) else made
        print(f"[{prog}] {kind} {' '.join(step)}", file=sys.stderr, flush=True)
        code = runners[kind](step)
        if code:
            said = f"analysis {step[0]}" if kind == "analysis" else kind
            print(f"[{prog}] stopped: the {said} step exited {code}; what came before is in "
                  "place", file=sys.stderr)
            return code
    print(f"page: {args.reports / name / 'README.md'}")
    return 0
