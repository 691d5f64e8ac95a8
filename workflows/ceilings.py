"""Measure the GPU's two ceilings in the same run: copy bandwidth and GEMM FLOP/s.

Datasheet peaks are leads; reports place results against what this GPU does now:
a large device-to-device copy (bytes read + written / time) and a large GEMM in the
workload's dtype through torch (2 n^3 / time), each the median of timed repetitions
with CUDA events after warm-up, on random data. Run before any NVTX range opens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COPY_BYTES = 1 << 30
GEMM_N = 8192
REPEATS = 10


def _median_seconds(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return sorted(times)[len(times) // 2]


def measure(dtype: str) -> dict[str, float]:
    """{"copy_bytes_per_s": ..., "<dtype>_gemm_flops_per_s": ...} measured on cuda:0."""
    import torch

    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    copy_s = _median_seconds(lambda: dst.copy_(src))
    a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=getattr(torch, dtype))
    gemm_s = _median_seconds(lambda: a @ b)
    return {"copy_bytes_per_s": 2 * COPY_BYTES / copy_s,
            f"{dtype}_gemm_flops_per_s": 2 * GEMM_N**3 / gemm_s,
            "method": f"median of {REPEATS} CUDA-event timings: {COPY_BYTES >> 20} MiB "
                      f"device copy, {GEMM_N}^3 {dtype} GEMM via torch"}
