"""LayerNorm forward with weight and bias; mean and variance in fp32.

One program per row: the row is loaded once (it fits one block), mean and variance are
computed in fp32 registers, and the normalized, scaled and shifted row is stored once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EPS = 1e-5


def layernorm_naive(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Written out by hand: mean, centre, variance, rsqrt, scale, shift (several kernels)."""
    mean = x.mean(dim=-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc * torch.rsqrt(var + EPS) * w + b


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, x_stride, out_stride, eps,
                     BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * (1.0 / tl.sqrt(var + eps)) * w + b
    tl.store(out_ptr + row * out_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = EPS
              ) -> torch.Tensor:
    """LayerNorm over the last dim of a 2-D tensor whose rows fit one block (<= 16384)."""
    if x.ndim != 2 or x.stride(1) != 1:
        raise ValueError("layernorm: needs a 2-D tensor with contiguous rows")
    if w.shape != (x.shape[1],) or b.shape != (x.shape[1],):
        raise ValueError("layernorm: weight and bias must have one value per column")
    block = triton.next_power_of_2(x.shape[1])
    if block > 16384:
        raise ValueError(f"layernorm: rows of {x.shape[1]} do not fit one block")
    out = torch.empty_like(x)
    if x.shape[0]:
        layernorm_kernel[(x.shape[0],)](x, w, b, out, x.shape[1], x.stride(0), out.stride(0),
                                        eps, BLOCK_SIZE=block,
                                        num_warps=4 if block <= 2048 else 8)
    return out
