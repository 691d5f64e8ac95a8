"""relu(A @ B) with the ReLU fused into the matmul epilogue, as one Triton kernel.

Tiled `tl.dot` with fp32 accumulation; the ReLU is applied to the accumulator in
registers before the single store, so the M x N intermediate never goes to HBM.
Masks make any M, N, K valid. Autotuned over a few Hopper-friendly tile shapes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def matmul_relu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eager form: a GEMM kernel, then a separate ReLU kernel."""
    return torch.relu(a @ b)


def _configs() -> list[triton.Config]:
    shapes = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
              (64, 128, 64, 4, 4), (64, 64, 32, 4, 4)]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8},
                      num_stages=s, num_warps=w)
        for m, n, k, s, w in shapes
    ]


@triton.jit
def matmul_relu_tile(a_ptr, b_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = relu(A @ B); tiles in grouped order for L2 reuse."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % group_m
    pid_n = (pid % group_size) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = tl.maximum(acc, 0.0)  # the fused epilogue: free, the tile is still in registers
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


matmul_relu_kernel = triton.autotune(configs=_configs(), key=["M", "N", "K"])(matmul_relu_tile)
"""The autotuned kernel the launcher uses by default."""


def matmul_relu(a: torch.Tensor, b: torch.Tensor,
                block: tuple[int, int, int] | None = None) -> torch.Tensor:
    """C = relu(A @ B) for 2-D A (M x K) and B (K x N) of the same dtype, any strides.

    `block=(BLOCK_M, BLOCK_N, BLOCK_K)` skips autotuning (used by the CPU interpreter
    tests, where there is nothing to time).
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul_relu: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul_relu: dtypes differ ({a.dtype} vs {b.dtype})")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))
    if block is None:
        matmul_relu_kernel[grid](*args)
    else:
        bm, bn, bk = block
        matmul_relu_tile[grid](*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=4)
    return c


if __name__ == "__main__":  # pragma: no cover - needs a GPU
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(matmul_relu(a, b), matmul_relu_reference(a, b), rtol=1e-2, atol=1e-2)
    for name, fn in [("triton", lambda: matmul_relu(a, b)),
                     ("torch", lambda: matmul_relu_reference(a, b))]:
        ms = triton.testing.do_bench(fn, return_mode="median")
        print(f"{name}: {ms * 1e3:.1f} us, {2 * 4096**3 / ms / 1e9:.0f} TFLOP/s")
