"""The command line's speed tricks keep their promises: the CSV rows formatted by hand are
the csv module's bytes, and what is held for a fast exit is held only when the process
does exit right after its command."""

from __future__ import annotations

import csv
import dataclasses
import gc
import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import api, reports, speed
from analysis import writers as speed_writers
from analysis.documents import RangeEntry, SystemsDoc
from analysis.io import finish_json, write_csv_atomic, write_csv_blocks, write_csv_columns
from analysis.ops import WRAPPER
from analysis.rules.registry import is_op_path, user_path
from tests.conftest import DATA

ROOT = DATA.parent.parent

TEXT = st.one_of(st.none(), st.text(alphabet=st.sampled_from(list('ab ,"\n\r\t;é')),
                                    max_size=6))
NUMBER = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=False))


@pytest.fixture(scope="module")
def emit_nvtx_doc() -> SystemsDoc:
    """An emit_nvtx capture's document: range names with commas, domains None."""
    return reports.systems_doc(DATA / "train_step_user" / "trace.sqlite", None, None)


def _csv_module(columns: list[str], rows: list[tuple]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TEXT, NUMBER, TEXT, NUMBER), max_size=8), st.booleans())
def test_rows_formatted_here_are_the_csv_modules_bytes(tmp_path_factory, rows, numbers_as_text
                                                       ) -> None:
    """Quotes, commas, newlines and carriage returns in the text columns, None, ints and
    floats: the same bytes as csv.writer, whether a number column is declared numeric or
    not."""
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    columns = ["a", "n", "b", "x"]
    text = [0, 1, 2] if numbers_as_text else [0, 2]
    write_csv_atomic(path, columns, rows, text)
    assert path.read_bytes() == _csv_module(columns, rows)
    write_csv_columns(path, columns, [list(c) for c in zip(*rows, strict=True)] or [[]] * 4, text)
    assert path.read_bytes() == _csv_module(columns, rows)
    blocks = [[list(c) for c in zip(*rows[i:i + 3], strict=True)] for i in range(0, len(rows), 3)]
    write_csv_blocks(path, columns, blocks, text)         # a block of text, the next of None
    assert path.read_bytes() == _csv_module(columns, rows)


@pytest.mark.parametrize("columns,rows", [(["a"], [("",), ("x,y",), (None,), (1,)]),
                                          (["a", "n"], [("", 1), ('q"', 2.5), (None, 3)])])
def test_a_table_written_in_parts_joins_to_the_whole(tmp_path: Path, columns, rows) -> None:
    """A table's rows cut in two files, the header in the first only, join to the csv
    module's bytes of the whole (one column: the csv module's own quoting of an empty
    field)."""
    from analysis.io import join_parts
    parts = [tmp_path / "p0", tmp_path / "p1"]
    for part, some, first in ((parts[0], rows[:2], True), (parts[1], rows[2:], False)):
        block = [list(c) for c in zip(*some, strict=True)]
        write_csv_blocks(part, columns, [block], [0], with_header=first)
    join_parts(parts, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == _csv_module(columns, rows)
    assert not parts[0].exists() and not parts[1].exists()


def test_text_columns_follow_the_field_types(emit_nvtx_doc: SystemsDoc) -> None:
    """Only fields typed plainly int or float are formatted as numbers: the range name,
    domain, pid (int or None), warm-up and devices go through the quoting."""
    doc = emit_nvtx_doc
    columns, _ = api.ranges_rows(doc)
    text = {columns[i] for i in api.text_columns(RangeEntry, columns)}
    assert {"name", "domain", "pid", "warmup", "devices"} == text


def test_ranges_csv_reads_back_as_the_document(tmp_path: Path, emit_nvtx_doc: SystemsDoc
                                               ) -> None:
    """ranges.csv, written by the fast path, parses to the document's own values (an
    emit_nvtx capture: names with commas and quotes)."""
    doc = emit_nvtx_doc
    columns, rows = api.ranges_rows(doc)
    path = tmp_path / "ranges.csv"
    write_csv_atomic(path, columns, rows, api.text_columns(RangeEntry, columns))
    back = pd.read_csv(path, keep_default_na=False)
    assert back["name"].tolist() == [e.name for e in doc.ranges]
    assert back["wall_ns"].tolist() == [e.wall_ns for e in doc.ranges]
    assert any("," in e.name for e in doc.ranges)


def test_nothing_is_kept_unless_the_process_exits_after_its_command(monkeypatch) -> None:
    """A command run inside a longer-lived process (tests, notebooks) keeps nothing alive
    and leaves the collector on; the command line's exit keeps and skips collecting."""
    monkeypatch.setattr(speed, "_KEPT", [])
    monkeypatch.setitem(speed._EXIT_FOLLOWS, "on", False)
    with speed.few_collections():
        assert not gc.isenabled()
        speed.keep(object())
    assert gc.isenabled() and speed._KEPT == []
    monkeypatch.setitem(speed._EXIT_FOLLOWS, "on", True)
    try:
        with speed.few_collections():
            speed.keep(marker := object())
        assert not gc.isenabled() and speed._KEPT == [marker]
    finally:
        gc.enable()


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
    assert {"systems.json", "systems.md", "ranges.csv"} <= {p.name for p in out.iterdir()}


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


SIDE_BY_SIDE = ["train_step_user/trace", "battery/dynamic_shapes_sampled/trace",
                "battery/compile_warmup_planted/trace", "ddp_single/trace"]


@pytest.mark.parametrize("writers", [1, 3])
@pytest.mark.parametrize("name", SIDE_BY_SIDE)
def test_writers_beside_give_the_files_written_in_turn(tmp_path: Path, name: str,
                                                       writers: int, monkeypatch) -> None:
    """The command line's way (ranges.csv from the range table and systems.json's range
    list from forked writers, one or several, each a part of the list, the parts joined
    and the rest appended here; the page and rules reading the entries they need, made on
    demand) writes the same bytes as writing everything in turn from the document
    (emit_nvtx names, CPU samples, warm-up instances set apart, two processes)."""
    folder = DATA / name.rsplit("/", 1)[0]
    trace = DATA / f"{name}.sqlite"
    meta = folder / "meta.json" if trace.name == "trace.sqlite" else None
    meta = meta if meta and meta.exists() else None
    monkeypatch.setattr(speed_writers, "JSON_MIN_RANGES", 1)    # its JSON writers too
    monkeypatch.setattr(speed_writers, "JSON_WRITERS", writers)
    monkeypatch.setattr(speed_writers, "CSV_WRITERS", writers)
    finished = []
    monkeypatch.setattr(reports, "finish_json", lambda *a: finished.append(
        finish_json(*a)) or finished[-1])
    files = {}
    for beside in (False, True):
        out = tmp_path / str(beside)
        reports.systems_report(out, trace, meta, None, None, beside=beside)
        files[beside] = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix != ".png"}
    assert files[True].keys() == files[False].keys() and "systems.json" in files[True]
    assert files[True] == files[False]
    assert finished == [True]                  # the range list came from the writer


def test_range_table_gives_the_entries_and_csv_rows_of_the_document() -> None:
    """The table the writers read holds what the document holds: its entries are the
    document's, field for field, and its CSV rows are api.ranges_rows'."""
    from analysis import systems
    from analysis.load import nsys_sqlite
    captured = []
    export = nsys_sqlite.load(DATA / "battery" / "dynamic_shapes_sampled" / "trace.sqlite")
    doc = systems.measure(export, on_table=lambda t, _: captured.append(t)).doc
    (table,) = captured
    assert table.entries() == doc.ranges
    header, columns = table.csv_columns()
    assert (header, list(zip(*columns, strict=True))) == api.ranges_rows(doc)
    blocks = list(table.csv_blocks(1))
    assert len(blocks) == table.n > 1
    assert [sum((b[i] for b in blocks), []) for i in range(len(header))] == columns
    assert any(e.cpu_samples for e in doc.ranges)


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_a_document_finished_from_a_written_beginning_is_the_whole(tmp_path: Path,
                                                                   emit_nvtx_doc, monkeypatch,
                                                                   kernel_copy: bool) -> None:
    """start_json's beginning, written whole or in parts (joined by the kernel's copy or,
    where that fails, a plain one), plus finish_json's rest is to_json_bytes; a beginning
    that is not the document's own is thrown away (False, nothing written, no part
    left)."""
    from analysis.documents import to_json_bytes
    from analysis.io import start_json
    if not kernel_copy:
        monkeypatch.setattr(os, "copy_file_range", _refused, raising=False)
    doc = emit_nvtx_doc
    n = len(doc.ranges)
    path = tmp_path / "systems.json"
    for cuts in ([0, n], [0, 1, n - 1, n], [0, n // 2, n]):
        parts = [tmp_path / f"part{a}" for a in cuts[:-1]]
        for part, a, b in zip(parts, cuts[:-1], cuts[1:], strict=True):
            start_json(part, doc, "ranges", range(a, b))
        assert finish_json(parts, path, doc, "ranges")
        assert path.read_bytes() == to_json_bytes(doc)
        assert not any(p.exists() for p in parts)
    parts = [tmp_path / "a", tmp_path / "b"]
    start_json(parts[0], doc, "ranges", range(0, 1))
    start_json(parts[1], doc, "ranges", range(1, n))
    other = dataclasses.replace(doc, source=dataclasses.replace(doc.source, path="elsewhere"))
    assert not finish_json(parts, tmp_path / "other.json", other, "ranges")
    assert not any(p.exists() for p in parts) and not (tmp_path / "other.json").exists()


def _refused(*args: object) -> int:
    raise OSError(18, "Invalid cross-device link")


def test_a_beginning_is_written_as_its_batches_are_made(tmp_path: Path, emit_nvtx_doc,
                                                        monkeypatch) -> None:
    """start_json writes each piece of the range list before the next is made (the
    pieces of a 110k-range list, held together, were 168 MB of new pages)."""
    from analysis import io as aio
    part = tmp_path / "part"
    piece = b"x" * 100_000                     # beyond the file's buffer: written through
    seen = []

    def body(items, key, rows=None):
        for _ in range(3):
            yield piece
            seen.append(part.stat().st_size)

    monkeypatch.setattr(aio, "list_body", body)
    aio.start_json(part, emit_nvtx_doc, "ranges")
    assert seen[0] >= len(piece) and seen[1] >= seen[0] + len(piece)


def test_the_tables_are_cut_for_the_cores_there_are(monkeypatch) -> None:
    """One writer for each file on two cores (they share them with this process), more
    on more cores, JSON's first, each with enough rows; every cut covers the table once,
    in order; none for systems.json below its size, none at all for an empty table."""
    monkeypatch.setattr(speed_writers, "cores", lambda: 2)
    assert speed_writers.cuts(110_011) == ([range(0, 110_011)], [range(0, 110_011)])
    assert speed_writers.cuts(39_999) == ([], [range(0, 39_999)])
    assert speed_writers.cuts(0) == ([], [])
    monkeypatch.setattr(speed_writers, "cores", lambda: 16)
    json, csv = speed_writers.cuts(110_011)
    assert (len(json), len(csv)) == (speed_writers.JSON_WRITERS_MAX,
                                     speed_writers.CSV_WRITERS_MAX)
    for cut in (json, csv):
        assert [i for r in cut for i in r] == list(range(110_011))
    assert [len(c) for c in speed_writers.cuts(45_000)] == [2, 2]
    monkeypatch.setattr(speed_writers, "cores", lambda: 4)
    assert [len(c) for c in speed_writers.cuts(110_011)] == [2, 1]
    monkeypatch.setattr(speed_writers, "CSV_WRITERS", 5)
    assert len(speed_writers.cuts(3)[1]) == 3                 # never an empty part
