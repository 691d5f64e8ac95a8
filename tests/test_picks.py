"""Systems picks, Compute measures: the kernels that hold the steady-state GPU time are
chosen from the Systems run, and ncu profiles their steady launches, not the first ones."""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis import calibration, picks
from analysis.documents import to_json
from tests.conftest import DATA
from workflows import ncu


def _doc(name: str):
    return calibration.document(DATA / "battery" / name / "trace.sqlite")


def test_the_hot_kernels_cover_the_share_and_skip_the_warm_up() -> None:
    doc = _doc("fp32_gemm_planted")
    chosen = picks.choose(doc)
    assert [n for n, _ in chosen.kernels] == [next(
        k.name for k in doc.kernel_summary if "f32f32" in k.name)]
    assert chosen.covered_pct >= 90 and chosen.left_out
    assert chosen.loop.name == "step" and chosen.skip == 8 and chosen.count == 1
    assert chosen.launches == 8                               # an iteration's launches
    argv = picks.ncu_filter(chosen)
    assert argv[argv.index("--nvtx-include") + 1] == "step/"
    assert argv[argv.index("--launch-skip") + 1] == "8"
    assert "sm80_xmma_gemm_f32f32" in argv[argv.index("--kernel-name") + 1]
    assert argv[argv.index("--filter-mode") + 1] == "per-launch-config"
    assert argv[argv.index("--launch-count") + 1] == "1"


def test_several_kernels_until_ninety_percent() -> None:
    """item_sync's backward runs on the autograd thread: its cuBLAS Kernel2 holds GPU time
    but is launched outside the loop's NVTX range (seen on the H200: ncu profiled only the
    step thread's GEMM and optimizer kernels); the page says so."""
    chosen = picks.choose(_doc("item_sync_planted"))
    shares = [ns / chosen.steady_ns for _, ns in chosen.kernels]
    assert shares == sorted(shares, reverse=True)
    assert chosen.other_threads == ["Kernel2"]
    everything = sum(shares) + sum(ns for _, ns in chosen.left_out) / chosen.steady_ns
    assert everything < 1.0                           # Kernel2 is neither chosen nor left out
    said = picks.said(chosen)
    assert "not reachable through the loop's NVTX range" in said and "Kernel2" in said


def test_the_ncu_driver_picks_from_a_systems_run_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "x").mkdir(parents=True)
    (tmp_path / "reports" / "x" / "systems.json").write_text(to_json(_doc("fp32_gemm_planted")))
    args = argparse.Namespace(command=["python", "x.py"], nvtx_include=None, launch_count=None,
                              name="x", systems=None, instances=1)
    command, flt, notes = ncu._plan(args, tmp_path)
    assert flt is None and "Nsight Systems picked 1 kernel" in notes[0]
    argv = ncu.profile_argv("ncu", "p", flt, command, picked=args.filter_argv)
    assert "--kernel-name" in argv and "--launch-count" in argv and argv[-2:] == command
    args = argparse.Namespace(command=["python", "x.py"], nvtx_include=None, launch_count=None,
                              name="y", systems=None, instances=1)
    _, _, notes = ncu._plan(args, tmp_path)                  # no Systems run of that name
    assert "no Systems run of y" in notes[0] and args.launch_count == ncu.SCRIPT_LAUNCH_CAP
    assert Path("reports/x/systems.json").is_file()
