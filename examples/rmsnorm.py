"""A workload file: RMSNorm declared with the toolkit's public registry API.

    make systems WORKLOAD=examples/rmsnorm.py     # Nsight Systems timeline of every variant
    make compute KERNEL=examples/rmsnorm.py       # Nsight Compute counters of its kernels
    make profile WORKLOAD=examples/rmsnorm.py     # both, then the page reports/rmsnorm/
    python -m workflows.bench --workloads examples/rmsnorm.py

A file declares one or more `Workload`s: how to make inputs for each size, the variants
(`impl(callable)` or `impl("module:attr")`, `compiled(...)` for torch.compile), the
reference to check them against, and the cost model per call (FLOPs, the fewest HBM bytes:
each input read once, each output written once, and the ideal kernel count). The runner
builds, checks and warms up every variant before any NVTX range opens, then times each in
the range `rmsnorm/<variant>`.

RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, per row. Eager PyTorch runs it as five
kernels (square, mean, add + rsqrt, two multiplies); the floor is one read of x and w and
one write of y, which one Triton program per row reaches.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

try:                                      # run by the toolkit from its checkout
    from workflows.workloads import CostModel, Workload, compiled, impl, randn
except ImportError:
    try:                                  # the installed package
        from nsight_workflows.workflows.workloads import CostModel, Workload, compiled, impl, randn
    except ImportError:                   # run as a script from the checkout's examples/
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from workflows.workloads import CostModel, Workload, compiled, impl, randn

EPS = 1e-6


def rmsnorm_naive(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch, one kernel per op."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * w


def rmsnorm_builtin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    """One program per row: the row is read once, reduced in registers, scaled, written."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * stride + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm_triton(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Launch rmsnorm_kernel over the rows of a contiguous 2-D x."""
    if not x.is_contiguous() or x.dim() != 2:
        raise ValueError("rmsnorm_triton: x must be a contiguous 2-D tensor")
    y = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    rmsnorm_kernel[(x.shape[0],)](x, w, y, x.shape[1], x.stride(0), EPS, BLOCK=block,
                                  num_warps=4 if block <= 2048 else 8)
    return y


def rmsnorm_cost(shapes: list[tuple[int, ...]], dtype: str) -> CostModel:
    (m, n), (nw,) = shapes
    nbytes = (2 * m * n + nw) * {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    return CostModel(flops=4 * m * n, min_bytes=nbytes, ideal_kernels=1)


RMSNORM = Workload(
    name="rmsnorm",
    description="RMSNorm over the last dimension with a weight, statistics in fp32",
    dtype="float32",
    sizes={"default": [(32768, 4096), (4096,)], "small": [(127, 1000), (1000,)]},
    make_inputs=randn,
    variants={"naive": impl(rmsnorm_naive), "builtin": impl(rmsnorm_builtin),
              "compiled": compiled(impl(rmsnorm_naive)), "triton": impl(rmsnorm_triton)},
    reference=impl(rmsnorm_builtin),
    cost=rmsnorm_cost,
    tolerance={"rtol": 1e-4, "atol": 1e-4},
)

if __name__ == "__main__":  # pragma: no cover - needs a GPU
    x, w = randn(RMSNORM.shapes("default"), "float32", "cuda")
    torch.testing.assert_close(rmsnorm_triton(x, w), rmsnorm_builtin(x, w), rtol=1e-4, atol=1e-4)
    ms = triton.testing.do_bench(lambda: rmsnorm_triton(x, w), return_mode="median")
    floor = rmsnorm_cost(RMSNORM.shapes("default"), "float32").min_bytes
    print(f"rmsnorm {x.shape[0]}x{x.shape[1]}: {ms * 1e3:.1f} us, {floor / ms / 1e6:.0f} GB/s")
    print(f"(floor at 4.8 TB/s: {floor / 4.8e12 * 1e6:.1f} us; {math.prod(x.shape)} elements)")
