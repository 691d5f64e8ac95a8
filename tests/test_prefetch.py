"""The export's ranges read on a thread before the imports (load/prefetch.py): the same
frame, the run's one connection, nothing prefetched for what is not an export."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.load import export, prefetch
from analysis.load.nsys_sqlite import load

DATA = Path(__file__).parent / "data"
TRACE = DATA / "twins" / "input_starved_sampled" / "trace.sqlite"


@pytest.fixture(autouse=True)
def fresh():
    export.close_all()
    yield
    export.close_all()


def test_prefetched_ranges_equal_the_loaders_own(tmp_path: Path) -> None:
    """The ranges frame read through the prefetch equals the one read without it, and the
    prefetched row is taken (not read again)."""
    plain = load(TRACE).ranges
    export.close_all()
    path = tmp_path / "trace.sqlite"
    shutil.copy(TRACE, path)
    assert prefetch.start(path)
    early = prefetch._EARLY[0]
    assert export.shared(path).conn is early.conn
    assert len(early.results) == 1             # read on the thread, not yet taken
    got = load(path).ranges
    assert not early.results                   # taken by the loader
    assert got.equals(plain)


def test_one_connection_with_the_prefetch(monkeypatch, tmp_path: Path) -> None:
    """`python -m analysis systems` as run from the shell: the connection opened before
    the imports is the run's only one."""
    from analysis.__main__ import main, prefetch_export

    path = tmp_path / "trace.sqlite"
    shutil.copy(TRACE, path)
    opened, real = [], sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    prefetch_export(["systems", str(path), "-o", str(tmp_path / "out"), "--quiet"])
    assert main(["systems", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    assert len(opened) == 1, opened
    assert json.loads((tmp_path / "out" / "systems.json").read_text())["ranges"]


def test_another_file_closes_the_early_connection(tmp_path: Path) -> None:
    """An early connection to a file the run does not read is closed, not kept beside."""
    other = tmp_path / "other.sqlite"
    shutil.copy(TRACE, other)
    assert prefetch.start(other)
    conn = prefetch._EARLY[0].conn
    assert prefetch.adopt(TRACE) is None
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")


@pytest.mark.parametrize("content", [b"", b"not an export at all"])
def test_not_an_export_prefetches_nothing(tmp_path: Path, content: bytes) -> None:
    """A file that is not SQLite, a missing one or a folder: nothing started, and the
    loader's own error stays the one the user sees."""
    bad = tmp_path / "x.sqlite"
    bad.write_bytes(content)
    assert not prefetch.start(bad)
    assert not prefetch.start(tmp_path / "missing.sqlite")
    assert not prefetch.start(tmp_path)
    assert prefetch.adopt(bad) is None


def test_a_failing_query_leaves_nothing(tmp_path: Path) -> None:
    """An export without NVTX_EVENTS: the thread reads nothing and the loader goes on."""
    path = tmp_path / "bare.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    assert prefetch.start(path)
    assert prefetch.adopt(path) is not None
    assert not prefetch._EARLY[0].results
