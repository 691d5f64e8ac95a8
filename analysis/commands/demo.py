"""`make demo`: render every committed H200 capture into reports, without a GPU.

For each folder of DATA holding trace.sqlite (an nsys export; committed xz-compressed
and unpacked first) and meta.json, runs the
systems analysis (with its TORCH_LOGS file), the compute analysis when
DATA/ncu/<workload>_raw.csv exists, and the README.md page, into OUT/<workload>/.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..common.errors import InputError
from ..documents.io import unpack_xz
from . import reports


def captures(data: Path) -> list[Path]:
    """Folders of `data` that hold a capture made by the runner."""
    return sorted(p for p in data.iterdir()
                  if (p / "trace.sqlite").is_file() and (p / "meta.json").is_file())


def render_all(data: Path, out: Path) -> list[Path]:
    """Render each capture (the report functions of the command line); return the
    README.md pages written."""
    if not data.is_dir():
        raise InputError(f"{data}: no such folder of captures")
    unpack_xz(data)
    pages = []
    for cap in captures(data):
        t0 = time.perf_counter()
        dest = out / cap.name
        logs = cap / "torch_logs.txt"
        reports.systems_report(dest, cap / "trace.sqlite", cap / "meta.json",
                               logs if logs.is_file() else None)
        csv = data / "ncu" / f"{cap.name}_raw.csv"
        if csv.is_file():
            reports.compute_report(dest, csv, data / "ncu" / f"{cap.name}_meta.json")
        pages.append(reports.page_report(dest))
        print(f"demo: {cap.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return pages
