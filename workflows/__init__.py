"""Run workloads under Nsight Systems / Nsight Compute: registry, runner and tool drivers.

`workflows` never parses trace files (that is `analysis`), and `kernels` knows nothing
of profiling.
"""

NVTX_DOMAIN = "profkit"
"""The one NVTX domain every measured range of the toolkit lives in."""
