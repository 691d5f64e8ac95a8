"""Range entries made where they are read (range_table.RangeEntries): the command line's
document holds them unmade, its rules and page read a few, and what anyone reads is what
the list of entries made at once holds."""

from __future__ import annotations

import dataclasses

import pytest

from analysis.commands import systems
from analysis.documents.range_table import RangeEntries
from analysis.documents.types import entry_column as column
from analysis.documents.types import entry_pick as pick
from analysis.documents.types import to_json_bytes
from analysis.load import nsys_sqlite
from analysis.render.markdown import render_systems
from analysis.render.page import render_page
from tests.conftest import DATA

EMIT_NVTX = DATA / "train_step_user" / "trace.sqlite"


@pytest.fixture(scope="session")
def export() -> nsys_sqlite.NsysExport:
    return nsys_sqlite.load(EMIT_NVTX)


def test_a_lazy_document_is_the_document_and_its_page_makes_few_entries(export) -> None:
    """Judged and rendered, a document whose entries are made on demand gives the same
    findings, page and JSON as one whose entries are all made first; the rules and the
    page made only the entries they read (the user's ranges, the outermost ones, the
    page's longest), not the emit_nvtx op ranges nested in them."""
    made_first = systems.measure(export)
    made_first.doc.ranges.whole()
    whole = systems.judge(made_first)
    lazy = systems.judge(systems.measure(export))
    entries = lazy.ranges
    assert isinstance(entries, RangeEntries)
    assert lazy.findings == whole.findings and lazy.variants == whole.variants
    assert render_systems(lazy, {}) == render_systems(whole, {})
    assert render_page(lazy, None, {}, "x") == render_page(whole, None, {}, "x")
    made = len(entries._picked)
    assert entries._made is None and 0 < made < len(entries) // 2
    assert to_json_bytes(lazy) == to_json_bytes(whole)     # (now made whole)
    assert entries._made is not None


def _table(export):
    return systems.measure(export).doc.ranges.table


def test_picked_entries_are_the_ones_the_list_holds(export) -> None:
    """An entry picked, then changed, is the one every later read sees: by column, picked
    again, in the whole list; entries not picked equal those made at once."""
    table = _table(export)
    entries = RangeEntries(table)
    full = table.entries()
    assert column(entries, "name") == [e.name for e in full]
    first, third = pick(entries, [3, 1])[::-1]
    assert (first, third) == (full[1], full[3])
    assert pick(entries, [1])[0] is first
    first.wall_ns = -1
    assert column(entries, "wall_ns")[1] == -1 and table.column("wall_ns")[1] != -1
    assert entries._made is None
    assert entries[1] is first and entries[3] is third and entries[0:4][1] is first
    assert entries == [dataclasses.replace(full[1], wall_ns=-1) if i == 1 else e
                       for i, e in enumerate(full)]
    assert column(entries, "wall_ns")[1] == -1 and pick(entries, [1])[0] is first


def test_a_tables_rows_make_the_entries_it_makes_whole(export) -> None:
    """Entries made for a slice or for positions equal those the whole table makes
    there, and a table made from the entries makes them again."""
    from analysis.documents.range_build import from_entries
    table = _table(export)
    full = table.entries()
    n = len(full)
    assert table.entries(slice(5, n - 5)) == full[5:n - 5]
    at = [n - 1, 0, n // 2]
    assert table.entries(at) == [full[i] for i in at]
    assert from_entries(full).entries() == full
    assert from_entries(full).entries(at) == [full[i] for i in at]
