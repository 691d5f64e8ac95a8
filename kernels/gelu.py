"""Tanh-approximation GeLU as one fused, masked Triton kernel.

Shape of the Triton tutorials: torch reference -> `gelu_kernel` -> launcher `gelu()`
-> allclose check -> benchmark (run this file on a GPU). One read of x and one write of y
per element: the HBM floor is 8 bytes per fp32 element.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SQRT_2_OVER_PI = 0.7978845608028654
GELU_COEF = 0.044715
# Triton kernels may read module globals only when they are constexpr.
_K_SQRT_2_OVER_PI = tl.constexpr(SQRT_2_OVER_PI)
_K_GELU_COEF = tl.constexpr(GELU_COEF)


def gelu_reference(x: torch.Tensor) -> torch.Tensor:
    """The op chain as the lecture writes it (nine eager kernels on a GPU)."""
    return 0.5 * x * (1 + torch.tanh(SQRT_2_OVER_PI * (x + GELU_COEF * x * x * x)))


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one block of BLOCK_SIZE elements.

    tanh(a) is written 1 - 2 / (exp(2a) + 1): unlike (e - 1) / (e + 1) it stays finite
    when exp(2a) overflows to inf (|x| above about 5.5 in fp32).
    """
    pid = tl.program_id(axis=0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    a = _K_SQRT_2_OVER_PI * (x + _K_GELU_COEF * x * x * x)
    tanh = 1.0 - 2.0 / (tl.exp(2.0 * a) + 1.0)
    y = 0.5 * x * (1.0 + tanh)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def gelu(x: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
    """Launch `gelu_kernel` over a contiguous tensor of any shape and size."""
    if not x.is_contiguous():
        raise ValueError("gelu: input must be contiguous (call .contiguous() first)")
    y = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return y
    grid = (triton.cdiv(n, block_size),)
    gelu_kernel[grid](x, y, n, BLOCK_SIZE=block_size, num_warps=4)
    return y


if __name__ == "__main__":  # pragma: no cover - needs a GPU
    x = torch.randn(8192, 8192, device="cuda")
    torch.testing.assert_close(gelu(x), gelu_reference(x), rtol=1e-5, atol=1e-5)
    ms = triton.testing.do_bench(lambda: gelu(x), return_mode="median")
    print(f"gelu 8192x8192 fp32: {ms * 1e3:.1f} us, {2 * x.numel() * 4 / ms / 1e6:.0f} GB/s")
