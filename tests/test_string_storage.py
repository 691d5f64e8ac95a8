"""The analysis gives the same document whatever pandas keeps text columns in.

The command line keeps them as Python strings (__main__.run_and_exit), and so does the
test suite (conftest.py); a notebook calling analysis.api gets pandas' default, Arrow
arrays where pyarrow is installed. One H200 install once merged every range key into one
under Arrow strings: these captures (a decode loop with warm-up calls, two processes, a
training step with CPU samples) are analyzed under both storages and must give equal
documents.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.commands import systems
from analysis.documents.types import to_json
from analysis.load import nsys_sqlite
from analysis.trace import runners
from tests.conftest import DATA

CAPTURES = ["plan/decode_train/trace.sqlite", "ddp_single/trace.sqlite",
            "train_step/trace.sqlite"]


def _doc(path) -> str:
    export = nsys_sqlite.load(path, ops=False)
    trace = runners.attribute_file(path, export, jobs=1)
    return to_json(systems.build(export, None, None, trace=trace))


@pytest.mark.parametrize("name", CAPTURES)
def test_arrow_and_python_strings_give_the_same_document(name: str) -> None:
    pytest.importorskip("pyarrow")
    path = DATA / name
    with pd.option_context("mode.string_storage", "pyarrow"):
        assert pd.Series(["x"]).array.__class__.__name__ == "ArrowStringArray"
        arrow = _doc(path)
    assert pd.get_option("mode.string_storage") == "python"
    assert arrow == _doc(path)
