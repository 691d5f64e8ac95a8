"""The loader reads older Nsight Systems export layouts with the same numbers.

Older layouts are derived from the real 2025.3 exports by the committed, documented
transformations in tests/data/tools/older_layouts.py.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.__main__ import main
from analysis.load import nsys_sqlite
from tests.conftest import DATA, systems_json
from tests.data.tools.older_layouts import LAYOUTS, derive

EXPORTS = [DATA / "edge" / "trace.sqlite", DATA / "matmul_relu" / "trace.sqlite"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("source", EXPORTS, ids=lambda p: p.parent.name)
def test_older_layout_gives_same_ranges(tmp_path: Path, layout: str, source: Path) -> None:
    old = derive(source, tmp_path / "old.sqlite", layout)
    want = systems_json(source)["ranges"]
    got = systems_json(old)["ranges"]
    if layout == "no_short_names":     # kernels are then named by their demangled names,
        for entries in (want, got):    # which split some base names: compare range totals
            for e in entries:
                e.pop("kernels")
                for t in e["other_threads"]:
                    t.pop("kernels")
    assert got == want


def test_schema_version_reported_and_missing(tmp_path: Path) -> None:
    assert nsys_sqlite.load(EXPORTS[0]).export_schema_version == "3.20.3"
    old = derive(EXPORTS[0], tmp_path / "old.sqlite", "no_gpu_info")
    export = nsys_sqlite.load(old)
    assert export.export_schema_version is None and export.gpus == []


def _without(tmp_path: Path, table: str) -> Path:
    out = tmp_path / f"no_{table}.sqlite"
    out.write_bytes(EXPORTS[0].read_bytes())
    with sqlite3.connect(out) as conn:
        conn.execute(f"DROP TABLE {table}")
    return out


@pytest.mark.parametrize("table, words", [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "does not contain CUDA kernel data"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "does not contain CUDA API data"),
    ("StringIds", "no StringIds table")])
def test_missing_required_table_exits_2(tmp_path: Path, capsys, table: str, words: str) -> None:
    assert main(["systems", str(_without(tmp_path, table)), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_no_nvtx_still_reports_kernels_and_says_why(tmp_path: Path) -> None:
    path = _without(tmp_path, "NVTX_EVENTS")
    doc = systems_json(path)
    assert doc["ranges"] == []
    assert any("no NVTX ranges" in n for n in doc["notes"])
    assert any("outside every NVTX range" in n for n in doc["notes"])
    assert main(["systems", str(path), "-o", str(tmp_path / "o")]) == 0


def test_second_process_with_same_correlation_ids(tmp_path: Path) -> None:
    """Joins must keep processes apart: each process gets its own entries, each equal to
    the single-process numbers; nothing crosses between them."""
    source = DATA / "edge" / "trace.sqlite"
    two = derive(source, tmp_path / "two.sqlite", "second_process")
    one = {e["name"]: e for e in systems_json(source)["ranges"]}
    both = systems_json(two)["ranges"]
    assert len(both) == 2 * len(one) and len({e["pid"] for e in both}) == 2
    for e in both:
        for key in ("instances", "kernel_count", "kernel_time_ns", "gpu_span_ns",
                    "gpu_idle_ns", "kernels"):
            assert e[key] == one[e["name"]][key], (e["name"], e["pid"], key)


def test_unreadable_schema_names_the_version(tmp_path: Path, capsys) -> None:
    """A kernel table without the columns the loader needs: exit 2 naming the version."""
    path = tmp_path / "odd.sqlite"
    path.write_bytes(EXPORTS[0].read_bytes())
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN correlationId TO cid")
    assert main(["systems", str(path), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "export schema version 3.20.3" in err and len(err.strip().splitlines()) == 1


BACKTRACES = DATA / "backtrace" / "trace.sqlite"


def test_backtrace_rows_are_not_calls(tmp_path: Path) -> None:
    """A capture with `--cudabacktrace` (Nsight Systems 2025.3) holds, beside each call it
    took a backtrace of, a row of its own in the API table with the call's correlation id;
    the analysis gives the same numbers and findings with those rows deleted (read as
    calls, every such sync counted twice in the host split)."""
    api = "CUPTI_ACTIVITY_KIND_RUNTIME"
    with sqlite3.connect(BACKTRACES) as db:
        twins = db.execute(
            f"SELECT count(*) FROM {api} b JOIN {api} r ON r.correlationId = b.correlationId "
            "AND r.eventClass = 0 WHERE b.eventClass = 67 AND b.callchainId IS NOT NULL"
        ).fetchone()[0]
    assert twins > 200
    clean = tmp_path / "clean.sqlite"
    shutil.copyfile(BACKTRACES, clean)
    with sqlite3.connect(clean) as db:
        db.execute(f"DELETE FROM {api} WHERE eventClass = 67")
    got, want = systems_json(BACKTRACES), systems_json(clean)
    for doc in (got, want):
        doc["source"].pop("path")
        doc["findings"] = [(f["rule"], f["range"], f["saving_ns"]) for f in doc["findings"]]
    assert got == want        # the numbers; what the backtraces name: test_backtraces.py
