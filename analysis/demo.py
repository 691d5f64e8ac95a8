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

from .errors import InputError
from .io import unpack_xz


def captures(data: Path) -> list[Path]:
    """Folders of `data` that hold a capture made by the runner."""
    return sorted(p for p in data.iterdir()
                  if (p / "trace.sqlite").is_file() and (p / "meta.json").is_file())


def render_all(data: Path, out: Path) -> list[Path]:
    """Render each capture; return the README.md pages written."""
    from .__main__ import main

    if not data.is_dir():
        raise InputError(f"{data}: no such folder of captures")
    unpack_xz(data)
    pages = []
    for cap in captures(data):
        t0 = time.perf_counter()
        dest = out / cap.name
        argv = ["systems", str(cap / "trace.sqlite"), "--meta", str(cap / "meta.json"),
                "-o", str(dest)]
        if (cap / "torch_logs.txt").is_file():
            argv += ["--torch-logs", str(cap / "torch_logs.txt")]
        steps = [argv]
        csv = data / "ncu" / f"{cap.name}_raw.csv"
        if csv.is_file():
            steps.append(["compute", str(csv), "--meta",
                          str(data / "ncu" / f"{cap.name}_meta.json"), "-o", str(dest)])
        steps.append(["page", str(dest)])
        for step in steps:
            if main(step) != 0:
                raise InputError(f"{cap}: demo step failed: {' '.join(step)}")
        print(f"demo: {cap.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        pages.append(dest / "README.md")
    return pages
