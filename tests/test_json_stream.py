"""The streamed JSON writer gives the same bytes as to_json, across its flush edges."""

from __future__ import annotations

import io
from pathlib import Path

from analysis import documents
from analysis.documents import SystemsDoc, dump_json, to_json
from analysis.io import load_json_doc

DATA = Path(__file__).parent / "data"


def test_dump_json_equals_to_json_whatever_the_flush_size(monkeypatch) -> None:
    doc = load_json_doc(Path(__file__).parent.parent / "reports" / "train_step" /
                        "systems.json", SystemsDoc)
    want = to_json(doc).encode("utf-8")
    for flush in (1, 7, 4096):
        monkeypatch.setattr(documents._Spill, "FLUSH", flush)
        fh = io.BytesIO()
        dump_json(doc, fh)
        assert fh.getvalue() == want
