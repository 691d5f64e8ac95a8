"""Range entries made where they are read (range_table.RangeEntries): the command line's
document holds them unmade, its rules and page read a few, and what anyone reads is what
the list of entries made at once holds."""

from __future__ import annotations

import dataclasses

import pytest

from analysis import systems
from analysis.documents import entry_column as column
from analysis.documents import entry_pick as pick
from analysis.documents import to_json_bytes
from analysis.load import nsys_sqlite
from analysis.range_table import RangeEntries
from analysis.render.markdown import render_systems
from analysis.render.page import render_page
from tests.conftest import DATA

EMIT_NVTX = DATA / "train_step_user" / "trace.sqlite"


@pytest.fixture(scope="module")
def export() -> nsys_sqlite.NsysExport:
    return nsys_sqlite.load(EMIT_NVTX)


def test_a_lazy_document_is_the_document_and_its_page_makes_few_entries(export) -> None:
    """Judged and rendered, a document whose entries are made on demand gives the same
    findings, page and JSON as one made whole; the rules and the page made only the
    entries they read (the user's ranges, the outermost ones, the page's longest), not
    the emit_nvtx op ranges nested in them."""
    whole = systems.judge(systems.measure(export))
    measured = systems.measure(export, lazy=True)
    lazy = systems.judge(measured)
    entries = lazy.ranges
    assert isinstance(entries, RangeEntries)
    assert lazy.findings == whole.findings and lazy.variants == whole.variants
    assert render_systems(lazy, {}) == render_systems(whole, {})
    assert render_page(lazy, None, {}, "x") == render_page(whole, None, {}, "x")
    made = len(entries._picked)
    assert entries._made is None and 0 < made < len(entries) // 2
    assert to_json_bytes(lazy) == to_json_bytes(whole)     # (now made whole)
    assert entries._made is not None


def test_picked_entries_are_the_ones_the_list_holds(export) -> None:
    """An entry picked, then changed, is the one every later read sees: by column, picked
    again, in a slice, in the whole list; entries not picked equal those made at once (a
    slice of the list not yet made is made for the reader and not kept)."""
    table = []
    systems.measure(export, on_table=lambda t, _: table.append(t))
    entries = RangeEntries(table[0])
    full = table[0].entries()
    assert column(entries, "name") == [e.name for e in full]
    first, third = pick(entries, [3, 1])[::-1]
    assert (first, third) == (full[1], full[3])
    assert pick(entries, [1])[0] is first
    first.wall_ns = -1
    assert column(entries, "wall_ns")[1] == -1 and table[0].column("wall_ns")[1] != -1
    assert entries[0:4][1] is first and entries[2:4] == full[2:4]
    assert entries[0:4][0] is not entries[0:4][0] and entries._made is None
    assert entries[1] is first and entries[3] is third
    assert entries == [dataclasses.replace(full[1], wall_ns=-1) if i == 1 else e
                       for i, e in enumerate(full)]
    assert column(entries, "wall_ns")[1] == -1 and pick(entries, [1])[0] is first


def test_a_tables_rows_make_the_entries_it_makes_whole(export) -> None:
    """Entries made for a slice or for positions equal those the whole table makes
    there."""
    table = []
    systems.measure(export, on_table=lambda t, _: table.append(t))
    full = table[0].entries()
    n = len(full)
    assert table[0].entries(slice(5, n - 5)) == full[5:n - 5]
    at = [n - 1, 0, n // 2]
    assert table[0].entries(at) == [full[i] for i in at]
    assert table[0].column("hot") == [e.hot for e in full]
