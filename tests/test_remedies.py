"""Remedies in the user's own layer, on real launches of each kind from the committed
Nsight Compute CSVs: a torch op gets a torch setting, an Inductor kernel a compile option,
the user's own Triton kernel its block sizes and tl.dot dtype."""

from __future__ import annotations

import pytest

from analysis.commands import compute
from analysis.diagnosis.remedies import layer, remedy
from analysis.documents.io import load_meta
from analysis.documents.types import Meta, from_dict
from analysis.load import ncu_csv
from tests.conftest import DATA

NCU = DATA / "ncu"


def _doc(name: str):
    meta = NCU / f"{name}_meta.json"
    return compute.build(ncu_csv.load(NCU / f"{name}_raw.csv"),
                         load_meta(meta) if meta.exists() else None)


def _meta(name: str) -> Meta:
    return from_dict(Meta, load_meta(NCU / f"{name}_meta.json"))


@pytest.mark.parametrize("name,kernel,want", [
    ("gelu", "void at::vectorized_elementwise_kernel", "torch"),
    ("gelu", "triton_poi_fused_add_mul_tanh_0", "inductor"),
    ("gelu", "gelu_kernel", "triton"),
    ("matmul_relu", "nvjet_sm90", "torch"),
    ("matmul_relu", "triton_poi_fused_relu_0", "inductor"),
    ("matmul_relu", "matmul_relu_persistent", "triton"),
    ("attention", "attention_kernel", "triton")])
def test_each_real_kernel_is_placed_in_its_layer(name: str, kernel: str, want: str) -> None:
    doc = _doc(name)
    k = next(k for k in doc.kernels if k.name.startswith(kernel))
    assert layer(k.name, k.range, _meta(name)) == want


def test_fp32_gemms_of_a_torch_program_get_tf32_not_tl_dot() -> None:
    """A user's program of fp32 matmuls (tests/data/tools/battery/fp32_gemm.py, `make
    compute SCRIPT=...` on the H200): its cuBLAS fp32 GEMMs (86% SM, tensor pipes idle)
    are told to use TF32 or bf16 autocast, not Triton's tl.dot."""
    doc = _doc("fp32_gemm")
    gemm = [f for f in doc.findings if f.rule == "compute_bound" and f.kernel
            and "f32f32" in f.kernel]
    assert gemm
    for f in gemm:
        assert "set_float32_matmul_precision" in f.suggestion and "tl.dot" not in f.suggestion


@pytest.mark.parametrize("bound", ["memory", "compute", "latency"])
def test_every_layer_has_its_own_words(bound: str) -> None:
    torch_, inductor, triton = (remedy(bound, k) for k in (
        "void at::native::vectorized_elementwise_kernel", "triton_poi_fused_0", "my_kernel"))
    assert "torch" in torch_ and "tl.dot" not in torch_ and "num_warps" not in torch_
    assert "torch.compile" in inductor or "TORCH_LOGS" in inductor
    assert "mode=" in inductor or "fused" in inductor
    assert any(w in triton for w in ("BLOCK_SIZE", "tl.dot", "num_stages"))


def test_the_compute_page_row_of_each_kernel_speaks_its_layer() -> None:
    from analysis.render.compute_md import suggestions

    said = suggestions(_doc("gelu"))
    inductor = next(v for k, v in said.items() if k.startswith("triton_poi"))
    own = next(v for k, v in said.items() if k == "gelu_kernel")
    torch_ = next(v for k, v in said.items() if "vectorized_elementwise_kernel" in k)
    assert "TORCH_LOGS" in inductor or "mode=" in inductor
    assert any(w in own for w in ("BLOCK_SIZE", "tl.dot", "num_stages"))
    assert "torch" in torch_ and "tl.dot" not in torch_
