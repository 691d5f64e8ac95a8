"""PyTorch's emit_nvtx op ranges as one row per op, backward linked by seq."""

from __future__ import annotations

import pytest

from tests.shared_docs import analyzed


@pytest.fixture(scope="session")
def doc():
    return analyzed("train_step_user/trace")


def _leaf_sum(doc, prefix: str) -> tuple[int, int]:
    """Kernel count and time of range entries whose leaf is an op range of `prefix`
    (the nsys-equal range table, independent of ops.py)."""
    rows = [e for e in doc.ranges if e.name.split("/")[-1].startswith(prefix + ",")]
    return sum(e.kernel_count for e in rows), sum(e.kernel_time_ns for e in rows)


def test_ops_strip_names_and_link_backward(doc) -> None:
    by = {(o.name, o.direction): o for o in doc.ops}
    assert all(", seq" not in o.name and "op_id" not in o.name for o in doc.ops)
    addmm, node = by["aten::addmm", "forward"], by["AddmmBackward0", "backward"]
    assert node.forward_op == "aten::addmm"
    assert (addmm.backward_kernel_count, addmm.backward_kernel_time_ns) == (
        node.kernel_count, node.kernel_time_ns)
    assert (node.kernel_count, node.kernel_time_ns) == _leaf_sum(doc, "AddmmBackward0")
    assert (addmm.kernel_count, addmm.kernel_time_ns) == _leaf_sum(doc, "aten::addmm")
    assert addmm.calls == 3 and node.calls == 3          # 3 addmm per step, 1 emit_nvtx step
    assert not any(o.name.startswith("autograd::engine") for o in doc.ops)


def test_ops_section_is_short_and_only_with_emit_nvtx(doc) -> None:
    from analysis.render.markdown import ops_section, render_systems
    lines = ops_section(doc)
    assert lines[0] == "## PyTorch ops (emit_nvtx)" and len(lines) < 30
    assert max(len(ln) for ln in lines) < 300
    gelu = analyzed("gelu/trace")
    assert gelu.ops == [] and "PyTorch ops" not in render_systems(gelu)
