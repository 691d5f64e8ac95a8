"""A report folder holds one analysis: runs into one folder, one after the other or at the
same time, never leave a mix of their files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.commands import reports
from tests.conftest import DATA

ROOT = DATA.parent.parent

WITH_OPS = DATA / "train_step_user" / "trace.sqlite"      # emit_nvtx: writes ops.parquet
WITHOUT_OPS = DATA / "edge" / "trace.sqlite"              # no op ranges: no ops.parquet


def _systems(trace: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "analysis", "systems", str(trace), "-o",
                             str(out), "--quiet"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _run(trace: Path, out: Path) -> None:
    proc = _systems(trace, out)
    assert proc.wait() == 0, proc.stderr.read()


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


@pytest.fixture(scope="session")
def alone(tmp_path_factory) -> dict[Path, dict[str, bytes]]:
    """Each export's report folder when it is the only run into it."""
    out = {}
    for trace in (WITH_OPS, WITHOUT_OPS):
        folder = tmp_path_factory.mktemp("alone")
        _run(trace, folder)
        out[trace] = _files(folder)
    assert "ops.parquet" in out[WITH_OPS] and "ops.parquet" not in out[WITHOUT_OPS]
    return out


@pytest.mark.parametrize("first,second", [(WITH_OPS, WITHOUT_OPS), (WITHOUT_OPS, WITH_OPS)])
def test_a_second_run_replaces_every_file_of_the_first(tmp_path, alone, first, second):
    _run(first, tmp_path)
    _run(second, tmp_path)
    assert _files(tmp_path) == alone[second]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no staging left


def test_concurrent_runs_leave_the_files_of_one_of_them(tmp_path, alone):
    for _ in range(3):
        procs = [_systems(WITH_OPS, tmp_path), _systems(WITHOUT_OPS, tmp_path)]
        assert [p.wait() for p in procs] == [0, 0], [p.stderr.read() for p in procs]
        files = _files(tmp_path)
        assert files in (alone[WITH_OPS], alone[WITHOUT_OPS])


def test_other_kinds_stay_and_the_stale_page_goes(tmp_path, alone):
    (tmp_path / "compute.json").write_text("{}")
    (tmp_path / "README.md").write_text("a page of the previous documents")
    (tmp_path / "notes.txt").write_text("the user's own file")
    _run(WITHOUT_OPS, tmp_path)
    files = _files(tmp_path)
    assert files["compute.json"] == b"{}" and files["notes.txt"] == b"the user's own file"
    assert "README.md" not in files
    assert json.loads(files["systems.json"])["source"]["path"] == str(WITHOUT_OPS)


def test_a_failed_run_leaves_the_folder_as_it_was(tmp_path, alone):
    _run(WITH_OPS, tmp_path)
    before = _files(tmp_path)
    with pytest.raises(RuntimeError):
        with reports.report_folder(tmp_path, "systems") as stage:
            (stage / "systems.json").write_text("half")
            raise RuntimeError("interrupted")
    assert _files(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)


def test_kinds_own_their_files():
    assert reports.owned("systems", "ops.csv", False)
    assert reports.owned("systems", "rank3", True) and not reports.owned("compute", "rank3", True)
    assert not reports.owned("compute", "systems.json", False)
    assert reports.owned("compute", "README.md", False)        # the page is stale too
    assert not reports.owned("systems", "notes.txt", False)


def test_a_commit_over_a_report_leaves_only_its_files(tmp_path, alone):
    """A report's commit over an older one: its files, and none of the old ones left in
    the folder, nor its staging folder."""
    _run(WITH_OPS, tmp_path)
    with reports.report_folder(tmp_path, "systems") as stage:
        (stage / "systems.json").write_text("{}")
    assert _files(tmp_path) == {"systems.json": b"{}"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["systems.json"]
