"""Command line: turn Nsight exports into reports.

    python -m analysis systems TRACE.sqlite|TRACE.nsys-rep [--torch-logs LOG]
                               [--meta META.json] -o DIR
    python -m analysis compute NCU.csv|NCU.ncu-rep [--meta META.json] -o DIR

`systems` writes DIR/systems.json (schema systems/1) and DIR/systems.md; `compute`
writes DIR/compute.json (compute/1), DIR/compute.md and DIR/roofline.png. Exit 0 on
success; 2 on bad input or usage, with one line on stderr naming the file and what is
wrong; 3 when a needed tool (nsys or ncu, to read a report file) is missing. Inputs are
never modified; outputs are written to a temporary file and renamed, so an interrupted
run leaves no half report.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis import compute, systems
from analysis.errors import InputError, ToolMissing
from analysis.load import ncu_csv, nsys_sqlite, torch_logs
from analysis.render.compute_md import render_compute
from analysis.render.markdown import render_systems
from analysis.render.plots import roofline_png


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_meta(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such meta.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a readable meta.json ({exc})") from exc
    if not isinstance(meta, dict):
        raise InputError(f"{path}: meta.json must hold a JSON object")
    return meta


def _convert(report: Path, tool: str, find: Callable[[], Path],
             run: Callable[[Path], None]) -> None:
    """Run a report-to-file conversion with an installed Nsight tool, mapping failures.

    A missing input is exit 2, a missing tool exit 3, a tool that fails on the file exit 2.
    """
    from workflows.tools import ToolError

    if not report.is_file():
        raise InputError(f"{report}: no such file")
    try:
        exe = find()
    except ToolError as exc:
        raise ToolMissing(f"{report}: reading {report.suffix} needs {tool}: {exc}") from exc
    try:
        run(exe)
    except ToolError as exc:
        raise InputError(f"{report}: {tool} could not export it: {exc}") from exc


def nsys_rep_to_sqlite(report: Path, workdir: Path) -> Path:
    """Export a .nsys-rep to SQLite in `workdir` with the installed nsys."""
    from workflows.nsys import export_argv, find_nsys
    from workflows.tools import run_tool

    out = workdir / (report.stem + ".sqlite")
    _convert(report, "nsys", find_nsys,
             lambda nsys: run_tool(export_argv(nsys, report, out), "nsys export"))
    return out


def ncu_rep_to_csv(report: Path, workdir: Path) -> Path:
    """Export a .ncu-rep's raw page to CSV in `workdir` with the installed ncu."""
    from workflows.ncu import find_ncu, import_csv_argv
    from workflows.tools import run_tool

    out = workdir / (report.stem + ".csv")
    _convert(report, "ncu", find_ncu, lambda ncu: out.write_text(
        run_tool(import_csv_argv(ncu, report), "ncu --import", stdout_only=True)))
    return out


def cmd_systems(args: argparse.Namespace) -> int:
    trace = Path(args.trace)
    meta = load_meta(Path(args.meta) if args.meta else None)
    events = torch_logs.load(args.torch_logs) if args.torch_logs else None
    with tempfile.TemporaryDirectory() as tmp:
        if trace.suffix == ".nsys-rep":
            trace_db = nsys_rep_to_sqlite(trace, Path(tmp))
        else:
            trace_db = trace
        export = nsys_sqlite.load(trace_db)
        export.path = trace
        doc = systems.build(export, meta, events)
    out = Path(args.output)
    write_atomic(out / "systems.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(out / "systems.md", render_systems(doc))
    print(f"wrote {out / 'systems.md'} and {out / 'systems.json'} "
          f"({len(doc['ranges'])} ranges)")
    return 0


def cmd_compute(args: argparse.Namespace) -> int:
    source = Path(args.csv)
    meta = load_meta(Path(args.meta) if args.meta else None)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = ncu_rep_to_csv(source, Path(tmp)) if source.suffix == ".ncu-rep" else source
        data = ncu_csv.load(csv_path)
        data.path = source
        doc = compute.build(data, meta)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp_png = tempfile.mkstemp(prefix=".roofline.", suffix=".png", dir=out)
    os.close(fd)
    png = roofline_png(doc, Path(tmp_png))
    if png:
        os.replace(tmp_png, out / "roofline.png")
    else:
        Path(tmp_png).unlink(missing_ok=True)
    write_atomic(out / "compute.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(out / "compute.md", render_compute(doc, "roofline.png" if png else None))
    print(f"wrote {out / 'compute.md'} and {out / 'compute.json'} "
          f"({len(doc['kernels'])} kernel launches)")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("systems", help="Nsight Systems export -> systems.{json,md}")
    s.add_argument("trace", help="TRACE.sqlite (nsys export --type=sqlite) or TRACE.nsys-rep")
    s.add_argument("--torch-logs", help="TORCH_LOGS=graph_breaks,recompiles output file")
    s.add_argument("--meta", help="meta.json written by the runner beside the trace")
    s.add_argument("-o", "--output", required=True, help="output folder")
    s.set_defaults(func=cmd_systems)
    c = sub.add_parser("compute", help="Nsight Compute raw CSV -> compute.{json,md}, roofline")
    c.add_argument("csv", help="NCU.csv (ncu --import X --csv --page raw) or NCU.ncu-rep")
    c.add_argument("--meta", help="meta.json written by the runner")
    c.add_argument("-o", "--output", required=True, help="output folder")
    c.set_defaults(func=cmd_compute)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (InputError, ToolMissing) as exc:
        print(f"analysis: {exc}", file=sys.stderr)
        return exc.exit_code
    except sqlite3.DatabaseError as exc:
        source = getattr(args, "trace", None) or getattr(args, "csv", None)
        print(f"analysis: {source}: cannot read export ({exc})", file=sys.stderr)
        return InputError.exit_code


if __name__ == "__main__":
    sys.exit(main())
