"""The report's tables as Parquet (pyarrow), for notebooks: what grows with the trace.

    ranges.parquet                          one row per range entry: its scalar fields
                                            (`devices` a list column), `row` its position
    ranges_kernels.parquet                  range_row, then KernelStat's fields
    ranges_copies.parquet                   range_row, then CopyStat's fields
    ranges_hot.parquet                      range_row, then HotFrame's fields
    ranges_lines.parquet                    range_row, then PyLine's fields
    ranges_tail_steps.parquet               range_row, then TailStep's fields
    ranges_other_threads.parquet            range_row, then ThreadLaunches' fields
    ranges_other_threads_kernels.parquet    range_row, tid, then KernelStat's fields
    ops.parquet                             one row per emit_nvtx op and direction

Each column's type, unit and meaning come from the field's declaration
(analysis/documents/entries.py) and travel in the Parquet schema's field metadata (`doc`, `unit`).
The files are written from the range table (range_table.RangeTable) and read back into
one (`read_range_table`), so every reader of a report folder (page, diff, picks, the
notebook API) reads the same rows the command measured.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..common.errors import InputError
from ..common.lazy import lazy
from .entries import RangeEntry
from .io import atomic_path
from .range_build import base_type
from .range_table import ROW, RangeTable, hints, long_fields, scalars

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:                           # imported where a table is first made or read (common/lazy.py)
    pa, pq = lazy("pyarrow"), lazy("pyarrow.parquet")

RANGES = "ranges.parquet"
OPS = "ops.parquet"


@cache
def _scalar_types() -> dict[type, pa.DataType]:
    """The Arrow type of each scalar annotation (made at the first use of pyarrow)."""
    return {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def file_of(key: str) -> str:
    """The file of a long table (`other_threads.kernels` -> ranges_other_threads_kernels)."""
    return f"ranges_{key.replace('.', '_')}.parquet" if key else RANGES


def files(cls: type = RangeEntry) -> list[str]:
    """Every file of the range tables, ranges.parquet first."""
    return [RANGES] + [file_of(k) for k, _ in long_fields(cls)]


def arrow_type(tp: Any) -> pa.DataType:
    """The Arrow type of a field's annotation (None allowed or not: Arrow columns take
    nulls)."""
    base, _ = base_type(tp)
    if typing.get_origin(base) is list:
        return pa.list_(arrow_type(typing.get_args(base)[0]))
    if typing.get_origin(base) is dict:
        return pa.map_(*map(arrow_type, typing.get_args(base)))
    if base in _scalar_types():
        return _scalar_types()[base]
    raise TypeError(f"no Parquet column type for {tp!r}")


def _field(cls: type, name: str) -> pa.Field:
    """A column of `cls`'s field `name`, with its declared meaning and unit."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    meta = {k: str(v) for k, v in f.metadata.items() if k in ("doc", "unit") and v}
    return pa.field(name, arrow_type(hints(cls)[name]), metadata=meta)


def schema(cls: type, long: bool = False, parent: tuple[type, str] | None = None
           ) -> pa.Schema:
    """The Parquet schema of a table of `cls`: its scalar fields, after range_row for a
    long table (`long`), and after the parent item's key field for a nested one
    (`parent`: its type and field, a thread's tid)."""
    fields = [_field(cls, n) for n in scalars(cls)]
    if not long:
        return pa.schema(fields)
    keys = [pa.field(ROW, pa.int64(), metadata={"doc": "the range's row in ranges.parquet"})]
    if parent is not None:
        keys.append(_field(*parent))
    return pa.schema(keys + fields)


def _schemas(cls: type) -> dict[str, pa.Schema]:
    """Table key -> schema ('' for ranges.parquet)."""
    out = {"": schema(cls)}
    kinds = dict(long_fields(cls))
    for key, item in kinds.items():
        if "." in key:
            of = kinds[key.rsplit(".", 1)[0]]
            out[key] = schema(item, True, (of, scalars(of)[0]))
        else:
            out[key] = schema(item, True)
    return out


def _array(values: list | np.ndarray, field: pa.Field) -> pa.Array:
    """One column as Arrow (numbers from numpy without a copy, the rest from lists)."""
    return pa.array(values, type=field.type)


def write_range_tables(folder: Path, table: RangeTable, cls: type = RangeEntry
                       ) -> dict[str, int]:
    """Write ranges.parquet and the long tables of `table` into `folder`: file -> rows."""
    return write_arrow(folder, range_arrow(table, cls))


def range_arrow(table: RangeTable, cls: type = RangeEntry) -> dict[str, pa.Table]:
    """ranges.parquet and the long tables of `table` as Arrow, by file name. Converting
    Python columns holds the GIL; writing them (write_arrow) lets go of it, so a caller
    converts first and writes beside other work."""
    shapes = _schemas(cls)
    main = shapes[""]
    arrays = [_array(table.columns[f.name] if f.name in table.columns
                     else table.column(f.name), f) for f in main]
    out = {RANGES: pa.Table.from_arrays(arrays, schema=main)}
    for key, _ in long_fields(cls):
        out[file_of(key)] = _from_frame(table.items.get(key), shapes[key])
    return out


def write_arrow(folder: Path, data: dict[str, pa.Table]) -> dict[str, int]:
    """Each table as the Parquet file of its name in `folder`: file -> rows."""
    return {name: _write(folder / name, t) for name, t in data.items()}


def _from_frame(frame: pd.DataFrame | None, shape: pa.Schema) -> pa.Table:
    """A long frame (or none: an empty table) as Arrow, column by column."""
    if frame is None:
        return shape.empty_table()
    arrays = [_array(frame[f.name].to_numpy() if pd.api.types.is_numeric_dtype(
        frame[f.name].dtype) else frame[f.name].tolist(), f) for f in shape]
    return pa.Table.from_arrays(arrays, schema=shape)


COMPRESSION = "zstd"
"""Parquet codec of the tables: on the 66k-range record_shapes capture, zstd wrote
ranges.parquet in 0.09 s and 2.3 MB where the default snappy took 0.24 s and 4.2 MB
(every Parquet reader of note reads zstd: pyarrow, pandas, Polars, DuckDB, Spark)."""


def _write(path: Path, data: pa.Table) -> int:
    with atomic_path(path, suffix=".parquet") as tmp:
        pq.write_table(data, tmp, compression=COMPRESSION)
    return data.num_rows


def rows_arrow(items: list[Any]) -> pa.Table:
    """A list of flat documents (ops) as one Arrow table of their fields."""
    cls = type(items[0])
    shape = pa.schema([_field(cls, n) for n in scalars(cls)])
    return pa.Table.from_arrays([pa.array([getattr(i, f.name) for i in items], f.type)
                                 for f in shape], schema=shape)


LATER_SOURCES = ("runs", "run_model")
"""Sources of fields added after report folders were first written: a folder without
their columns or tables (written before them) reads them as their defaults."""


def read_range_table(folder: Path, cls: type = RangeEntry) -> RangeTable:
    """The range table a report folder's Parquet files hold, each column read when first
    asked for (`page` and `diff` of a 110k-range capture read a few); InputError naming a
    file that is missing or lacks a column (but for LATER_SOURCES' fields)."""
    shapes = _schemas(cls)
    later = {f.name for f in dataclasses.fields(cls)
             if f.metadata.get("source") in LATER_SOURCES}
    meta = _checked(folder / RANGES, shapes[""], later)
    present = set(meta.schema.to_arrow_schema().names)
    files = {}
    for key, shape in shapes.items():
        if key and not (key in later and not (folder / file_of(key)).exists()):
            _checked(folder / file_of(key), shape)
            files[key] = folder / file_of(key)
    items = _Lazy(files, _read_frames)
    return RangeTable(meta.num_rows, _Lazy({n: folder / RANGES for n in shapes[""].names
                                            if n in present}, _read_columns), items)


class _Lazy(Mapping[str, Any]):
    """Keys whose values are read from files when first asked for, then kept; `read`
    takes a path and the keys to read from it (all those not read yet, when the mapping
    is walked whole: one read of the file, not one per column)."""

    def __init__(self, paths: dict[str, Path], read: Any) -> None:
        self.paths, self.read, self.done = paths, read, {}

    def __getitem__(self, key: str) -> Any:
        if key not in self.done:
            self.done.update(self.read(self.paths[key], [key]))
        return self.done[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def taken(self, at: np.ndarray) -> dict[str, Any]:
        """Every key's values at positions `at`: those read already indexed, the others
        read from their files and taken there before they become Python values (a few
        entries of 110k make a few values, not 110k dicts and lists)."""
        out = {}
        for path, left in self._unread():
            out.update(self.read(path, left, at))
        for k, v in self.done.items():
            out[k] = [v[i] for i in at.tolist()] if isinstance(v, list) else v[at]
        return {k: out[k] for k in self.paths}

    def items(self):  # type: ignore[override]
        for path, left in self._unread():
            self.done.update(self.read(path, left))
        return {k: self.done[k] for k in self.paths}.items()

    def _unread(self) -> Iterator[tuple[Path, list[str]]]:
        """Each file with the keys not read from it yet (files with none left out)."""
        for path in dict.fromkeys(self.paths.values()):
            left = [k for k, p in self.paths.items() if p == path and k not in self.done]
            if left:
                yield path, left


def _checked(path: Path, shape: pa.Schema, optional: set[str] = frozenset()
             ) -> pq.FileMetaData:
    """A table's metadata, once it is known to hold every column `shape` names (but
    those `optional`)."""
    try:
        meta = pq.read_metadata(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (the report's tables are incomplete)"
                         ) from None
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: not a readable Parquet table ({exc})") from exc
    lacking = [n for n in shape.names
               if n not in meta.schema.to_arrow_schema().names and n not in optional]
    if lacking:
        raise InputError(f"{path}: lacks the columns {', '.join(lacking)}")
    return meta


def _plain(col: pa.ChunkedArray) -> np.ndarray | list:
    """A column as numpy numbers (no nulls) or a Python list (text, lists, maps as dicts,
    nulls)."""
    plain = pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
    if plain and col.null_count == 0:
        return col.to_numpy()
    values = col.to_pylist()
    if pa.types.is_map(col.type):
        return [None if v is None else dict(v) for v in values]
    return values


def _read_columns(path: Path, names: list[str], at: np.ndarray | None = None
                  ) -> dict[str, np.ndarray | list]:
    """Columns of a table (at rows `at` only, when given)."""
    data = pq.ParquetFile(path).read(columns=names)
    if at is not None:
        data = data.take(pa.array(at, type=pa.int64()))
    return {n: _plain(data.column(n)) for n in names}


def _read_frames(path: Path, keys: list[str]) -> dict[str, pd.DataFrame]:
    """A long table as a frame: numbers as numpy, text as Python objects (None kept)."""
    data = pq.ParquetFile(path).read()
    frame = pd.DataFrame({name: (v if isinstance(v := _plain(data.column(name)), np.ndarray)
                                 else pd.Series(v, dtype=object))
                          for name in data.column_names})
    return dict.fromkeys(keys, frame)


def has_tables(folder: Path) -> bool:
    """Whether a report folder holds the range tables."""
    return (folder / RANGES).is_file()


def columns_markdown(cls: type = RangeEntry) -> list[str]:
    """Every Parquet table's columns as a markdown table (docs/documents.md's column reference):
    file, column, Arrow type, unit, meaning, from the fields' declarations."""
    rows = []
    for key, shape in _schemas(cls).items():
        for f in shape:
            meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
            rows.append(f"| `{file_of(key)}` | `{f.name}` | {f.type} | {meta.get('unit', '')} "
                        f"| {meta.get('doc', '')} |")
    return ["| file | column | type | unit | meaning |", "| --- | --- | --- | --- | --- |",
            *rows]
