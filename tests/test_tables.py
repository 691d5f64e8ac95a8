"""The report's tables: Parquet files that read back as the document measured, a small
systems.json, CSV on request, fields declared once and checked, and a command line that
exits with its command's code."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.commands import reports
from analysis.common.names import WRAPPER, is_op_path, user_path
from analysis.documents import tables
from analysis.documents.entries import SOURCES
from analysis.documents.files import load_systems, summary_rows, write_systems, write_tables
from analysis.documents.range_build import ColumnError, checked, range_table, rounded
from analysis.documents.range_table import long_fields, scalars
from analysis.documents.types import RangeEntry, SystemsDoc, entry_pick, to_dict
from analysis.load import nsys_sqlite
from tests.conftest import DATA
from tests.shared_docs import analyzed

ROOT = DATA.parent.parent
SIDE_BY_SIDE = ["train_step_user/trace", "battery/dynamic_shapes_sampled/trace",
                "battery/compile_warmup_planted/trace", "ddp_single/trace", "edge/trace"]


def _measured(name: str) -> SystemsDoc:
    return analyzed(name)


@pytest.mark.parametrize("name", SIDE_BY_SIDE)
def test_the_tables_read_back_as_the_document_measured(tmp_path: Path, name: str) -> None:
    """Every field of every entry, lists and nested lists included (emit_nvtx names, CPU
    samples, warm-up set apart, two processes, other threads' kernels), read back from
    the Parquet files equals the document measured; systems.json holds a summary of it
    and the tables' row counts."""
    doc = _measured(name)
    small = write_systems(tmp_path, doc)
    back = load_systems(tmp_path)
    assert to_dict(back) == to_dict(dataclasses.replace(doc, tables=small.tables))
    assert small.tables[tables.RANGES] == len(doc.ranges)
    assert small.tables[tables.file_of("kernels")] == sum(len(e.kernels) for e in doc.ranges)
    on_disk = json.loads((tmp_path / "systems.json").read_text())
    assert [e["row"] for e in on_disk["ranges"]] == summary_rows(doc)
    assert on_disk["ranges"] == [to_dict(doc.ranges[i]) for i in summary_rows(doc)]
    some = list(range(0, len(doc.ranges), 3))[::-1]        # a few, out of order
    fresh = load_systems(tmp_path)                          # nothing read from it yet
    assert [to_dict(e) for e in entry_pick(fresh.ranges, some)] == \
        [to_dict(doc.ranges[i]) for i in some]


def test_a_hand_made_document_is_written_through_the_same_table(tmp_path: Path) -> None:
    """A document whose ranges are a plain list (an older systems.json, a test) goes
    through the same table: the files read back as its entries, rows numbered."""
    doc = _measured("train_step_user/trace")
    plain = dataclasses.replace(doc, ranges=list(doc.ranges))
    write_systems(tmp_path, plain)
    assert list(load_systems(tmp_path).ranges) == list(doc.ranges)


def test_an_older_full_systems_json_is_read_as_it_is(tmp_path: Path) -> None:
    """systems.json files that hold every range (before the tables) still load whole."""
    doc = _measured("gelu/trace")
    (tmp_path / "systems.json").write_text(json.dumps(
        {k: v for k, v in to_dict(doc).items() if k != "tables"}))
    assert list(load_systems(tmp_path).ranges) == list(doc.ranges)


def test_the_emit_nvtx_capture_gives_a_small_json_and_every_range_in_parquet(
        tmp_path: Path) -> None:
    """The 200-step emit_nvtx capture: systems.json under 5 MB, ranges.parquet with every
    one of its 110k ranges, the columns typed and documented from the declarations."""
    out = tmp_path / "r"
    assert subprocess.run([sys.executable, "-m", "analysis", "systems",
                           str(DATA / "emit_nvtx_200" / "trace.sqlite"), "-o", str(out),
                           "--quiet"], cwd=ROOT).returncode == 0
    assert (out / "systems.json").stat().st_size < 5e6
    data = pq.read_table(out / "ranges.parquet")
    summary = json.loads((out / "systems.json").read_text())
    assert data.num_rows == summary["tables"]["ranges.parquet"] > 110_000
    assert data.column_names == list(scalars(RangeEntry))
    field = data.schema.field("wall_ns")
    assert field.metadata[b"unit"] == b"ns" and b"nvtx_sum" in field.metadata[b"doc"]
    assert not list(out.glob("*.csv"))


def test_csv_only_on_request_and_it_reads_back_as_the_document(tmp_path: Path) -> None:
    """--csv writes ranges.csv (names with commas and quotes parse back), kernel_summary.csv
    and ops.csv."""
    out = tmp_path / "r"
    trace = DATA / "train_step_user" / "trace.sqlite"
    doc = reports.systems_report(out, trace, None, None, _opts(csv=True))
    back = pd.read_csv(out / "ranges.csv", keep_default_na=False)
    assert back["name"].tolist() == [e.name for e in doc.ranges]
    assert back["wall_ns"].tolist() == [e.wall_ns for e in doc.ranges]
    assert any("," in e.name for e in doc.ranges)
    assert {"kernel_summary.csv", "ops.csv"} <= {p.name for p in out.iterdir()}


def test_tables_start_once_final_and_equal_the_documents(tmp_path: Path, monkeypatch) -> None:
    """systems_report starts writing the tables as soon as measure() has made the range
    and op tables final (before the steps are found and the rules run), and what it
    writes is what the finished document's tables are."""
    from analysis.commands import systems
    order: list[str] = []
    real_beside, real_steps = reports.beside, systems.add_steps
    monkeypatch.setattr(reports, "beside", lambda fn: order.append("tables") or real_beside(fn))
    monkeypatch.setattr(systems, "add_steps",
                        lambda *a, **k: order.append("steps") or real_steps(*a, **k))
    out = tmp_path / "r"
    doc = reports.systems_report(out, DATA / "train_step_user" / "trace.sqlite", None, None,
                                 _opts())
    assert order == ["tables", "steps"]
    again = tmp_path / "again"
    again.mkdir()
    counts = write_tables(again, doc)
    assert counts == json.loads((out / "systems.json").read_text())["tables"]
    for name in counts:
        assert pq.read_table(out / name).equals(pq.read_table(again / name)), name


def test_a_failure_after_the_tables_started_leaves_no_folder(tmp_path: Path,
                                                             monkeypatch) -> None:
    """measure() failing after the tables' child started: the error is the caller's, the
    child is reaped and the report folder is not made."""
    from analysis.commands import systems

    def fail(*a, **k):
        raise RuntimeError("after the tables")
    jobs, real_beside = [], reports.beside
    monkeypatch.setattr(reports, "beside", lambda fn: jobs.append(real_beside(fn)) or jobs[-1])
    monkeypatch.setattr(systems, "add_steps", fail)
    out = tmp_path / "r"
    with pytest.raises(RuntimeError, match="after the tables"):
        reports.systems_report(out, DATA / "train_step_user" / "trace.sqlite", None, None,
                               _opts())
    assert not out.exists()
    assert len(jobs) == 1 and jobs[0].pid == 0 and jobs[0].fd == -1   # closed, reaped


def _opts(**kw):
    import argparse
    return argparse.Namespace(jobs=1, chunk_rows=None, progress=False, **kw)


def test_every_field_is_declared_with_a_known_source_and_a_unit_in_its_name() -> None:
    """Each range entry field says what it is and where it comes from; a field whose
    name ends in _ns is declared in ns (and the other way round)."""
    for f in dataclasses.fields(RangeEntry):
        assert f.metadata["doc"] and f.metadata["source"] in SOURCES, f.name
        assert (f.metadata["unit"] == "ns") == f.name.endswith("_ns"), f.name
    for _, item in long_fields(RangeEntry):
        for f in dataclasses.fields(item):
            assert f.metadata["doc"] and (f.metadata["unit"] == "ns") == f.name.endswith(
                "_ns"), f.name


def test_columns_are_checked_not_cast() -> None:
    """A float column for an int field, a missing value for a field that takes none,
    text for a number: each refused, naming the field."""
    with pytest.raises(ColumnError, match="busy_ns.*float64"):
        checked(pd.Series([1.5, 2.0]), "busy_ns", int)
    with pytest.raises(ColumnError, match="missing"):
        checked(pd.Series([1, None]), "busy_ns", int)
    with pytest.raises(ColumnError, match="declared str"):
        checked(pd.Series([1, 2], dtype=object), "warmup", str | None)
    assert checked(pd.Series([1, 2]), "wall_median_ns", float).dtype == np.float64
    assert checked(pd.Series([1, None], dtype="Int64"), "pid", int | None) == [1, None]
    with pytest.raises(ColumnError, match="pid.*float64"):
        checked(pd.Series([1.0, None]), "pid", int | None)
    with pytest.raises(ColumnError, match="missing"):
        checked(pd.Series(["a", None], dtype=object), "name", str)
    with pytest.raises(ColumnError, match="declared str"):
        checked(pd.Series(["a", 2.5], dtype=object), "warmup", str | None)
    with pytest.raises(ColumnError, match="declared a map"):
        checked(pd.Series([{}, "x"], dtype=object), "critical_path_ns", dict[str, int] | None)
    assert checked(pd.Series(["a", None, float("nan")], dtype=object), "warmup",
                   str | None) == ["a", None, None]
    assert checked(pd.Series([{"gpu": 1}, None], dtype=object), "critical_path_ns",
                   dict[str, int] | None) == [{"gpu": 1}, {}]


def test_a_per_key_column_without_a_declaration_is_refused() -> None:
    from analysis.trace import build as model
    from analysis.trace import ranges
    trace = model.attribute(nsys_sqlite.load(DATA / "gelu" / "trace.sqlite"))
    summary = ranges.summarize(trace)
    extra = summary.set_index("key")[["kernel_count"]].rename(
        columns={"kernel_count": "undeclared_ns"})
    with pytest.raises(ColumnError, match="undeclared_ns.*analysis/documents/entries.py"):
        range_table(summary, trace.kernels, [extra])


def test_the_command_line_exits_with_the_commands_code(tmp_path: Path) -> None:
    """`python -m analysis` ends by the fast exit with the command's exit code, its
    reports complete (2 on a missing file, 0 and every file on success)."""
    bad = subprocess.run([sys.executable, "-m", "analysis", "systems", str(tmp_path / "no"),
                          "-o", str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    out = tmp_path / "r"
    ok = subprocess.run([sys.executable, "-m", "analysis", "systems",
                         str(DATA / "train_step_user" / "trace.sqlite"), "-o", str(out),
                         "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert {"systems.json", "systems.md", *tables.files()} <= {p.name for p in out.iterdir()}


PARTS = ["train", "step", "", WRAPPER, f"{WRAPPER}: torch::autograd::AccumulateGrad",
         "aten::linear, seq = 4, op_id = 7", "x" + WRAPPER, "aten::mm, seq = 1"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PARTS), min_size=1, max_size=6))
def test_user_path_cuts_before_the_first_op_range(parts: list[str]) -> None:
    """user_path (string searches, no split per path) is the path cut before its first
    part that is an emit_nvtx op range or an autograd wrapper."""
    path = "/".join(parts)
    first = next((i for i, p in enumerate(parts)
                  if ", op_id = " in p or p.startswith(WRAPPER)), len(parts))
    assert user_path(path) == "/".join(parts[:first])
    assert is_op_path(path) == (user_path(path) != path)


@given(st.lists(st.one_of(st.floats(min_value=0, max_value=1e13),
                          st.integers(0, 10**8).map(lambda k: k / 20),
                          st.integers(0, 10**7).map(lambda k: k / 20 + 1e6)), max_size=60))
def test_rounded_means_are_what_round_gives(values: list[float]) -> None:
    """Mean durations to 0.1 ns are Python's round(v, 1) for every value, halves too."""
    got = rounded(pd.Series(values, dtype="float64"))
    assert got.tolist() == [round(v, 1) for v in values]
