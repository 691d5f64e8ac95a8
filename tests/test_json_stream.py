"""The document writer: orjson's indented JSON, read back as the same values as the
standard library's `json.dumps(indent=2)`, ASCII-escaped the same way, with the standard
library as the fallback."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis import jsoncodec
from analysis.documents import SystemsDoc, dump_json, to_dict, to_json
from analysis.io import load_json_doc

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


def _doc_with(entries: list[dict]) -> SystemsDoc:
    """A systems document whose range list is `entries`-long (names with µ and commas)."""
    from analysis.documents import RangeEntry
    ranges = [RangeEntry(name=e["name"], domain=None, instances=1, kernel_count=e["n"],
                         kernel_time_ns=e["n"], gpu_span_ns=0, gpu_idle_ns=0)
              for e in entries]
    return SystemsDoc(source=None, ranges=ranges)


@given(st.integers(0, 3), st.integers(-1, 1), st.booleans())
def test_long_lists_written_in_batches_are_the_same_bytes(batches: int, extra: int,
                                                          non_ascii: bool) -> None:
    """A document whose range list spans several batches (exactly full, one short, one
    over) is written as the one-piece dump writes it, escapes included."""
    n = max(0, batches * 3 + extra)
    name = "aten::mm, µ = 1" if non_ascii else "aten::mm, seq = 1"
    doc = _doc_with([{"name": f"{name}/{i}", "n": i} for i in range(n)])
    whole = (json.dumps(to_dict(doc), indent=2) + "\n").encode("ascii")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jsoncodec, "STREAM_ITEMS", 3)
        fh = io.BytesIO()
        dump_json(doc, fh)
        assert fh.getvalue() == whole == jsoncodec.to_json_bytes(doc)


def test_a_value_orjson_refuses_in_a_late_batch_rewrites_the_file(monkeypatch) -> None:
    """Midway through the batches orjson meets an integer beyond 64 bits: what was
    written is replaced by the standard library's text (a file that cannot seek: the
    error is raised)."""
    monkeypatch.setattr(jsoncodec, "STREAM_ITEMS", 2)
    doc = _doc_with([{"name": f"r{i}", "n": i} for i in range(7)])
    doc.ranges[6].kernel_count = 2**70
    fh = io.BytesIO(b"old")
    fh.seek(3)
    dump_json(doc, fh)
    assert fh.getvalue()[:3] == b"old"
    assert json.loads(fh.getvalue()[3:])["ranges"][6]["kernel_count"] == 2**70

    class Pipe(io.BytesIO):
        def seekable(self) -> bool:
            return False

    with pytest.raises(TypeError):
        dump_json(doc, Pipe())
