"""Several ranks side by side: per-rank exports of a DDP run on two H200s (one rank made
the straggler), against NVIDIA's own per-export numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.__main__ import main
from tests.conftest import DATA


def _ranks(tmp_path: Path, *argv: str) -> dict:
    assert main(["systems", *argv, "-o", str(tmp_path)]) == 0
    return json.loads((tmp_path / "ranks.json").read_text())


def test_straggler_is_named_with_the_wait_it_causes(tmp_path: Path) -> None:
    doc = _ranks(tmp_path, str(DATA / "ddp_straggler"))
    (f,) = [f for f in doc["findings"] if f["rule"] == "straggler"]
    assert f["evidence"]["rank"] == 1
    assert f["evidence"]["wait_ns_per_step"]["0"] > 1e6          # rank 0 waits > 1 ms/step
    by = {r["rank"]: r for r in doc["ranks"]}
    assert by[0]["nccl_kernel_ns"] > 3 * by[1]["nccl_kernel_ns"]
    assert (tmp_path / "rank1" / "README.md").is_file() and "rank 1" in (
        tmp_path / "ranks.md").read_text()


def test_balanced_run_names_no_straggler(tmp_path: Path) -> None:
    doc = _ranks(tmp_path, str(DATA / "ddp_balanced" / "rank0.sqlite"),
                 str(DATA / "ddp_balanced" / "rank1.sqlite"))
    assert not [f for f in doc["findings"] if f["rule"] == "straggler"]
    assert [r["steps"] for r in doc["ranks"]] == [10, 10]


@pytest.mark.parametrize("run", ["ddp_straggler", "ddp_balanced"])
@pytest.mark.parametrize("version", ["2023.4", "2025.3"])
def test_per_rank_nccl_time_equals_cuda_gpu_kern_sum(tmp_path: Path, run: str,
                                                     version: str) -> None:
    doc = _ranks(tmp_path, str(DATA / run / "rank*.sqlite"))
    for r in doc["ranks"]:
        ref = pd.read_csv(DATA / run / "nsys_stats" /
                          f"rank{r['rank']}_{version}_cuda_gpu_kern_sum_base.csv")
        nccl = ref[ref["Name"].str.startswith("nccl")]["Total Time (ns)"].sum()
        assert r["nccl_kernel_total_ns"] == nccl


def test_jobs_do_not_change_the_report(tmp_path: Path) -> None:
    one = _ranks(tmp_path / "a", "--jobs", "1", str(DATA / "ddp_straggler"))
    two = _ranks(tmp_path / "b", "--jobs", "2", str(DATA / "ddp_straggler"))
    assert one == two


def test_a_bad_export_among_several_is_named(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "rank2.sqlite"
    bad.write_text("not sqlite")
    assert main(["systems", str(DATA / "ddp_balanced" / "rank0.sqlite"), str(bad),
                 "-o", str(tmp_path / "o")]) == 2
    assert "rank2.sqlite" in capsys.readouterr().err


def test_many_ranks_bench_modes_agree(tmp_path: Path) -> None:
    """bench-analysis' many-rank case: sequential, --jobs 2 and a local Dask cluster
    (one task per export) give one report."""
    pytest.importorskip("distributed")
    from analysis.commands import bench as bench_ranks
    assert bench_ranks.main(["--ranks", "2", "-o", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "analysis_ranks.json").read_text())
    assert [r["mode"] for r in rows] == list(bench_ranks.MODES)
    assert all(r["same_report"] and r["seconds"] > 0 for r in rows)


def test_one_export_holding_every_rank_names_the_straggler(tmp_path: Path) -> None:
    """torchrun under one nsys (two processes, --straggler 1): its processes are the ranks,
    each the CUDA device it used; the straggler is rank 1, named (not priced: ranks are
    modeled one at a time) and listed, and the processes' NCCL time sums to nsys stats'
    cuda_gpu_kern_sum of the whole export."""
    assert main(["systems", str(DATA / "ddp_single" / "trace.sqlite"), "-o",
                 str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "systems.json").read_text())
    assert [(r["rank"], r["steps"]) for r in doc["ranks"]] == [(0, 10), (1, 10)]
    pids = {e["pid"]: e["devices"] for e in doc["ranges"] if e["devices"]}
    assert all(pids[r["pid"]] == [r["rank"]] for r in doc["ranks"])
    straggler = [f for f in doc["findings"] if f["rule"] == "straggler"]
    assert [f["evidence"]["rank"] for f in straggler] == [1]
    assert "one at a time" in straggler[0]["not_priced"] and straggler[0]["saving_ns"] == 0
    for version in ("2023.4", "2025.3"):
        ref = pd.read_csv(DATA / "ddp_single" / "nsys_stats" /
                          f"trace_{version}_cuda_gpu_kern_sum_base.csv")
        nccl = ref[ref["Name"].str.startswith("nccl")]["Total Time (ns)"].sum()
        assert sum(r["nccl_kernel_total_ns"] for r in doc["ranks"]) == nccl
    page = (tmp_path / "systems.md").read_text()
    assert "## Ranks in this export" in page and "rank 1 (pid" in page
    assert "straggler (not priced: ranks are modeled one at a time" in page

