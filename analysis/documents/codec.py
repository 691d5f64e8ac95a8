"""The documents' JSON: dataclasses to JSON text and back (documents.py holds the types).

`to_json` / `to_json_bytes` / `dump_json` write a document, `to_dict` gives its JSON-ready
form, `from_dict(cls, obj)` reads one back: unknown keys ignored, missing ones at the type's
defaults. Field order is the key order of the files, `schema` first.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Callable, Sequence
from typing import IO, Any, TypeVar

import numpy as np

try:
    import orjson
except ImportError:          # the standard library writes the same values, more slowly
    orjson = None  # type: ignore[assignment]

T = TypeVar("T")

FIRST_KEYS = ("schema",)


_FIELDS: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool, type(None))
_ORJSON_OPTIONS = (orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
                   if orjson is not None else 0)


def _field_names(cls: type) -> tuple[str, ...]:
    """Field names of a document class, `schema` first (cached: documents hold many)."""
    if cls not in _FIELDS:
        names = [f.name for f in dataclasses.fields(cls)]
        _FIELDS[cls] = tuple([n for n in FIRST_KEYS if n in names]
                             + [n for n in names if n not in FIRST_KEYS])
    return _FIELDS[cls]


def to_dict(obj: Any) -> Any:
    """JSON-ready form of a document (dataclasses to dicts, `schema` first)."""
    if isinstance(obj, _SCALARS):
        return obj
    if isinstance(obj, (list, tuple)) or _listed(obj):
        return [v if isinstance(v, _SCALARS) else to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: v if isinstance(v, _SCALARS) else to_dict(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        d = obj.__dict__
        return {n: v if isinstance(v := d[n], _SCALARS) else to_dict(v)
                for n in _field_names(type(obj))}
    return obj


def to_json_bytes(obj: Any) -> bytes:
    """The document as JSON: 2-space indent, ASCII only (other characters escaped as
    `json.dumps` escapes them), keys in field order with `schema` first, a final newline.

    orjson writes it; the standard library does when orjson is not installed or refuses
    a value (an integer beyond 64 bits). Both give the same values to any JSON reader;
    they spell a few floats differently (orjson `1e-7`, `0.00001`; Python `1e-07`,
    `1e-05`) and orjson writes NaN as null. Only top-level documents carry `schema`, so
    nested dataclasses keep their field order as is."""
    if orjson is not None:
        try:
            text = orjson.dumps(_top(obj), default=_plain, option=_ORJSON_OPTIONS)
        except TypeError:          # orjson.JSONEncodeError is a TypeError
            return _stdlib(obj)
        if text.isascii() and b"\x7f" not in text:
            return text
        return _escaped(text)
    return _stdlib(obj)


def to_json(obj: Any) -> str:
    """to_json_bytes as text."""
    return to_json_bytes(obj).decode("ascii")


def dump_json(obj: Any, fh: IO[bytes]) -> None:
    """Write to_json_bytes(obj) to a binary file."""
    fh.write(to_json_bytes(obj))


def _stdlib(obj: Any) -> bytes:
    return (json.dumps(to_dict(obj), indent=2) + "\n").encode("ascii")


def _escaped(text: bytes) -> bytes:
    """UTF-8 JSON text with its runs of DEL and non-ASCII characters (only inside strings)
    escaped as json.dumps escapes them. A maximal run of bytes from 0x7f up holds whole
    characters (no ASCII byte is part of a longer one); numpy finds the runs, which a
    regular expression took 3.8 s to scan for in a 187 MB document."""
    at = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) >= 0x7F)
    breaks = np.flatnonzero(np.diff(at) > 1)
    starts = at[np.r_[0, breaks + 1]].tolist()
    ends = (at[np.r_[breaks, len(at) - 1]] + 1).tolist()
    out, prev = [], 0
    for s, e in zip(starts, ends, strict=True):
        out += [text[prev:s], json.dumps(text[s:e].decode())[1:-1].encode("ascii")]
        prev = e
    out.append(text[prev:])
    return b"".join(out)


def _top(obj: Any) -> Any:
    """A dataclass as a dict of its fields in `_field_names` order (`schema` first)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {n: getattr(obj, n) for n in _field_names(type(obj))}
    return obj


def _listed(v: Any) -> bool:
    """Whether `v` is a sequence written as a JSON list that is not a list or tuple (a
    document's range list made when read: range_table.RangeEntries)."""
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes, list, tuple))


def _plain(v: Any) -> Any:
    """What orjson does not take itself: numpy scalars, float subclasses and sequences
    other than lists (_listed)."""
    if _listed(v):
        return list(v)
    if hasattr(v, "item") and not isinstance(v, (list, dict)):
        return v.item()
    if isinstance(v, float):
        return float(v)
    raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def _unwrap_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else Any
    return tp


Convert = Callable[[Any], Any] | None


def _converter(tp: Any) -> Convert:
    """How a JSON value becomes a value of type `tp`: None where it is taken as it is
    (numbers, strings, lists of them), else a function (documents nested in it)."""
    tp = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return lambda v: None if v is None else from_dict(tp, v)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        each = _converter(item)
        return None if each is None else (lambda v: None if v is None else [each(x) for x in v])
    if origin is dict:
        _, item = typing.get_args(tp) or (str, Any)
        each = _converter(item)
        return None if each is None else (
            lambda v: None if v is None else {k: each(x) for k, x in v.items()})
    return None


def from_dict(cls: type[T], obj: dict[str, Any]) -> T:
    """A document of type `cls` from its JSON form; unknown keys are ignored, missing ones
    take the type's defaults. TypeError when a required field is missing."""
    if not isinstance(obj, dict):
        raise TypeError(f"{cls.__name__} must be a JSON object")
    plan = _plan(cls)
    return cls(**{k: v if (c := plan[k]) is None else c(v) for k, v in obj.items()
                  if k in plan})


@functools.cache
def _plan(cls: type) -> dict[str, Convert]:
    """A document type's fields and how each is converted, resolved once per type
    (resolving the types per object made reading a 110k-range systems.json take 47 s)."""
    hints = typing.get_type_hints(cls)
    return {f.name: _converter(hints[f.name]) for f in dataclasses.fields(cls)}
