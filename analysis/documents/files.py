"""A systems report's files and how they are read back: a small systems.json for people
(the summary), Parquet tables for notebooks (analysis/documents/tables.py), CSV on request.

    systems.json   source, variants, findings, kernel summary, copies, ranks, notes, the
                   entries of the loop ranges and of the ranges the pages show
                   (`summary_rows`), and `tables`: each Parquet file and its rows
    ranges.parquet and ranges_*.parquet   every range entry (tables.py), ops.parquet
    ranges.csv, kernel_summary.csv, ops.csv   with --csv only

`load_systems` gives the whole document back from a folder (or a systems.json with its
tables beside it): the summary, with every range from the Parquet tables; an older
systems.json that holds every range is read as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.names import is_op_path
from . import tables
from .entries import RangeEntry
from .io import atomic_path, load_json_doc, write_json_atomic
from .range_build import from_entries
from .range_table import RangeEntries, RangeTable, scalars
from .types import SystemsDoc, entry_array, entry_column, entry_pick

if TYPE_CHECKING:
    import pyarrow as pa

LOOP_MIN_INSTANCES = 3
"""A user range repeated at least this many times is a loop: its entry stays in
systems.json."""

SUMMARY_LOOPS = 100
"""Loop ranges systems.json holds at most (those with most wall time)."""


def range_table_of(doc: SystemsDoc) -> RangeTable:
    """The table a document's ranges come from (made from its entries when they are a
    plain list: an older systems.json, a document built by hand)."""
    ranges = doc.ranges
    return ranges.table if isinstance(ranges, RangeEntries) else from_entries(ranges)


def summary_rows(doc: SystemsDoc) -> list[int]:
    """Positions of the entries systems.json holds: the user's loop ranges (at most
    SUMMARY_LOOPS, most wall time first), the ranges the pages show, the variants' and
    the findings' ranges."""
    names = entry_column(doc.ranges, "name")
    walls = entry_array(doc.ranges, "wall_ns")
    repeated = np.flatnonzero(entry_array(doc.ranges, "wall_instances") >= LOOP_MIN_INSTANCES)
    loops = [i for i in repeated.tolist() if not is_op_path(names[i])]
    loops = sorted(loops, key=lambda i: -walls[i])[:SUMMARY_LOOPS]
    named = {v.range for v in doc.variants} | {f.range for f in doc.findings if f.range}
    return sorted(set(loops) | set(page_rows(doc)) | {i for i, n in enumerate(names)
                                                      if n in named})


def summary(doc: SystemsDoc, counts: dict[str, int]) -> SystemsDoc:
    """The document systems.json holds: `doc` with the summary's entries and the tables'
    rows."""
    return dataclasses.replace(doc, ranges=entry_pick(doc.ranges, summary_rows(doc)),
                               tables=counts)


def table_data(table: RangeTable, ops: list) -> dict[str, pa.Table]:
    """The Parquet tables of a document (its range table, and ops) as Arrow, by file
    name. They hold what `measure` made: findings change none of them."""
    data = tables.range_arrow(table)
    if ops:
        data[tables.OPS] = tables.rows_arrow(ops)
    return data


def write_table_data(folder: Path, table: RangeTable, ops: list) -> dict[str, int]:
    """Write the Parquet tables of a range table and ops (table_data) into `folder`:
    file -> rows."""
    return tables.write_arrow(folder, table_data(table, ops))


def write_tables(folder: Path, doc: SystemsDoc) -> dict[str, int]:
    """Write the Parquet tables of `doc` (table_data) into `folder`: file -> rows."""
    return write_table_data(folder, range_table_of(doc), doc.ops)


def write_systems(folder: Path, doc: SystemsDoc, csv: bool = False,
                  counts: dict[str, int] | None = None) -> SystemsDoc:
    """Write the Parquet tables (unless `counts` says they are written: write_tables),
    systems.json (the summary) and, with `csv`, the CSV tables of `doc` into `folder`;
    the summary written."""
    table = range_table_of(doc)
    if counts is None:
        counts = write_tables(folder, doc)
    small = summary(doc, counts)
    write_json_atomic(folder / "systems.json", small)
    if csv:
        write_csvs(folder, doc, table)
    return small


def ranges_columns(table: RangeTable) -> dict[str, list]:
    """The range table as ranges.csv and api.ranges_frame give it: the scalar fields
    (the position `row` is the frame's index), then `devices` joined by commas."""
    cols = {name: table.column(name) for name in scalars(RangeEntry)
            if name not in ("devices", "row")}
    cols["devices"] = [",".join(map(str, d)) for d in table.column("devices")]
    return cols


def write_csvs(folder: Path, doc: SystemsDoc, table: RangeTable) -> None:
    """ranges.csv (ranges_columns), kernel_summary.csv and ops.csv (when the trace has
    emit_nvtx ops)."""
    frames = {"ranges": pd.DataFrame(ranges_columns(table))}
    for name, items in (("kernel_summary", doc.kernel_summary), ("ops", doc.ops)):
        if items:
            frames[name] = pd.DataFrame([dataclasses.astuple(i) for i in items],
                                        columns=[f.name for f in dataclasses.fields(items[0])])
    for name, frame in frames.items():
        if len(frame):
            write_csv(folder / f"{name}.csv", frame)


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """A frame as CSV (no index, "\\n" line ends), atomically."""
    with atomic_path(path, suffix=".csv") as tmp:
        frame.to_csv(tmp, index=False, lineterminator="\n")


def load_systems(path: Path) -> SystemsDoc:
    """The whole systems document of a report folder, or of a systems.json with its
    tables beside it: the summary, its ranges every entry of the Parquet tables."""
    json_path = path / "systems.json" if path.is_dir() else path
    doc = load_json_doc(json_path, SystemsDoc)
    folder = json_path.parent
    if doc.tables and tables.has_tables(folder):
        doc.ranges = RangeEntries(tables.read_range_table(folder))
    return doc


MAX_RANGES = 25


KERNEL_RANGES = 5
"""Range rows a page shows at most: a trace with more (PyTorch's emit_nvtx puts one range
around every op) shows the ranges that hold the most kernel time and says how many more
are in systems.json."""


def shown_rows(doc: SystemsDoc) -> list[int]:
    """Positions of the ranges the NVTX table shows: every one, or the MAX_RANGES with
    most wall time, then kernel time."""
    if len(doc.ranges) <= MAX_RANGES:
        return list(range(len(doc.ranges)))
    return sorted(most(doc.ranges, "wall_ns", "kernel_time_ns", first=MAX_RANGES))


def kernel_rows(doc: SystemsDoc, n: int = KERNEL_RANGES) -> list[int]:
    """Positions of the `n` ranges whose kernels the page lists (most kernel time, own and
    other threads')."""
    return sorted(most(doc.ranges, ("kernel_time_ns", "other_threads_kernel_time_ns"),
                        first=n))


def page_rows(doc: SystemsDoc) -> list[int]:
    """Positions of every range the page shows."""
    return sorted(set(shown_rows(doc)) | set(kernel_rows(doc)))


def most(entries: Sequence[RangeEntry], *keys: str | tuple[str, ...],
          first: int | None = None) -> list[int]:
    """Positions of `entries` by `keys` descending (a key: a field, or fields summed), the
    first key first, ties in timeline order (numpy's stable sort: 110k emit_nvtx entries
    sorted with a Python key took 0.1 s), the `first` of them (all by default); read as
    arrays (RangeEntries.array: no entry is made for it)."""
    columns = [-sum(entry_array(entries, f) for f in ((key,) if isinstance(key, str)
                                                       else key)) for key in keys]
    return np.lexsort(columns[::-1])[:first].tolist()
