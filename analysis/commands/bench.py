"""How fast is `python -m analysis systems` on big traces, against `nsys stats`?

    python -m analysis.commands.bench [--base tests/data/gelu/trace.sqlite] [--copies 100 ... 5200]
                             [--repeat 3] [--nsys PATH] [-o reports/bench] [--stem analysis]

Builds big exports by replaying a real one K times: every kernel, memcpy, memset, CUDA
API and NVTX row is copied with its timestamps shifted past the previous copy and its
correlation id shifted past every id used so far, so attribution stays one to one (and
each table stays in start order, as Nsight Systems writes it). It then times the analysis
and, when an nsys is given or found, `nsys stats` with every report whose numbers the
document gives (nsys_stats.REPORTS: kernels, GPU span and wall time per range, the
kernel table, memory copies) on the same file, in paired runs (wall time, and peak memory
of every process each tool starts), checks that both give the same numbers, and writes
STEM.md/.json and STEM.png (time and memory against trace size, both tools). Each pair
also times `nsys stats` with the first two reports only (kernels and GPU span per range:
what the document held before wall time, host facts and copies were added), the
reference the earlier benches used.

With --ranks N: How long do many ranks take? The committed per-rank DDP exports replayed as N ranks,
analyzed sequentially, on local worker processes and on a local Dask cluster.

    python -m analysis.commands.bench --ranks 16 [--source tests/data/ddp_straggler]

Each rank<k>.sqlite is a copy of the source's rank(k mod 2) export. Every mode must give
the same ranks.json; the page gives wall time and peak memory of each (in a child process).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from ..common.settings import env
from ..documents.files import load_systems
from ..documents.io import unpack_xz, write_atomic, write_png
from ..render.plots import bench_png
from ..render.text import table
from .nsys_stats import REPORTS, mismatches

TIMED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME")


def replicate(base: Path, out: Path, copies: int) -> dict[str, int]:
    """Write `out`: `base` with its GPU, API and NVTX rows repeated `copies` times."""
    shutil.copyfile(base, out)
    conn = sqlite3.connect(out)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    timed = [t for t in TIMED_TABLES if t in tables]
    lo, hi = conn.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    span = int(hi - lo) + 1_000_000
    corr = int(conn.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
               .fetchone()[0]) + 1
    with conn:
        for table in timed:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            _repeat(conn, table, cols, copies, span, corr)
        cols = [r[1] for r in conn.execute("PRAGMA table_info(NVTX_EVENTS)")]
        _repeat(conn, "NVTX_EVENTS", cols, copies, span, None,
                where="eventType IN (59, 60, 70, 71)")
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in (*timed, "NVTX_EVENTS")}
    conn.close()
    return counts


def _repeat(conn: sqlite3.Connection, table: str, cols: list[str], copies: int, span: int,
            corr: int | None, where: str = "1") -> None:
    """INSERT copies 1..copies-1 of the rows of `table` matching `where`, shifted."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS k(i INTEGER)")
    conn.execute("DELETE FROM k")
    conn.executemany("INSERT INTO k VALUES (?)", [(i,) for i in range(1, copies)])
    shifted = []
    for c in cols:
        if c in ("start", "end"):
            shifted.append(f"t.{c} + k.i * {span}")
        elif c == "correlationId" and corr is not None:
            shifted.append(f"t.{c} + k.i * {corr}")
        else:
            shifted.append(f"t.{c}")
    # copy by copy, rows in their own order: the table stays in start order, as Nsight
    # Systems writes it
    conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(shifted)} "
                 f"FROM k, {table} t WHERE {where.replace('eventType', 't.eventType')} "
                 "ORDER BY k.i, t.rowid")


def peak_child(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak memory (MiB) of `argv` with every process it starts: the sum
    of their proportional set sizes (PSS: a page shared by forked processes counts once
    over them, where summed resident sets would count it in each), sampled every 20 ms
    (psutil; resident sets where PSS is not available; without psutil, the largest single
    process's peak from the kernel's accounting)."""
    t0 = time.perf_counter()
    try:
        import psutil
    except ImportError:
        wrapper = ("import resource, subprocess, sys; "
                   "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
                   "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        res = subprocess.run([sys.executable, "-c", wrapper, *argv], check=True,
                             capture_output=True, text=True)
        return time.perf_counter() - t0, int(res.stdout.split()[-1]) / 1024
    proc, peak = psutil.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), 0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(_footprint(p)
                                 for p in [proc, *proc.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv,
                                            stderr=proc.stderr.read() if proc.stderr else "")
    return wall, peak / 2**20


def wall_time(argv: list[str]) -> float:
    """Wall seconds of `argv` (output discarded; CalledProcessError if it fails)."""
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def _footprint(proc) -> int:
    """A process's proportional set size in bytes (its resident set where the system does
    not report PSS)."""
    try:
        return int(proc.memory_full_info().pss)
    except AttributeError:
        return int(proc.memory_info().rss)


TWO = REPORTS[:2]
"""The earlier reference: kernels and GPU span per range only."""


def _nsys_argv(nsys: str, base: Path, trace: Path, reports: tuple[str, ...] = REPORTS
               ) -> list[str]:
    return [nsys, "stats", *[a for r in reports for a in ("--report", r)],
            "--format", "csv", "--force-overwrite", "true", "--output", str(base), str(trace)]


def measure(trace: Path, nsys: str | None, work: Path, repeat: int = 1) -> dict:
    """Paired runs of the analysis and nsys stats on one trace (`repeat` pairs, the tools
    alternating: the analysis, nsys stats with every report, with the first two), their
    medians, and whether they gave the same numbers."""
    ours = [sys.executable, "-m", "analysis", "systems", str(trace), "-o", str(work / "out"),
            "--quiet"]
    theirs = _nsys_argv(nsys, work / "stats", trace) if nsys else None
    two = _nsys_argv(nsys, work / "two", trace, TWO) if nsys else None
    runs = []
    for _ in range(repeat):
        run = {"analysis_s": wall_time(ours)}
        if theirs and two:
            run["nsys_stats_s"] = wall_time(theirs)
            run["ratio"] = run["analysis_s"] / run["nsys_stats_s"]
            run["nsys_two_s"] = wall_time(two)
            run["ratio_two"] = run["analysis_s"] / run["nsys_two_s"]
        runs.append(run)
    # memory from one more pair, sampled: reading PSS takes CPU the timed runs should have
    runs[0]["analysis_mib"] = peak_child(ours)[1]
    if theirs:
        runs[0]["nsys_stats_mib"] = peak_child(theirs)[1]
    row: dict = {"runs": runs, **{k: median(r[k] for r in runs if k in r) for k in runs[0]}}
    if nsys:
        doc = load_systems(work / "out")
        diffs = mismatches(doc, work / "stats")
        row["same_numbers"] = not diffs
        row["first_differences"] = diffs[:5]
    return row


def render(rows: list[dict], base: Path, nsys: str | None, png: str | None) -> str:
    """The markdown table of the runs (medians), the memory growth, the plot."""
    n = len(rows[0]["runs"]) if rows else 0
    reports = " ".join(f"--report {r}" for r in REPORTS)
    lines = ["# Analysis speed and memory on big traces", "",
             f"Traces: `{base}` replayed K times (python -m analysis.commands.bench). Machine: "
             f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()};"
             f" the analysis on its defaults (every core, windows of 250,000 GPU operations),"
             " its bytecode compiled first as an installed package has it."
             f" Reference: `nsys stats {reports}` ({nsys or 'not available'}): every report "
             "whose numbers the document gives, all of them compared (same numbers); "
             "`2 reports`: the first two only (`nvtx_kern_sum:base`, `nvtx_gpu_proj_sum`), "
             f"the earlier benches' reference. {n} paired run(s) per size, medians; memory, "
             "from one more run of each tool (sampling it takes CPU), is "
             "the peak of the summed proportional set sizes (PSS: shared pages counted once) of "
             "every process a tool ran.", "",
             "| copies | kernels | CUDA API rows | NVTX ranges | analysis | peak memory | "
             "nsys stats | peak memory | analysis / nsys (median of pairs) | same numbers | "
             "nsys stats, 2 reports | analysis / 2 reports |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        lines.append(
            f"| {r['copies']:,} | {r['kernels']:,} | {r['api_rows']:,} | {r['ranges']:,} | "
            f"{r['analysis_s']:.1f} s | {r['analysis_mib']:,.0f} MiB | "
            + (f"{r['nsys_stats_s']:.1f} s | {r['nsys_stats_mib']:,.0f} MiB | "
               f"{r['ratio']:.2f} | {'yes' if r['same_numbers'] else 'NO'} | "
               f"{r['nsys_two_s']:.1f} s | {r['ratio_two']:.2f} |"
               if "nsys_stats_s" in r else "– | – | – | – | – | – |"))
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        lines += ["", f"From {lo['kernels']:,} to {hi['kernels']:,} kernels the analysis's "
                  f"peak memory grew {hi['analysis_mib'] / lo['analysis_mib']:.2f}x"
                  + (f", nsys stats' {hi['nsys_stats_mib'] / lo['nsys_stats_mib']:.2f}x"
                     if "nsys_stats_mib" in hi else "") + "."]
    if png:
        lines += ["", f"![time and memory against trace size]({png})"]
    return "\n".join(lines) + "\n"


MODES = {"sequential": ["--jobs", "1"], "--jobs 2": ["--jobs", "2"],
         "Dask (local cluster)": ["--dask", "local"]}


def replay(source: Path, ranks: int, into: Path) -> list[Path]:
    """rank0..rank<ranks-1>.sqlite in `into`, copies of the source's rank exports."""
    exports = sorted(source.glob("rank*.sqlite"))
    out = []
    for k in range(ranks):
        dest = into / f"rank{k}.sqlite"
        shutil.copyfile(exports[k % len(exports)], dest)
        out.append(dest)
    return out


def run_ranks(ranks: int, source: Path, work: Path) -> list[dict]:
    """Time each mode on the same N exports; check they agree."""
    replay(source, ranks, work / "in")
    rows, reports = [], {}
    for mode, flags in MODES.items():
        out = work / mode.split()[0].strip("-")
        seconds, rss = peak_child([sys.executable, "-m", "analysis", "systems",
                                   str(work / "in"), "-o", str(out), *flags])
        reports[mode] = json.loads((out / "ranks.json").read_text())
        rows.append({"mode": mode, "ranks": ranks, "seconds": seconds, "peak_rss_mib": rss})
    first = next(iter(reports.values()))
    for r in rows:
        r["same_report"] = reports[r["mode"]] == first
    return rows


def render_ranks(rows: list[dict], source: Path) -> str:
    lines = ["# Many ranks", "",
             f"`{source}` replayed as {rows[0]['ranks']} per-rank exports, analyzed with "
             "`python -m analysis systems DIR` (python -m analysis.commands.bench --ranks N). "
             "Machine: "
             f"{os.cpu_count()} CPUs, {platform.platform()}, Python "
             f"{platform.python_version()}. Peak RSS of the command (Dask and worker "
             "processes are children and count in it only as far as rusage sees them).", ""]
    lines += table(["mode", "ranks", "wall", "peak RSS", "same report"],
                   [[r["mode"], str(r["ranks"]), f"{r['seconds']:.1f} s",
                     f"{r['peak_rss_mib']:,.0f} MiB", "yes" if r["same_report"] else "NO"]
                    for r in rows], "lrrrl")
    return "\n".join(lines) + "\n"


def main_ranks(args: argparse.Namespace) -> int:
    """The many-ranks bench (--ranks N): analysis_ranks.md/.json; exit 1 when modes differ."""
    unpack_xz(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in").mkdir()
        rows = run_ranks(args.ranks, args.source, Path(tmp))
    write_atomic(args.output / "analysis_ranks.json", json.dumps(rows, indent=2) + "\n")
    write_atomic(args.output / "analysis_ranks.md", render_ranks(rows, args.source))
    print(render_ranks(rows, args.source), end="")
    return 0 if all(r["same_report"] for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    """Replay, measure and write STEM.md/.json/.png; exit 1 when numbers differ."""
    p = argparse.ArgumentParser(prog="python -m analysis.commands.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, default=Path("tests/data/gelu/trace.sqlite"))
    p.add_argument("--copies", type=int, nargs="+", default=[100, 500, 1000, 2500, 5200])
    p.add_argument("--repeat", type=int, default=3, help="paired runs per size (medians)")
    p.add_argument("--nsys", help="nsys for the reference timing (default: $NSYS or PATH)")
    p.add_argument("-o", "--output", type=Path, default=Path("reports/bench"))
    p.add_argument("--stem", default="analysis", help="output file names: STEM.md, STEM.json, "
                   "STEM.png")
    p.add_argument("--ranks", type=int, help="the many-ranks bench instead: the per-rank "
                   "exports of --source replayed as N ranks, sequential, --jobs 2 and Dask")
    p.add_argument("--source", type=Path, default=Path("tests/data/ddp_straggler"))
    args = p.parse_args(argv)
    if args.ranks:
        return main_ranks(args)
    unpack_xz(args.base.parent)          # the committed captures are stored xz-compressed
    # bytecode as an installed package has it (pip compiles at install; a checkout run
    # with PYTHONDONTWRITEBYTECODE would compile every module on every run, 0.3 s)
    compileall.compile_dir(Path(__file__).parent, quiet=1)
    nsys = args.nsys or env("NSYS") or shutil.which("nsys")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.copies:
            work = Path(tmp) / str(k)
            work.mkdir()
            trace = work / "trace.sqlite"
            counts = replicate(args.base, trace, k)
            print(f"{k} copies: {counts['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels", flush=True)
            row = {"copies": k, "kernels": counts["CUPTI_ACTIVITY_KIND_KERNEL"],
                   "api_rows": counts["CUPTI_ACTIVITY_KIND_RUNTIME"],
                   "ranges": counts["NVTX_EVENTS"], **measure(trace, nsys, work, args.repeat)}
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
            rows.append(row)
            trace.unlink()
    args.output.mkdir(parents=True, exist_ok=True)
    png = write_png(args.output, f"{args.stem}.png", lambda path: bench_png(rows, path))
    write_atomic(args.output / f"{args.stem}.json", json.dumps(rows, indent=2) + "\n")
    write_atomic(args.output / f"{args.stem}.md", render(rows, args.base, nsys, png))
    print(f"wrote {args.output / (args.stem + '.md')}")
    return 0 if all(r.get("same_numbers", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
