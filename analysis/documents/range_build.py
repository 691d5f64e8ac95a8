"""The range table of a trace: every declared field of a range entry (analysis/documents/entries.py)
taken from its source, checked against its declared type, never silently cast.

`range_table` builds it from the analyses' frames (systems.measure); `from_entries` from
entries already made (an older systems.json, a document built by hand): one table, one
writer of the files (analysis/documents/tables.py).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .entries import RangeEntry
from .range_table import (
    ROW,
    RangeTable,
    hints,
    item_columns,
    long_fields,
    scalars,
    warmup_labels,
)


class ColumnError(TypeError):
    """A source gave a column that does not fit the field it fills."""


def base_type(tp: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def checked(values: pd.Series, name: str, tp: Any) -> np.ndarray | list:
    """A source's column for field `name` of type `tp`: int64 or float64 numbers as a numpy
    array (int columns into a float field are exact), text and optional values as a list
    with None; ColumnError when the column does not fit (a float column for an int
    field, a missing value for a field that takes none, text for a number)."""
    base, optional = base_type(tp)
    want = str if base is str else dict if typing.get_origin(base) is dict else None
    if want is not None:                     # text or maps, None where missing: said by
        out = values.tolist()                # one pass in C (isna alone took 19 ms on
        kinds = set(map(type, out))          # 110k paths)
        if kinds <= {want, type(None)} and (optional or type(None) not in kinds):
            return out if want is str or type(None) not in kinds else \
                [{} if v is None else v for v in out]
    missing = values.isna()
    if missing.any() and not optional:
        raise ColumnError(f"field {name!r}: its source has missing values")
    if base in (int, float):
        kind = values.dtype.kind if isinstance(values.dtype, np.dtype) else \
            np.dtype(values.dtype.numpy_dtype).kind if hasattr(values.dtype, "numpy_dtype") \
            else "O"
        ok = kind in "iu" or (base is float and kind == "f")
        if not ok and not (optional and missing.all()):
            raise ColumnError(f"field {name!r} is declared {base.__name__}, its source "
                              f"gives {values.dtype}")
        if not missing.any():
            return values.to_numpy(dtype="int64" if base is int else "float64")
        return [None if m else base(v) for v, m in zip(values.tolist(), missing.tolist(),
                                                        strict=True)]
    if typing.get_origin(base) is dict:
        out = values.astype(object).where(~missing, None).tolist()
        if any(v is not None and not isinstance(v, dict) for v in out):
            raise ColumnError(f"field {name!r} is declared a map, its source gives "
                              f"{values.dtype}")
        return [{} if v is None else v for v in out]
    if base is str:
        out = values.astype(object).where(~missing, None).tolist()
        if any(v is not None and not isinstance(v, str) for v in out):
            raise ColumnError(f"field {name!r} is declared str, its source gives "
                              f"{values.dtype}")
        return out
    raise ColumnError(f"field {name!r}: no column type for {tp!r}")


def _declared(cls: type, source: str) -> list[tuple[str, str]]:
    """(field, source column) of the fields of `cls` filled from `source`."""
    return [(f.name, f.metadata.get("column") or f.name) for f in dataclasses.fields(cls)
            if f.metadata.get("source") == source]


def _per_key(frames: list[pd.DataFrame], keys: np.ndarray, cls: type) -> dict[str, Any]:
    """The `per_key` fields from frames indexed by key: every declared field needs a
    column and every column its declaration; a key without a row takes 0."""
    types_of = hints(cls)
    wanted = {f for f, _ in _declared(cls, "per_key")}
    given = [c for frame in frames for c in frame.columns]
    stray, lacking = set(given) - wanted, wanted - set(given)
    if stray or lacking or len(given) != len(set(given)):
        raise ColumnError(f"per-key columns {sorted(stray)} are not declared and fields "
                          f"{sorted(lacking)} have no column (or one has two): declare "
                          "each field once, in analysis/documents/entries.py, and compute "
                          "one column of its name")
    out = {}
    for frame in frames:
        aligned = frame.reindex(keys, fill_value=0)
        out.update({f: checked(aligned[f], f, types_of[f]) for f in frame.columns})
    return out


def _long(frame: pd.DataFrame, row_of: np.ndarray, cls: type, parent: str | None = None
          ) -> pd.DataFrame:
    """A frame keyed by `key` as a long table: range_row (row_of[key]) first, then (for a
    nested table) the parent's key column, then the item's fields, stably sorted by
    range_row (each entry's items in the frame's order); types checked."""
    types_of = hints(cls)
    rows = row_of[frame["key"].to_numpy(dtype="int64")] if len(frame) else \
        np.zeros(0, dtype="int64")
    order = np.argsort(rows, kind="stable")
    out = {ROW: rows[order]}
    if parent is not None:
        out[parent] = frame[parent].to_numpy(dtype="int64")[order]
    for name in item_columns(cls)[1:]:
        col = checked(frame[name].iloc[order].reset_index(drop=True), name, types_of[name])
        out[name] = pd.Series(col, dtype=object) if isinstance(col, list) else col
    return pd.DataFrame(out)


def range_table(summary: pd.DataFrame, kernels: pd.DataFrame,
                per_key: list[pd.DataFrame] | None = None,
                threads: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                devices: dict[int, list[int]] | None = None,
                copies: pd.DataFrame | None = None,
                samples: tuple[pd.Series, pd.DataFrame] | None = None,
                warmup: tuple[list[dict[str, Any]], dict[str, str]] | None = None,
                lines: tuple[pd.Series, pd.DataFrame] | None = None,
                cls: type = RangeEntry) -> RangeTable:
    """The table of one entry per range key, in the summary's (timeline) order: the
    `summary` fields from ranges.summarize's frame, the `per_key` ones from busy.per_key
    and host.per_key (frames indexed by key), `threads` (busy.per_key's threads
    and their kernels), `devices` per key, `copies` (host.copy_table), `samples`
    (host.hot_frames), `warmup` (the TORCH_LOGS events and set-apart paths the label
    comes from), `lines` (pylines.py_lines); the long tables from `kernels`
    (Trace.kernels) and those frames."""
    types_of = hints(cls)
    keys = summary["key"].to_numpy(dtype="int64")
    row_of = np.zeros(int(keys.max()) + 1 if len(keys) else 0, dtype="int64")
    row_of[keys] = np.arange(len(keys))
    cols: dict[str, Any] = {f: checked(summary[c].reset_index(drop=True), f, types_of[f])
                            for f, c in _declared(cls, "summary")}
    cols["row"] = np.arange(len(keys), dtype="int64")
    if per_key is not None:
        cols.update(_per_key(per_key, keys, cls))   # reindexed by the array: an index of
        # 110k keys made from a list infers its type value by value (0.1 s)
    devices, key_list = devices or {}, keys.tolist()
    cols["devices"] = [devices.get(k, []) for k in key_list]
    for field, given in (("cpu_samples", samples), ("py_samples", lines)):
        if given is not None:
            counts = given[0].reindex(keys, fill_value=0)
            cols[field] = checked(counts, field, types_of[field])
    cols["warmup"] = warmup_labels(cols["name"], *(warmup or ([], {})))
    items = {"kernels": _long(kernels.assign(avg_ns=rounded(kernels["avg_ns"])), row_of,
                              _item(cls, "kernels"))}
    if copies is not None:
        items["copies"] = _long(copies, row_of, _item(cls, "copies"))
    if samples is not None:
        items["hot"] = _long(samples[1], row_of, _item(cls, "hot"))
    if lines is not None:
        items["lines"] = _long(lines[1], row_of, _item(cls, "lines"))
    if threads is not None:
        parent = _item(cls, "other_threads")
        items["other_threads"] = _long(threads[0], row_of, parent)
        items["other_threads.kernels"] = _long(threads[1], row_of,
                                               _item(parent, "kernels"), "tid")
    return RangeTable(len(keys), cols, items)


def rounded(values: pd.Series) -> np.ndarray:
    """Mean durations to 0.1 ns as Python's round() gives them (numpy's rounds some
    halves the other way: 127170.05 -> 127170.0 against 127170.1): numpy's where a
    value's tenths lie clearly off a half (k / 10 is then the double round() gives), and
    round()'s for the few near one."""
    v = values.to_numpy(dtype="float64")
    out = np.round(v, 1)
    frac = np.abs(v * 10 - np.floor(v * 10) - 0.5)
    near = np.flatnonzero((frac < 1e-6) | ~np.isfinite(v))
    out[near] = [round(x, 1) for x in v[near].tolist()]
    return out


def add_by_row(table: RangeTable, frame: pd.DataFrame, source: str,
               cls: type = RangeEntry) -> None:
    """The fields declared with `source` from a frame indexed by table row (a row it lacks
    takes the field's default): every such field needs its column, every column its
    declaration."""
    wanted = {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("source") == source}
    stray, lacking = set(frame.columns) - set(wanted), set(wanted) - set(frame.columns)
    if stray or lacking:
        raise ColumnError(f"{source} columns {sorted(stray)} are not declared and fields "
                          f"{sorted(lacking)} have no column")
    types_of = hints(cls)
    for name, f in wanted.items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        if isinstance(default, list):              # items: a long table of their own
            item = _item(cls, name)
            rows = sorted(((int(r), x) for r, xs in frame[name].items() for x in xs),
                          key=lambda p: p[0])
            table.items[name] = _frame([(r, *(getattr(x, c) for c in scalars(item)))
                                        for r, x in rows], item_columns(item))
            continue
        col = frame[name].reindex(range(table.n))
        if isinstance(default, dict):
            col = pd.Series([v if isinstance(v, dict) else {} for v in col.tolist()],
                            dtype=object)
        elif len(frame) < table.n:
            col = col.fillna(default).astype(frame[name].dtype)
        table.columns[name] = checked(col, name, types_of[name])


def _item(cls: type, name: str) -> type:
    return dict(long_fields(cls))[name]


def from_entries(entries: Sequence[RangeEntry], cls: type = RangeEntry) -> RangeTable:
    """The table of entries already made (their `row` renumbered to their positions)."""
    cols: dict[str, Any] = {f: [getattr(e, f) for e in entries] for f in scalars(cls)}
    cols["row"] = np.arange(len(entries), dtype="int64")
    items = {}
    for key, item in long_fields(cls):
        if "." in key:
            continue
        rows = [(r, x) for r, e in enumerate(entries) for x in getattr(e, key)]
        items[key] = _frame([(r, *(getattr(x, c) for c in scalars(item))) for r, x in rows],
                            item_columns(item))
        for sub, subitem in long_fields(item):
            if "." not in sub:
                first = scalars(item)[0]
                items[f"{key}.{sub}"] = _frame(
                    [(r, getattr(x, first), *(getattr(y, c) for c in scalars(subitem)))
                     for r, x in rows for y in getattr(x, sub)],
                    [ROW, first, *scalars(subitem)])
    return RangeTable(len(entries), cols, items)


def _frame(rows: list[tuple], columns: list[str]) -> pd.DataFrame:
    """Rows as a frame of object columns (range_row and keys int64)."""
    frame = pd.DataFrame(rows, columns=columns, dtype=object)
    for c in columns[:1]:
        frame[c] = frame[c].astype("int64")
    return frame
