"""relu(A @ B) with the ReLU fused into the matmul epilogue, as one Triton kernel.

Two forms of the same tile computation (fp32 accumulation; the ReLU is applied to the
accumulator in registers before the single store, so the M x N intermediate never goes
to HBM):

- `matmul_relu_persistent`: the Hopper form. One program per SM walks the output tiles
  (grouped order, so the GROUP_M row panels sharing a B column panel are read while they
  are still in L2); A, B and C move through tensor descriptors made on the device (TMA:
  bulk copies into shared memory, out-of-bounds rows and columns zero-filled on load and
  clipped on store, so no masks). Used when both inputs have unit inner stride and
  16-byte aligned rows, which TMA requires.
- `matmul_relu_tile`: one program per tile with masked pointer loads, for any strides.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tuning import launch_options, sm_count


def matmul_relu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eager form: a GEMM kernel, then a separate ReLU kernel."""
    return torch.relu(a @ b)


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M consecutive row tiles share each column tile in turn."""
    group_size = GROUP_M * num_pid_n
    first_m = (tile // group_size) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group_size) % group_m
    pid_n = (tile % group_size) // group_m
    return pid_m, pid_n


@triton.jit
def matmul_relu_tile(a_ptr, b_ptr, c_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of C = relu(A @ B) from masked pointer loads."""
    pid_m, pid_n = _tile_coords(tl.program_id(axis=0), tl.cdiv(M, BLOCK_M),
                                tl.cdiv(N, BLOCK_N), GROUP_M)
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


@triton.jit
def matmul_relu_persistent(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                           NUM_SMS: tl.constexpr, SPLIT_EPILOGUE: tl.constexpr):
    """Persistent tiles through TMA descriptors made on the device: their block shapes are
    the config's, so autotuning needs no host-side hook and Triton can cache its choice
    (TRITON_CACHE_AUTOTUNING; the ncu path relies on it). With SPLIT_EPILOGUE, C is
    stored in two half tiles: half the staging shared memory, room for one more stage."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if SPLIT_EPILOGUE else BLOCK_N
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, C_BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    # A second tile counter for the epilogue keeps the K loop's prologue independent of it.
    tile_c = tl.program_id(axis=0) - NUM_SMS
    for tile in tl.range(tl.program_id(axis=0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.maximum(acc, 0.0)                  # the fused ReLU
        out_ty = c_ptr.dtype.element_ty
        if SPLIT_EPILOGUE:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left.to(out_ty))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right.to(out_ty))
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(out_ty))


def persistent_config(bm: int, bn: int, bk: int, stages: int, warps: int,
                      split: bool = False) -> triton.Config:
    """One point of the persistent kernel's search space."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                          "SPLIT_EPILOGUE": split}, num_stages=stages, num_warps=warps)


def tile_config(bm: int, bn: int, bk: int, stages: int, warps: int) -> triton.Config:
    """One point of the pointer kernel's search space."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                         num_stages=stages, num_warps=warps)


# The fastest of the sweeps on the H200 at 4096^3 fp16 (`make sweep KERNEL=matmul_relu`,
# reports/bench/sweep_matmul_relu_NVIDIA_H200.md: 193-210 us there, torch's relu(a @ b)
# 198-219 us), plus 64-row tiles for shapes with few tiles.
PERSISTENT_CONFIGS = [persistent_config(128, 256, 64, 4, 8, True),
                      persistent_config(128, 256, 64, 3, 8, True),
                      persistent_config(128, 128, 64, 5, 4),
                      persistent_config(128, 128, 64, 4, 4),
                      persistent_config(64, 128, 64, 4, 4)]
TILE_CONFIGS = [tile_config(128, 256, 64, 3, 8), tile_config(128, 128, 32, 4, 4),
                tile_config(64, 128, 64, 4, 4), tile_config(64, 64, 32, 4, 4)]

matmul_relu_persistent_tuned = triton.autotune(
    configs=PERSISTENT_CONFIGS, key=["M", "N", "K"])(matmul_relu_persistent)
"""The autotuned persistent kernel the launcher uses for TMA-compatible inputs."""

matmul_relu_tile_tuned = triton.autotune(
    configs=TILE_CONFIGS, key=["M", "N", "K"])(matmul_relu_tile)
"""The autotuned pointer kernel for inputs TMA cannot read."""


def tma_compatible(*tensors: torch.Tensor) -> bool:
    """TMA needs unit inner stride, 16-byte aligned base and 16-byte aligned row pitch."""
    return all(t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0
               and t.data_ptr() % 16 == 0 for t in tensors)


def _launch_persistent(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                       config: triton.Config | None) -> None:
    M, K = a.shape
    N = b.shape[1]
    sms = sm_count(a.device)
    # Device-side descriptors live in a scratch buffer Triton asks for at launch.
    triton.set_allocator(lambda size, alignment, stream: torch.empty(
        size, device=a.device, dtype=torch.int8))

    def grid(meta: dict) -> tuple[int]:
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(sms, tiles),)

    args = (a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0))
    if config is None:
        matmul_relu_persistent_tuned[grid](*args, NUM_SMS=sms)
    else:
        matmul_relu_persistent[grid(config.kwargs)](*args, NUM_SMS=sms,
                                                    **launch_options(config, a.device))


def _launch_tiles(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                  config: triton.Config | None) -> None:
    M, K = a.shape
    N = b.shape[1]

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))
    if config is None:
        matmul_relu_tile_tuned[grid](*args)
    else:
        matmul_relu_tile[grid(config.kwargs)](*args, **launch_options(config, a.device))


def matmul_relu(a: torch.Tensor, b: torch.Tensor, config: triton.Config | None = None,
                persistent: bool | None = None) -> torch.Tensor:
    """C = relu(A @ B) for 2-D A (M x K) and B (K x N) of the same dtype, any strides.

    `persistent=None` picks the TMA kernel when the inputs allow it (see
    `tma_compatible`), the pointer kernel otherwise; True/False forces one (True on
    incompatible inputs is a ValueError). A `config` (from `persistent_config` or
    `tile_config`) skips autotuning and selects its kernel: the CPU interpreter tests,
    where there is nothing to time, and the sweep that chose the configs.
    """
    if config is not None:
        persistent = "SPLIT_EPILOGUE" in config.kwargs
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul_relu: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul_relu: dtypes differ ({a.dtype} vs {b.dtype})")
    c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
    usable = tma_compatible(a, b, c)
    if persistent and not usable:
        raise ValueError("matmul_relu: persistent=True needs unit inner strides and "
                         "16-byte aligned rows (TMA); got strides "
                         f"{a.stride()} and {b.stride()} for {a.dtype}")
    if usable if persistent is None else persistent:
        _launch_persistent(a, b, c, config)
    else:
        _launch_tiles(a, b, c, config)
    return c


if __name__ == "__main__":  # pragma: no cover - needs a GPU
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(matmul_relu(a, b), matmul_relu_reference(a, b), rtol=1e-2, atol=1e-2)
    for name, fn in [("triton", lambda: matmul_relu(a, b)),
                     ("torch", lambda: matmul_relu_reference(a, b))]:
        ms = triton.testing.do_bench(fn, return_mode="median")
        print(f"{name}: {ms * 1e3:.1f} us, {2 * 4096**3 / ms / 1e9:.0f} TFLOP/s")
