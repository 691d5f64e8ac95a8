"""Findings rules on real exports and inline documents: fire when they should, never else."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis import compute, findings, systems
from analysis.load import ncu_csv, nsys_sqlite
from tests.conftest import DATA


def _doc(scenario: str, with_meta: bool, events: pd.DataFrame | None = None) -> dict:
    meta = json.loads((DATA / scenario / "meta.json").read_text()) if with_meta else None
    return systems.build(nsys_sqlite.load(DATA / scenario / "trace.sqlite"), meta, events)


@pytest.mark.parametrize("with_meta", [True, False])
def test_unfused_gemm_epilogue_is_caught(with_meta: bool) -> None:
    fired = [f for f in _doc("matmul_relu", with_meta)["findings"]
             if f["rule"] == "fusion_failure"]
    assert [f["range"] for f in fired] == ["matmul_relu/compiled"]
    text = json.dumps(fired[0])
    assert "nvjet_sm90" in text and "triton_poi_fused_relu_0" in text
    assert "epilogue" in fired[0]["suggestion"]


@pytest.mark.parametrize("with_meta", [True, False])
def test_fused_gelu_raises_nothing(with_meta: bool) -> None:
    assert _doc("gelu", with_meta)["findings"] == []


def test_graph_break_from_torch_logs_without_meta() -> None:
    events = pd.DataFrame([{"kind": "graph_break", "function": None, "file": "/w/m.py",
                            "line": 12, "reason": "Data-dependent branching"}])
    doc = _doc("gelu", False, events)
    (f,) = [f for f in doc["findings"] if f["rule"] == "graph_break"]
    assert f["range"] == "gelu/compiled"            # the only range with Inductor kernels
    assert "/w/m.py:12" in f["message"] and f["evidence"]["reason"].startswith("Data")


def test_graph_break_from_meta_attaches_to_compiled_range() -> None:
    meta = json.loads((DATA / "gelu" / "meta.json").read_text())
    meta["compiled"]["graph_breaks"] = [{"reason": "print", "file": "x.py", "line": 3}]
    doc = systems.build(nsys_sqlite.load(DATA / "gelu" / "trace.sqlite"), meta)
    assert [(f["rule"], f["range"]) for f in doc["findings"]] == [("graph_break",
                                                                    "gelu/compiled")]


def test_idle_and_launch_bound_rules() -> None:
    entries = {"w/v": {"name": "w/v", "gpu_span_ns": 100_000, "kernels": []},
               "w/u": {"name": "w/u", "gpu_span_ns": 100_000, "kernels": []}}
    gap_rows = {"w/v": {"gaps": 30, "gap_ns": 40_000, "largest_gap_ns": 6_000,
                        "host_wait_ns": 36_000},
                "w/u": {"gaps": 2, "gap_ns": 15_000, "largest_gap_ns": 9_000,
                        "host_wait_ns": 0}}
    out = findings.idle_findings(entries, gap_rows, {"w/v": 2_000.0, "w/u": 50_000.0})
    assert [(f["rule"], f["range"]) for f in out] == [("gpu_idle_gaps", "w/u"),
                                                      ("launch_bound", "w/v")]
    assert out[1]["evidence"]["host_wait_pct"] == 90.0


def test_compile_kernels_in_range() -> None:
    meta = {"iterations": 10, "cost_model": {"ideal_kernels": 1},
            "ranges": {"compiled": "w/compiled"}}
    entry = {"name": "w/compiled", "instances": 1, "kernel_count": 137,
             "kernels": [{"name": "triton_poi_fused_0", "count": 10},
                         {"name": "triton_per_bench", "count": 127}]}
    (f,) = findings.compile_in_range({"w/compiled": entry}, meta)
    assert f["rule"] == "compile_kernels_in_range" and f["kernel"] == "triton_per_bench"
    entry["kernels"] = [{"name": "k", "count": 10}]
    entry["kernel_count"] = 10
    assert findings.compile_in_range({"w/compiled": entry}, meta) == []


def test_compute_findings_on_real_csv() -> None:
    meta = json.loads((DATA / "ncu" / "matmul_relu_meta.json").read_text())
    doc = compute.build(ncu_csv.load(DATA / "ncu" / "matmul_relu_raw.csv"), meta)
    rules = {(f["rule"], f["kernel"]) for f in doc["findings"]}
    assert ("compute_bound", "matmul_relu_persistent") in rules
    assert ("latency_bound", "triton_poi_fused_relu_0") in rules
    assert any(r == "excess_dram_traffic" for r, _ in rules)
    sev = [findings.SEVERITY_ORDER[f["severity"]] for f in doc["findings"]]
    assert sev == sorted(sev)


def test_wave_quantization_and_occupancy() -> None:
    k = {"range": "r", "name": "k", "bound": "compute", "sm_sol_pct": 70.0, "mem_sol_pct": 20.0,
         "dram_throughput_pct": 10.0, "waves_per_sm": 1.21, "grid_size": 160,
         "theoretical_occupancy_pct": 50.0, "achieved_occupancy_pct": 30.0,
         "limit_registers": 2, "limit_shared_mem": 4, "limit_warps": 8, "limit_blocks": 32}
    got = {f["rule"]: f for f in findings.kernel_findings(0, k)}
    assert set(got) == {"compute_bound", "low_occupancy", "wave_quantization"}
    assert "21%" in got["wave_quantization"]["message"]
    assert got["low_occupancy"]["evidence"]["limiter"].startswith("tail effect")
    k.update(waves_per_sm=3.9, achieved_occupancy_pct=45.0)
    assert {f["rule"] for f in findings.kernel_findings(0, k)} == {"compute_bound"}


def test_real_graph_break_trace_and_log() -> None:
    from analysis.load import torch_logs
    events = torch_logs.load(DATA / "graph_break" / "torch_logs.txt")
    doc = _doc("graph_break", True, events)
    breaks = [f for f in doc["findings"] if f["rule"] == "graph_break"]
    assert {(f["evidence"]["line"], f["evidence"]["reason"]) for f in breaks} == {
        (156, "Data-dependent branching"), (158, "Failed to trace builtin operator")}
    assert {f["range"] for f in breaks} == {"graph_break/compiled"}
    fused = [f for f in doc["findings"] if f["rule"] == "fusion_failure"]
    assert [f["range"] for f in fused] == ["graph_break/compiled"]


def test_real_launch_bound_trace() -> None:
    doc = _doc("launch_bound", True)
    fired = {(f["rule"], f["range"]) for f in doc["findings"]}
    assert ("launch_bound", "launch_bound/naive") in fired
    (naive,) = [f for f in doc["findings"] if f["range"] == "launch_bound/naive"]
    assert naive["evidence"]["median_kernel_ns"] < 20_000
    assert naive["evidence"]["host_wait_pct"] > 50


def test_eager_aten_kernels_in_compiled_range() -> None:
    facts = {"w/compiled": {"names": [
        ("triton_poi_fused_0", "triton_poi_fused_0"),
        ("vectorized_elementwise_kernel",
         "void at::native::vectorized_elementwise_kernel<4, Mul>")],
        "median_ns": 6.0, "gemm_then_pointwise": None}}
    meta = {"ranges": {"compiled": "w/compiled"}, "compiled": {"graph_breaks": []}}
    (f,) = findings.compile_findings({}, meta, [], facts)
    assert f["rule"] == "graph_break" and f["kernel"] == "vectorized_elementwise_kernel"
    assert f["range"] == "w/compiled"


def test_graph_break_without_meta_and_ambiguous_range() -> None:
    facts = {p: {"names": [(n, "")], "median_ns": 1.0, "gemm_then_pointwise": None}
             for p, n in (("a/x", "triton_poi_fused_0"), ("a/y", "triton_red_fused_1"))}
    events = [{"kind": "graph_break", "file": "m.py", "line": 3, "reason": "print"}]
    (f,) = findings.compile_findings({}, None, events, facts)
    assert f["range"] is None and "no single range" in f["message"]


def test_occupancy_limiter_follows_ncu() -> None:
    k = {"range": "r", "name": "k", "bound": "memory", "sm_sol_pct": 40.0, "mem_sol_pct": 86.0,
         "dram_throughput_pct": 86.0, "waves_per_sm": 31.0, "grid_size": 65536,
         "theoretical_occupancy_pct": 100.0, "achieved_occupancy_pct": 84.0,
         "limit_registers": 12, "limit_shared_mem": 32, "limit_warps": 16, "limit_blocks": 32}
    (occ,) = [f for f in findings.kernel_findings(0, k) if f["rule"] == "low_occupancy"]
    assert occ["severity"] == "info"                 # DRAM at 86%: not what holds it back
    assert occ["evidence"]["limiter"].startswith("none at launch")
    k.update(theoretical_occupancy_pct=18.75, achieved_occupancy_pct=5.0,
             dram_throughput_pct=20.0)
    (occ,) = [f for f in findings.kernel_findings(0, k) if f["rule"] == "low_occupancy"]
    assert occ["severity"] == "warning" and occ["evidence"]["limiter"] == "registers"
