"""Findings rules on real exports and inline documents: fire when they should, never else."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.commands import compute, systems
from analysis.common.names import user_path
from analysis.diagnosis import rules
from analysis.diagnosis.rules import REGISTRY, Context, registry
from analysis.diagnosis.rules.host_rules import explained, starved
from analysis.documents.types import (
    SEVERITY_ORDER,
    CostModel,
    Finding,
    KernelLaunch,
    KernelStat,
    Meta,
    RangeEntry,
    SystemsDoc,
    SystemsSource,
    TailStep,
)
from analysis.load import ncu_csv, nsys_sqlite
from analysis.trace.ranges import leaf_paths
from tests.conftest import DATA
from tests.shared_docs import analyzed


def _doc(scenario: str, with_meta: bool, events: pd.DataFrame | None = None):
    meta = json.loads((DATA / scenario / "meta.json").read_text()) if with_meta else None
    return systems.build(nsys_sqlite.load(DATA / scenario / "trace.sqlite"), meta, events)


def _run(rule_id: str, ctx: Context) -> list:
    r = REGISTRY[rule_id]
    return r.fn(r, ctx)


def _entry(name: str, span: int = 100_000, **kw) -> RangeEntry:
    base = dict(domain="d", instances=1, kernel_count=0, kernel_time_ns=0, gpu_span_ns=span,
                gpu_idle_ns=0, kernels=[])
    return RangeEntry(name=name, **{**base, **kw})


@pytest.mark.parametrize("with_meta", [True, False])
def test_unfused_gemm_epilogue_is_caught(with_meta: bool) -> None:
    fired = [f for f in _doc("matmul_relu", with_meta).findings if f.rule == "fusion_failure"]
    assert [f.range for f in fired] == ["matmul_relu/compiled"]
    text = json.dumps(fired[0].__dict__)
    assert "nvjet_sm90" in text and "triton_poi_fused_relu_0" in text
    assert "epilogue" in fired[0].suggestion


@pytest.mark.parametrize("with_meta", [True, False])
def test_fused_gelu_raises_nothing(with_meta: bool) -> None:
    assert _doc("gelu", with_meta).findings == []


def test_graph_break_from_torch_logs_without_meta() -> None:
    events = pd.DataFrame([{"kind": "graph_break", "function": None, "file": "/w/m.py",
                            "line": 12, "reason": "Data-dependent branching"}])
    doc = _doc("gelu", False, events)
    (f,) = [f for f in doc.findings if f.rule == "graph_break"]
    assert f.range == "gelu/compiled"            # the only range with Inductor kernels
    assert "/w/m.py:12" in f.message and f.evidence["reason"].startswith("Data")


def test_graph_break_from_meta_attaches_to_compiled_range() -> None:
    meta = json.loads((DATA / "gelu" / "meta.json").read_text())
    meta["compiled"]["graph_breaks"] = [{"reason": "print", "file": "x.py", "line": 3}]
    doc = systems.build(nsys_sqlite.load(DATA / "gelu" / "trace.sqlite"), meta)
    assert [(f.rule, f.range) for f in doc.findings] == [("graph_break", "gelu/compiled")]


def test_idle_and_launch_bound_rules() -> None:
    v, u = _entry("w/v"), _entry("w/u")
    facts = [(u, {"gaps": 2, "gap_ns": 15_000, "largest_gap_ns": 9_000, "host_wait_ns": 0},
              50_000.0),
             (v, {"gaps": 30, "gap_ns": 40_000, "largest_gap_ns": 6_000,
                  "host_wait_ns": 36_000}, 2_000.0)]
    ctx = Context(cache={"idle": facts})
    (idle,) = _run("gpu_idle_gaps", ctx)
    (launch,) = _run("launch_bound", ctx)
    assert (idle.range, launch.range) == ("w/u", "w/v")
    assert launch.evidence["host_wait_pct"] == 90.0


def test_compile_kernels_in_range() -> None:
    meta = Meta(iterations=10, ranges={"compiled": "w/compiled"},
                cost_model=CostModel(flops=1, min_bytes=1, ideal_kernels=1))
    entry = _entry("w/compiled", kernel_count=137, kernels=[
        KernelStat("triton_poi_fused_0", 10, 0, 0.0, 0, 0),
        KernelStat("triton_per_bench", 127, 0, 0.0, 0, 0)])
    ctx = Context(meta=meta, cache={})
    ctx.all_entries = {"w/compiled": entry}
    (f,) = _run("compile_kernels_in_range", ctx)
    assert f.rule == "compile_kernels_in_range" and f.kernel == "triton_per_bench"
    entry.kernels, entry.kernel_count = [KernelStat("k", 10, 0, 0.0, 0, 0)], 10
    assert _run("compile_kernels_in_range", ctx) == []


def test_compute_findings_on_real_csv() -> None:
    meta = json.loads((DATA / "ncu" / "matmul_relu_meta.json").read_text())
    doc = compute.build(ncu_csv.load(DATA / "ncu" / "matmul_relu_raw.csv"), meta)
    fired = {(f.rule, f.kernel) for f in doc.findings}
    assert ("compute_bound", "matmul_relu_persistent") in fired
    assert ("latency_bound", "triton_poi_fused_relu_0") in fired
    assert any(r == "excess_dram_traffic" for r, _ in fired)
    # no Systems model beside it: not priced, ordered by Compute's own measure
    assert all(f.not_priced and f.saving_ns == 0 for f in doc.findings)
    impacts = [f.evidence["kernel_saving_ns"] for f in doc.findings]
    assert impacts == sorted(impacts, reverse=True) and impacts[0] > 0
    extra = sum(f.evidence["kernel_saving_ns"] for f in doc.findings
                if f.rule == "excess_dram_traffic")
    assert extra > 0.10 * sum(k.duration_ns or 0 for k in doc.kernels)


def _launch(**kw) -> Context:
    from analysis.documents.types import Ceilings, ComputeDoc, ComputeSource

    doc = ComputeDoc(source=ComputeSource("x", None), kernels=[KernelLaunch(**kw)], ranges=[],
                     ceilings=Ceilings(), thresholds={})
    return Context(compute=doc)


def _compute_rules(ctx: Context) -> dict:
    return {f.rule: f for f in rules.run("compute", ctx)}


def test_wave_quantization_and_occupancy() -> None:
    k = dict(range="r", name="k", bound="compute", sm_sol_pct=70.0, mem_sol_pct=20.0,
             dram_throughput_pct=10.0, waves_per_sm=1.21, grid_size=160,
             theoretical_occupancy_pct=50.0, achieved_occupancy_pct=30.0,
             limit_registers=2, limit_shared_mem=4, limit_warps=8, limit_blocks=32)
    got = _compute_rules(_launch(**k))
    assert set(got) == {"compute_bound", "low_occupancy", "wave_quantization"}
    assert "21%" in got["wave_quantization"].message
    assert got["low_occupancy"].evidence["limiter"].startswith("tail effect")
    k.update(waves_per_sm=3.9, achieved_occupancy_pct=45.0)
    assert set(_compute_rules(_launch(**k))) == {"compute_bound"}


def test_real_graph_break_trace_and_log() -> None:
    from analysis.load import torch_logs
    events = torch_logs.load(DATA / "graph_break" / "torch_logs.txt")
    doc = _doc("graph_break", True, events)
    breaks = [f for f in doc.findings if f.rule == "graph_break"]
    assert {(f.evidence["line"], f.evidence["reason"]) for f in breaks} == {
        (156, "Data-dependent branching"), (158, "Failed to trace builtin operator")}
    assert {f.range for f in breaks} == {"graph_break/compiled"}
    fused = [f for f in doc.findings if f.rule == "fusion_failure"]
    assert [f.range for f in fused] == ["graph_break/compiled"]


def test_real_launch_bound_trace() -> None:
    doc = _doc("launch_bound", True)
    fired = {(f.rule, f.range) for f in doc.findings}
    assert ("launch_bound", "launch_bound/naive") in fired
    (naive,) = [f for f in doc.findings if f.range == "launch_bound/naive"]
    assert naive.evidence["median_kernel_ns"] < 20_000
    assert naive.evidence["host_wait_pct"] > 50


def _sequences(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    """Context.seq_names of kernels (path, name, demangled name), 6 ns each."""
    return pd.DataFrame([{"pid": 1, "path": p, "name": n, "count": 1, "total_ns": 6,
                          "aten": "at::native::" in d} for p, n, d in rows])


def test_eager_aten_kernels_in_compiled_range() -> None:
    ctx = Context(meta=Meta(ranges={"compiled": "w/compiled"},
                            compiled={"graph_breaks": []}))
    ctx.seq_names = _sequences([
        ("w/compiled", "triton_poi_fused_0", "triton_poi_fused_0"),
        ("w/compiled", "vectorized_elementwise_kernel",
         "void at::native::vectorized_elementwise_kernel<4, Mul>")])
    (f,) = _run("graph_break", ctx)
    assert f.rule == "graph_break" and f.kernel == "vectorized_elementwise_kernel"
    assert f.range == "w/compiled"


def test_graph_break_without_meta_and_ambiguous_range() -> None:
    ctx = Context(events=[{"kind": "graph_break", "file": "m.py", "line": 3,
                           "reason": "print"}])
    ctx.seq_names = _sequences([("a/x", "triton_poi_fused_0", ""),
                                ("a/y", "triton_red_fused_1", "")])
    (f,) = _run("graph_break", ctx)
    assert f.range is None and "no single range" in f.message


def test_occupancy_limiter_follows_ncu() -> None:
    k = dict(range="r", name="k", bound="memory", sm_sol_pct=40.0, mem_sol_pct=86.0,
             dram_throughput_pct=86.0, waves_per_sm=31.0, grid_size=65536,
             theoretical_occupancy_pct=100.0, achieved_occupancy_pct=84.0,
             limit_registers=12, limit_shared_mem=32, limit_warps=16, limit_blocks=32)
    occ = _compute_rules(_launch(**k))["low_occupancy"]
    assert occ.severity == "info"                 # DRAM at 86%: not what holds it back
    assert occ.evidence["limiter"].startswith("none at launch")
    k.update(theoretical_occupancy_pct=18.75, achieved_occupancy_pct=5.0,
             dram_throughput_pct=20.0)
    occ = _compute_rules(_launch(**k))["low_occupancy"]
    assert occ.severity == "warning" and occ.evidence["limiter"] == "registers"


def test_leaf_paths_linear_and_right() -> None:
    assert leaf_paths(["a", "a/b", "a/b/c", "a/bc", "x/y"]) == {"a/b/c", "a/bc", "x/y"}
    assert leaf_paths(["a", "a b", "a!", "a/c", "a.b/c"]) == {"a b", "a!", "a/c", "a.b/c"}


@given(st.lists(st.text(alphabet="ab/ !.", max_size=6), max_size=12))
def test_leaf_paths_is_its_definition(paths: list[str]) -> None:
    from analysis.trace.ranges import leaf_paths
    assert leaf_paths(paths) == {p for p in paths
                                 if not any(q.startswith(p + "/") for q in paths)}


def test_a_rule_id_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        rules.rule("launch_bound", "systems", "info", "again")(lambda r, ctx: [])


def test_registry_declares_every_rule_with_its_source_and_severity() -> None:
    for r in REGISTRY.values():
        assert r.source in ("systems", "compute", "ranks") and r.doc
        assert r.severity in SEVERITY_ORDER


def test_readme_rules_table_is_the_registry() -> None:
    readme = (DATA.parent.parent / "docs" / "rules.md").read_text()
    table = "\n".join(rules.markdown_table())
    assert table in readme, "docs/rules.md's table differs: paste `python -m analysis rules`"


def test_recompiles_are_placed_in_their_range_and_not_called_launch_bound() -> None:
    """A compiled MLP served at changing batch sizes (H200, TORCH_LOGS): each recompile
    and the graph break name the range open when they were logged; those ranges, whose
    idle time is compilation, get no launch_bound or gpu_idle_gaps finding."""
    from analysis.load import torch_logs
    cap = DATA / "serve_recompiles"
    doc = systems.build(nsys_sqlite.load(cap / "trace.sqlite"), None,
                        torch_logs.load(cap / "torch_logs.txt"))
    compile_found = [f for f in doc.findings if f.rule in ("recompile", "graph_break")
                     and f.kernel is None]
    assert {f.range for f in compile_found if f.rule == "recompile"} == {
        "batch_16", "batch_24", "batch_32"}
    assert [f.range for f in compile_found if f.rule == "graph_break"] == ["batch_8"]
    assert all(f.saving_ns == 0 and "paid once" in f.not_priced and "compiled there" in
               f.message for f in compile_found if f.rule == "recompile")
    assert all("compiled code" in f.not_priced for f in compile_found
               if f.rule == "graph_break")
    idle = {f.range for f in doc.findings if f.rule in ("launch_bound", "gpu_idle_gaps")}
    assert not idle & {"batch_8", "batch_16", "batch_24", "batch_32"}
    warm = {e.name: e.warmup for e in doc.ranges}
    assert all(warm[f"batch_{b}"] for b in (8, 16, 24, 32))


def test_rules_look_at_one_process_at_a_time() -> None:
    """Two ranks' processes in one export: a range name exists in both, and each process
    gets its own findings, naming it (the fp32 GEMMs of each rank's step are all in its
    forward, a nested loop: the finding is the forward's)."""
    doc = analyzed("ddp_single/trace")
    bwd = [f for f in doc.findings if f.rule == "fp32_gemm"
           and f.range == "ddp_run/ddp_step/fwd"]
    assert sorted(f.evidence["pid"] for f in bwd) == sorted({e.pid for e in doc.ranges})
    assert all(f.message.startswith(f"[pid {f.evidence['pid']}]") for f in bwd)


def test_guard_failures_are_said_short_with_their_own_fix() -> None:
    """Dynamo's guard texts from H200 logs: the type guard loses its source excerpt and
    gets the class fix, a size mismatch keeps its words and the dynamic-shape fix, an
    .item() guard the scalar fix."""
    from analysis.diagnosis import guards
    from analysis.load import torch_logs
    train = torch_logs.load(DATA / "train_step" / "torch_logs.txt")
    why, fix = guards.explain(train[train["kind"] == "recompile"]["reason"].iloc[0])
    assert why == ("'self' is a different type than when compiled (compiled for "
                   "workflows.workloads._block.<locals>.Block)")
    assert "module level" in fix and "#" not in why
    serve = torch_logs.load(DATA / "serve_recompiles" / "torch_logs.txt")
    reasons = serve[serve["kind"] == "recompile"]["reason"].tolist()
    assert guards.explain(reasons[0]) == (
        "tensor 'x' size mismatch at index 0. expected 8, actual 16", guards.SHAPE_FIX)
    assert guards.explain("1/1: ___as_tensor(___stack0).item() == 0.15  # (unknown)") == (
        "a Python number read with .item() changed (guarded value 0.15)", guards.ITEM_FIX)
    assert guards.explain("0/0: ___check_type_id(x, 1), type=<class 'm.A'>")[1] == \
        "pass the same class each call"
    cpu = torch_logs.load(DATA / "torch_logs" / "recompile_guards_cpu.txt")
    assert [guards.explain(r) for r in cpu["reason"]] == [
        ("'self' is a different type than when compiled (compiled for "
         "__main__.make.<locals>.Block)", guards.TYPE_FIX),
        ("compiled again for another backend or mode (eager, then aot_eager)",
         guards.BACKEND_FIX)]
    assert guards.explain(None) == ("", guards.SHAPE_FIX)
    assert len(guards.explain("0/0: " + "x" * 500)[0]) == 160


@pytest.mark.parametrize("capture", ["emit_nvtx_200", "train_step_user"])
def test_findings_name_the_users_ranges_not_emit_nvtx_op_paths(capture: str) -> None:
    doc = analyzed(f"{capture}/trace")
    assert doc.findings
    for f in doc.findings:
        assert ", op_id = " not in (f.range or "") and "evaluate_function" not in (f.range or "")


@pytest.mark.parametrize("capture", ["emit_nvtx_200", "train_step_user"])
def test_rules_judge_the_users_ranges_and_find_the_same_without_op_entries(
        capture: str, monkeypatch) -> None:
    """The rules read the user's ranges (Context._ranges): the emit_nvtx op ranges are
    left out, those at the top of the autograd thread too, and the findings are the ones
    the rules give reading every entry."""
    measured = systems.measure(nsys_sqlite.load(DATA / capture / "trace.sqlite"))
    doc, trace = measured.doc, measured.trace
    ctx = Context(systems=doc, trace=trace)
    judged = set(ctx._names)
    ops = [e.name for e in doc.ranges if user_path(e.name) != e.name]
    assert ops and any("/" not in n for n in ops) and not judged & set(ops)
    assert {e.name for e in doc.ranges} - judged == set(ops)
    found = systems.run_rules(doc, None, [], trace)
    leaves = {user_path(p) for p in trace.seq_names["path"].tolist()} - {""}
    assert ctx.kernel_leaves == sorted(leaf_paths(list(leaves)) - ctx.library_paths
                                       - {e.name for e in ctx._ranges if e.warmup})
    monkeypatch.setattr(registry, "judged_mask", lambda names, domains: np.ones(len(names),
                                                                               dtype=bool))
    assert len(Context(systems=doc, trace=trace)._names) == len(doc.ranges)
    assert systems.run_rules(doc, None, [], trace) == found and found


def test_fp32_gemms_of_a_nested_loop_are_its_own_finding() -> None:
    """A loop whose step runs fp32 GEMMs itself and in a nested loop: one finding each,
    the loop's counting only the GEMMs outside the nested loop, whose windows its change
    leaves out (ranges_apart); a nested loop that holds none gets no finding."""
    def entry(name: str, gemm_ns: int, other_ns: int = 0) -> RangeEntry:
        kernels = [KernelStat("ampere_sgemm_128x64_nn", 16, gemm_ns, gemm_ns / 16, 1, 1)]
        if other_ns:
            kernels.append(KernelStat("elementwise_kernel", 16, other_ns, other_ns / 16, 1, 1))
        return RangeEntry(name=name, domain=None, instances=16, kernel_count=32,
                          kernel_time_ns=gemm_ns + other_ns, gpu_span_ns=1, gpu_idle_ns=0,
                          wall_instances=16, wall_ns=10**9, kernels=kernels)

    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[
        entry("l", 16_000_000 + 4_000_000, 1_000), entry("l/gemm", 4_000_000),
        entry("l/relu", 0, 1_000)])
    found = {f.range: f for f in _run("fp32_gemm", Context(systems=doc))}
    assert sorted(found) == ["l", "l/gemm"]
    assert found["l"].evidence["gemm_ns"] == pytest.approx(16_000_000)
    assert found["l"].evidence["ranges_apart"] == ["l/gemm"]
    assert "outside l/gemm" in found["l"].message
    assert found["l/gemm"].evidence["gemm_ns"] == 4_000_000
    assert "ranges_apart" not in found["l/gemm"].evidence
    doc.ranges[1] = entry("l/gemm", 0, 1_000)        # every GEMM in the loop's own body
    (only,) = _run("fp32_gemm", Context(systems=doc))
    assert only.range == "l" and "ranges_apart" not in only.evidence


def test_fp32_gemms_by_short_and_demangled_names_together() -> None:
    """A step with a cuBLAS GEMM named by its short name (`..._ffma_...`) beside CUTLASS
    `Kernel2` ones counts both, from the modeled steps' demangled names: counted by short
    names alone, the step's 7% stays under the bar and the finding goes (seed 64 g05)."""
    named = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x256x8_stage3_ffma_cublas"
    e = RangeEntry(name="l", domain=None, instances=16, kernel_count=64,
                   kernel_time_ns=16 * 7_000_000, gpu_span_ns=1, gpu_idle_ns=0,
                   wall_instances=16, wall_ns=10**9, kernels=[
                       KernelStat(named, 16, 16 * 500_000, 500_000.0, 1, 1),
                       KernelStat("Kernel2", 48, 16 * 6_500_000, 6_500_000 / 3, 1, 1)])
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e])
    assert not _run("fp32_gemm", Context(systems=doc))      # short names: 7% of 7 ms
    asked = []

    def kernels(path: str, pattern: str) -> tuple[float, float, float]:
        asked.append(path)
        return 4.0, 7_000_000.0, 7_000_000.0
    (f,) = _run("fp32_gemm", Context(systems=doc, kernels=kernels))
    assert asked and f.evidence["gemm_ns"] == 16 * 7_000_000
    assert f.evidence["kernels"] == [named, "Kernel2"] and f.kernel == named


def test_intervals_minus() -> None:
    from analysis.common.intervals import minus
    assert minus([(0, 10), (20, 30)], [(2, 4), (3, 5), (8, 22), (25, 26)]) == (
        (0, 2), (5, 8), (22, 25), (26, 30))
    assert minus([(0, 10)], []) == ((0, 10),) and minus([(0, 10)], [(0, 10)]) == ()


def test_small_pieces_grown_by_cat_are_found_by_their_order() -> None:
    """Concatenations whose longest is under 1.5x the shortest (small pieces) are a
    growing tensor when their durations rise through the step (Pricer.growth), and not
    when they do not."""
    cat = KernelStat("CatArrayBatchedCopy_vectorized", 320, 320 * 1150, 1150.0, 1024, 1280)
    e = RangeEntry(name="l", domain=None, instances=16, kernel_count=320,
                   kernel_time_ns=320 * 1150, gpu_span_ns=1, gpu_idle_ns=0,
                   wall_instances=16, wall_ns=10**8, kernels=[cat])
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e])
    for trend, fired in ((0.9, ["l"]), (0.1, []), (None, [])):
        ctx = Context(systems=doc, growth=lambda path, pattern, least, t=trend: t)
        assert [f.range for f in _run("cat_in_loop", ctx)] == fired


def test_growth_is_the_rank_correlation_of_durations_or_grids_with_their_order() -> None:
    from types import SimpleNamespace

    from analysis.diagnosis.graph_reads import growth_of

    def step(ns: list[int], blocks: list[int] | None = None) -> SimpleNamespace:
        starts = np.arange(len(ns)) * 10_000
        ops = pd.DataFrame({"kind": 0, "name": ["CatArrayBatchedCopy"] * len(ns)})
        if blocks is not None:
            ops["grid"] = np.array(blocks) * 1024 + 128
        return SimpleNamespace(calls=pd.DataFrame(index=range(0)), cache={}, ops=ops,
                               start=starts, end=starts + np.array(ns))
    rising = [1000 + 12 * i + (37 * i) % 40 for i in range(24)]
    jitter = [1100 + (37 * i) % 40 for i in range(24)]
    assert growth_of(step(rising), "Cat", (), 8) > 0.9
    assert abs(growth_of(step(jitter), "Cat", (), 8)) < 0.5
    assert growth_of(step([1000] * 24), "Cat", (), 8) == 0.0
    assert growth_of(step(rising[:5]), "Cat", (), 8) is None
    # small pieces: the copy time within its jitter, the grid following the output
    assert growth_of(step(jitter, [16 * (i + 1) for i in range(24)]), "Cat", (), 8) > 0.9
    assert abs(growth_of(step(jitter, [16] * 24), "Cat", (), 8)) < 0.5


def test_growth_is_read_within_each_instance_of_the_range() -> None:
    """A step modeled as one round of an outer range holds many instances of the step
    (seed 77's g09): a tensor grown in each makes a sawtooth over the round, and each
    instance's own trend is read, their median the growth; over the whole round, the
    sawtooth is no trend."""
    from types import SimpleNamespace

    from analysis.diagnosis.graph_reads import growth_of

    blocks = [16 * (i + 1) for i in range(24)] * 4
    starts = np.arange(len(blocks)) * 10_000
    ops = pd.DataFrame({"kind": 0, "name": ["CatArrayBatchedCopy"] * len(blocks),
                        "grid": np.array(blocks) * 1024 + 128})
    g = SimpleNamespace(calls=pd.DataFrame(index=range(0)), cache={}, ops=ops, start=starts,
                        end=starts + 1100 + (37 * np.arange(len(blocks))) % 40,
                        op_launched=lambda: starts)
    each = tuple((int(starts[24 * i]), int(starts[24 * i + 23]) + 1) for i in range(4))
    assert growth_of(g, "Cat", each, 8) > 0.9
    assert growth_of(g, "Cat", ((0, int(starts[-1]) + 1),), 8) < 0.5


def test_slow_steps_under_the_tail_factor_make_a_slow_step_finding() -> None:
    """A loop the GPU holds hides part of a checkpoint: its slow steps take 2x the median,
    no tail step (3x); the steps read off its runs (Pricer.slow_steps) are the finding's
    windows, and without them (or with a short tail) nothing fires."""
    e = RangeEntry(name="l", domain=None, instances=16, kernel_count=0, kernel_time_ns=0,
                   gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16, wall_ns=16 * 5_000_000,
                   run_instances=16, run_per_instance_ns=5_200_000,
                   step_median_ns=4_600_000, tail_ns=540_000)
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e])
    wins = ((0, 9_200_000), (80_000_000, 89_000_000))
    ctx = Context(systems=doc, slow_steps=lambda path, factor: (wins, "m.py:9 in save",
                                                                False))
    (f,) = _run("slow_step", ctx)
    assert f.evidence["windows"] == [list(w) for w in wins] and "2 of its 16" in f.message
    assert "2.0x its median" in f.message and "m.py:9 in save" in f.message
    assert _run("slow_step", Context(systems=doc, slow_steps=lambda p, k: ((), "", False))) \
        == []
    e.tail_ns = 100_000                                   # under 10% of the loop
    assert _run("slow_step", Context(systems=doc,
                                     slow_steps=lambda p, k: (wins, "", False))) == []


def test_tail_steps_tied_on_two_lines_name_the_same_one_every_run() -> None:
    """The slow steps' line, where the tail steps name it: the line most of them fell
    on, and between two lines as many steps each, the same one whatever their order (a
    tie broken by the order of a set of strings changed with the process's hash seed:
    seed 61's step/small_ops named causes.py:281 in one run, program.py:121 in another)."""
    def tail(line: str, at: int) -> TailStep:
        return TailStep(instance=at, start_ns=at * 10_000_000, step_ns=9_000_000,
                        wall_ns=9_000_000, kernels=0, sync_ns=0, memory_ns=0, launch_ns=0,
                        os_ns=0, backlog_ns=0, line=line)
    a, b = "a.py:1 in save, torch.save", "b.py:2 in variant, torch.cuda.synchronize"
    for lines, named in (([a, b, b, a], b), ([b, a, a, b], b), ([a, b, a], a)):
        e = RangeEntry(name="l", domain=None, instances=16, kernel_count=0,
                       kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                       wall_ns=16 * 5_000_000, run_instances=16,
                       run_per_instance_ns=5_200_000, step_median_ns=1_000_000,
                       tail_ns=4_000_000, tail_steps=[tail(x, i) for i, x in enumerate(lines)])
        doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e])
        (f,) = _run("slow_step", Context(systems=doc))
        assert f"fell on {named}." in f.message, lines


def test_a_save_the_samples_name_is_a_slow_step_whatever_the_steps_lengths() -> None:
    """torch.save sampled on the loop's thread (Pricer.slow_steps says the call named the
    windows): the finding fires on its windows though no step stands out (a save on a
    run's last step, or under a GPU backlog), and not where the saves are under 1% of the
    loop's time as it runs."""
    e = RangeEntry(name="l", domain=None, instances=16, kernel_count=0, kernel_time_ns=0,
                   gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16, wall_ns=16 * 5_000_000,
                   run_instances=16, run_per_instance_ns=5_000_000,
                   step_median_ns=5_000_000, tail_ns=0)
    doc = SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e])
    wins = ((1_000_000, 4_000_000), (41_000_000, 44_500_000))      # 6.5 ms of 80 ms
    line = "m.py:9 in save, torch.serialization._save"
    (f,) = _run("slow_step", Context(systems=doc,
                                     slow_steps=lambda p, k: (wins, line, True)))
    assert f.evidence["windows"] == [list(w) for w in wins]
    assert "torch.save ran on the loop's thread 2 time(s)" in f.message and line in f.message
    small = ((1_000_000, 1_500_000),)                                # 0.6% of the loop
    assert _run("slow_step", Context(systems=doc,
                                     slow_steps=lambda p, k: (small, line, True))) == []


def test_the_gils_holder_gone_is_capped_by_the_iteration_not_the_range() -> None:
    """A finding's saving is at most its range's own time, unless its change acts on the
    whole step as it runs (the GIL's holder gone: a range beside the step waited for the
    GIL as the step did); then the loop's cost as it runs."""
    from analysis.loops.changes import WHOLE_STEP

    e = RangeEntry(name="it/cat", domain=None, instances=16, kernel_count=0,
                   kernel_time_ns=0, gpu_span_ns=1, gpu_idle_ns=0, wall_instances=16,
                   wall_ns=16 * 20_000_000, run_instances=16,
                   run_per_instance_ns=30_000_000)
    ctx = Context(systems=SystemsDoc(source=SystemsSource("x", None, None, []), ranges=[e]))
    assert ctx.loop_cost("it/cat") == 16 * 20_000_000
    assert ctx.loop_cost("it/cat", own=False) == 16 * 30_000_000
    assert "no_gil" in WHOLE_STEP


def test_sibling_loops_of_one_iteration_keep_one_gil_finding() -> None:
    """The GIL's waits of ranges one after the other in each iteration (one parent, as
    many steps) are one cause: the finding with the most waits stays, naming the others;
    a loop elsewhere (another parent, or another number of steps) keeps its own."""
    from analysis.diagnosis.rules.run_rules import one_per_iteration

    def f(rng: str, n: int, gil: int) -> Finding:
        return Finding(rule="gil_contention", severity="warning", range=rng, kernel=None,
                       message="", evidence={"gil_ns": gil}, suggestion="", iterations=n)
    found = [f("it/a", 16, 10), f("it/b", 16, 12), f("it/c", 4, 3), f("top", 16, 5)]
    kept = one_per_iteration(found, "gil_ns")
    assert [x.range for x in kept] == ["it/b", "it/c", "top"]
    assert kept[0].evidence["siblings"] == ["it/a"] and "siblings" not in kept[1].evidence


def test_a_loop_waiting_for_the_gil_stays_host_bound_by_its_own_cpu_work() -> None:
    """gil_contention supersedes host_bound on its range, unless the thread's own CPU
    work (its OS calls, where it waits for the GIL, aside) holds HOST_OUTSIDE_PCT of the
    wall: then host_bound stays, marked to price the CPU time only (host_ahead's
    own_cpu)."""
    def f(rule: str, cpu: int) -> Finding:
        return Finding(rule=rule, severity="warning", range="loop/step", kernel=None,
                       message="m", evidence={"host_cpu_ns": cpu, "wall_ns": 100},
                       suggestion="s")
    kept = registry.superseded([f("gil_contention", 0), f("host_bound", 75)])
    assert [x.rule for x in kept] == ["gil_contention", "host_bound"]
    assert kept[1].evidence["beside_gil"] is True
    assert [x.rule for x in registry.superseded([f("gil_contention", 0), f("host_bound", 30)])
            ] == ["gil_contention"]


def test_a_checkpoint_beside_a_gil_holder_keeps_its_slow_step_finding() -> None:
    """gil_contention supersedes slow_step on its range, unless torch.save was sampled in
    the slow steps (the call names the cause): that finding stays, priced over the whole
    of its windows (no beside_gil: the save's waits for the GIL are the save's)."""
    def f(rule: str, **ev) -> Finding:
        return Finding(rule=rule, severity="warning", range="g05_all", kernel=None,
                       message="m", evidence=ev, suggestion="s")
    kept = registry.superseded([f("gil_contention"), f("slow_step", torch_save=True)])
    assert [x.rule for x in kept] == ["gil_contention", "slow_step"]
    assert "beside_gil" not in kept[1].evidence
    assert [x.rule for x in registry.superseded(
        [f("gil_contention"), f("slow_step", torch_save=False)])] == ["gil_contention"]


def _sync_loop(busy_ns: int) -> Context:
    """A loop that syncs every iteration (1,000 ns, 100 of them waiting) around an input
    range with no kernels of its own holding 800 ns, the GPU busy `busy_ns`."""
    def entry(name: str, **kw) -> RangeEntry:
        return RangeEntry(**{"name": name, "domain": None, "instances": 5, "kernel_count": 0,
                             "kernel_time_ns": 0, "gpu_span_ns": 0, "gpu_idle_ns": 0,
                             "wall_instances": 5, **kw})
    loop = entry("loop", wall_ns=5_000, sync_instances=5, host_sync_ns=500,
                 busy_ns=busy_ns, host_cpu_ns=4_300, kernel_count=5)
    data = entry("loop/input", wall_ns=4_000, host_cpu_ns=4_000)
    return Context(systems=SystemsDoc(source=SystemsSource(
        path="synthetic", export_schema_version=None, nsys_version=None, gpus=[]),
        ranges=[loop, data]))


def test_an_input_that_outlasts_the_gpu_starves_a_loop_that_syncs() -> None:
    """A loop that syncs every iteration leaves its host-side findings to the sync only
    where its host works less than its GPU (the work would run under the GPU's without
    the sync); an input built on the loop's thread that outlasts the GPU's work starves
    the loop, sync or none (seed 55 g10: an `.item()` beside 36 ms of input a step)."""
    assert set(starved(_sync_loop(busy_ns=500))) == {"loop/input"}
    held = _sync_loop(busy_ns=4_800)
    assert not starved(held) and explained(held, "loop/input")


def test_a_kernel_count_of_one_a_step_is_one_whatever_the_steps_weigh(monkeypatch) -> None:
    """Every modeled step holds one fill: the weighted mean count is 1, not the
    0.9999999999999999 eleven steps' weights sum to, which fill_overwritten's one a step
    turned down (seed 62 g14's torch.zeros)."""
    from analysis.diagnosis import pricing

    w = np.array([0.9945975747486382, 1.6826430551426066, 0.9547922439374674,
                  1.1802468342209773, 0.7010625458707471, 1.1046694796706937,
                  0.8051828610142244, 0.8934700106627742, 1.625547008945079,
                  0.9206131369790599, 1.2277864616474525])
    assert (np.ones((len(w), 3)) * w[:, None]).sum(0)[0] / w.sum() < 1   # as summed

    class Models:
        def key_of(self, path: str, pid: int | None) -> int:
            return 0

        def graphs(self, key: int) -> list:
            return [object()] * len(w)

        def weights(self, key: int) -> np.ndarray:
            return w

        def windows(self, path: str, pid: int | None) -> tuple:
            return ()

    monkeypatch.setattr(pricing, "kernel_time", lambda g, pattern, scope: (1.0, 2e3, 1e4))
    p = pricing.Pricer(Models(), {"loop"})
    monkeypatch.setattr(p, "candidates", lambda path: [path])
    assert p.kernels("loop", "Fill")[0] == 1
