"""Command line: turn Nsight exports into reports.

    python -m analysis systems TRACE.sqlite|TRACE.nsys-rep [--torch-logs LOG]
                               [--meta META.json] [--jobs N] [--chunk-rows N]
                               [--quiet|--progress] [--csv] -o DIR
    python -m analysis compute NCU.csv|NCU.ncu-rep [--meta META.json] -o DIR
    python -m analysis page DIR [--workload NAME]
    python -m analysis diff A B [--threshold PCT] [--metric auto|span|kernel|busy] [-o DIFF.md]
    python -m analysis picks REPORT [--trace EXPORT.sqlite] [--instances N] [--runs N] [--json]
    python -m analysis demo [DATA] [-o OUT]
    python -m analysis scrub IN.sqlite OUT.sqlite
    python -m analysis rules

`systems` writes DIR/systems.json (schema systems/2: the summary), the tables as Parquet
(ranges.parquet, one row per range; ranges_*.parquet, their kernels, copies, threads and
samples; ops.parquet; CSV too with --csv), DIR/systems.md and two plots
(time_per_iter.png, timeline.png); `compute` writes DIR/compute.json (compute/1),
DIR/compute.md and DIR/roofline.png; `page` merges what DIR holds into DIR/README.md;
`diff` compares two runs (each a systems.json, a folder holding one, or a run folder with
trace.sqlite and meta.json) and exits 1 when a variant got slower than the threshold;
`picks` prints the Nsight Compute plan of a Systems run (the kernels covering 90% of the
steady-state GPU time, the launches and ncu runs that reach them, the time it will take)
before any GPU time is spent; `demo` renders every committed H200 capture under DATA
(default tests/data).

Exit 0 on success; 2 on bad input or usage, with one line on stderr naming the file and
what is wrong; 3 when a needed tool (nsys or ncu, to read a report file) is missing.
Inputs are never modified; a report is written into a staging folder and moved into DIR
under a lock on it, so an interrupted run leaves DIR as it was.
"""

from __future__ import annotations

import ctypes
import gc
import sys

from .load import prefetch  # standard library only: it runs before pandas is imported

PR_SET_THP_DISABLE = 41                 # linux/prctl.h


def small_pages_only() -> None:
    """Ask Linux for no transparent huge pages in this process (prctl PR_SET_THP_DISABLE).
    The allocators of pyarrow and numpy ask for huge pages for large buffers, and on the
    2-core test machine the first one (the 37 MB of range paths written to Parquet) then
    stalled 0.25 s in the kernel in most runs, against 0.05 s of small-page faults."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)
        except (OSError, AttributeError):   # no libc symbol: nothing to ask
            pass


def prefetch_export(argv: list[str]) -> None:
    """`systems` on one .sqlite export: its NVTX ranges read on a thread while the imports
    below run (load/prefetch.py says why; the run's one connection is that one)."""
    named = [a for a in argv[1:] if a.endswith(".sqlite")]
    if argv[:1] == ["systems"] and len(named) == 1:
        prefetch.start(named[0])


def hide_pyarrow(hidden: bool) -> None:
    """pandas imported without pyarrow (`hidden`), then pyarrow importable again (not
    `hidden`). pandas imports pyarrow with itself where it is installed, 0.1 s of every
    start, though the command keeps text as Python strings (run_and_exit) and uses
    pyarrow only to write the Parquet tables, on another core (common/lazy.py). Not with
    --dask: its workers are processes of their own, whose pandas sends frames back with
    Arrow-backed text, which a pandas imported without pyarrow cannot read."""
    if hidden and "--dask" in sys.argv[1:]:
        return
    if hidden:
        sys.modules.setdefault("pyarrow", None)       # None: `import pyarrow` fails
    elif "pyarrow" in sys.modules and sys.modules["pyarrow"] is None:
        del sys.modules["pyarrow"]


if __name__ == "__main__":      # the command itself: no collection from its first import
    gc.disable()                # on (run_and_exit says why; the imports ran 180, 36 ms),
    small_pages_only()          # no huge page,
    prefetch_export(sys.argv[1:])   # the export's largest read begun,
    hide_pyarrow(True)          # and pandas imported without pyarrow

import argparse
import glob
import os
import sqlite3
from pathlib import Path

import pandas as pd

from .commands import demo, diff, reports
from .commands.picks import plan_dict
from .commands.scrub import scrub
from .common.errors import InputError, ToolkitError
from .common.settings import NCU_INSTANCES, NCU_MAX_RUNS
from .diagnosis.rules import markdown_table
from .documents.io import write_atomic
from .documents.types import to_json
from .render.picks_md import plan_text

hide_pyarrow(False)


def cmd_systems(args: argparse.Namespace) -> int:
    paths = trace_paths(args.trace)
    out = Path(args.output)
    if len(paths) > 1:
        reports.ranks_report(out, paths, args)
    else:
        reports.systems_report(out, paths[0], _path(args.meta), _path(args.torch_logs), args)
    return 0


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def trace_paths(given: list[str]) -> list[Path]:
    """The exports named: files, folders (every *.sqlite inside) or glob patterns."""
    out: list[Path] = []
    for g in given:
        p = Path(g)
        if p.is_dir():
            found = sorted(p.glob("*.sqlite"))
            if not found:
                raise InputError(f"{p}: is a directory with no .sqlite export in it")
            out += found
        elif any(c in g for c in "*?[") and not p.exists():
            out += [Path(x) for x in sorted(glob.glob(g))]
        else:
            out.append(p)
    if not out:
        raise InputError(f"{', '.join(given)}: no export found")
    return out


def cmd_compute(args: argparse.Namespace) -> int:
    reports.compute_report(Path(args.output), Path(args.csv), _path(args.meta))
    return 0


def cmd_page(args: argparse.Namespace) -> int:
    reports.page_report(Path(args.dir), args.workload)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    result = diff.compare(reports.run_doc(Path(args.base)),
                          reports.run_doc(Path(args.new)), args.threshold,
                          args.metric)
    text = diff.render_diff(result, args.base, args.new)
    if args.output:
        out = Path(args.output)
        write_atomic(out, text)
        rows = [{k: sorted(v) if isinstance(v, set) else v for k, v in r.items()}
                for r in result["variants"]]
        write_atomic(out.with_suffix(".json"), to_json({**result, "variants": rows}))
    print(text, end="")
    return 1 if result["regressions"] else 0


def cmd_picks(args: argparse.Namespace) -> int:
    plan, export = reports.compute_plan(Path(args.report), _path(args.trace), args.instances,
                                        args.runs)
    found = plan_dict(plan, str(export))
    print(to_json(found) if args.json else plan_text(found), end="")
    return 0


def cmd_scrub(args: argparse.Namespace) -> int:
    counts = scrub(Path(args.input), Path(args.output))
    print(f"wrote {args.output}: blanked {counts['environment_blocks']} environment "
          f"block(s), {counts['environment_rows']} environment row(s), shortened "
          f"{counts['paths']} path value(s); rank variables kept; carried the text of "
          f"{counts['source_lines']} sampled line(s) of your code")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    print("\n".join(markdown_table()))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    demo.render_all(Path(args.data), Path(args.output))
    return 0


def parser(prog: str = "python -m analysis", epilog: str | None = None
           ) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("systems", help="Nsight Systems export -> systems.{json,md}, plots")
    s.add_argument("trace", nargs="+", help="TRACE.sqlite (nsys export --type=sqlite) or "
                   "TRACE.nsys-rep; several (files, a folder, a glob): one per rank, and a "
                   "cross-rank report")
    s.add_argument("--step", help="the range that is the step (default: found; see "
                   "`steps` in systems.json: the user's loop, profiler markers, the period "
                   "of the kernel sequence, else the whole capture)")
    s.add_argument("--jobs", type=int, help="worker processes: windows of one export read "
                   "in parallel, or with several ranks one export each (default: the "
                   "machine's cores)")
    s.add_argument("--chunk-rows", type=int, metavar="N", help="GPU operations per window "
                   "of the timeline (default 250000): peak memory follows it, not the trace")
    s.add_argument("--quiet", dest="progress", action="store_false", default=None,
                   help="no progress bar")
    s.add_argument("--progress", dest="progress", action="store_true",
                   help="a progress bar on stderr even when it is not a terminal")
    s.add_argument("--dask", metavar="ADDRESS", help="with several ranks: run one task per "
                   "export on this Dask scheduler ('local': a cluster of this machine)")
    s.add_argument("--torch-logs", help="TORCH_LOGS=graph_breaks,recompiles output file")
    s.add_argument("--meta", help="meta.json written by the runner beside the trace")
    s.add_argument("--csv", action="store_true", help="also write ranges.csv, "
                   "kernel_summary.csv and ops.csv (the tables are in Parquet either way)")
    s.add_argument("-o", "--output", required=True, help="output folder")
    s.set_defaults(func=cmd_systems)
    c = sub.add_parser("compute", help="Nsight Compute raw CSV -> compute.{json,md}, roofline")
    c.add_argument("csv", help="NCU.csv (ncu --import X --csv --page raw) or NCU.ncu-rep")
    c.add_argument("--meta", help="meta.json written by the runner")
    c.add_argument("-o", "--output", required=True, help="output folder")
    c.set_defaults(func=cmd_compute)
    g = sub.add_parser("page", help="systems.json [+ compute.json] in DIR -> DIR/README.md")
    g.add_argument("dir")
    g.add_argument("--workload", help="name in the title (default: from the report)")
    g.set_defaults(func=cmd_page)
    d = sub.add_parser("diff", help="compare two runs; exit 1 on a regression")
    d.add_argument("base")
    d.add_argument("new")
    d.add_argument("--threshold", type=float, default=5.0,
                   help="percent slower per iteration that counts as a regression (5)")
    d.add_argument("--metric", choices=["auto", "span", "kernel", "busy"], default="auto",
                   help="what the gate compares per iteration: the range's own GPU span, "
                   "its kernel time (own and other threads'), its GPU busy time; auto: the "
                   "one that moved most (default)")
    d.add_argument("-o", "--output", help="also write the diff as markdown here (and its "
                   "JSON, every row, beside it)")
    d.set_defaults(func=cmd_diff)
    k = sub.add_parser("picks", help="the Nsight Compute plan of a Systems run, before any "
                       "GPU time is spent")
    k.add_argument("report", help="a systems.json, its report folder, or a run folder")
    k.add_argument("--trace", help="the export the report was made from (default: the one "
                   "it names, else the run folder's trace.sqlite)")
    k.add_argument("--instances", type=int, default=NCU_INSTANCES, help="launch "
                   f"configurations per kernel name at most (default {NCU_INSTANCES})")
    k.add_argument("--runs", type=int, default=NCU_MAX_RUNS, help="ncu runs at most (each "
                   f"runs the whole program again; default {NCU_MAX_RUNS})")
    k.add_argument("--json", action="store_true", help="the plan as JSON")
    k.set_defaults(func=cmd_picks)
    x = sub.add_parser("scrub", help="a copy of an export safe to share: no environment, "
                       "same numbers")
    x.add_argument("input", help="IN.sqlite (never modified)")
    x.add_argument("output", help="OUT.sqlite")
    x.set_defaults(func=cmd_scrub)
    r = sub.add_parser("rules", help="the findings rules and thresholds, as a markdown table")
    r.set_defaults(func=cmd_rules)
    m = sub.add_parser("demo", help="render every committed capture (no GPU needed)")
    m.add_argument("data", nargs="?", default="tests/data")
    m.add_argument("-o", "--output", default="runs/demo")
    m.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None, prog: str = "python -m analysis",
         epilog: str | None = None) -> int:
    args = parser(prog, epilog).parse_args(argv)
    try:
        return args.func(args)
    except ToolkitError as exc:
        print(f"analysis: {exc}", file=sys.stderr)
        return exc.exit_code
    except sqlite3.DatabaseError as exc:
        source = getattr(args, "trace", None) or getattr(args, "csv", None)
        print(f"analysis: {source}: cannot read export ({exc})", file=sys.stderr)
        return InputError.exit_code
    except BrokenPipeError:
        # the reader of stdout went away (`| head`): the reports are written; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def run_and_exit(argv: list[str] | None = None, prog: str = "python -m analysis",
                 epilog: str | None = None) -> None:
    """main() as a process's whole life: the analysis makes large acyclic data (frames,
    100k range names) that the cyclic collector would walk again and again for nothing
    (0.4 s of 3 on a 110k-range capture), and tearing that heap down at exit object by
    object costs as much again; so no collection runs, and the process leaves through
    os._exit once its reports are written and its streams flushed. Text columns stay Python
    strings: with pyarrow installed, pandas 3 keeps them as Arrow arrays and converts them
    back at every step (0.8 s of 5 on a 1M-kernel trace)."""
    gc.disable()
    pd.set_option("mode.string_storage", "python")
    code = main(argv, prog, epilog)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed pipe: nothing left to say
            pass
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
