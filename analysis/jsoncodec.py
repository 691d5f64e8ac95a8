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
from collections.abc import Callable, Iterator, Sequence
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

    orjson writes it (the standard library's indenting encoder is pure Python: it took
    most of the time of `analysis systems` on traces with 40k ranges); the standard
    library does when orjson is not installed or refuses a value (an integer beyond 64
    bits). Both give the same values to any JSON reader; they spell a few floats
    differently (orjson `1e-7`, `0.00001`; Python `1e-07`, `1e-05`) and orjson writes NaN
    as null. Only top-level documents carry `schema`, so nested dataclasses keep their
    field order as is."""
    return b"".join(_json_parts(obj))


def to_json(obj: Any) -> str:
    """to_json_bytes as text."""
    return to_json_bytes(obj).decode("ascii")


def dump_json(obj: Any, fh: IO[bytes]) -> None:
    """Write to_json_bytes(obj) to a binary file, piece by piece (_pieces: a document's
    long lists batch by batch, never the whole text in memory). Where orjson refuses a
    value midway, a seekable file is rewritten from where it started by the standard
    library."""
    if orjson is None:
        fh.write(_stdlib(obj))
        return
    start = fh.tell() if fh.seekable() else None
    try:
        for part in _pieces(obj):
            fh.write(part)
    except TypeError:              # orjson.JSONEncodeError is a TypeError
        if start is None:
            raise
        fh.seek(start)
        fh.truncate()
        fh.write(_stdlib(obj))


def _json_parts(obj: Any) -> list[bytes | memoryview]:
    """to_json_bytes as pieces that join to it."""
    if orjson is not None:
        try:
            return list(_pieces(obj))
        except TypeError:          # orjson.JSONEncodeError is a TypeError
            pass
    return [_stdlib(obj)]


def _stdlib(obj: Any) -> bytes:
    return (json.dumps(to_dict(obj), indent=2) + "\n").encode("ascii")


STREAM_ITEMS = 2048
"""Top-level lists longer than this are written in batches of it (_pieces)."""


def _pieces(obj: Any) -> Iterator[bytes | memoryview]:
    """to_json_bytes(obj) by orjson, in pieces; TypeError where orjson refuses a value.

    A document's top-level lists longer than STREAM_ITEMS (110k range entries under
    emit_nvtx: a 170 MB text) are spliced in: the document is dumped with them empty,
    and at each such key's `[]` (found by its line: a newline with the key's two-space
    indent occurs nowhere else, newlines in strings being escaped) its items go in
    (list_body). The same bytes, in a third less time: no 170 MB buffer to fill and
    copy."""
    top = _top(obj)
    long = [k for k, v in top.items() if (isinstance(v, list) or _listed(v))
            and len(v) > STREAM_ITEMS] \
        if isinstance(top, dict) else []
    text = orjson.dumps({**top, **{k: [] for k in long}}, default=_plain,
                        option=_ORJSON_OPTIONS)
    at = 0
    for key in long:
        head = _opening(key)
        i = text.index(head + b"]", at) + len(head)
        yield from _ascii(memoryview(text)[at:i])
        yield from list_body(top[key], key)
        yield b"\n  ]"
        at = i + 1
    yield from _ascii(memoryview(text)[at:])


def split_at(doc: Any, key: str) -> tuple[list[bytes | memoryview], list[bytes | memoryview]]:
    """The document's JSON around its top-level list at `key`, from one dump: what comes
    up to `"key": [`, and what follows the `]` that closes it (list_body, then `\n  ]`,
    go between); TypeError as in _pieces."""
    text = orjson.dumps({**_top(doc), key: []}, default=_plain, option=_ORJSON_OPTIONS)
    head = _opening(key)
    at = text.index(head + b"]") + len(head)
    return _ascii(memoryview(text)[:at]), _ascii(memoryview(text)[at + 1:])


def _opening(key: str) -> bytes:
    """How a document's top-level list at `key` opens in its JSON (two-space indent)."""
    return b"\n  " + orjson.dumps(key) + b": ["


def list_body(items: Sequence, key: str, rows: range | None = None
              ) -> Iterator[bytes | memoryview]:
    """What a document's JSON holds between `"key": [` and the `\n  ]` that closes a
    non-empty top-level list: its items (those at `rows` only: that part of it, the
    comma before them included unless they come first), each batch of STREAM_ITEMS
    dumped as `{key: batch}` (the same indent) without its braces (io.start_json writes
    it apart)."""
    skip = len(b"{" + _opening(key))
    rows = range(len(items)) if rows is None else rows
    for j in range(rows.start, rows.stop, STREAM_ITEMS):
        batch = orjson.dumps({key: items[j:min(j + STREAM_ITEMS, rows.stop)]},
                             default=_plain, option=_ORJSON_OPTIONS)
        if j:
            yield b","
        yield from _ascii(memoryview(batch)[skip:-len(b"\n  ]\n}\n")])


def _ascii(piece: memoryview) -> list[bytes | memoryview]:
    """A piece of orjson's UTF-8 as ASCII: as it is, or escaped (_escaped)."""
    if not len(piece) or np.frombuffer(piece, np.uint8).max() < 0x7F:
        return [piece]
    return _escaped(bytes(piece))


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


def _escaped(text: bytes) -> list[bytes | memoryview]:
    """orjson's UTF-8 with DEL and every non-ASCII character escaped as json.dumps
    escapes them, as pieces (views of `text` between the escapes: no copy of a 40 MB
    document). Such characters occur only inside strings and are rare: their bytes are
    found with numpy (a regex over 40 MB took 0.3 s), and each run of them, whole UTF-8
    sequences, is escaped once per distinct run."""
    high = _high_bytes(text)
    cuts = np.flatnonzero(np.diff(high) != 1) + 1
    starts = high[np.r_[0, cuts]].tolist()
    ends = (high[np.r_[cuts - 1, len(high) - 1]] + 1).tolist()
    view, done = memoryview(text), {}
    out: list[bytes | memoryview] = []
    at = 0
    for a, z in zip(starts, ends, strict=True):
        run = text[a:z]
        if run not in done:
            done[run] = json.dumps(run.decode("utf-8"))[1:-1].encode("ascii")
        out += [view[at:a], done[run]]
        at = z
    out.append(view[at:])
    return out


BLOCK = 1 << 16


def _high_bytes(text: bytes) -> np.ndarray:
    """Positions of the bytes >= 0x7F: blocks of BLOCK bytes are ruled out by their
    maximum first (a few escapes in a 170 MB document: 0.35 s -> 0.05 s)."""
    a = np.frombuffer(text, np.uint8)
    whole = len(a) // BLOCK * BLOCK
    hit = np.flatnonzero(a[:whole].reshape(-1, BLOCK).max(axis=1) >= 0x7F)
    parts = [b * BLOCK + np.flatnonzero(a[b * BLOCK:(b + 1) * BLOCK] >= 0x7F)
             for b in hit.tolist()]
    parts.append(whole + np.flatnonzero(a[whole:] >= 0x7F))
    return np.concatenate(parts)


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
