"""How long do many ranks take? The committed per-rank DDP exports replayed as N ranks,
analyzed sequentially, on local worker processes and on a local Dask cluster.

    python -m analysis.commands.bench_ranks [--ranks 16] [--source tests/data/ddp_straggler]
                                   [-o reports/bench]

Each rank<k>.sqlite is a copy of the source's rank(k mod 2) export. Every mode must give
the same ranks.json; the page gives wall time and peak memory of each (in a child process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from ..documents.io import unpack_xz, write_atomic
from ..render.markdown import table
from .bench import peak_child

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


def run(ranks: int, source: Path, work: Path) -> list[dict]:
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


def render(rows: list[dict], source: Path) -> str:
    lines = ["# Many ranks", "",
             f"`{source}` replayed as {rows[0]['ranks']} per-rank exports, analyzed with "
             "`python -m analysis systems DIR` (python -m analysis.commands.bench_ranks). Machine: "
             f"{os.cpu_count()} CPUs, {platform.platform()}, Python "
             f"{platform.python_version()}. Peak RSS of the command (Dask and worker "
             "processes are children and count in it only as far as rusage sees them).", ""]
    lines += table(["mode", "ranks", "wall", "peak RSS", "same report"],
                   [[r["mode"], str(r["ranks"]), f"{r['seconds']:.1f} s",
                     f"{r['peak_rss_mib']:,.0f} MiB", "yes" if r["same_report"] else "NO"]
                    for r in rows], "lrrrl")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.commands.bench_ranks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--source", type=Path, default=Path("tests/data/ddp_straggler"))
    p.add_argument("-o", "--output", type=Path, default=Path("reports/bench"))
    args = p.parse_args(argv)
    unpack_xz(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in").mkdir()
        rows = run(args.ranks, args.source, Path(tmp))
    write_atomic(args.output / "analysis_ranks.json", json.dumps(rows, indent=2) + "\n")
    write_atomic(args.output / "analysis_ranks.md", render(rows, args.source))
    print(render(rows, args.source), end="")
    return 0 if all(r["same_report"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
