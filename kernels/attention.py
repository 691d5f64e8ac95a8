"""Flash attention forward (causal and non-causal) in Triton, with online softmax.

Each program owns BLOCK_M query rows of one (batch, head). It walks the keys in BLOCK_N
tiles, keeping a running row max m, a running sum l and an unnormalized output acc;
when a new tile raises the max, acc and l are rescaled by exp(m_old - m_new). S = QK^T
and P = softmax(S) never reach HBM: memory traffic is one read of Q, K, V and one write
of O, against the naive form's S x S matrices per head.

Q, K and V tiles arrive through tensor descriptors (TMA) over the (batch * heads * seq,
head_dim) view. The key loop is split in two: tiles that need no mask (every key valid
and, when causal, left of the block's diagonal) run without any per-element select, and
only the diagonal tile (causal) or the last partial tile (sequence not a multiple of
BLOCK_N) is masked. Rows a tile reads past the end of one head belong to the next head
(or are zero-filled past the tensor): the mask removes them from the softmax, and the
output is stored with a row mask.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .tuning import launch_options

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
def _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, rows, lo, hi, seq_len, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Online-softmax update of (acc, l_i, m_i) over keys lo..hi (log2 domain: exp2)."""
    for start in tl.range(lo, hi, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        k = k_desc.load([row0 + start, 0])
        qk = tl.dot(q, k.T)
        if MASKED:
            cols = start + tl.arange(0, BLOCK_N)
            valid = cols[None, :] < seq_len
            if CAUSAL:
                valid = valid & (rows[:, None] >= cols[None, :])
            qk = tl.where(valid, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            qk = qk - m_new[:, None]
        else:                          # scale folded into one multiply-add per element
            m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = v_desc.load([row0 + start, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_kernel(q_desc, k_desc, v_desc, o_ptr, qk_scale, seq_len,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    row0 = tl.program_id(1) * seq_len            # first row of this (batch, head)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = q_desc.load([row0 + pid_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:                         # BLOCK_M % BLOCK_N == 0: the split is tile-aligned
        split = pid_m * BLOCK_M
        end = tl.minimum(split + BLOCK_M, seq_len)
    else:
        split = (seq_len // BLOCK_N) * BLOCK_N
        end = seq_len
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, rows, 0, split, seq_len,
                            qk_scale, BLOCK_N, False, CAUSAL)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, rows, split, end,
                            seq_len, qk_scale, BLOCK_N, True, CAUSAL)
    out = acc / l_i[:, None]
    dims = tl.arange(0, HEAD_DIM)
    offs = (row0 + rows).to(tl.int64)[:, None] * HEAD_DIM + dims[None, :]
    tl.store(o_ptr + offs, out.to(o_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


def _set_blocks(nargs: dict) -> None:
    """Autotune pre-hook: descriptor block shapes follow the config being tried."""
    d = nargs["HEAD_DIM"]
    nargs["q_desc"].block_shape = [nargs["BLOCK_M"], d]
    nargs["k_desc"].block_shape = [nargs["BLOCK_N"], d]
    nargs["v_desc"].block_shape = [nargs["BLOCK_N"], d]


def attention_config(bm: int, bn: int, stages: int, warps: int) -> triton.Config:
    """One point of the search space; BLOCK_N must divide BLOCK_M (tile-aligned causal
    split)."""
    if bm % bn:
        raise ValueError(f"attention: BLOCK_N {bn} must divide BLOCK_M {bm}")
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps,
                         pre_hook=_set_blocks)


# The fastest points of the sweeps on the H200 at 4x16x4096x128 fp16, non-causal and
# causal (`make sweep KERNEL=attention|attention_causal`,
# reports/bench/sweep_attention*_NVIDIA_H200.md).
CONFIGS = [attention_config(128, 64, 2, 4), attention_config(128, 128, 3, 8),
           attention_config(64, 64, 3, 4), attention_config(256, 64, 3, 8)]

attention_tuned = triton.autotune(
    configs=CONFIGS, key=["seq_len", "HEAD_DIM", "CAUSAL"])(attention_kernel)
"""The autotuned kernel the launcher uses when no config is given."""


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError("attention: q, k, v must all be (batch, heads, seq, head_dim)")
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        raise ValueError("attention: q, k, v must be contiguous (call .contiguous() first)")
    if q.shape[-1] not in (16, 32, 64, 128, 256):
        raise ValueError(f"attention: head_dim {q.shape[-1]} is not a power of two in 16..256")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              config: triton.Config | None = None) -> torch.Tensor:
    """Attention forward for contiguous (batch, heads, seq, head_dim) tensors.

    A `config` (from `attention_config`) skips autotuning: the CPU interpreter tests and
    the sweep that chose the configs.
    """
    _check(q, k, v)
    b, h, s, d = q.shape
    out = torch.empty_like(q)
    # Placeholder block shapes: the autotune pre-hook (or _set_blocks below) sets them.
    descs = [TensorDescriptor.from_tensor(t.view(b * h * s, d), [16, d]) for t in (q, k, v)]
    args = (*descs, out, LOG2E / math.sqrt(d), s)
    if config is None:
        def grid(meta: dict) -> tuple[int, int]:
            return (triton.cdiv(s, meta["BLOCK_M"]), b * h)
        attention_tuned[grid](*args, HEAD_DIM=d, CAUSAL=causal)
        return out
    meta = {**config.kwargs, "HEAD_DIM": d}
    _set_blocks({"q_desc": descs[0], "k_desc": descs[1], "v_desc": descs[2], **meta})
    attention_kernel[(triton.cdiv(s, meta["BLOCK_M"]), b * h)](
        *args, HEAD_DIM=d, CAUSAL=causal, **launch_options(config, q.device))
    return out


def attention_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return attention(q, k, v, causal=True)
