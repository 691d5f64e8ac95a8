"""The Nsight Compute plan over the whole program (analysis/commands/picks.py): the kernels that
hold 90% of the steady-state GPU time, on every thread, reached by kernel name and
invocation number, at most NCU_INSTANCES launch configurations each, grouped into few ncu
runs, with the time it will take; printed by `python -m analysis picks`."""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from pathlib import Path

import pytest

from analysis.__main__ import main
from analysis.commands import calibration, picks
from analysis.commands.picks import Target
from analysis.common.settings import (
    NCU_INSTANCES,
    NCU_MAX_RUNS,
    NCU_PASS_OVERHEAD_S,
    NCU_PASSES,
    NCU_RUN_OVERHEAD_S,
    NCU_SLOWDOWN,
)
from analysis.documents.types import to_json
from analysis.load.nsys_launches import launches
from tests.conftest import DATA
from workflows import ncu

BATTERY = DATA / "battery"


def _doc(name: str):
    return calibration.document(BATTERY / name / "trace.sqlite")


def _plan(name: str, instances: int = NCU_INSTANCES) -> picks.Plan:
    doc = _doc(name)
    rows = launches(BATTERY / name / "trace.sqlite", picks.candidates(doc))
    return picks.plan(doc, rows, instances)


def test_the_backwards_gemm_on_the_autograd_thread_is_reached() -> None:
    """item_sync: cuBLAS Kernel2 runs on the autograd thread, outside every NVTX range of
    the step thread; the plan reaches it by name and invocation, so the names cover 90%."""
    p = _plan("item_sync_planted")
    assert p.covered_pct >= 90 and "Kernel2" in {t.name for t in p.targets}
    shares = [ns for _, ns in p.kernels]
    assert shares == sorted(shares, reverse=True)
    per_name = {n: sum(t.name == n for t in p.targets) for n, _ in p.kernels}
    assert max(per_name.values()) <= NCU_INSTANCES and not p.unreached
    assert len(p.runs) <= NCU_MAX_RUNS
    assert "Kernel2" in picks.said(p) and "on every thread" in picks.said(p)


def test_each_target_is_the_launch_its_invocation_names() -> None:
    """An independent read of the export: the N-th launch of the name, in launch order
    (correlation ids), has the target's configuration, and lies past the warm-up."""
    p = _plan("input_starved_planted")
    warm = picks.warmup_counts(_doc("input_starved_planted"))
    with sqlite3.connect(BATTERY / "input_starved_planted" / "trace.sqlite") as conn:
        for t in p.targets:
            rows = conn.execute(
                "SELECT k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, "
                "k.staticSharedMemory + k.dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL "
                "k JOIN StringIds s ON s.id = k.shortName WHERE s.value = ? "
                "ORDER BY k.correlationId", (t.name,)).fetchall()
            g = rows[t.invocation - 1]
            assert t.config == "grid {},{},{} block {},{},{} shared {}".format(*g)
            assert t.invocation > max(warm.get(t.name, 0), 1)


def test_runs_profile_exactly_the_targets() -> None:
    p = _plan("input_starved_planted")
    by_run = {(r.invocation, n) for r in p.runs for n in r.names}
    assert by_run == {(t.invocation, t.name) for t in p.targets}
    for r in p.runs:
        argv = r.argv()
        value = argv[argv.index("--kernel-id") + 1]
        assert value.startswith("::regex:^(") and value.endswith(f")$:{r.invocation}")
        assert argv[argv.index("--launch-count") + 1] == str(len(r.names))
        assert argv[argv.index("--kill") + 1] == "yes"          # stopped once profiled
        assert 0 < r.until_s <= p.program_s
    expected = sum(NCU_RUN_OVERHEAD_S + NCU_SLOWDOWN * r.until_s for r in p.runs) + sum(
        NCU_PASSES * (t.duration_ns * 1e-9 + NCU_PASS_OVERHEAD_S) for t in p.targets)
    assert p.estimate_s == pytest.approx(expected)


def _t(name: str, ns: int, candidates: list[int]) -> Target:
    return Target(name=name, config=f"c{ns}", steady_ns=ns, launches=len(candidates),
                  duration_ns=1.0, candidates=candidates)


def test_grouping_reaches_the_most_time_in_few_runs() -> None:
    """Runs by the most steady time of names not yet reached; a second configuration joins
    a run or is left once NCU_MAX_RUNS (2) are spent; the goal reached, no more runs."""
    def found() -> list[Target]:
        return [_t("a", 100, [5, 9]), _t("b", 90, [9, 12]), _t("a", 50, [12, 13]),
                _t("c", 80, [3]), _t("b", 2, [7])]
    time_of = {"a": 150, "b": 92, "c": 80}
    got = found()
    runs = picks.group(got, time_of, goal_ns=1e9, worth_ns=10)
    assert [(r.invocation, r.names) for r in runs] == [(9, ["a", "b"]), (3, ["c"])]
    assert [t.invocation for t in got] == [9, 9, 0, 3, 0]
    got = found()
    runs = picks.group(got, time_of, goal_ns=200, worth_ns=10)    # 242 reached in one
    assert [(r.invocation, r.names) for r in runs] == [(9, ["a", "b"]), (12, ["a"])]
    assert [t.invocation for t in got] == [9, 9, 12, 0, 0]


def test_a_name_is_reached_through_any_configuration_and_none_past_the_goal() -> None:
    """y's top configuration needs a run of its own (invocation 9); its second shares x's
    number, so one run reaches both names; z fits that run too, but the goal is reached
    without it, and each launch profiled costs its replay passes: it is left out."""
    got = [_t("x", 100, [5]), _t("y", 60, [9]), _t("y", 30, [5, 6]), _t("z", 5, [5])]
    runs = picks.group(got, {"x": 100, "y": 90, "z": 5}, goal_ns=175, worth_ns=100)
    assert [(r.invocation, r.names) for r in runs] == [(5, ["x", "y"])]
    assert [t.invocation for t in got] == [5, 0, 5, 0]
    got = [_t("x", 100, [5, 7]), _t("y", 60, [7]), _t("y", 30, [5])]
    runs = picks.group(got, {"x": 100, "y": 90}, goal_ns=1e9, worth_ns=100)
    assert [(r.invocation, r.names) for r in runs] == [(7, ["x", "y"])]   # the tie goes
    assert [t.invocation for t in got] == [7, 7, 0]         # to y's bigger configuration


def test_one_configuration_per_name_gives_one_target_per_name() -> None:
    p = _plan("input_starved_planted", instances=1)
    assert len(p.targets) == len({t.name for t in p.targets}) == len(p.kernels)


def test_picks_command_prints_the_plan_of_a_committed_report(capsys) -> None:
    """reports/train_step (a committed systems document) against its committed export."""
    report = DATA.parent.parent / "reports" / "train_step"
    assert main(["picks", str(report), "--trace",
                 str(DATA / "train_step" / "trace.sqlite"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["covered_pct"] >= 90 and plan["estimate_s"] > 0
    assert all(r["ncu_args"][0] == "--kernel-id" for r in plan["runs"])
    names = [k["name"] for k in plan["kernels"]]
    assert {t["name"] for t in plan["targets"]} <= set(names)
    assert main(["picks", str(report), "--trace",
                 str(DATA / "train_step" / "trace.sqlite")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Nsight Compute plan") and "Estimate:" in text


def test_picks_needs_the_export(tmp_path: Path, capsys) -> None:
    (tmp_path / "systems.json").write_text(to_json(_doc("fp32_gemm_planted")).replace(
        str(BATTERY), "/nowhere"))
    assert main(["picks", str(tmp_path)]) == 2
    assert "--trace" in capsys.readouterr().err


def test_the_ncu_driver_runs_the_plan_of_a_systems_run_of_the_same_name(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "x").mkdir(parents=True)
    doc = _doc("item_sync_planted")
    doc.source.path = str(BATTERY / "item_sync_planted" / "trace.sqlite")
    (tmp_path / "reports" / "x" / "systems.json").write_text(to_json(doc))
    args = argparse.Namespace(command=["python", "x.py"], nvtx_include=None, launch_count=None,
                              name="x", systems=None, instances=3)
    command, flt, notes = ncu._plan(args, tmp_path)
    assert flt is None and "Nsight Systems picked" in notes[0] and args.estimate_s > 0
    for picked in args.filter_runs:
        argv = ncu.profile_argv("ncu", "p", flt, command, picked=picked)
        assert "--kernel-id" in argv and "--nvtx-include" not in argv
        assert argv[-2:] == command
    args = argparse.Namespace(command=["python", "x.py"], nvtx_include=None, launch_count=None,
                              name="y", systems=None, instances=3)
    _, _, notes = ncu._plan(args, tmp_path)                  # no Systems run of that name
    assert "no Systems run of y" in notes[0] and args.launch_count == ncu.SCRIPT_LAUNCH_CAP


def test_the_runs_csvs_are_merged_with_ids_numbered_again() -> None:
    head = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n'
    one = head + '"0","a","5"\n"1","b","6"\n'
    two = '"ID","gpu__time_duration.sum","Kernel Name"\n"","ns",""\n"0","7","c"\n'
    merged = ncu.merged_csv([one, two]).splitlines()
    assert merged[:2] == ['"ID","Kernel Name","gpu__time_duration.sum"', '"","","ns"']
    assert merged[2:] == ['"0","a","5"', '"1","b","6"', '"2","c","7"']
    assert ncu.merged_csv([one]) == one
    assert ncu.merged_csv(["", one]) == one                  # a run that profiled nothing


PLAN = DATA / "plan" / "decode_train"


def test_a_decode_loop_and_a_training_loop_under_one_plan() -> None:
    """The H200 capture of tests/data/tools/plan/decode_train.py: the plan covers 90% of
    the steady GPU time with at most 3 configurations per name in at most 2 runs, reaches
    the decode loop's GEMMs and the backward's, launched by the autograd thread (not the
    thread that holds the ranges); its runs are those the H200 run made, its estimate
    within 15% of the time ncu took there."""
    doc = calibration.document(PLAN / "trace.sqlite")
    rows = launches(PLAN / "trace.sqlite", picks.candidates(doc))
    p = picks.plan(doc, rows)
    assert p.covered_pct >= 90 and len(p.runs) <= NCU_MAX_RUNS
    per_name = {n: sum(t.name == n for t in p.targets) for n, _ in p.kernels}
    assert max(per_name.values()) <= NCU_INSTANCES
    decode = {t.name for t in p.targets if "64x8" in t.name}        # M = 8: the decode
    assert len(decode) == 3                                         # loop's GEMMs
    main_tid = rows.loc[rows["name"] == sorted(decode)[0], "tid"].iloc[0]
    launched = {(r.name, r.invocation): r.tid for r in rows.itertuples()}
    backward = [t for t in p.targets if "nvjet" in t.name
                and launched[(t.name, t.invocation)] != main_tid]
    assert backward, "a GEMM launched by the autograd thread is profiled"
    on_h200 = json.loads((PLAN / "plan.json").read_text())
    assert [(r.invocation, r.names) for r in p.runs] == \
        [(r["invocation"], r["names"]) for r in on_h200["runs"]]
    said = json.loads((PLAN / "ncu_meta.json").read_text())["notes"][-1]
    took = float(re.findall(r"([\d.]+) s", said)[0])
    assert abs(p.estimate_s - took) / took < 0.15


def test_profiled_launches_are_tied_to_the_ranges_that_launched_them() -> None:
    """ncu's own NVTX record has no range for the backward's kernels (the autograd thread
    opens none); the plan knows each launch's Systems range, and the compute report takes
    it: every launch of the H200 run gets one, the backward's GEMMs `train_step`."""
    from analysis.load import ncu_csv
    from analysis.trace import launch_ranges

    plan = json.loads((PLAN / "plan.json").read_text())
    other = [t for t in plan["targets"] if t["thread"] == "other thread"]
    assert other and all(t["range"] == "train_step" for t in other)
    data = ncu_csv.load(PLAN / "ncu_raw.csv")
    assert (data.kernels["range"] == "").any()                 # what ncu alone says
    filled = launch_ranges.fill(data.kernels, plan)
    assert (filled["range"] != "").all()
    gemms = filled[filled["name"].str.contains("nvjet_sm90_hsh_256x128")]
    assert set(gemms["range"]) == {"train_step"}
    assert launch_ranges.base_name("void at::native::vectorized_elementwise_kernel<4, "
                                   "at::native::GeluCUDAKernelImpl>(int, T2, T3)") == \
        "vectorized_elementwise_kernel"


def test_compute_findings_get_the_wall_saving_the_step_model_replays(tmp_path: Path) -> None:
    """With the Systems report of the same program beside it, each Compute finding of a
    modeled loop is replayed there with its kernels as fast as it says they can be: the
    training step's kernels shorten its wall time; the decode loop, held by its host
    (cuDNN builds a plan every token), gains next to nothing from faster kernels (a few µs
    where its run's last kernel ends it)."""
    from analysis.commands import reports

    out = tmp_path / "decode_train"
    reports.systems_report(out, PLAN / "trace.sqlite", PLAN / "meta.json", None)
    doc = reports.compute_report(out, PLAN / "ncu_raw.csv", PLAN / "ncu_meta.json")
    priced = [f for f in doc.findings if "wall_saving_ns" in f.evidence]
    assert priced and any("replayed on the Systems step model" in n for n in doc.notes)
    train = [f for f in priced if f.range == "train_step"]
    decode = [f for f in priced if f.range == "decode"]
    assert train and all(f.evidence["wall_saving_ns"] > 0 for f in train)
    assert decode and all(f.evidence["wall_saving_ns"] < 10_000 for f in decode)   # of 2.9 s
    assert all(0 <= f.evidence["kernel_speed_factor"] < 1 for f in priced)
    assert any("off its critical path" in f.message for f in decode)
    # priced by that wall saving, and ranked by it beside the Systems findings
    assert all(f.saving_ns == f.evidence["wall_saving_ns"] and f.share_of == "wall time"
               and not f.not_priced for f in priced)
    assert doc.findings.index(train[0]) < doc.findings.index(decode[0])
    assert all(f.not_priced for f in doc.findings if f not in priced)
