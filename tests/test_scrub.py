"""`analysis scrub`: no environment left, rank variables kept, every number unchanged."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.__main__ import main
from analysis.commands import scrub, systems
from analysis.load import nsys_sqlite
from tests.conftest import DATA

SECRET = "API_TOKEN=hunter2"


def test_no_committed_export_holds_an_environment() -> None:
    exports = sorted(DATA.rglob("*.sqlite"))
    assert len(exports) >= 20
    assert {str(p): scrub.env_blocks(p) for p in exports if scrub.env_blocks(p)} == {}


def _raw_copy(tmp_path: Path) -> Path:
    """A committed export made to look raw again: an environment block with a secret and
    rank variables, environment rows, and the capture's working directory in paths."""
    raw = tmp_path / "raw.sqlite"
    shutil.copyfile(DATA / "edge" / "trace.sqlite", raw)
    conn = sqlite3.connect(raw)
    with conn:
        block = "\x00".join([SECRET, "HOME=/home/alice", "RANK=1", "PWD=/home/alice/proj",
                             "WORLD_SIZE=2"])
        conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (10**6, block))
        conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                     (10**6 + 1, "/home/alice/proj/train.py"))
        conn.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES "
                     "('PROCESS_0:ENVIRONMENT_VARIABLE', ?), "
                     "('PROCESS_0:ENVIRONMENT_VARIABLE', 'LOCAL_RANK=\"1\"'), "
                     "('PROCESS_1:WORKING_DIR', '/home/alice/proj')", (SECRET,))
    conn.close()
    return raw


def test_scrub_blanks_environment_keeps_ranks_and_numbers(tmp_path: Path) -> None:
    raw = _raw_copy(tmp_path)
    before = raw.read_bytes()
    assert scrub.env_blocks(raw) == 2
    out = tmp_path / "shared.sqlite"
    assert main(["scrub", str(raw), str(out)]) == 0
    assert raw.read_bytes() == before                       # the input is untouched
    assert scrub.env_blocks(out) == 0
    conn = sqlite3.connect(out)
    text = "\n".join(str(v) for (v,) in conn.execute(
        "SELECT value FROM StringIds UNION ALL SELECT value FROM META_DATA_CAPTURE"))
    assert "hunter2" not in text and "/home/alice" not in text
    assert "RANK=1\x00WORLD_SIZE=2" in text and 'LOCAL_RANK="1"' in text
    assert "./train.py" in text
    assert out.stat().st_mode & 0o044                        # readable by others, as a plain file
    a = systems.build(nsys_sqlite.load(raw))
    b = systems.build(nsys_sqlite.load(out))
    a.source.path = b.source.path
    assert a == b


def test_scrub_refuses_to_overwrite_its_input_and_bad_files(tmp_path: Path, capsys) -> None:
    raw = _raw_copy(tmp_path)
    assert main(["scrub", str(raw), str(raw)]) == 2
    (tmp_path / "x.txt").write_text("not sqlite")
    assert main(["scrub", str(tmp_path / "x.txt"), str(tmp_path / "y.sqlite")]) == 2
    assert not (tmp_path / "y.sqlite").exists()
    assert "x.txt" in capsys.readouterr().err


@pytest.mark.parametrize("value, env", [("A=1\x00B=2", True), ("plain text", False),
                                        ("a\x00b\x00c", False), ("A=1\x00", True)])
def test_env_block_detection(value: str, env: bool) -> None:
    assert scrub.is_env_block(value) is env


def test_a_scrubbed_copy_names_the_call_where_the_code_is_not(tmp_path: Path,
                                                              monkeypatch) -> None:
    """scrub, run where the program is, carries the text of the lines the samples name:
    the copy analysed where no file of the program is readable names the line and its
    call (`.cpu()`, compiled: no Python frame names it) as a report made beside the code
    does; the export without that table names the line alone."""
    raw = tmp_path / "raw.sqlite"
    shutil.copy(DATA / "twins" / "cpu_readback_sampled" / "trace.sqlite", raw)
    monkeypatch.chdir(DATA / "tools" / "twins")
    assert scrub.scrub(raw, tmp_path / "clean.sqlite")["source_lines"] > 0
    monkeypatch.chdir(tmp_path)

    def planted(path: Path):
        doc = systems.judge(systems.measure(nsys_sqlite.load(path)))
        return next(f for f in doc.findings
                    if f.rule == "readback_in_loop" and f.range == "planted")
    carried, bare = planted(tmp_path / "clean.sqlite"), planted(raw)
    assert "on cpu_readback.py:24 " in carried.message, carried.message
    assert "in Tensor.cpu." in carried.message and "(`" in carried.message
    assert "on cpu_readback.py:24 " in bare.message and "in Tensor.cpu." not in bare.message


def test_carried_lines_are_named_as_the_scrubbed_samples_name_their_files(
        tmp_path: Path) -> None:
    """A capture whose frames name the program by its absolute path: the copy's carried
    lines name it as its scrubbed samples do (`./empty_cache.py`), so a report made from
    the copy finds their text."""
    from analysis.load.nsys_pysamples import SOURCE_TABLE, load_py_samples

    here = str((DATA / "tools" / "twins").resolve())
    raw = tmp_path / "raw.sqlite"
    shutil.copy(DATA / "twins" / "empty_cache_sampled" / "trace.sqlite", raw)
    conn = sqlite3.connect(raw)
    conn.execute("UPDATE StringIds SET value = ? || substr(value, 2) WHERE value = "
                 "'./empty_cache.py'", (here,))
    conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name LIKE '%WORKING_DIR'",
                 (here,))
    conn.commit()
    conn.close()
    scrub.scrub(raw, tmp_path / "clean.sqlite")
    conn = sqlite3.connect(tmp_path / "clean.sqlite")
    carried = conn.execute(f"SELECT file, line FROM {SOURCE_TABLE}").fetchall()
    conn.close()
    frames = {(f[0], f[2]) for s in load_py_samples(tmp_path / "clean.sqlite").stacks
              for f in s}
    assert ("./empty_cache.py", 29) in carried and set(carried) <= frames
