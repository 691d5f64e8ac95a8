"""The loop as it runs, on programs captured for it on the H200 (tests/data/tools:
twins/copy_engine.py, twins/gil_thread.py, loader_train.py; capture_engines_h200.sh;
queue_ab.py, capture_queue_h200.sh): copies on the compute stream, a Python thread
holding the GIL, a training script with no range whose DataLoader holds the step, and a
host that fills the launch queue, each against its fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.common.names import DETECTED
from analysis.loops.queue import (
    QUEUE_DEPTH,
    QUEUE_RETURN_NS,
    QUEUE_SLOTS,
    QUEUE_WAIT_NS,
    queue_waits,
)
from tests.conftest import DATA
from tests.shared_docs import analyzed


def _loops(name: str) -> dict:
    return {e.name: e for e in analyzed(name).ranges if e.critical_path_ns}


def _share(e, what: str) -> float:
    return e.critical_path_ns.get(what, 0) / (e.run_per_instance_ns * e.run_instances)


def test_copies_on_the_compute_stream_hold_the_step_their_prefetch_does_not() -> None:
    """copy_engine: the blocking copy holds 44% of the planted step as it runs, on the
    host-to-device engine; prefetched on a side stream it is off the path."""
    loops = _loops("twins/copy_engine/trace")
    assert 0.35 < _share(loops["planted/step"], "copy_h2d") < 0.55
    assert _share(loops["fixed/step"], "copy_h2d") < 0.05
    first = analyzed("twins/copy_engine/trace").findings
    rule = [f for f in first if f.rule == "copy_on_compute_stream"]
    ranges = {f.range for f in rule}
    assert {"planted", "control"} <= ranges and not any(r.startswith("fixed") for r in ranges)


def test_a_python_thread_holding_the_gil_is_named_and_priced() -> None:
    """gil_thread: the loop's thread waits for the GIL 94% of its time as it runs, held by
    the background thread (named from the CPU samples, with the user's line that started
    it); the fixed loop does not wait."""
    doc = analyzed("twins/gil_thread_sampled/trace")
    loops = {e.name: e for e in doc.ranges if e.critical_path_ns}
    assert _share(loops["planted/step"], "gil") > 0.85
    assert _share(loops["fixed/step"], "gil") < 0.03      # nsys's own sampler thread
    holders = [k for k in loops["planted/step"].critical_threads_ns if "holding the GIL" in k]
    assert holders and holders[0].startswith("python3 (thread ")
    # where the holder came from: the main thread's sample in its Thread.start
    assert ", started at gil_thread.py:37 in thread)" in holders[0]
    gil = next(f for f in doc.findings if f.rule == "gil_contention")
    assert "started at gil_thread.py:37 in thread" in gil.message
    assert "NSys PySampling" not in gil.message            # under 1%: not a holder
    top = doc.findings[0]                # the thread's removal, or fusing the ops that
    assert top.rule == "gil_contention" or (   # each wait for the GIL: within 5% of it
        top.rule == "unfused_elementwise" and 0.95 * top.saving_ns <= max(
            f.saving_ns for f in doc.findings
            if f.rule == "gil_contention" and f.range == top.range))
    assert [f for f in doc.findings if f.range == "planted/step"][0].rule == "gil_contention"
    assert not [f for f in doc.findings if f.rule == "host_bound"
                and f.range in ("planted", "control")]           # the GIL explains it


def test_the_autograd_thread_is_named_on_the_critical_path() -> None:
    threads = _loops("battery/item_sync_planted/trace")["step/log"].critical_threads_ns
    assert next(iter(threads)).startswith("pt_autograd_0 (thread ")


@pytest.fixture(scope="module")
def loader() -> dict:
    return {s: analyzed(f"loader/{s}/trace") for s in ("planted", "fixed")}


def test_a_script_without_ranges_is_modeled_on_its_detected_steps(loader) -> None:
    """Each detected step is an instance of the loop `detected step` on the launching
    thread: its cost as it runs is the script's own timing of its steady steps."""
    for side, doc in loader.items():
        e = next(x for x in doc.ranges if x.name == DETECTED)
        truth = json.loads((DATA / "loader" / side / "truth.json").read_text())["step_ns"]
        assert e.modeled_instances >= 16 and e.critical_path_ns
        assert abs(e.run_per_instance_ns - truth) <= 0.05 * truth, (side, truth)
        assert doc.steps[0].source == "detected"
        assert any("detected steps are the loop" in n for n in doc.notes)


def test_the_input_pipeline_holding_the_step_is_named_by_the_users_line(loader) -> None:
    """The planted script (2 workers) waits for its batches: the first finding names the
    `for` line over the loader and prices the wait within 15% of what 8 workers saved;
    the fixed twin has no such finding."""
    planted, fixed = loader["planted"], loader["fixed"]
    first = planted.findings[0]
    assert first.rule == "input_wait" and first.range == DETECTED
    assert "loader_train.py:73" in first.message and "enumerate(loader)" in first.message
    run = {s: next(x for x in d.ranges if x.name == DETECTED).run_per_instance_ns
           for s, d in loader.items()}
    realized = run["planted"] - run["fixed"]
    assert 0.85 <= first.saving_per_instance_ns / realized <= 1.15
    assert not [f for f in fixed.findings if f.rule == "input_wait"]


def test_a_full_launch_queue_is_the_gpus_wait_and_priced_through_it() -> None:
    """queue_ab: fp32 GEMMs and 1,500 tiny launches a step; the host fills the launch
    queue and blocks in one launch a step for ~56 ms. The loop is held by the GPU, not by
    launch calls, and TF32 for the GEMM is priced at what the twin realized (82.7 -> 25.1
    ms a step: the host's pace, not the GEMM's speed-up), within 15%."""
    doc = analyzed("queue_ab/trace")
    loops = {e.name: e for e in doc.ranges if e.critical_path_ns}
    assert _share(loops["qfull/step"], "gpu") > 0.8
    assert _share(loops["qfull/step"], "launch") < 0.1
    truth = json.loads((DATA / "queue_ab" / "truth.json").read_text())
    realized = truth["cost_ns"]["qfull"] - truth["cost_ns"]["qfast"]
    gemm = next(f for f in doc.findings if f.rule == "fp32_gemm" and f.range == "qfull/step")
    assert abs(gemm.saving_per_instance_ns - realized) <= 0.15 * realized
    for e in loops.values():
        assert abs(e.replayed_run_ns - e.run_per_instance_ns * e.run_instances) \
            <= 0.05 * e.run_per_instance_ns * e.run_instances


def test_a_thread_that_empties_the_cache_blocks_the_loop_but_the_gpu_holds_it() -> None:
    """alloc_ab (H100): eight fp32 GEMMs a step while a housekeeping thread fills a 1 GiB
    buffer and empties the cache every 2 ms (`churn`), beside the same with the cache kept
    (`calm`). The loop's host waits in the allocator (its range 22.6 ms an instance, in
    OS calls, against 0.4 ms), yet the GPU holds both loops as they run, and the churn
    costs 3% a step (22.98 against 22.24 ms). No finding prices more than the loop costs,
    and none on `churn/step` more than 3x what the churn cost."""
    doc = analyzed("alloc_ab/trace")
    loops = {e.name: e for e in doc.ranges if e.critical_path_ns}
    churn, calm = loops["churn/step"], loops["calm/step"]
    assert _share(churn, "gpu") > 0.9 and _share(calm, "gpu") > 0.9
    assert churn.wall_ns > 10 * calm.wall_ns and churn.host_os_ns > 0.9 * churn.wall_ns
    truth = json.loads((DATA / "alloc_ab" / "truth.json").read_text())["cost_ns"]
    assert 0 < truth["churn"] - truth["calm"] < 0.05 * truth["calm"]
    for f in doc.findings:
        if f.range in loops and not f.one_time and f.rule != "fp32_gemm":
            assert f.saving_per_instance_ns <= loops[f.range].run_per_instance_ns
        if f.range == "churn/step" and f.rule != "fp32_gemm":
            assert f.saving_per_instance_ns <= 3 * (truth["churn"] - truth["calm"])
    for e in loops.values():
        assert abs(e.replayed_run_ns - e.run_per_instance_ns * e.run_instances) \
            <= 0.05 * e.run_per_instance_ns * e.run_instances


def test_a_long_launch_waits_for_the_queue_only_behind_a_deep_one() -> None:
    """A launch of 200 µs with QUEUE_DEPTH operations ahead of it, returning just after
    one ended inside it, ends after that one; the same launch with a short queue ahead (a
    module load), returning long after the last operation that ended inside it (it waited
    for something else), or a launch of 20 µs waits for nothing."""
    launch, start, end = np.arange(3), np.array([0, 1_000, 50_000]), \
        np.array([10, 201_000, 70_000])
    launched = np.full(QUEUE_DEPTH + 2, -1)               # by earlier steps' calls
    op_end = np.r_[np.full(QUEUE_DEPTH, 2_000_000), 150_000, 200_500]
    assert 20_000 < QUEUE_WAIT_NS <= 200_000
    assert QUEUE_DEPTH <= 983 < QUEUE_SLOTS          # the H200's queue with GEMMs ahead
    assert queue_waits(launch, start, end, launched, op_end) == [(QUEUE_DEPTH + 1, 1)]
    assert queue_waits(launch, start, end, launched[-10:], op_end[-10:]) == []
    early = op_end.copy()
    early[-1] = 201_000 - QUEUE_RETURN_NS - 1_000
    assert queue_waits(launch, start, end, launched, early) == []


@pytest.mark.parametrize("name", ["loops_ab/trace", "queue_ab/trace"])
def test_modeling_a_sample_of_the_steps_keeps_the_error_under_the_limit(name, monkeypatch
                                                                       ) -> None:
    """Every instance modeled against the sample of strata and tail steps (model.py): on
    loops whose steps spread (a checkpoint in eight, a GPU backlog) the replay stays within
    5% of the run either way, the critical path's categories move by 2% of the run or
    less, and each finding worth 5% of its loop keeps its saving within 1%."""
    from analysis.commands import systems
    from analysis.load import nsys_sqlite
    from analysis.loops import model

    sampled = analyzed(name)
    monkeypatch.setattr(model, "SAMPLE_INSTANCES", 10**6)
    monkeypatch.setattr(model, "MODEL_CALLS", 10**9)
    every = systems.judge(systems.measure(nsys_sqlite.load(DATA / f"{name}.sqlite")))
    loops = {e.name: e for e in every.ranges if e.critical_path_ns}
    fewer = 0
    for e in sampled.ranges:
        if not e.critical_path_ns:
            continue
        full = loops[e.name]
        run = full.run_per_instance_ns * full.run_instances
        fewer += e.modeled_instances < full.modeled_instances == full.run_instances
        for doc_entry in (e, full):
            assert abs(doc_entry.replayed_run_ns - run) <= 0.05 * run
        for cat in set(e.critical_path_ns) | set(full.critical_path_ns):
            if ":" not in cat:
                assert abs(e.critical_path_ns.get(cat, 0)
                           - full.critical_path_ns.get(cat, 0)) <= 0.02 * run, (e.name, cat)
    assert fewer >= 2                                  # the sample is a sample
    cost = {e.name: e.run_per_instance_ns for e in every.ranges if e.critical_path_ns}
    saved = {(f.rule, f.range): f.saving_per_instance_ns for f in every.findings}
    for f in sampled.findings:
        full_saving = saved.get((f.rule, f.range))
        if f.range in cost and full_saving and full_saving >= 0.05 * cost[f.range]:
            assert abs(f.saving_per_instance_ns - full_saving) <= 0.01 * full_saving


def test_a_cuda_graphs_kernels_take_one_entry_of_the_launch_queue() -> None:
    """QUEUE_DEPTH kernels ahead of a long launch, all of one CUDA graph launch (one
    correlation id), are one entry of the queue: the launch did not wait for it."""
    launch, start, end = np.arange(2), np.array([0, 1_000]), np.array([10, 201_000])
    launched = np.full(QUEUE_DEPTH + 2, -1)
    op_end = np.r_[np.full(QUEUE_DEPTH, 2_000_000), 150_000, 200_500]
    apart = np.arange(QUEUE_DEPTH + 2)
    graph = np.r_[np.zeros(QUEUE_DEPTH, dtype=int), 1, 2]
    assert queue_waits(launch, start, end, launched, op_end, apart) == [(QUEUE_DEPTH + 1, 1)]
    assert queue_waits(launch, start, end, launched, op_end, graph) == []
