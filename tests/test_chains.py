"""Chains of elementwise kernels (loops/chains.py, the unfused_elementwise rule and its
change one_pass) on programs captured on the H200: the battery's 200 tiny eager ops a
step against the same step replayed as one CUDA graph, and a loop beside a Python thread
that holds the GIL."""

from __future__ import annotations

from analysis.commands import calibration
from tests.shared_docs import analyzed


def _chains(name: str) -> list:
    return [f for f in analyzed(name).findings if f.rule == "unfused_elementwise"]


def test_two_hundred_tiny_ops_are_one_chain_priced_as_the_fix_realized() -> None:
    """launch_bound.py's step: 200 elementwise kernels on one 256 x 256 state (64 blocks
    of 128 threads), one chain; fused, the step saves what the CUDA-graph twin saved
    within the calibration's target (the page pins the ratio, 1.10)."""
    (f,) = _chains("battery/launch_bound_planted/trace")
    ev = f.evidence
    assert ev["grid"] == 64 * 1024 + 128
    assert (round(ev["kernels_per_chain"]), round(ev["chains_per_step"], 6)) == (200, 1)
    planted = calibration.per_instance(next(e for e in analyzed(
        "battery/launch_bound_planted/trace").ranges if e.name == "step"))
    fixed = calibration.per_instance(next(e for e in analyzed(
        "battery/launch_bound_fixed/trace").ranges if e.name == "step"))
    ratio = f.saving_per_instance_ns / (planted - fixed)
    assert calibration.RATIO[0] <= ratio <= calibration.RATIO[1]
    assert f.saving_per_instance_ns <= planted


def test_a_chain_in_one_cuda_graph_saves_its_kernels_not_the_launch() -> None:
    """The same 200 kernels replayed by one cudaGraphLaunch: fusing them saves GPU time
    (the kernels but the shortest, 0.22 ms a step), never the one launch the fused kernel
    still needs: the saving stays under the step's kernel time."""
    (f,) = _chains("battery/launch_bound_fixed/trace")
    assert 0 < f.saving_per_instance_ns <= f.evidence["kernel_ns"]


def test_fusing_a_chain_takes_the_waits_for_the_gil_of_its_ops() -> None:
    """gil_thread.py's loop waits for the GIL 95% of its time; its chains of 90 kernels
    are named on the line that launches them. Each op's dispatch lets the GIL go and waits
    to take it back, so fusing the chain saves the waits of the ops it removes: most of
    the loop (the generated battery measured it: a per-parameter AdamW made fused beside
    a thread that holds the GIL saved 80% of its loop), yet no more than the thread's
    removal, which takes every wait: the GIL finding leads."""
    doc = analyzed("twins/gil_thread_sampled/trace")
    chain = next(f for f in doc.findings if f.rule == "unfused_elementwise"
                 and f.range == "planted/step")
    gil = next(f for f in doc.findings if f.rule == "gil_contention"
               and f.range == "planted/step")
    assert 0.5 * gil.saving_ns < chain.saving_ns <= gil.saving_ns
    (line,) = chain.evidence["lines_named"]
    assert (line["file"], line["function"]) == ("gil_thread.py", "work")
    assert "gil_thread.py:" in chain.message
    mine = [f for f in doc.findings if f.range == "planted/step"]
    assert mine[0].rule == "gil_contention"


def test_without_python_samples_the_finding_says_how_to_get_them() -> None:
    (f,) = _chains("battery/launch_bound_planted/trace")
    assert not f.evidence["lines_named"] and "SAMPLE=cpu" in f.message
