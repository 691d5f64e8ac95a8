"""Workload registry: inputs, variants and the cost model of each op chain.

A workload is a small dataclass in a plain dict (no base class): how to make its inputs
for a size, which variants exist (naive eager, builtin, `torch.compile`, Triton), a
reference to check them against, and its cost model per call: FLOPs, the fewest HBM
bytes (each input read once, each output written once) and the ideal kernel count.

torch is imported inside the functions, so the registry (names, sizes, costs) can be
read on a machine without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]
Variant = Callable[..., Any]


@dataclass(frozen=True)
class CostModel:
    """Work one call must do, whatever the implementation."""

    flops: int
    min_bytes: int
    ideal_kernels: int

    def as_dict(self) -> dict[str, int]:
        return {"flops": self.flops, "min_bytes": self.min_bytes,
                "ideal_kernels": self.ideal_kernels}


@dataclass(frozen=True)
class Workload:
    """One op chain and the ways to run it."""

    name: str
    description: str
    dtype: str
    sizes: dict[str, list[Shape]]
    make_inputs: Callable[[list[Shape], str, str], tuple]
    variants: dict[str, Callable[[], Variant]]
    reference: Callable[[], Variant]
    cost: Callable[[list[Shape], str], CostModel]
    tolerance: dict[str, float] = field(default_factory=lambda: {"rtol": 1e-5, "atol": 1e-5})
    bench: bool = True   # part of `make bench` (the rule-exercising workloads are not)
    compiled_from: str = "naive"   # the variant `compiled` wraps in torch.compile

    def shapes(self, size: str) -> list[Shape]:
        if size not in self.sizes:
            raise KeyError(f"workload {self.name!r} has no size {size!r} "
                           f"(known: {', '.join(self.sizes)})")
        return self.sizes[size]


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _randn(shapes: list[Shape], dtype: str, device: str) -> tuple:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    return tuple(torch.randn(s, generator=gen, dtype=torch.float32).to(device=device,
                 dtype=getattr(torch, dtype)) for s in shapes)


def _compiled(fn_factory: Callable[[], Variant]) -> Callable[[], Variant]:
    def build() -> Variant:
        import torch

        return torch.compile(fn_factory())
    return build


# --- gelu -------------------------------------------------------------------------------

def _gelu_naive() -> Variant:
    from kernels.gelu import gelu_reference

    return gelu_reference


def _gelu_builtin() -> Variant:
    import torch.nn.functional as F

    return lambda x: F.gelu(x, approximate="tanh")


def _gelu_triton() -> Variant:
    from kernels.gelu import gelu

    return gelu


def _gelu_cost(shapes: list[Shape], dtype: str) -> CostModel:
    n = math.prod(shapes[0])
    # 4 mul + 1 add for the cubic term's argument, tanh counted as 1, 1 add, 2 mul.
    return CostModel(flops=9 * n, min_bytes=2 * n * DTYPE_BYTES[dtype], ideal_kernels=1)


GELU = Workload(
    name="gelu",
    description="tanh-approximation GeLU, 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))",
    dtype="float32",
    sizes={"default": [(8192, 8192)], "small": [(1024, 1024)]},
    make_inputs=_randn,
    variants={"naive": _gelu_naive, "builtin": _gelu_builtin,
              "compiled": _compiled(_gelu_naive), "triton": _gelu_triton},
    reference=_gelu_naive,
    cost=_gelu_cost,
)


# --- matmul_relu ------------------------------------------------------------------------

def _matmul_relu_naive() -> Variant:
    from kernels.matmul_relu import matmul_relu_reference

    return matmul_relu_reference


def _matmul_relu_triton() -> Variant:
    from kernels.matmul_relu import matmul_relu

    return matmul_relu


def _matmul_relu_cost(shapes: list[Shape], dtype: str) -> CostModel:
    (m, k), (_, n) = shapes
    nbytes = (m * k + k * n + m * n) * DTYPE_BYTES[dtype]
    return CostModel(flops=2 * m * n * k, min_bytes=nbytes, ideal_kernels=1)


MATMUL_RELU = Workload(
    name="matmul_relu",
    description="relu(A @ B), fp16 with fp32 accumulation",
    dtype="float16",
    sizes={"default": [(4096, 4096), (4096, 4096)], "small": [(1024, 1024), (1024, 1024)]},
    make_inputs=_randn,
    variants={"naive": _matmul_relu_naive, "compiled": _compiled(_matmul_relu_naive),
              "triton": _matmul_relu_triton},
    reference=_matmul_relu_naive,
    cost=_matmul_relu_cost,
    tolerance={"rtol": 1e-2, "atol": 1e-2},
)




# --- graph_break: exists to exercise the graph_break finding ----------------------------

def _graph_break_naive() -> Variant:
    def block(x):
        y = x.sin()
        if y.sum() > 0:          # data-dependent branch: torch.compile breaks the graph here
            y = y * 2
        print(end="")            # a side effect: a second graph break
        return y.cos()
    return block


def _elementwise_cost(n_inputs: int, flops_per_elem: int) -> Callable[[list[Shape], str],
                                                                        CostModel]:
    def cost(shapes: list[Shape], dtype: str) -> CostModel:
        n = math.prod(shapes[0])
        return CostModel(flops=flops_per_elem * n,
                         min_bytes=(n_inputs + 1) * n * DTYPE_BYTES[dtype], ideal_kernels=1)
    return cost


GRAPH_BREAK = Workload(
    name="graph_break",
    description="sin -> data-dependent `if y.sum() > 0` -> print -> cos (breaks torch.compile)",
    dtype="float32",
    sizes={"default": [(4096, 4096)], "small": [(1024, 1024)]},
    make_inputs=_randn,
    variants={"naive": _graph_break_naive, "compiled": _compiled(_graph_break_naive)},
    reference=_graph_break_naive,
    cost=_elementwise_cost(1, 3),
    bench=False,
)


# --- launch_bound: many tiny kernels ----------------------------------------------------

LAUNCH_CHAIN = 32


def _launch_chain_naive() -> Variant:
    def chain(x):
        for i in range(LAUNCH_CHAIN):
            x = x * 1.0001 + 0.001 * (i % 3)
        return x
    return chain


LAUNCH_BOUND = Workload(
    name="launch_bound",
    description=f"{LAUNCH_CHAIN} x (x * 1.0001 + c) on a tiny tensor: launch overhead dominates",
    dtype="float32",
    sizes={"default": [(64, 64)], "small": [(64, 64)]},
    make_inputs=_randn,
    variants={"naive": _launch_chain_naive, "compiled": _compiled(_launch_chain_naive)},
    reference=_launch_chain_naive,
    cost=_elementwise_cost(1, 2 * LAUNCH_CHAIN),
    bench=False,
)


# --- the lecture's other memory-bound ops ------------------------------------------------

def _kernel(module: str, name: str) -> Callable[[], Variant]:
    """A factory importing kernels.<module>.<name> when the variant is built."""
    def build() -> Variant:
        import importlib

        return getattr(importlib.import_module(f"kernels.{module}"), name)
    return build


def _torch_fn(expr: Callable[..., Any]) -> Callable[[], Variant]:
    return lambda: expr


def _row_cost(flops_per_elem: int, outputs: str) -> Callable[[list[Shape], str], CostModel]:
    """Cost of a row-wise op on an M x N input (plus N-sized params for layernorm)."""
    def cost(shapes: list[Shape], dtype: str) -> CostModel:
        (m, n), extra = shapes[0], sum(math.prod(s) for s in shapes[1:])
        out = m * n if outputs == "matrix" else m
        return CostModel(flops=flops_per_elem * m * n,
                         min_bytes=(m * n + extra + out) * DTYPE_BYTES[dtype], ideal_kernels=1)
    return cost


def _add_relu_naive(x, y):
    import torch

    return torch.relu(x + y)


def _softmax_builtin(x):
    import torch

    return torch.softmax(x, dim=1)


def _row_sum_builtin(x):
    return x.sum(dim=1)


def _layernorm_builtin(x, w, b):
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[1],), w, b)


ADD_RELU = Workload(
    name="add_relu", description="relu(x + y): add and ReLU fused (3 passes over HBM, not 5)",
    dtype="float32", sizes={"default": [(8192, 8192)] * 2, "small": [(1023, 1025)] * 2},
    make_inputs=_randn,
    variants={"naive": _torch_fn(_add_relu_naive), "compiled": _compiled(_torch_fn(
        _add_relu_naive)), "triton": _kernel("add_relu", "add_relu")},
    reference=_torch_fn(_add_relu_naive), cost=_elementwise_cost(2, 2))

SOFTMAX = Workload(
    name="softmax", description="row softmax, each row fits one block",
    dtype="float32", sizes={"default": [(65536, 1024)], "small": [(1023, 1000)]},
    make_inputs=_randn,
    variants={"naive": _kernel("softmax", "softmax_naive"),
              "builtin": _torch_fn(_softmax_builtin),
              "compiled": _compiled(_kernel("softmax", "softmax_naive")),
              "triton": _kernel("softmax", "softmax")},
    reference=_torch_fn(_softmax_builtin), cost=_row_cost(5, "matrix"))

ROW_SUM = Workload(
    name="row_sum", description="sum of each row, rows longer than a block",
    dtype="float32", sizes={"default": [(4096, 65536)], "small": [(64, 10000)]},
    make_inputs=_randn,
    variants={"builtin": _torch_fn(_row_sum_builtin),
              "compiled": _compiled(_torch_fn(_row_sum_builtin)),
              "triton": _kernel("row_sum", "row_sum")},
    reference=_torch_fn(_row_sum_builtin), cost=_row_cost(1, "vector"),
    tolerance={"rtol": 1e-4, "atol": 1e-3}, compiled_from="builtin")

LAYERNORM = Workload(
    name="layernorm", description="LayerNorm forward with weight and bias, statistics in fp32",
    dtype="float32",
    sizes={"default": [(65536, 1024), (1024,), (1024,)],
           "small": [(1023, 1000), (1000,), (1000,)]},
    make_inputs=_randn,
    variants={"naive": _kernel("layernorm", "layernorm_naive"),
              "builtin": _torch_fn(_layernorm_builtin),
              "compiled": _compiled(_kernel("layernorm", "layernorm_naive")),
              "triton": _kernel("layernorm", "layernorm")},
    reference=_torch_fn(_layernorm_builtin), cost=_row_cost(8, "matrix"),
    tolerance={"rtol": 1e-4, "atol": 1e-4})


REGISTRY: dict[str, Workload] = {w.name: w for w in (
    GELU, ADD_RELU, SOFTMAX, ROW_SUM, LAYERNORM, MATMUL_RELU, GRAPH_BREAK, LAUNCH_BOUND)}


def get(name: str) -> Workload:
    """The registered workload `name`, or a KeyError listing the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r} (known: {', '.join(sorted(REGISTRY))})")\
            from None


# --- attention ---------------------------------------------------------------------------

def _sdpa(causal: bool) -> Callable[[], Variant]:
    def build() -> Variant:
        import torch.nn.functional as F

        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return build


def _attention_naive(causal: bool) -> Callable[[], Variant]:
    def build() -> Variant:
        from kernels.attention import attention_naive

        return lambda q, k, v: attention_naive(q, k, v, causal)
    return build


def _attention_cost(causal: bool) -> Callable[[list[Shape], str], CostModel]:
    def cost(shapes: list[Shape], dtype: str) -> CostModel:
        b, h, s, d = shapes[0]
        flops = 4 * b * h * s * s * d // (2 if causal else 1)
        return CostModel(flops=flops, min_bytes=4 * b * h * s * d * DTYPE_BYTES[dtype],
                         ideal_kernels=1)
    return cost


def _attention(causal: bool) -> Workload:
    name = "attention_causal" if causal else "attention"
    return Workload(
        name=name, description=f"{'causal' if causal else 'non-causal'} attention forward, "
        "fp16: naive materializes QK^T and softmax; triton is flash attention",
        dtype="float16",
        sizes={"default": [(4, 16, 4096, 128)] * 3, "small": [(1, 2, 257, 64)] * 3},
        make_inputs=_randn,
        variants={"naive": _attention_naive(causal), "builtin": _sdpa(causal),
                  "compiled": _compiled(_attention_naive(causal)),
                  "triton": _kernel("attention",
                                    "attention_causal" if causal else "attention")},
        reference=_sdpa(causal), cost=_attention_cost(causal),
        tolerance={"rtol": 1e-2, "atol": 1e-2})


ATTENTION, ATTENTION_CAUSAL = _attention(False), _attention(True)
REGISTRY.update({w.name: w for w in (ATTENTION, ATTENTION_CAUSAL)})
