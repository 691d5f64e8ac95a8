"""Flash attention forward (causal and non-causal) in Triton, with online softmax.

Each program owns BLOCK_M query rows of one (batch, head). It walks the keys in BLOCK_N
tiles, keeping a running row max m, a running sum l and an unnormalized output acc;
when a new tile raises the max, acc and l are rescaled by exp(m_old - m_new). S = QK^T
and P = softmax(S) never reach HBM: memory traffic is one read of Q, K, V and one write
of O, against the naive form's S x S matrices per head.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


def attention_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) V with S and P materialized (the memory-hungry form)."""
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, n_heads, seq_len,
                     stride_b, stride_h, stride_s,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = (bh // n_heads).to(tl.int64) * stride_b + (bh % n_heads).to(tl.int64) * stride_h
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols0 = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * stride_s + dims[None, :],
                mask=rows[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = seq_len
    if CAUSAL:
        hi = (pid_m + 1) * BLOCK_M          # keys past the block's last row are all masked
    for start in tl.range(0, hi, BLOCK_N):
        cols = start + cols0
        kt = tl.load(k_ptr + base + cols[None, :] * stride_s + dims[:, None],
                     mask=cols[None, :] < seq_len, other=0.0)
        qk = tl.dot(q, kt) * qk_scale        # log2 domain: exp2 below
        valid = cols[None, :] < seq_len
        if CAUSAL:
            valid = valid & (rows[:, None] >= cols[None, :])
        qk = tl.where(valid, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + cols[:, None] * stride_s + dims[None, :],
                    mask=cols[:, None] < seq_len, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rows[:, None] * stride_s + dims[None, :],
             out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              block_m: int = 128, block_n: int = 64) -> torch.Tensor:
    """Attention forward for (batch, heads, seq, head_dim) tensors of one layout."""
    if q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError("attention: q, k, v must all be (batch, heads, seq, head_dim)")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("attention: q, k, v must be contiguous (call .contiguous() first)")
    b, h, s, d = q.shape
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"attention: head_dim {d} is not a power of two in 16..256")
    out = torch.empty_like(q)
    grid = (triton.cdiv(s, block_m), b * h)
    extra = {} if q.device.type == "cpu" else {"num_warps": 8, "num_stages": 3}
    attention_kernel[grid](q, k, v, out, LOG2E / math.sqrt(d), h, s, q.stride(0), q.stride(1),
                           q.stride(2), HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
                           CAUSAL=causal, **extra)
    return out


def attention_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return attention(q, k, v, causal=True)
