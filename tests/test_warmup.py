"""Instances that autotuned (or did other first-call work) are set apart as warm-up: a real
max-autotune / @triton.autotune capture, and the thresholds on synthetic counts."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from analysis.trace import apart
from tests.shared_docs import analyzed


def _doc():
    return analyzed("autotune/trace")


def test_the_autotuning_step_is_set_apart_and_labelled_warm_up() -> None:
    doc = _doc()
    by = {e.name: e for e in doc.ranges}
    assert set(by) == {"step [warm-up]", "step [warm-up]/mlp", "step [warm-up]/scale_add",
                       "step", "step/mlp", "step/scale_add"}
    warm = by["step [warm-up]"]
    assert warm.instances == 1 and warm.kernel_count == 34_485
    assert warm.warmup.startswith("set apart: launched 34,485 kernels")
    assert "median of 4" in warm.warmup
    assert by["step [warm-up]/mlp"].warmup.startswith("inside step [warm-up]")
    # the steady state: 7 steps of 4 kernels (3 compiled MLP kernels, 1 scale_add)
    assert (by["step"].instances, by["step"].kernel_count) == (7, 28)
    assert not by["step"].warmup and not by["step/mlp"].warmup
    assert by["step/scale_add"].kernels[0].count == 7


def test_no_rule_reads_the_benchmark_kernels_as_the_program() -> None:
    doc = _doc()
    # before: launch_bound on step/mlp "3.95 s per iteration at stake" and a graph_break
    # for the benchmark's eager fill kernels
    assert not [f for f in doc.findings if f.rule == "graph_break"]
    steady = [f for f in doc.findings if f.rule != "first_calls"]     # warm-up: said once
    assert all("[warm-up]" not in (f.range or "") for f in steady)
    # the steady step's own Python (1.5 ms of its 2.0 ms wall, the GPU busy 0.5) outlasts
    # its GPU work: host-bound though it syncs, priced at most its CPU time per instance
    host = [f for f in steady if f.rule == "host_bound"]
    assert [f.range for f in host] == ["step"]
    step = next(e for e in doc.ranges if e.name == "step")
    assert host[0].saving_per_instance_ns <= step.host_cpu_ns / step.wall_instances
    assert all(f.saving_per_instance_ns < 100_000 for f in steady if f not in host)
    assert [f.range for f in doc.findings if f.rule == "first_calls"] == ["step [warm-up]"]


def _trace(paths: list[str], counts: list[int]) -> SimpleNamespace:
    keys = {p: i for i, p in enumerate(dict.fromkeys(paths))}
    ranges = pd.DataFrame({"key": [keys[p] for p in paths], "path": paths,
                           "start_ns": [10 * i for i in range(len(paths))],
                           "end_ns": [10 * i + 5 for i in range(len(paths))]})
    return SimpleNamespace(ranges=ranges, instance_kernels=pd.DataFrame(
        {"range": range(len(paths)), "kernel_count": counts}),
        host=pd.DataFrame({"range": [], "module_loads": []}))


def test_thresholds_factor_extra_and_instances() -> None:
    found = apart.warmup_instances(_trace(["s"] * 5, [200, 4, 4, 4, 4]))
    assert list(found) == [0] and "median of 4" in found[0]
    assert not apart.warmup_instances(_trace(["s"] * 5, [39, 4, 4, 4, 4]))     # < 10x
    assert not apart.warmup_instances(_trace(["s"] * 5, [90, 4, 4, 4, 4]))     # < +100
    assert not apart.warmup_instances(_trace(["s"] * 2, [900, 4]))             # 2 instances
    assert not apart.warmup_instances(_trace(["s"] * 4, [5, 5, 5, 5]))
    # any instance, not only the first (a new shape autotunes later); keys kept apart
    found = apart.warmup_instances(_trace(["a", "b", "a", "b", "a", "b", "a"],
                                          [3, 1000, 3, 1, 500, 1, 3]))
    assert sorted(found) == [1, 4]
    assert not apart.warmup_instances(_trace(["s [warm-up]"] * 4, [900, 1, 1, 1]))
