"""JSON Schemas of the documents, generated from their types (analysis/documents/types.py).

    python -m analysis.documents.schemas [--check]

writes meta, systems, compute and ranks .schema.json beside this file, and docs/documents.md's
Parquet column reference (between its COLUMNS markers) from the range entry's field
declarations (`--check`: exit 1 when a committed file differs from what the types
give). A test keeps the files in step with the types and validates every document the
command line writes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from ..tables import columns_markdown
from ..types import ComputeDoc, Meta, RanksDoc, SystemsDoc

HERE = Path(__file__).parent
DOCUMENTS = {"meta": Meta, "systems": SystemsDoc, "compute": ComputeDoc, "ranks": RanksDoc}
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one annotation; dataclasses go to $defs once and are referenced."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type(a, defs) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type(args[0], defs) if args else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type(args[1], defs) if args else {}}
    if dataclasses.is_dataclass(tp):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}
            defs[tp.__name__] = _object(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _object(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    return {"type": "object", "description": (cls.__doc__ or cls.__name__).strip(),
            "properties": {f.name: _described(_type(hints[f.name], defs), f)
                           for f in fields},
            "required": [f.name for f in fields]}


def _described(schema: dict[str, Any], f: dataclasses.Field) -> dict[str, Any]:
    """A property's schema with its declaration's meaning and unit (analysis/documents/entries.py),
    where the field has one."""
    doc, unit = f.metadata.get("doc"), f.metadata.get("unit")
    if not doc:
        return schema
    return {**schema, "description": doc + (f" [{unit}]" if unit else "")}


def schema_of(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of document `name` (meta, systems, compute)."""
    cls = DOCUMENTS[name]
    defs: dict[str, Any] = {}
    root = _object(cls, defs)
    root.pop("description")
    if name == "meta":              # meta.json files predate some fields: none required
        root["required"] = []
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"{name}.schema.json", "title": f"{name} document",
            "description": (cls.__doc__ or "").strip(), **root, "$defs": defs}


def path_of(name: str) -> Path:
    return HERE / f"{name}.schema.json"


def render(name: str) -> str:
    return json.dumps(schema_of(name), indent=2, ensure_ascii=False) + "\n"


DOC = HERE.parents[2] / "docs" / "documents.md"
COLUMNS = ("<!-- COLUMNS: python -m analysis.documents.schemas -->", "<!-- /COLUMNS -->")
"""docs/documents.md's markers around the Parquet column reference."""


def readme_with_columns(text: str) -> str:
    """docs/documents.md's text with its column reference made anew (tables.columns_markdown)."""
    head, rest = text.split(COLUMNS[0], 1)
    _, tail = rest.split(COLUMNS[1], 1)
    return "\n".join([head + COLUMNS[0], *columns_markdown(), COLUMNS[1] + tail])


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    stale = []
    if DOC.is_file() and COLUMNS[0] in (text := DOC.read_text()):
        if readme_with_columns(text) != text:
            if check:
                stale.append("docs/documents.md's column reference")
            else:
                DOC.write_text(readme_with_columns(text))
                print(f"wrote {DOC}'s column reference")
    for name in DOCUMENTS:
        text = render(name)
        if check:
            if not path_of(name).exists() or path_of(name).read_text() != text:
                stale.append(name)
        else:
            path_of(name).write_text(text)
            print(f"wrote {path_of(name)}")
    if stale:
        print(f"stale schemas: {', '.join(stale)} (run python -m analysis.documents.schemas)")
    return 1 if stale else 0
