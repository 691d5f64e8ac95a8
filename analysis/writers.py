"""The writers the command line forks beside its analysis, for the range table's files.

As soon as the range entries' table is made (systems.measure's `on_table`), ranges.csv
and systems.json up to the end of its range list are written from it by forked
processes (speed.Beside) while this one goes on with the rules and the page. Each file
is cut in parts of consecutive rows, one writer each (`cuts`: as many as the cores allow,
one on a 2-core machine), and the parts are joined in order by the kernel's copy
(io.join_parts, io.finish_json): the same bytes as one writer, tested at any cut.

Measured on emit_nvtx_200 (110k entries): on the H200 host's 16 cores one JSON writer
took 0.6 s and the CSV one 0.45 s after the table, against 0.2 s for the rules and page.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .api import text_columns
from .documents import RangeEntry, SystemsDoc, SystemsSource
from .io import start_json, write_csv_blocks
from .range_table import RangeEntries, RangeTable, csv_header
from .speed import Beside

JSON_MIN_RANGES = 40_000
"""Range entries from which systems.json's range list is written by writers beside:
below, their JSON takes less than a fork and its copied pages cost (about 3 us each)."""

SLICE_MIN_RANGES = 20_000
"""Rows each writer beyond a file's first is given at least."""

JSON_WRITERS_MAX = 4
"""Writers of systems.json's range list at most (each part beyond the first is copied
once more, when the parts are joined)."""

CSV_WRITERS_MAX = 3
"""Writers of ranges.csv at most (its rows take about 3/4 of the JSON's time)."""

JSON_WRITERS: int | None = None
"""Writers of systems.json's range list (None: as `cuts` finds for the cores)."""

CSV_WRITERS: int | None = None
"""Writers of ranges.csv (None: as `cuts` finds for the cores)."""

JSON_PART = ".systems.json.part"
"""systems.json's parts as the writers wrote them (finish_json completes them)."""

CSV_PART = ".ranges.csv.part"
"""ranges.csv's parts as the writers wrote them (join_parts joins them)."""


def cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cuts(n: int) -> tuple[list[range], list[range]]:
    """How a table of `n` rows is cut between writers beside: systems.json's range list
    (none below JSON_MIN_RANGES), then ranges.csv (none for an empty table). The cores
    beyond this process's and one other go to the JSON writers first (JSON_WRITERS_MAX
    at most), the rest to the CSV ones (CSV_WRITERS_MAX), each writer beyond a file's
    first with SLICE_MIN_RANGES rows at least; one writer each where there are no such
    cores (a 2-core machine: the writers share the cores with this process)."""
    spare = cores() - 2
    most = max(1, n // SLICE_MIN_RANGES)
    json = min(JSON_WRITERS_MAX, most, max(spare, 1)) if n >= JSON_MIN_RANGES else 0
    csv = min(CSV_WRITERS_MAX, most, max(spare - json, 1)) if n else 0
    return (_cut(n, (JSON_WRITERS or json) if json else 0),
            _cut(n, (CSV_WRITERS or csv) if csv else 0))


def _cut(n: int, k: int) -> list[range]:
    """`n` rows in min(k, n) consecutive parts of about equal size."""
    k = min(k, n)
    at = [n * i // k for i in range(k + 1)] if k else []
    return [range(a, b) for a, b in zip(at[:-1], at[1:], strict=True)]


def start(fork: Beside, stage: Path, table: RangeTable, source: SystemsSource
          ) -> tuple[list[Path], list[Path]]:
    """Fork the writers of the range table into `stage`: each part of systems.json's
    range list (the first part with the document's beginning: its first keys are its
    schema and source, its range list the table's entries), then each part of
    ranges.csv. The parts' files, in order: systems.json's, then ranges.csv's."""
    json_rows, csv_rows = cuts(table.n)
    head = SystemsDoc(source=source, ranges=RangeEntries(table))
    json_parts = [stage / f"{JSON_PART}{i or ''}" for i in range(len(json_rows))]
    csv_parts = [stage / f"{CSV_PART}{i or ''}" for i in range(len(csv_rows))]
    for part, rows in zip(json_parts, json_rows, strict=True):
        fork.start(functools.partial(start_json, part, head, "ranges", rows))
    for part, rows in zip(csv_parts, csv_rows, strict=True):
        fork.start(functools.partial(_write_csv, part, table, rows))
    return json_parts, csv_parts


def _write_csv(part: Path, table: RangeTable, rows: range) -> None:
    """ranges.csv's rows `rows` (after its header, where they come first)."""
    header = csv_header()
    write_csv_blocks(part, header, table.csv_blocks(rows=rows),
                     text_columns(RangeEntry, header), with_header=rows.start == 0)
