"""Command line: turn Nsight exports into reports.

    python -m analysis systems TRACE.sqlite|TRACE.nsys-rep [--torch-logs LOG]
                               [--meta META.json] [--jobs N] [--chunk-rows N]
                               [--quiet|--progress] -o DIR
    python -m analysis compute NCU.csv|NCU.ncu-rep [--meta META.json] -o DIR
    python -m analysis page DIR [--workload NAME]
    python -m analysis diff A B [--threshold PCT] [--metric auto|span|kernel|busy] [-o DIFF.md]
    python -m analysis demo [DATA] [-o OUT]
    python -m analysis scrub IN.sqlite OUT.sqlite
    python -m analysis rules

`systems` writes DIR/systems.json (schema systems/1), DIR/systems.md and two plots
(time_per_iter.png, timeline.png); `compute` writes DIR/compute.json (compute/1),
DIR/compute.md and DIR/roofline.png; `page` merges what DIR holds into DIR/README.md;
`diff` compares two runs (each a systems.json, a folder holding one, or a run folder with
trace.sqlite and meta.json) and exits 1 when a variant got slower than the threshold;
`demo` renders every committed H200 capture under DATA (default tests/data).

Exit 0 on success; 2 on bad input or usage, with one line on stderr naming the file and
what is wrong; 3 when a needed tool (nsys or ncu, to read a report file) is missing.
Inputs are never modified; outputs are written to a temporary file and renamed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from . import compute, diff, systems
from .documents import ComputeDoc, SystemsDoc, to_json
from .errors import InputError, ToolkitError
from .io import (
    Beside,
    load_json_doc,
    load_meta,
    ncu_rep_to_csv,
    nsys_rep_to_sqlite,
    write_atomic,
    write_csv_atomic,
    write_json_atomic,
    write_png,
)
from .load import ncu_csv, nsys_sqlite, torch_logs
from .render import plots
from .render.compute_md import render_compute
from .render.markdown import render_systems
from .render.page import render_page


def systems_doc(trace: Path, meta_path: Path | None, logs: Path | None,
                opts: argparse.Namespace | None = None,
                tables_ready: Callable[[SystemsDoc], object] | None = None) -> SystemsDoc:
    """Analyze one Nsight Systems export (SQLite, or .nsys-rep through nsys), its GPU
    operations read window by window on `opts.jobs` processes (model.attribute_file);
    `tables_ready` as in systems.build."""
    from . import model
    from .progress import progress_bar

    meta = load_meta(meta_path)
    events = systems.event_list(torch_logs.load(logs)) if logs else None
    opts = opts or argparse.Namespace()
    with tempfile.TemporaryDirectory() as tmp:
        db = nsys_rep_to_sqlite(trace, Path(tmp)) if trace.suffix == ".nsys-rep" else trace
        export = nsys_sqlite.load(db, ops=False)
        with progress_bar(f"analysis: {trace.name}", getattr(opts, "progress", None)) as bar:
            tr = model.attribute_file(db, export, systems.watch_paths(meta),
                                      chunk_rows=getattr(opts, "chunk_rows", None),
                                      jobs=getattr(opts, "jobs", None), progress=bar,
                                      events=events)
        export.path = trace
        return systems.build(export, meta, events, trace=tr, tables_ready=tables_ready)


def write_report(out: Path, stem: str, doc: Any, markdown: str, what: str) -> int:
    """DIR/<stem>.json and DIR/<stem>.md, atomically; say where they went."""
    write_json_atomic(out / f"{stem}.json", doc)
    write_atomic(out / f"{stem}.md", markdown)
    print(f"wrote {out / (stem + '.md')} and {out / (stem + '.json')} ({what})")
    return 0


def trace_paths(given: list[str]) -> list[Path]:
    """The exports named: files, folders (every *.sqlite inside) or glob patterns."""
    import glob

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


def cmd_systems(args: argparse.Namespace) -> int:
    paths = trace_paths(args.trace)
    if len(paths) > 1:
        return cmd_ranks(paths, Path(args.output), args)
    out = Path(args.output)

    def tables_ready(doc: SystemsDoc) -> None:
        out.mkdir(parents=True, exist_ok=True)
        beside.start(lambda: write_tables(out, doc))

    with Beside() as beside:          # the CSV tables are written while the rules run
        doc = systems_doc(paths[0], Path(args.meta) if args.meta else None,
                          Path(args.torch_logs) if args.torch_logs else None, args,
                          tables_ready)
        return write_systems(out, doc, tables=False)


def cmd_ranks(paths: list[Path], out: Path, args: argparse.Namespace) -> int:
    """Several exports, one per rank: each rank's report in DIR/rank<k>/, and ranks.md."""
    from .ranks import analyze_ranks, rank_of
    from .render.ranks_md import render_ranks

    for p in paths:
        connect_check(p)
    from .progress import progress_bar

    jobs = args.jobs or os.cpu_count() or 1
    with progress_bar(f"analysis: {len(paths)} ranks", args.progress) as bar:
        docs, ranks = analyze_ranks(paths, args.step, jobs, args.dask, bar)
    folders = {}
    for doc, row in zip(docs, [rank_of(p, i) for i, p in enumerate(paths)], strict=True):
        folders[row] = f"rank{row}"
        write_systems(out / folders[row], doc)
        write_atomic(out / folders[row] / "README.md",
                     render_page(doc, None, {}, f"rank {row}"))
    return write_report(out, "ranks", ranks, render_ranks(ranks, folders),
                        f"{len(paths)} ranks")


def connect_check(path: Path) -> None:
    """Fail early, naming the file, when one of several exports is not readable."""
    nsys_sqlite.connect(path).close()


def write_systems(out: Path, doc: SystemsDoc, tables: bool = True) -> int:
    """systems.json/.md, the plots and (unless the caller wrote them) the CSV tables of
    one systems document."""
    out.mkdir(parents=True, exist_ok=True)
    if tables:
        write_tables(out, doc)
    images = {k: name for k, name, draw in (
        ("time", "time_per_iter.png", plots.time_bars_png),
        ("timeline", "timeline.png", plots.timeline_png))
        if write_png(out, name, lambda p, d=draw: d(doc, p))}
    return write_report(out, "systems", doc, render_systems(doc, images),
                        f"{len(doc.ranges)} ranges")


def write_tables(out: Path, doc: SystemsDoc) -> None:
    """The tables a user will sort, whole, as CSV beside the page (ranges.csv,
    kernel_summary.csv, ops.csv when the trace has emit_nvtx ops)."""
    from .api import dataclass_rows, ranges_rows

    for name, (columns, rows) in (("ranges", ranges_rows(doc)),
                                  ("kernel_summary", dataclass_rows(doc.kernel_summary)),
                                  ("ops", dataclass_rows(doc.ops))):
        if rows:
            write_csv_atomic(out / f"{name}.csv", columns, rows)


def cmd_compute(args: argparse.Namespace) -> int:
    source = Path(args.csv)
    meta = load_meta(Path(args.meta) if args.meta else None)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = ncu_rep_to_csv(source, Path(tmp)) if source.suffix == ".ncu-rep" else source
        data = ncu_csv.load(csv_path)
        data.path = source
        doc = compute.build(data, meta)
    out = Path(args.output)
    png = write_png(out, "roofline.png", lambda p: plots.roofline_png(doc, p))
    return write_report(out, "compute", doc, render_compute(doc, png),
                        f"{len(doc.kernels)} kernel launches")


def cmd_page(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    sysdoc = load_json_doc(folder / "systems.json", SystemsDoc)
    comp = folder / "compute.json"
    compdoc = load_json_doc(comp, ComputeDoc) if comp.exists() else None
    images = {kind: name for kind, name in (("time", "time_per_iter.png"),
                                            ("timeline", "timeline.png"),
                                            ("roofline", "roofline.png"))
              if (folder / name).exists()}
    workload = args.workload or (sysdoc.run or {}).get("workload") or folder.name
    write_atomic(folder / "README.md", render_page(sysdoc, compdoc, images, workload))
    print(f"wrote {folder / 'README.md'}")
    return 0


def run_doc(path: Path) -> SystemsDoc:
    """A systems/1 document from a JSON file, a report folder or a run folder."""
    if path.is_file():
        return load_json_doc(path, SystemsDoc)
    if (path / "systems.json").is_file():
        return load_json_doc(path / "systems.json", SystemsDoc)
    if (path / "trace.sqlite").is_file():
        meta, logs = path / "meta.json", path / "torch_logs.txt"
        return systems_doc(path / "trace.sqlite", meta if meta.exists() else None,
                           logs if logs.exists() else None)
    raise InputError(f"{path}: neither a systems.json nor a folder with systems.json or "
                     "trace.sqlite")


def cmd_diff(args: argparse.Namespace) -> int:
    result = diff.compare(run_doc(Path(args.base)), run_doc(Path(args.new)), args.threshold,
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


def cmd_scrub(args: argparse.Namespace) -> int:
    from .scrub import scrub

    counts = scrub(Path(args.input), Path(args.output))
    print(f"wrote {args.output}: blanked {counts['environment_blocks']} environment "
          f"block(s), {counts['environment_rows']} environment row(s), shortened "
          f"{counts['paths']} path value(s); rank variables kept")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from .rules import markdown_table

    print("\n".join(markdown_table()))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import render_all

    render_all(Path(args.data), Path(args.output))
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
    s.add_argument("--step", help="with several ranks: the step range (default: the range "
                   "ending in 'step' with most instances)")
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


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """No cyclic garbage collection while a command runs. The analysis builds large,
    acyclic data (frames, 100k ranges, 40k document entries): the collector's repeated
    passes over it took about 0.4 s of 2.6 s on an emit_nvtx trace, and found nothing
    to free. Reference counting still frees everything; worker processes collect as
    usual (model._init_worker)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def main(argv: list[str] | None = None, prog: str = "python -m analysis",
         epilog: str | None = None) -> int:
    args = parser(prog, epilog).parse_args(argv)
    try:
        with few_collections():
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


def exit_now(code: int) -> NoReturn:
    """End the process with `code` without tearing its heap down: the standard streams are
    flushed, every report is already written and closed, every child joined. Freeing a
    few million objects one by one took 0.2 s of 2.5 s on a 100k-range trace. For the
    command line only (`main` itself returns, for callers in the same process)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed pipe or stream: nothing to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
