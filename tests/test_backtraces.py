"""CUDA backtraces name the Python call of a blocking call (analysis/load/nsys_backtraces.py).

On the committed capture with `--cudabacktrace=sync` (tests/data/backtrace, the generated
battery's program, seed 70), each sync's backtrace ends in torch's Python bindings: the
call the user's line made. Loop g01 plants a `torch.unique` nested in its step beside a
`torch.cuda.synchronize()`: without backtraces the CUDA calls read as a boolean mask's
count (a scalar read back after a non-scan kernel); with them, as torch.unique.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from analysis.diagnosis.sync_sites import binding_call
from analysis.load.nsys_backtraces import bindings
from tests.conftest import DATA
from tests.shared_docs import analyzed

CAPTURE = "backtrace/trace"


@pytest.mark.parametrize(("frame", "call"), [
    ("THCPModule_cudaSynchronize", "torch.cuda.synchronize"),
    ("torch::autograd::THPVariable__unique2", "torch.unique"),
    ("torch::autograd::THPVariable_cpu", "Tensor.cpu"),
    ("torch::autograd::THPVariable_tensor", "torch.tensor"),
    ("torch::autograd::THPVariable_item", "Tensor.item"),
    ("torch::autograd::THPVariable_bool_scalar", "Tensor.__bool__"),
    ("torch::autograd::THPVariable_is_nonzero", "Tensor.__bool__"),
    ("_PyEval_EvalFrameDefault", ""),
])
def test_binding_frames_are_python_calls(frame: str, call: str) -> None:
    assert binding_call(frame) == call


def test_every_backtrace_names_its_binding() -> None:
    """The 293 backtraces of the capture, each by its outermost bindings frame, keyed by
    the call's process and correlation id (the loop's four planted sync kinds)."""
    found = bindings(DATA / f"{CAPTURE}.sqlite")
    assert Counter(found.values()) == {
        "THCPModule_cudaSynchronize": 116, "torch::autograd::THPVariable__unique2": 76,
        "torch::autograd::THPVariable_cpu": 60, "torch::autograd::THPVariable_tensor": 41}
    assert len({pid for pid, _ in found}) == 1


def test_an_export_without_backtraces_reads_none() -> None:
    assert bindings(DATA / "twins" / "item_sync_sampled" / "trace.sqlite") == {}


def test_the_unique_sync_is_named_by_its_backtrace() -> None:
    """g01's step: its syncs are torch.unique's (not a mask's count), priced by making it
    a fixed-size mask, the message naming the call the backtraces came through."""
    doc = analyzed(CAPTURE)
    f = next(f for f in doc.findings if f.rule == "sync_in_loop" and f.range == "g01_all/step")
    assert f.evidence["syncs"] == {"unique": 16, "synchronize": 15}
    assert f.evidence["backtraced_calls"] == {"torch.unique": 16}
    assert f.change == "unique_mask"
    assert "come from `torch.unique` (16 of 16 with a CUDA backtrace)" in f.message
    assert "fixed-size mask" in f.suggestion
    truth = json.loads((DATA / "backtrace" / "truth.json").read_text())
    assert {c["name"] for c in truth["loops"][1]["causes"]} == {"unique", "synchronize"}


def test_a_synchronize_loop_names_torch_cuda_synchronize() -> None:
    doc = analyzed(CAPTURE)
    f = next(f for f in doc.findings if f.rule == "sync_in_loop"
             and f.range == "g01_fix_unique/synchronize")
    assert f.evidence["backtraced_calls"] == {"torch.cuda.synchronize": 16}
    assert f.change == "no_sync"


HELD_OUT = "backtrace/seed72"
"""A second capture, made after the code above was written (seed 72, 12 loops)."""
CALL_OF = {"tolist": "Tensor.tolist", "unique": "torch.unique", "readback": "Tensor.cpu",
           "repeat_interleave": "repeat_interleave", "synchronize": "torch.cuda.synchronize"}
"""The battery's sync causes (tests/data/tools/battery_gen/causes.py) by the call they make."""


def test_every_planted_sync_is_named_by_its_call_on_a_held_out_capture() -> None:
    """Each sync cause planted in a loop of the held-out capture is named by a finding on
    that loop (its steps or the cause's own range) through its backtraced call."""
    doc = analyzed(HELD_OUT)
    truth = json.loads((DATA / "backtrace" / "seed72_truth.json").read_text())
    named: dict[str, set[str]] = {}
    for f in doc.findings:
        loop = (f.range or "").split("/")[0]
        named.setdefault(loop, set()).update(f.evidence.get("backtraced_calls") or {})
    planted = [(spec["loop"], CALL_OF[c["name"]]) for spec in truth["loops"]
               for c in spec["causes"] if c["name"] in CALL_OF]
    assert len(planted) >= 8
    assert [(loop, call) for loop, call in planted
            if call not in named.get(f"{loop}_all", set())] == []


def test_a_copy_is_named_by_the_backtrace_of_its_sync() -> None:
    """A pageable upload's backtrace is on the synchronize after its copy, a readback's
    on the copy's own wait: the copy findings name `torch.tensor` and `Tensor.cpu`."""
    doc = analyzed(CAPTURE)
    by = {(f.rule, f.range): f for f in doc.findings}
    upload = by[("pageable_copy", "g00_all/python_batch")]
    assert upload.evidence["backtraced_calls"] == {"torch.tensor": 16}
    assert "come from `torch.tensor`" in upload.message
    assert by[("readback_in_loop", "g05_all/step")].evidence["backtraced_calls"] == {
        "Tensor.cpu": 16}
