"""The compute/1 document (Nsight Compute counters per profiled launch) and its parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .findings import Finding


@dataclass
class KernelLaunch:
    """One profiled kernel launch (Nsight Compute raw page row), in base units."""

    range: str
    name: str
    duration_ns: int | None = None
    dram_read_bytes: int | None = None
    dram_write_bytes: int | None = None
    dram_throughput_pct: float | None = None
    dram_bytes_per_s: float | None = None
    sm_sol_pct: float | None = None
    mem_sol_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    block_size: int | None = None
    grid_size: int | None = None
    waves_per_sm: float | None = None
    tensor_pipe_pct: float | None = None
    bound: str | None = None
    limit_registers: float | None = None
    limit_shared_mem: float | None = None
    limit_warps: float | None = None
    limit_blocks: float | None = None


@dataclass
class ComputeRange:
    """Per NVTX range, per iteration: summed kernels and roofline placement."""

    range: str
    kernels_per_iter: float
    duration_ns_per_iter: float
    dram_bytes_per_iter: float
    dram_bytes_per_s: float | None = None
    dram_vs_min_bytes: float | None = None
    intensity_flop_per_byte: float | None = None
    flops_per_s: float | None = None
    pct_of_roofline: float | None = None
    pct_of_measured_gemm: float | None = None


@dataclass
class Ceilings:
    """True upper bounds (ncu's DRAM peak, the datasheet's dense FLOP/s), with sources;
    the GEMM rate measured in the run is a second reference, not a ceiling."""

    dram_bytes_per_s: float | None = None
    dram_source: str | None = None
    flops_per_s: float | None = None
    flops_source: str | None = None
    measured_flops_per_s: float | None = None


@dataclass
class ComputeSource:
    path: str
    gpu: str | None


@dataclass
class ComputeDoc:
    """The compute/1 document: one entry per profiled launch, per-range totals, findings."""

    source: ComputeSource
    kernels: list[KernelLaunch]
    ranges: list[ComputeRange]
    ceilings: Ceilings
    thresholds: dict[str, float]
    run: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    schema: str = "compute/1"
