"""`python -m analysis systems`: outputs, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.__main__ import main
from tests.conftest import DATA

ROOT = Path(__file__).resolve().parents[1]
GELU = DATA / "gelu"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis", *args], capture_output=True,
                          text=True, cwd=Path(__file__).parents[1])


def test_systems_report_from_real_export(tmp_path: Path) -> None:
    before = (GELU / "trace.sqlite").read_bytes()
    res = run_cli("systems", str(GELU / "trace.sqlite"), "--meta", str(GELU / "meta.json"),
                  "--torch-logs", str(GELU / "torch_logs.txt"), "-o", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "systems.json").read_text())
    assert doc["schema"] == "systems/2"
    assert doc["source"]["export_schema_version"] == "3.20.3"
    assert doc["source"]["gpus"][0]["name"] == "NVIDIA H200"
    per_iter = {v["variant"]: v["kernels_per_iter"] for v in doc["variants"]}
    assert per_iter == {"naive": 9, "builtin": 1, "compiled": 1, "triton": 1}
    md = (tmp_path / "systems.md").read_text()
    assert "| naive | gelu/naive |" in md and "NVIDIA H200" in md
    assert (GELU / "trace.sqlite").read_bytes() == before      # input untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def _file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _sqlite_without_kernels(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("make, expect", [
    (lambda d: d / "missing.sqlite", "no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: _file(d / "empty.sqlite", b""), "empty file"),
    (lambda d: _file(d / "t.sqlite", b"hello, not a database"), "not an SQLite"),
    (lambda d: _file(d / "r.sqlite", bytes(range(256)) * 8), "not an SQLite"),
    (lambda d: _sqlite_without_kernels(d / "k.sqlite"), "does not contain CUDA kernel data"),
])
def test_bad_inputs_exit_2_with_one_line(tmp_path: Path, make, expect: str) -> None:
    target = make(tmp_path)
    res = run_cli("systems", str(target), "-o", str(tmp_path / "out"))
    assert res.returncode == 2
    assert expect in res.stderr and str(target) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_truncated_export_exits_2(tmp_path: Path) -> None:
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes((GELU / "trace.sqlite").read_bytes()[:200_000])
    res = run_cli("systems", str(cut), "-o", str(tmp_path / "out"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_meta_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "meta.json"
    bad.write_text("{not json")
    assert main(["systems", str(GELU / "trace.sqlite"), "--meta", str(bad),
                 "-o", str(tmp_path)]) == 2


def test_nsys_rep_without_nsys_exits_3(tmp_path: Path, monkeypatch, capsys) -> None:
    rep = tmp_path / "trace.nsys-rep"
    rep.write_bytes(b"\x00" * 16)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setattr("analysis.common.tools.NSYS_PATTERNS", ())
    assert main(["systems", str(rep), "-o", str(tmp_path / "out")]) == 3
    assert "needs nsys" in capsys.readouterr().err


def test_usage_error_exits_2() -> None:
    res = run_cli("systems")
    assert res.returncode == 2


def test_copy_of_export_gives_same_numbers(tmp_path: Path) -> None:
    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(GELU / "trace.sqlite", copy)
    assert main(["systems", str(copy), "-o", str(tmp_path / "a")]) == 0
    assert main(["systems", str(GELU / "trace.sqlite"), "-o", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "systems.json").read_text())
    b = json.loads((tmp_path / "b" / "systems.json").read_text())
    assert a["ranges"] == b["ranges"]


def test_nsys_rep_that_nsys_cannot_read_is_one_line(tmp_path: Path, monkeypatch,
                                                    capsys) -> None:
    """A fake nsys that fails with many lines: the CLI says it in one line, exit 2."""
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\necho 'line one'\necho 'line two'\necho 'Cannot import' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NSYS", str(fake))
    rep = tmp_path / "bad.nsys-rep"
    rep.write_bytes(b"not a report")
    assert main(["systems", str(rep), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nsys could not export it" in err[0] and "Cannot import" in err[0]


def test_command_line_writes_everything_then_exits_fast_and_quietly(tmp_path: Path) -> None:
    """`python -m analysis` ends with os._exit after the reports (no heap teardown): every
    file is complete, the message printed; a reader that went away costs no traceback."""
    out = tmp_path / "r"
    res = subprocess.run([sys.executable, "-m", "analysis", "systems",
                          str(DATA / "gelu" / "trace.sqlite"), "-o", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith("wrote ")
    assert json.loads((out / "systems.json").read_text())["schema"] == "systems/2"
    assert (out / "ranges.parquet").read_bytes().endswith(b"PAR1")
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "systems",
                             str(DATA / "gelu" / "trace.sqlite"), "-o", str(tmp_path / "p")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()                               # the reader goes away at once
    err = proc.stderr.read()
    assert proc.wait() == 1 and "Traceback" not in err
    assert (tmp_path / "p" / "systems.json").exists()


def test_profile_runs_the_steps_in_order_and_stops_at_a_failure(tmp_path: Path, capsys) -> None:
    from nsight_workflows import profile

    calls: list[tuple[str, list[str]]] = []

    def runner(kind: str, code: int = 0):
        return lambda argv: calls.append((kind, argv)) or code

    runners = {"nsys": runner("nsys"), "ncu": runner("ncu"), "analysis": runner("analysis")}
    argv = ["--runs", str(tmp_path), "--sample", "cpu", "--", "python", "train.py", "-n", "2"]
    assert profile.main(argv, True, runners) == 0
    assert [k if k != "analysis" else a[0] for k, a in calls] == [
        "nsys", "systems", "picks", "ncu", "compute", "page"]
    assert calls[0][1][-5:] == ["--", "python", "train.py", "-n", "2"]
    assert "--sample" in calls[0][1] and "--sample" not in calls[3][1]
    assert "--torch-logs" not in calls[1][1]            # the capture wrote none
    assert capsys.readouterr().out.endswith("page: reports/train/README.md\n")
    calls.clear()
    assert profile.main(["--name", "t", "--", "./serve"], False,
                        {**runners, "analysis": runner("analysis", 4)}) == 4
    assert [k for k, _ in calls] == ["nsys", "analysis"]
    assert "the analysis systems step exited 4" in capsys.readouterr().err


def test_profile_names_the_run_after_the_script() -> None:
    from nsight_workflows.profile import default_name

    assert default_name(["python", "train.py", "--x"]) == "train"
    assert default_name(["torchrun", "--nproc-per-node=2", "-m", "pkg.trainer"]) == "trainer"
    assert default_name(["./serve", "--port", "1"]) == "serve"


def test_the_command_imports_pandas_without_pyarrow(tmp_path: Path) -> None:
    """pyarrow is imported where the Parquet tables are written, not with pandas at every
    start (analysis/__main__.py hide_pyarrow; common/lazy.py): a command that writes no
    table never imports it, and a systems run without forks (the tables written in the
    process itself) writes the same tables as one with them."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "analysis", "rules"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and "| pandas" in res.stderr
    assert "pyarrow.lib" not in res.stderr       # (pandas tries, and is told no)
    outs = {}
    for forks in ("0", "1"):
        outs[forks] = tmp_path / forks
        env = {**os.environ, "ANALYSIS_FORKS": forks}
        assert subprocess.run([sys.executable, "-m", "analysis", "systems",
                               str(DATA / "gelu" / "trace.sqlite"), "-o", str(outs[forks]),
                               "--quiet"], env=env, cwd=ROOT).returncode == 0
    for one in sorted(outs["0"].glob("*.parquet")):
        assert pq.read_table(one).equals(pq.read_table(outs["1"] / one.name)), one.name
