"""The analysis benchmark's replays and report, and the progress bar's manners."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from analysis.commands import bench

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


def test_replicate_keeps_start_order_and_shifts_ids(tmp_path: Path) -> None:
    out = tmp_path / "t.sqlite"
    counts = bench.replicate(DATA / "gelu" / "trace.sqlite", out, 3)
    conn = sqlite3.connect(out)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        starts = [s for (s,) in conn.execute(f"SELECT start FROM {table} ORDER BY rowid")]
        assert starts == sorted(starts) and len(starts) == counts[table]
    ids = conn.execute("SELECT count(DISTINCT correlationId), count(*) "
                       "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert ids[0] == ids[1] == counts["CUPTI_ACTIVITY_KIND_KERNEL"] == 3 * 966


def test_bench_writes_table_and_json(tmp_path: Path) -> None:
    assert bench.main(["--copies", "1", "2", "--repeat", "2", "--nsys", "",
                       "-o", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "analysis.json").read_text())
    assert [r["kernels"] for r in rows] == [966, 2 * 966]
    assert all(len(r["runs"]) == 2 and r["analysis_mib"] > 0 for r in rows)
    text = (tmp_path / "analysis.md").read_text()
    assert "| 2 | 1,932 |" in text and "2 paired run(s)" in text


def test_reference_runs_every_report_the_document_gives() -> None:
    """nsys stats is timed doing the work the analysis does (every report whose numbers
    the document gives, all compared), and separately the earlier two-report run."""
    from analysis.commands.nsys_stats import REPORTS
    argv = bench._nsys_argv("nsys", Path("b"), Path("t.sqlite"))
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--report"] == list(REPORTS)
    assert {"nvtx_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_kern_sum:base"} <= set(REPORTS)
    two = bench._nsys_argv("nsys", Path("b"), Path("t.sqlite"), bench.TWO)
    assert [two[i + 1] for i, a in enumerate(two) if a == "--report"] == [
        "nvtx_kern_sum:base", "nvtx_gpu_proj_sum"]


def _systems(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis", "systems",
                           str(DATA / "train_step" / "trace.sqlite"), "-o", str(tmp_path),
                           "--chunk-rows", "2000", *flags],
                          cwd=ROOT, capture_output=True, text=True, check=True)


def test_progress_on_stderr_when_asked_silent_otherwise(tmp_path: Path) -> None:
    shown = _systems(tmp_path / "a", "--progress")
    assert "window" in shown.stderr and "wrote" in shown.stdout
    assert "window" not in shown.stdout
    assert _systems(tmp_path / "b").stderr == ""           # not a terminal: silent
    assert _systems(tmp_path / "c", "--quiet").stderr == ""
