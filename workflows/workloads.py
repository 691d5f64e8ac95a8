"""Workload registry: inputs, variants and the cost model of each op chain.

A workload is a small dataclass in a plain dict (no base class): how to make its inputs
for each size it owns, which variants exist (naive eager, builtin, `torch.compile`,
Triton), a reference to check them against, and its cost model per call: FLOPs, the
fewest HBM bytes (each input read once, each output written once) and the ideal kernel
count.

Every variant is declared one way, `impl(target, *bound)`: `target` is either
"module:attr" of the toolkit's kernels/ (imported when the variant is built, so the
registry reads without torch or a GPU) or a plain callable; `compiled(impl(...))` wraps a
variant in torch.compile. torch is imported inside the functions.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import settings
from .siblings import sibling

Shape = tuple[int, ...]
Variant = Callable[..., Any]
Factory = Callable[[], Variant]
_documents = sibling("analysis.documents.types")
CostModel = _documents.CostModel
ROLES: tuple[str, ...] = _documents.ROLES
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Workload:
    """One op chain and the ways to run it."""

    name: str
    description: str
    dtype: str
    sizes: dict[str, list[Shape]]
    make_inputs: Callable[[list[Shape], str, str], tuple]
    variants: dict[str, Factory]
    reference: Factory
    cost: Callable[[list[Shape], str], Any]          # -> CostModel
    tolerance: dict[str, float] = field(default_factory=lambda: {"rtol": 1e-5, "atol": 1e-5})
    bench: bool = True   # part of `make bench` (the rule-exercising workloads are not)
    compiled_from: str = "naive"   # the variant the compiled one wraps in torch.compile
    explain_compiled: bool = True  # run torch._dynamo.explain on it before the ranges
    roles: dict[str, str] = field(default_factory=dict)
    """variant -> one of ROLES (baseline, builtin, compiled, triton, other). A variant not
    named here takes the role its factory declares (`compiled(...)`: compiled), else the
    one of its name (naive/eager: baseline, builtin, compiled, triton), else other."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.roles) - set(self.variants))
        wrong = sorted(r for r in self.roles.values() if r not in ROLES)
        if unknown or wrong:
            raise ValueError(f"workload {self.name!r}: roles name no such variant {unknown}"
                             if unknown else f"workload {self.name!r}: roles must be one of "
                             f"{', '.join(ROLES)} (got {', '.join(wrong)})")

    def role(self, variant: str) -> str:
        """The variant's role (see `roles`)."""
        declared = getattr(self.variants[variant], "role", None)
        return self.roles.get(variant) or declared or _documents.role_by_name(variant)

    def all_roles(self) -> dict[str, str]:
        """Every variant's role, as meta.json records them."""
        return {v: self.role(v) for v in self.variants}

    def shapes(self, size: str) -> list[Shape]:
        if size not in self.sizes:
            raise KeyError(f"workload {self.name!r} has no size {size!r} "
                           f"(known: {', '.join(self.sizes)})")
        return self.sizes[size]


def impl(target: str | Variant, *bound: Any) -> Factory:
    """The one way to declare a variant: "module:attr" of kernels/ or a callable, with
    leading arguments bound (functools.partial). Building it imports what it needs."""
    def build() -> Variant:
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            fn = getattr(sibling(f"kernels.{module}"), attr)
        else:
            fn = target
        return functools.partial(fn, *bound) if bound else fn
    build.target = target            # type: ignore[attr-defined]  (for messages and tests)
    return build


def compiled(factory: Factory) -> Factory:
    """The variant `factory` builds, wrapped in torch.compile."""
    def build() -> Variant:
        import torch

        return torch.compile(factory())
    build.role = "compiled"          # type: ignore[attr-defined]  (Workload.role reads it)
    return build


def randn(shapes: list[Shape], dtype: str, device: str) -> tuple:
    """Seeded normal inputs of the given shapes (made in fp32 on the CPU, then moved)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    return tuple(torch.randn(s, generator=gen, dtype=torch.float32).to(device=device,
                 dtype=getattr(torch, dtype)) for s in shapes)


def elementwise_cost(n_inputs: int, flops_per_elem: int) -> Callable[[list[Shape], str], Any]:
    """Cost of an elementwise op over n_inputs same-shaped tensors, one output."""
    def cost(shapes: list[Shape], dtype: str) -> Any:
        n = math.prod(shapes[0])
        return CostModel(flops=flops_per_elem * n,
                         min_bytes=(n_inputs + 1) * n * DTYPE_BYTES[dtype], ideal_kernels=1)
    return cost


def row_cost(flops_per_elem: int, outputs: str) -> Callable[[list[Shape], str], Any]:
    """Cost of a row-wise op on an M x N input (plus N-sized params for layernorm)."""
    def cost(shapes: list[Shape], dtype: str) -> Any:
        (m, n), extra = shapes[0], sum(math.prod(s) for s in shapes[1:])
        out = m * n if outputs == "matrix" else m
        return CostModel(flops=flops_per_elem * m * n,
                         min_bytes=(m * n + extra + out) * DTYPE_BYTES[dtype], ideal_kernels=1)
    return cost


# --- plain torch callables the variants name ----------------------------------------------

def gelu_builtin(x):
    import torch.nn.functional as F

    return F.gelu(x, approximate="tanh")


def add_relu_naive(x, y):
    import torch

    return torch.relu(x + y)


def softmax_builtin(x):
    import torch

    return torch.softmax(x, dim=1)


def row_sum_builtin(x):
    return x.sum(dim=1)


def layernorm_builtin(x, w, b):
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[1],), w, b)


def graph_break_block(x):
    """sin, a data-dependent branch and a print: torch.compile breaks the graph twice."""
    y = x.sin()
    if y.sum() > 0:          # data-dependent branch: torch.compile breaks the graph here
        y = y * 2
    print(end="")            # a side effect: a second graph break
    return y.cos()


LAUNCH_CHAIN = 32


def launch_chain(x):
    for i in range(LAUNCH_CHAIN):
        x = x * 1.0001 + 0.001 * (i % 3)
    return x


def sdpa(causal: bool, q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


# --- cost models --------------------------------------------------------------------------

def gelu_cost(shapes: list[Shape], dtype: str) -> Any:
    n = math.prod(shapes[0])
    # 4 mul + 1 add for the cubic term's argument, tanh counted as 1, 1 add, 2 mul.
    return CostModel(flops=9 * n, min_bytes=2 * n * DTYPE_BYTES[dtype], ideal_kernels=1)


def matmul_relu_cost(shapes: list[Shape], dtype: str) -> Any:
    (m, k), (_, n) = shapes
    nbytes = (m * k + k * n + m * n) * DTYPE_BYTES[dtype]
    return CostModel(flops=2 * m * n * k, min_bytes=nbytes, ideal_kernels=1)


def attention_cost(causal: bool) -> Callable[[list[Shape], str], Any]:
    def cost(shapes: list[Shape], dtype: str) -> Any:
        b, h, s, d = shapes[0]
        flops = 4 * b * h * s * s * d // (2 if causal else 1)
        return CostModel(flops=flops, min_bytes=4 * b * h * s * d * DTYPE_BYTES[dtype],
                         ideal_kernels=1)
    return cost


# --- the workloads ------------------------------------------------------------------------

def _attention(causal: bool) -> Workload:
    name = "attention_causal" if causal else "attention"
    return Workload(
        name=name, description=f"{'causal' if causal else 'non-causal'} attention forward, "
        "fp16: naive materializes QK^T and softmax; triton is flash attention",
        dtype="float16",
        sizes={"default": [(4, 16, 4096, 128)] * 3, "small": [(1, 2, 257, 64)] * 3},
        make_inputs=randn,
        variants={"naive": impl(_naive_attention, causal), "builtin": impl(sdpa, causal),
                  "compiled": compiled(impl(_naive_attention, causal)),
                  "triton": impl(f"attention:{name}")},
        reference=impl(sdpa, causal), cost=attention_cost(causal),
        tolerance={"rtol": 1e-2, "atol": 1e-2})


def _naive_attention(causal: bool, q, k, v):
    return sibling("kernels.attention").attention_naive(q, k, v, causal)


# --- train_step: a transformer block's forward, backward and optimizer step -------------

def _block(d: int, heads: int) -> Any:
    """A new transformer block of width d (workflows/models.py: one class per process, so
    torch.compile never recompiles on a new type)."""
    from .models import Block

    return Block(d, heads)


TRAIN_HEADS = 16


def _backward_and_step(loss: Any, opt: Any) -> None:
    """The training workloads' tail: backward in a `bwd` range, the optimizer step in an
    `opt` range."""
    from .nvtx_ranges import nvtx_range

    with nvtx_range("bwd"):
        loss.backward()
    with nvtx_range("opt"):
        opt.step()
        opt.zero_grad(set_to_none=True)


def train_step(mode: str | None) -> Factory:
    """One training step in bf16 autocast with fused AdamW, `fwd` / `bwd` / `opt` in NVTX
    sub-ranges; mode None is eager, else torch.compile(model, mode=mode) ("default", or
    "reduce-overhead": CUDA graphs). Backward runs on PyTorch's autograd thread."""
    def build() -> Variant:
        import torch
        import torch.nn.functional as F

        from .nvtx_ranges import nvtx_range

        state: dict[str, Any] = {}

        def step(x, target):
            if not state:                       # the model is made for the inputs' width
                torch.manual_seed(0)
                model = _block(x.shape[-1], TRAIN_HEADS).to(x.device)
                state["opt"] = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                                 fused=x.is_cuda)
                state["fwd"] = model if mode is None else torch.compile(model, mode=mode)
            if mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            with nvtx_range("fwd"), torch.autocast(x.device.type, dtype=torch.bfloat16):
                loss = F.mse_loss(state["fwd"](x).float(), target.float())
            _backward_and_step(loss, state["opt"])
            return loss.detach().clone()
        return step
    build.role = "baseline" if mode is None else "compiled"  # type: ignore[attr-defined]
    return build


def train_step_cost(shapes: list[Shape], dtype: str) -> Any:
    """Approximate: the block's matrix products forward (2 FLOP per MAC) and backward
    (twice that), causal attention; bytes: fp32 weights read forward and backward, their
    gradients written, AdamW's read of weight, grad and two moments and write of three,
    plus the inputs. No ideal kernel count (0): a training step is many ops by nature."""
    (b, s, d), _ = shapes
    params = 12 * d * d + 13 * d
    flops = 6 * b * s * 12 * d * d + 3 * 2 * b * s * s * d
    return CostModel(flops=flops, min_bytes=10 * 4 * params + 2 * b * s * d * 2,
                     ideal_kernels=0)


# --- ddp_step: data-parallel training across ranks (torchrun) ---------------------------

DDP_LAYERS, DDP_EXTRA = 8, 40


def ddp_train_step() -> Factory:
    """One data-parallel SGD step of 8 linear layers: DDP all-reduces the gradients with
    NCCL from its own threads while backward runs. Under torchrun (the runner starts the
    process group) every rank runs it; alone it runs without DDP. The rank named by
    PROFKIT_STRAGGLER (the runner's --straggler) does DDP_EXTRA extra matrix products in
    its forward, so the others wait for it inside the all-reduce."""
    def build() -> Variant:

        import torch
        import torch.distributed as dist
        import torch.nn as nn

        from .nvtx_ranges import nvtx_range

        state: dict[str, Any] = {}

        def step(x, w):
            if not state:
                torch.manual_seed(0)
                d = x.shape[-1]
                model = nn.Sequential(*[nn.Linear(d, d) for _ in range(DDP_LAYERS)]).to(x.device)
                if dist.is_initialized():
                    from torch.nn.parallel import DistributedDataParallel

                    model = DistributedDataParallel(model, device_ids=[x.device.index])
                rank = dist.get_rank() if dist.is_initialized() else 0
                state.update(model=model, opt=torch.optim.SGD(model.parameters(), lr=1e-3),
                             extra=rank == settings.straggler_rank())
            with nvtx_range("step"):              # the cross-rank report's step
                with nvtx_range("fwd"):
                    h = x
                    for _ in range(DDP_EXTRA if state["extra"] else 0):
                        h = torch.tanh(h @ w)
                    loss = state["model"](h).square().mean()
                _backward_and_step(loss, state["opt"])
            return loss.detach().clone()
        return step
    return build


def ddp_cost(shapes: list[Shape], dtype: str) -> Any:
    """Forward and backward of the layers (6 b d^2 FLOP each); bytes: fp32 weights read in
    forward and backward, gradients written, SGD's read and write; no ideal kernel count."""
    (b, d), _ = shapes
    params = DDP_LAYERS * (d * d + d)
    return CostModel(flops=6 * b * d * d * DDP_LAYERS, min_bytes=5 * 4 * params,
                     ideal_kernels=0)


WORKLOADS = [
    Workload(
        name="gelu",
        description="tanh-approximation GeLU, 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))",
        dtype="float32", sizes={"default": [(8192, 8192)], "small": [(1024, 1024)]},
        make_inputs=randn,
        variants={"naive": impl("gelu:gelu_reference"), "builtin": impl(gelu_builtin),
                  "compiled": compiled(impl("gelu:gelu_reference")),
                  "triton": impl("gelu:gelu")},
        reference=impl("gelu:gelu_reference"), cost=gelu_cost),
    Workload(
        name="add_relu", description="relu(x + y): add and ReLU fused (3 passes over HBM, "
        "not 5)", dtype="float32",
        sizes={"default": [(8192, 8192)] * 2, "small": [(1023, 1025)] * 2},
        make_inputs=randn,
        variants={"naive": impl(add_relu_naive), "compiled": compiled(impl(add_relu_naive)),
                  "triton": impl("add_relu:add_relu")},
        reference=impl(add_relu_naive), cost=elementwise_cost(2, 2)),
    Workload(
        name="softmax", description="row softmax, each row fits one block", dtype="float32",
        sizes={"default": [(65536, 1024)], "small": [(1023, 1000)]}, make_inputs=randn,
        variants={"naive": impl("softmax:softmax_naive"), "builtin": impl(softmax_builtin),
                  "compiled": compiled(impl("softmax:softmax_naive")),
                  "triton": impl("softmax:softmax")},
        reference=impl(softmax_builtin), cost=row_cost(5, "matrix")),
    Workload(
        name="row_sum", description="sum of each row, rows longer than a block",
        dtype="float32", sizes={"default": [(4096, 65536)], "small": [(64, 10000)]},
        make_inputs=randn,
        variants={"builtin": impl(row_sum_builtin), "compiled": compiled(impl(row_sum_builtin)),
                  "triton": impl("row_sum:row_sum")},
        reference=impl(row_sum_builtin), cost=row_cost(1, "vector"),
        tolerance={"rtol": 1e-4, "atol": 1e-3}, compiled_from="builtin"),
    Workload(
        name="layernorm", description="LayerNorm forward with weight and bias, statistics in "
        "fp32", dtype="float32",
        sizes={"default": [(65536, 1024), (1024,), (1024,)],
               "small": [(1023, 1000), (1000,), (1000,)]},
        make_inputs=randn,
        variants={"naive": impl("layernorm:layernorm_naive"),
                  "builtin": impl(layernorm_builtin),
                  "compiled": compiled(impl("layernorm:layernorm_naive")),
                  "triton": impl("layernorm:layernorm")},
        reference=impl(layernorm_builtin), cost=row_cost(8, "matrix"),
        tolerance={"rtol": 1e-4, "atol": 1e-4}),
    Workload(
        name="matmul_relu", description="relu(A @ B), fp16 with fp32 accumulation",
        dtype="float16",
        sizes={"default": [(4096, 4096), (4096, 4096)], "small": [(1024, 1024), (1024, 1024)]},
        make_inputs=randn,
        variants={"naive": impl("matmul_relu:matmul_relu_reference"),
                  "compiled": compiled(impl("matmul_relu:matmul_relu_reference")),
                  "triton": impl("matmul_relu:matmul_relu")},
        reference=impl("matmul_relu:matmul_relu_reference"), cost=matmul_relu_cost,
        tolerance={"rtol": 1e-2, "atol": 1e-2}),
    _attention(False),
    _attention(True),
    Workload(
        name="train_step",
        description="transformer block (causal attention + GeLU MLP + LayerNorms) forward, "
        "backward and fused AdamW step in bf16 autocast; fwd / bwd / opt sub-ranges",
        dtype="bfloat16", sizes={"default": [(8, 1024, 1024)] * 2, "small": [(2, 128, 256)] * 2},
        make_inputs=randn,
        variants={"eager": train_step(None), "compiled": train_step("default"),
                  "cudagraphs": train_step("reduce-overhead")},
        reference=train_step(None), cost=train_step_cost,
        tolerance={"rtol": 5e-2, "atol": 5e-2}, bench=False, compiled_from="eager",
        explain_compiled=False),
    Workload(
        name="ddp_step",
        description="data-parallel SGD step of 8 linear layers (DDP, NCCL all-reduce), each "
        "step a `step` range holding fwd / bwd / opt; run it on several GPUs: make systems "
        "WORKLOAD=ddp_step NPROC=2 [STRAGGLER=1]",
        dtype="float32", sizes={"default": [(256, 4096), (4096, 4096)],
                                "small": [(16, 256), (256, 256)]},
        make_inputs=randn, variants={"ddp": ddp_train_step()}, reference=ddp_train_step(),
        cost=ddp_cost, tolerance={"rtol": 1e-3, "atol": 1e-3}, bench=False,
        compiled_from="ddp", explain_compiled=False, roles={"ddp": "baseline"}),
    Workload(
        name="graph_break",
        description="sin -> data-dependent `if y.sum() > 0` -> print -> cos (breaks "
        "torch.compile)", dtype="float32",
        sizes={"default": [(4096, 4096)], "small": [(1024, 1024)]}, make_inputs=randn,
        variants={"naive": impl(graph_break_block),
                  "compiled": compiled(impl(graph_break_block))},
        reference=impl(graph_break_block), cost=elementwise_cost(1, 3), bench=False),
    Workload(
        name="launch_bound",
        description=f"{LAUNCH_CHAIN} x (x * 1.0001 + c) on a tiny tensor: launch overhead "
        "dominates", dtype="float32", sizes={"default": [(64, 64)], "small": [(64, 64)]},
        make_inputs=randn,
        variants={"naive": impl(launch_chain), "compiled": compiled(impl(launch_chain))},
        reference=impl(launch_chain), cost=elementwise_cost(1, 2 * LAUNCH_CHAIN), bench=False),
]

REGISTRY: dict[str, Workload] = {w.name: w for w in WORKLOADS}
SIZES: list[str] = sorted({s for w in WORKLOADS for s in w.sizes})
"""Size names any registered workload owns: the drivers' --size choices."""


def get(name: str) -> Workload:
    """The registered workload `name`, or a KeyError listing the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r} (known: {', '.join(sorted(REGISTRY))})")\
            from None


def load_file(path: str | Path) -> list[Workload]:
    """The workloads a workload file declares (module-level `Workload` objects, in order).

    A workload file is plain Python that builds `Workload(...)` values with this module's
    public API (Workload, CostModel, impl, compiled, randn and the cost helpers); see
    examples/ and README.md. It is imported under a private module name.
    """
    path = Path(path)
    if not path.is_file():
        raise KeyError(f"workload file {path} does not exist")
    name = f"_workload_file_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KeyError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    found: list[Workload] = []
    for w in [*vars(module).values(), *getattr(module, "WORKLOADS", [])]:
        if isinstance(w, Workload) and all(w is not f for f in found):
            found.append(w)
    if not found:
        raise KeyError(f"{path} declares no Workload")
    return found


def resolve(spec: str) -> Workload:
    """A registered name, a workload file (`path.py`, when it declares one workload) or
    `path.py:name`. KeyError with what is known otherwise."""
    file, _, name = spec.partition(":") if ".py" in spec else (spec, "", "")
    if not file.endswith(".py"):
        return get(spec)
    found = load_file(file)
    if name:
        match = [w for w in found if w.name == name]
        if not match:
            raise KeyError(f"{file} declares no workload {name!r} "
                           f"(it declares: {', '.join(w.name for w in found)})")
        return match[0]
    if len(found) > 1:
        raise KeyError(f"{file} declares {len(found)} workloads; pick one as "
                       f"{file}:NAME ({', '.join(w.name for w in found)})")
    return found[0]


def run_name(spec: str) -> str:
    """The folder name a workload spec's runs and reports go to: the registered name, or
    the file's stem (`examples/rmsnorm.py` -> rmsnorm; `x.py:name` -> name)."""
    file, _, name = spec.partition(":")
    return name or Path(file).stem if file.endswith(".py") else spec
