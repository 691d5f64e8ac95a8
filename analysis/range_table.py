"""A systems document's range entries as columns, before they are objects.

Every field of documents.RangeEntry is one column of a RangeTable (a Python list, or a
numpy array of plain numbers), in timeline order of the range keys. The entries are built
from it (`entries`); ranges.csv is written from the columns themselves (`csv_columns`: the
rows api.ranges_rows gives from the entries; `csv_blocks`, a block of rows at a time, is
how the writer reads them). The command line forks the CSV writer with
the table as soon as it is made, and leaves the entries to be made where they are read
(RangeEntries): the writer of systems.json makes them all, beside; this process only
those its page and rules read (110k emit_nvtx entries: 0.45 s, for 21 read).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .apart import APART_TAGS, apart_prefix
from .documents import CopyStat, HotFrame, KernelStat, RangeEntry, ThreadLaunches

ENTRY_COLUMNS = {"path": "name", "domain": "domain", "pid": "pid", "instances": "instances",
                 "kernel_count": "kernel_count", "kernel_time_ns": "kernel_time_ns",
                 "gpu_span_ns": "gpu_span_ns", "gpu_idle_ns": "gpu_idle_ns",
                 "wall_instances": "wall_instances", "wall_ns": "wall_ns",
                 "wall_median_ns": "wall_median_ns"}
"""Columns of the range summary (ranges.summarize) -> the RangeEntry fields they fill."""

CSV_BLOCK = 2048
"""Rows of ranges.csv made at a time (RangeTable.csv_blocks)."""

WARMUP_NAME = re.compile(r"warm[-_ ]?up", re.I)


def scalars() -> list[str]:
    """RangeEntry's scalar fields, in field order: ranges.csv's columns (then
    `devices`)."""
    return [f.name for f in dataclasses.fields(RangeEntry)
            if f.default_factory is dataclasses.MISSING]


def csv_header() -> list[str]:
    """ranges.csv's columns: the scalar fields, then `devices`."""
    return [*scalars(), "devices"]


@dataclass
class RangeTable:
    """The range entries' fields as columns (field name -> values, one per entry); a
    field without a column takes its default in every entry (hot: an empty list)."""

    n: int
    columns: dict[str, list | np.ndarray]

    def entries(self, rows: slice | list[int] | None = None) -> list[RangeEntry]:
        """The entries (of `rows` only: a slice, or positions), each made once (a second
        call makes new ones)."""
        if rows is None:
            return _entries(self.n, self.columns)
        if isinstance(rows, slice):
            return _entries(len(range(self.n)[rows]),
                            {f: col[rows] for f, col in self.columns.items()})
        at = np.asarray(rows, dtype=np.int64)
        return _entries(len(rows), {f: col[at] if isinstance(col, np.ndarray)
                                    else [col[i] for i in rows]
                                    for f, col in self.columns.items()})

    def column(self, field: str, rows: slice = slice(None)) -> list:
        """One field of every entry (of `rows` only), as plain Python values in a list of
        its own (its default where the table has no column for it)."""
        if field in self.columns:
            col = self.columns[field][rows]
            return col.tolist() if isinstance(col, np.ndarray) else list(col)
        n = len(range(self.n)[rows])
        default = next(f for f in dataclasses.fields(RangeEntry) if f.name == field)
        if default.default_factory is not dataclasses.MISSING:
            return [default.default_factory() for _ in range(n)]
        return [default.default] * n

    def csv_columns(self, rows: slice = slice(None)) -> tuple[list[str], list[list]]:
        """ranges.csv's header and columns (of `rows` only): the scalar fields, then the
        devices joined by commas (api.ranges_rows gives the same rows from the
        entries)."""
        cols = [self.column(f, rows) for f in scalars()]
        devices = [",".join(map(str, d)) for d in self.column("devices", rows)]
        return csv_header(), cols + [devices]

    def csv_blocks(self, size: int = CSV_BLOCK, rows: range | None = None
                   ) -> Iterator[list[list]]:
        """csv_columns' columns (of `rows` only), `size` rows at a time
        (io.write_csv_blocks)."""
        rows = range(self.n) if rows is None else rows
        for at in range(rows.start, rows.stop, size):
            yield self.csv_columns(slice(at, min(at + size, rows.stop)))[1]


class RangeEntries(Sequence[RangeEntry]):
    """A document's range entries, made from their table when they are read: all of them
    at the first read of the list as a whole (iteration, an index); a slice makes its
    entries (not kept: the writer of systems.json reads the list slice by slice, the heap
    of one slice reused by the next), `pick` makes only those asked for (kept), and
    `column` reads a field without making any. The command line's document holds one
    (systems.measure(lazy=True)): its page and rules read 21 of the 110k entries of an
    emit_nvtx capture, and the writer of systems.json, forked, makes them all. An entry
    picked is the one every later read gives."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, table: RangeTable) -> None:
        self.table = table
        self._made: list[RangeEntry] | None = None
        self._picked: dict[int, RangeEntry] = {}

    def whole(self) -> list[RangeEntry]:
        """Every entry, made once."""
        if self._made is None:
            self._made = self[:]               # (the entries picked already among them)
        return self._made

    def pick(self, positions: Iterable[int]) -> list[RangeEntry]:
        """The entries at `positions` (made now, once each)."""
        at = list(positions)
        if self._made is not None:
            return [self._made[i] for i in at]
        new = sorted({i for i in at if i not in self._picked})
        self._picked.update(zip(new, self.table.entries(new), strict=True))
        return [self._picked[i] for i in at]

    def column(self, field: str) -> list:
        """One field of every entry, without making them."""
        if self._made is not None:
            return [getattr(e, field) for e in self._made]
        if self._picked:
            values = self.table.column(field)
            for i, e in self._picked.items():
                values[i] = getattr(e, field)
            return values
        return self.table.column(field)

    def __len__(self) -> int:
        return self.table.n

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if not isinstance(i, slice) or self._made is not None:
            return self.whole()[i]
        made = self.table.entries(i)         # a slice of a list not made: made, not kept
        at = range(self.table.n)[i]
        for j, e in self._picked.items():
            if j in at:
                made[at.index(j)] = e
        return made

    def __iter__(self) -> Iterator[RangeEntry]:
        return iter(self.whole())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"RangeEntries({self.table.n} entries)"


def range_table(summary: pd.DataFrame, kernels: pd.DataFrame,
                threads: tuple[pd.DataFrame, dict[int, list[dict]]] | None = None,
                devices: dict[int, list[int]] | None = None,
                copies: dict[int, list[CopyStat]] | None = None,
                samples: dict[int, tuple[int, list[HotFrame]]] | None = None,
                warmup: tuple[list[dict[str, Any]], dict[str, str]] | None = None
                ) -> RangeTable:
    """The table of one entry per range key, in timeline order: the summary's columns
    (ENTRY_COLUMNS) and `threads`' per-key frame (busy.per_key: columns named as the
    fields; with its list of other launching threads); kernels grouped in one pass,
    `devices` the CUDA devices of each key's kernels, `copies` its copies, `samples` its
    CPU samples and hot libraries (host.hot_frames), `warmup` the TORCH_LOGS events and
    set-apart paths its warm-up label comes from (warmup_labels)."""
    devices, copies, samples = devices or {}, copies or {}, samples or {}
    per_key: dict[int, list[KernelStat]] = {}
    for key, name, count, total, lo, hi, avg in zip(*_lists(kernels, (
            "key", "name", "count", "total_ns", "min_ns", "max_ns", "avg_ns")), strict=True):
        per_key.setdefault(key, []).append(KernelStat(str(name), count, total, round(avg, 1),
                                                      lo, hi))
    keys = summary["key"].tolist()
    extra, launches = threads if threads is not None else (None, {})
    given: dict[str, list | np.ndarray] = {
        field: _column(summary[c]) for c, field in ENTRY_COLUMNS.items()}
    given["domain"] = [d if isinstance(d, str) else None for d in given["domain"]]
    if extra is not None:
        aligned = extra.reindex(keys, fill_value=0).astype("int64")
        given.update({c: aligned[c].to_numpy() for c in extra.columns})
    given.update(cpu_samples=np.array([samples[k][0] if k in samples else 0 for k in keys],
                                      dtype="int64"),
                 warmup=warmup_labels(given["name"], *(warmup or ([], {}))),
                 hot=[samples[k][1] if k in samples else [] for k in keys],
                 devices=[devices.get(k, []) for k in keys],
                 kernels=[per_key.get(k, []) for k in keys],
                 copies=[copies.get(k, []) for k in keys],
                 other_threads=[[ThreadLaunches(**t) for t in launches.get(k, ())]
                                for k in keys])
    return RangeTable(len(keys), given)


def warmup_labels(names: list[str], events: list[dict[str, Any]],
                  apart: dict[str, str] | None = None) -> list[str | None]:
    """Why each range is warm-up (None: it is not): it ran compilation or autotuning: a
    warm-up name, a graph break or recompile logged while it was the innermost range
    open, an instance set apart for its kernels (`apart`: Trace.warmup, path -> why), or
    it is nested in a set apart instance. Rules (but compile_kernels_in_range and the
    compile rules) and verdicts leave them out."""
    compiled_in: dict[str, int] = {}
    for ev in events:
        if ev.get("range"):
            compiled_in[ev["range"]] = compiled_in.get(ev["range"], 0) + 1
    apart = apart or {}
    any_apart = apart or any(p in k for k in compiled_in for p in APART_TAGS)
    out: list[str | None] = []
    for name in names:
        outer = apart_prefix(name) if any_apart else ""
        if name in compiled_in:
            out.append(f"torch.compile compiled here ({compiled_in[name]} graph break or "
                       "recompile event(s) in TORCH_LOGS)")
        elif outer in apart:
            out.append(f"set apart: {apart[outer]}" if outer == name
                       else f"inside {outer}, set apart: {apart[outer]}")
        elif outer:
            out.append(f"inside {outer}, where torch.compile compiled")
        elif "warm" in name.lower() and WARMUP_NAME.search(name):
            out.append("named as warm-up")
        else:
            out.append(None)
    return out


def _entries(n: int, given: dict[str, list | np.ndarray]) -> list[RangeEntry]:
    """`n` entries from their fields' columns, every field set as __init__ would set it,
    without calling it (110k entries under emit_nvtx: keyword calls took seconds). Each
    entry's dict is a copy of one template (the defaults; keys in the order the files
    always had) updated at once with the fields most entries hold a value of their own
    in; the other numeric fields (most host parts and GPU numbers of emit_nvtx op ranges
    are zero) are set afterwards only where they differ from the default."""
    fields = dataclasses.fields(RangeEntry)
    base = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    lists = [f.name for f in fields if f.default_factory is not dataclasses.MISSING]
    fresh = [f for f in lists if f not in given]
    order = [*base, *(f for f in given if f not in base and f not in lists), "hot",
             "devices", "kernels", "copies", "other_threads"]
    template = {f: base.get(f, 0) if f not in lists else None for f in order}
    sparse = {name: at.tolist() for name, col in given.items() if isinstance(col, np.ndarray)
              and len(at := np.flatnonzero(col != template[name])) < n // 2}
    dense = [f for f in given if f not in sparse]
    columns = [_plain(given[f]) for f in dense] + [[[] for _ in range(n)] for _ in fresh]
    names = dense + fresh
    entries, dicts = [], []
    new, copy = object.__new__, template.copy
    for values in zip(*columns, strict=True):
        d = copy()
        d.update(zip(names, values, strict=True))
        e = new(RangeEntry)
        e.__dict__ = d
        entries.append(e)
        dicts.append(d)
    for name, at in sparse.items():
        for i, v in zip(at, given[name][at].tolist(), strict=True):
            dicts[i][name] = v
    return entries


def _plain(col: list | np.ndarray) -> list:
    return col.tolist() if isinstance(col, np.ndarray) else col


def _column(col: pd.Series) -> np.ndarray | list:
    """A column as a numpy array of plain numbers (int64; float64 without NaN), or as a
    Python list with None for missing values (text, NA)."""
    if pd.api.types.is_integer_dtype(col.dtype) and not col.isna().any():
        return col.to_numpy(dtype="int64")
    if pd.api.types.is_float_dtype(col.dtype) and not col.isna().any():
        return col.to_numpy(dtype="float64")
    return col.astype(object).where(col.notna(), None).tolist()


def _lists(frame: pd.DataFrame, columns: tuple[str, ...]) -> list[list]:
    """Columns as Python lists (ints as int, floats as float; NaN/NA as None)."""
    out = []
    for c in columns:
        col = frame[c]
        if pd.api.types.is_integer_dtype(col.dtype):
            out.append(col.to_numpy(dtype="int64").tolist())
        else:
            out.append(col.astype(object).where(col.notna(), None).tolist())
    return out
