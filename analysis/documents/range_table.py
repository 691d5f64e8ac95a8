"""A systems document's range entries as columns, before they are objects.

Every field of documents.RangeEntry (declared in analysis/documents/entries.py) is either one
column of a RangeTable (a numpy array of plain numbers, or a Python list: text, None,
lists of devices) or, for a list of documents (kernels, copies, hot, other_threads and
their kernels), a long frame of its own: `range_row` (the entry's position), then the
item's fields, sorted by range_row. These are the Parquet tables as they are written
(analysis/documents/tables.py) and read back; entries are made from them only where a reader asks
for them (RangeEntries): the page and the rules of a 110k-range emit_nvtx capture read
about 20.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..common.names import APART_TAGS, COMPILE_TAG, WARMUP_NAME, apart_prefix
from .entries import RangeEntry

ROW = "range_row"
"""The column of every long table that names its entry's position."""


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """A document type's fields' annotations, resolved once."""
    return typing.get_type_hints(cls)


def item_type(cls: type, name: str) -> type | None:
    """The document type a list field of `cls` holds (None: not a list of documents)."""
    tp = hints(cls)[name]
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return item if dataclasses.is_dataclass(item) else None
    return None


@functools.cache
def long_fields(cls: type = RangeEntry, prefix: str = "") -> tuple[tuple[str, type], ...]:
    """(table key, item type) of every list of documents of `cls`, those nested in its
    items after them (`other_threads.kernels`): the long tables."""
    out: list[tuple[str, type]] = []
    for f in dataclasses.fields(cls):
        item = item_type(cls, f.name)
        if item is not None:
            out.append((prefix + f.name, item))
            out += long_fields(item, f"{prefix}{f.name}.")
    return tuple(out)


@functools.cache
def scalars(cls: type = RangeEntry) -> tuple[str, ...]:
    """The fields of `cls` that are columns (not lists of documents), in field order."""
    return tuple(f.name for f in dataclasses.fields(cls) if item_type(cls, f.name) is None)


def item_columns(cls: type) -> list[str]:
    """A long table's columns for items of `cls`: range_row, then its scalar fields."""
    return [ROW, *scalars(cls)]


@dataclass
class RangeTable:
    """The range entries' fields: `columns` (field -> one value per entry; a field
    without a column takes its default) and `items` (long table key -> its frame)."""

    n: int
    columns: Mapping[str, list | np.ndarray]
    items: Mapping[str, pd.DataFrame] = field(default_factory=dict)

    def entries(self, rows: slice | Sequence[int] | None = None,
                cls: type = RangeEntry) -> list[RangeEntry]:
        """The entries (of `rows` only: a slice, or positions), each made once (a second
        call makes new ones)."""
        at = np.arange(self.n)[rows if rows is not None else slice(None)] \
            if rows is None or isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)
        taken = getattr(self.columns, "taken", None)     # columns read from a file
        given = taken(at) if taken is not None else {
            f: [col[i] for i in at.tolist()] if isinstance(col, list) else col[at]
            for f, col in self.columns.items()}
        given.update(self._lists(at, cls))
        return _entries(len(at), given, cls)

    def column(self, name: str, rows: slice = slice(None)) -> list:
        """One scalar field of every entry (of `rows` only), as plain Python values in a
        list of its own (its default where the table has no column for it)."""
        if name in self.columns:
            col = self.columns[name][rows]
            return col.tolist() if isinstance(col, np.ndarray) else list(col)
        n = len(range(self.n)[rows])
        f = next(f for f in dataclasses.fields(RangeEntry) if f.name == name)
        if f.default_factory is not dataclasses.MISSING:
            return [f.default_factory() for _ in range(n)]
        return [f.default] * n

    def _lists(self, at: np.ndarray, cls: type) -> dict[str, list[list]]:
        """The list-of-documents fields of the entries at positions `at` (a nested list,
        other_threads' kernels, filled into each of its parent items)."""
        out = {}
        for key, item in long_fields(cls):
            if "." in key or key not in self.items:
                continue
            children = {sub: _grouped(self.items.get(f"{key}.{sub}"), at, subitem)
                        for sub, subitem in long_fields(item) if "." not in sub}
            out[key] = _per_row(self.items[key], at, item, children)
        return out


def _taken(frame: pd.DataFrame, at: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows of a long frame (sorted by range_row) that belong to the entries at `at`,
    in `at`'s order, and how many each entry has."""
    rr = frame[ROW].to_numpy(dtype="int64")
    lo, hi = np.searchsorted(rr, at, "left"), np.searchsorted(rr, at, "right")
    counts = hi - lo
    if counts.sum() == len(frame) and np.all(np.diff(at) > 0):
        return frame, counts                       # every row, in order
    take = np.repeat(lo - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(counts.sum())
    return frame.iloc[take], counts


def _made(frame: pd.DataFrame, cls: type, skip: int = 1) -> list:
    """One `cls` per row of a long frame (its columns after range_row and the parent's
    key, in field order)."""
    names = [c for c in frame.columns[skip:]]
    cols = [frame[c].tolist() for c in names]
    return [cls(*values) for values in zip(*cols, strict=True)]


def _per_row(frame: pd.DataFrame, at: np.ndarray, cls: type,
             children: dict[str, dict] | None = None) -> list[list]:
    """Per entry at `at`, its items; `children`: per nested field, (row, parent key) ->
    its items (the parent's first field is the key: a thread's tid)."""
    sub, counts = _taken(frame, at)
    items = _made(sub, cls)
    if children and items:
        rows, keys = sub[ROW].tolist(), sub[sub.columns[1]].tolist()
        for name, grouped in children.items():
            for item, r, k in zip(items, rows, keys, strict=True):
                setattr(item, name, grouped.get((r, k), []))
    ends = np.cumsum(counts)
    return [items[a:b] for a, b in zip((ends - counts).tolist(), ends.tolist(), strict=True)]


def _grouped(frame: pd.DataFrame | None, at: np.ndarray, cls: type
             ) -> dict[tuple[int, Any], list]:
    """A nested long frame (range_row, the parent's key, the item's fields) as
    (row, key) -> items, for the entries at `at`."""
    if frame is None or not len(frame):
        return {}
    sub, _ = _taken(frame, at)
    out: dict[tuple[int, Any], list] = {}
    for r, k, item in zip(sub[ROW].tolist(), sub[sub.columns[1]].tolist(),
                          _made(sub, cls, 2), strict=True):
        out.setdefault((r, k), []).append(item)
    return out


class RangeEntries(Sequence[RangeEntry]):
    """A document's range entries, made from their table when they are read: all of them
    at the first read of the list as a whole (iteration, an index, a slice), `pick`
    makes only those asked for (kept), and `column` reads a field without making any.
    An entry picked is the one every later read gives. The table stays what was
    measured (the files are written from it): an entry changed after it is made changes
    what readers of the entries see, not the files."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, table: RangeTable, cls: type = RangeEntry) -> None:
        self.table = table
        self.cls = cls
        self._made: list[RangeEntry] | None = None
        self._picked: dict[int, RangeEntry] = {}

    def whole(self) -> list[RangeEntry]:
        """Every entry, made once (the entries picked already among them)."""
        if self._made is None:
            made = self.table.entries(cls=self.cls)
            for i, e in self._picked.items():
                made[i] = e
            self._made = made
        return self._made

    def pick(self, positions: Iterable[int]) -> list[RangeEntry]:
        """The entries at `positions` (made now, once each)."""
        at = list(positions)
        if self._made is not None:
            return [self._made[i] for i in at]
        new = sorted({i for i in at if i not in self._picked})
        self._picked.update(zip(new, self.table.entries(new, self.cls), strict=True))
        return [self._picked[i] for i in at]

    def array(self, name: str) -> np.ndarray:
        """One numeric field of every entry as int64 (a missing value: 0), without making
        them: the table's own array where it has one, the picked entries' values on it."""
        col = self.table.columns.get(name)
        if self._made is not None or not isinstance(col, np.ndarray):
            return np.array([v or 0 for v in self.column(name)], dtype=np.int64)
        out = col.astype(np.int64)             # a copy: the table stays what was measured
        for i, e in self._picked.items():
            out[i] = getattr(e, name) or 0
        return out

    def column(self, name: str) -> list:
        """One scalar field of every entry, without making them."""
        if self._made is not None:
            return [getattr(e, name) for e in self._made]
        values = self.table.column(name)
        for i, e in self._picked.items():
            values[i] = getattr(e, name)
        return values

    def __len__(self) -> int:
        return self.table.n

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return self.whole()[i]

    def __iter__(self) -> Iterator[RangeEntry]:
        return iter(self.whole())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"RangeEntries({self.table.n} entries)"


def _entries(n: int, given: dict[str, list | np.ndarray], cls: type) -> list[RangeEntry]:
    """`n` entries from their fields' columns, every field set as __init__ would set it,
    without calling it (110k entries under emit_nvtx: keyword calls took seconds): each
    entry's dict a copy of one template (the defaults, keys in field order) updated with
    its values."""
    fields = dataclasses.fields(cls)
    template = {f.name: f.default if f.default is not dataclasses.MISSING else None
                for f in fields}
    fresh = [f.name for f in fields if f.default_factory is not dataclasses.MISSING
             and f.name not in given]
    names = [f for f in template if f in given] + fresh
    columns = [_plain(given[f]) for f in names if f in given] + \
        [[[] for _ in range(n)] for _ in fresh]
    entries = []
    new, copy = object.__new__, template.copy
    for values in zip(*columns, strict=True):
        d = copy()
        d.update(zip(names, values, strict=True))
        e = new(cls)
        e.__dict__ = d
        entries.append(e)
    return entries


def _plain(col: list | np.ndarray) -> list:
    return col.tolist() if isinstance(col, np.ndarray) else col


def _candidates(names: list[str], compiled_in: dict[str, int]) -> list[int]:
    """The rows that may get a warm-up label: named in a compile event, or holding a tag
    or a warm-up word (C searches: a call per name, of 66k, cost 0.07 s more)."""
    return [i for i, n in enumerate(names)
            if ("warm" in n.lower() or COMPILE_TAG in n or n in compiled_in)]


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
    out: list[str | None] = [None] * len(names)
    for i in _candidates(names, compiled_in):
        name = names[i]
        outer = apart_prefix(name) if any_apart else ""
        if name in compiled_in:
            out[i] = (f"torch.compile compiled here ({compiled_in[name]} graph break or "
                      "recompile event(s) in TORCH_LOGS)")
        elif outer in apart:
            out[i] = (f"set apart: {apart[outer]}" if outer == name
                      else f"inside {outer}, set apart: {apart[outer]}")
        elif outer:
            out[i] = f"inside {outer}, where torch.compile compiled"
        elif WARMUP_NAME.search(name):
            out[i] = "named as warm-up"
    return out
