"""Workload files: a user's own op declared with the public registry API, run like a
registered one (examples/rmsnorm.py checked on the CPU under TRITON_INTERPRET)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflows import workloads

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rmsnorm.py"


def test_example_variants_match_the_reference_on_the_cpu() -> None:
    pytest.importorskip("triton")
    from workflows.runner import rel_error

    (w,) = workloads.load_file(EXAMPLE)
    assert workloads.resolve(str(EXAMPLE)).name == w.name == "rmsnorm"
    inputs = w.make_inputs(w.shapes("small"), w.dtype, "cpu")
    ref = w.reference()(*inputs)
    for name in ("naive", "builtin", "triton"):
        assert rel_error(w.variants[name]()(*inputs), ref) < 1e-5, name
    assert callable(w.variants["compiled"]())
    cost = w.cost(w.shapes("default"), w.dtype)
    assert cost.min_bytes == (2 * 32768 * 4096 + 4096) * 4 and cost.ideal_kernels == 1


def test_specs_names_and_errors(tmp_path: Path) -> None:
    assert workloads.run_name(str(EXAMPLE)) == "rmsnorm"
    assert workloads.run_name("gelu") == "gelu"
    two = tmp_path / "two.py"
    two.write_text("from workflows.workloads import REGISTRY\n"
                   "A = REGISTRY['gelu']\nB = REGISTRY['softmax']\n")
    with pytest.raises(KeyError, match="pick one"):
        workloads.resolve(str(two))
    assert workloads.resolve(f"{two}:softmax").name == "softmax"
    with pytest.raises(KeyError, match="no workload 'x'"):
        workloads.resolve(f"{two}:x")
    (tmp_path / "none.py").write_text("X = 1\n")
    with pytest.raises(KeyError, match="declares no Workload"):
        workloads.resolve(str(tmp_path / "none.py"))
    with pytest.raises(KeyError, match="unknown workload"):
        workloads.resolve("nope")
