"""The document writer: orjson's indented JSON, read back as the same values as the
standard library's `json.dumps(indent=2)`, ASCII-escaped the same way, with the standard
library as the fallback."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from analysis.documents import codec as jsoncodec
from analysis.documents.io import load_json_doc
from analysis.documents.types import SystemsDoc, dump_json, to_dict, to_json

REPORTS = Path(__file__).parent.parent / "reports"
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def _same_up_to_float_spelling(ours: str, stdlib: str) -> bool:
    """Line for line equal, where lines differ only in how a number is spelled."""
    a, b = ours.splitlines(), stdlib.splitlines()
    if len(a) != len(b):
        return False
    norm = lambda line: NUMBER.sub(lambda m: repr(float(m.group(0))), line)  # noqa: E731
    return all(x == y or norm(x) == norm(y) for x, y in zip(a, b, strict=True))


def test_real_documents_read_back_as_the_standard_library_writes_them() -> None:
    for path in sorted(REPORTS.glob("*/systems.json")):
        doc = load_json_doc(path, SystemsDoc)
        ours, stdlib = to_json(doc), json.dumps(to_dict(doc), indent=2) + "\n"
        assert json.loads(ours) == json.loads(stdlib), path
        assert _same_up_to_float_spelling(ours, stdlib), path
        fh = io.BytesIO()
        dump_json(doc, fh)
        assert fh.getvalue() == ours.encode("ascii")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(json_values)
def test_same_values_and_layout_as_json_dumps_indent_2(value) -> None:
    ours, stdlib = to_json(value), json.dumps(value, indent=2) + "\n"
    assert ours.isascii()
    assert json.loads(ours) == json.loads(stdlib)
    assert _same_up_to_float_spelling(ours, stdlib)


@given(st.text())
def test_strings_are_escaped_exactly_as_json_dumps_escapes_them(text: str) -> None:
    assert to_json({"name": text}) == json.dumps({"name": text}, indent=2) + "\n"


def test_without_orjson_the_standard_library_writes_it(monkeypatch) -> None:
    monkeypatch.setattr(jsoncodec, "orjson", None)
    value = {"a": [1, 2.5e-07, "µs"], "b": {}}
    assert to_json(value) == json.dumps(value, indent=2) + "\n"


def test_what_orjson_refuses_falls_back_and_nan_is_null() -> None:
    assert json.loads(to_json({"big": 2**70})) == {"big": 2**70}
    assert json.loads(to_json({"x": math.nan})) == {"x": None}
