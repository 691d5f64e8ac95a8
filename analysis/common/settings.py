"""Every setting of the analysis in one place: the environment variables it reads and the
default thresholds its rules and classifications judge by. docs/settings.md lists
each of them (a test keeps it complete); the rules table (`python -m analysis rules`)
shows the thresholds each rule uses.

The modules that use a value import it from here; nothing else reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENVIRONMENT: dict[str, str] = {
    "NSYS": "the `nsys` executable to convert .nsys-rep reports and run `nsys stats` "
            "(default: PATH, then the usual install folders)",
    "NCU": "the `ncu` executable to convert .ncu-rep reports (default: PATH, then the usual "
           "install folders)",
}
"""Environment variables the analysis reads, and what for."""


def env(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of a declared environment variable (KeyError for an undeclared one)."""
    if name not in ENVIRONMENT:
        raise KeyError(f"{name} is not a declared setting (analysis/common/settings.py)")
    return (os.environ if environ is None else environ).get(name)


# --- findings -----------------------------------------------------------------------------
FINDING_MIN_PCT = 1.0
"""A finding that would save less than this % of the analyzed time is listed after the
others and left off the pages."""
OFF_PATH_PCT = 1.0
"""A cause whose removal the step model replays to a saving under this % of its range's
wall time is off the critical path (a faster kernel in a loop the host holds, idle gaps
the host does not wait on): its finding says so, as information."""

# --- reading ----------------------------------------------------------------------------
CHUNK_ROWS = 250_000
"""GPU operations per window when reading an export (peak memory follows it)."""

# --- the systems rules -------------------------------------------------------------------
GAP_NS = 5_000
"""Idle gaps shorter than this are not summarized (the idle rules' smallest gap)."""
IDLE_WARN_PCT = 10.0
"""gpu_idle_gaps: idle share of a leaf range's wall time that raises a finding."""
LAUNCH_IDLE_PCT = 20.0
"""launch_bound: idle share above which short kernels point at launch overhead."""
LAUNCH_KERNEL_NS = 20_000
"""launch_bound: a median kernel shorter than this is short."""

# --- set-apart (warm-up) instances -------------------------------------------------------
WARMUP_FACTOR = 10
"""An instance that launched at least this many times its range's median kernels ..."""
WARMUP_EXTRA = 100
"""... and at least this many more is warm-up (autotuning, first calls)."""
WARMUP_MIN_INSTANCES = 3
"""Instances a range needs before a median of them means something."""
WARMUP_WALL_FACTOR = 3
"""A leading instance that took this many times the median wall time and loaded modules
is a first call (set apart as warm-up)."""

# --- where the wall time goes: the host-side rules -----------------------------------------
LOOP_MIN_INSTANCES = 3
"""A range repeated at least this many times in its process is a loop's iteration."""
INPUT_SHARE_PCT = 30.0
"""input_starved: a range without kernels of its own holding this % of its parent's wall
time ..."""
INPUT_BUSY_PCT = 50.0
"""... while the GPU was busy less than this % of its wall time."""
SYNC_INSTANCES_PCT = 80.0
"""sync_in_loop: a synchronize call in at least this % of a loop's iterations ..."""
SYNC_MIN_PCT = 2.0
"""... waiting at least this % of their wall time, or (where a step model holds the loop)
costing at least FINDING_MIN_PCT of it replayed without the wait: what a sync costs is
more than its wait where the GPU idles after it."""
PAGEABLE_INSTANCES_PCT = 80.0
"""pageable_copy: copies from or to pageable memory in at least this % of iterations."""
PINNED_BPS = 55e9
"""Host-to-device bytes/s from pinned memory when the trace has no pinned copy to measure
it: 55 GB/s, measured on the H200 test machine (tests/data/battery/pageable_copy_fixed:
20 x 256 MiB in 96.8 ms)."""
INPUT_WAIT_MIN_PCT = 30.0
"""input_wait: the loop's thread is found waiting for the DataLoader's next batch in at
least this % of its Python samples."""
BUILD_MIN_PCT = 10.0
"""batch_in_python: the lines that build a tensor from Python data (torch.tensor of a list,
and the lines of the same function before it) hold at least this % of a loop's Python
samples."""
PER_TENSOR_MIN_PCT = 10.0
"""per_tensor_ops: a line updating tensors in place one by one holds at least this % of a
loop's Python samples."""
SLOW_TAIL_PCT = 10.0
"""slow_step: a loop whose slow steps (SLOW_STEP_FACTOR x its median step or longer) add
this share of its cost as it runs, or more (the mean step over the median)."""
SAVE_MIN_PCT = 1.0
"""slow_step: a loop whose thread was sampled in torch.save for this share of its cost
as it runs, or more: a checkpoint on the loop's thread, named by the call (a save on a
run's last step, or under a GPU backlog that hides it, leaves the steps' lengths alike)."""
SLOW_STEP_FACTOR = 1.5
"""slow_step: the steps this many times the loop's median step or longer are the slow
ones its change moves off the loop's thread. A periodic checkpoint in a loop the GPU
holds took 1.9x the median step on the generated battery (the GPU's backlog hides part
of it), under the 3x that makes a step a tail step (runs.TAIL_FACTOR)."""
FILL_MIN_PCT = 5.0
"""fill_overwritten: a loop's fill kernels (torch.zeros, torch.full, Tensor.fill_), one a
step or more, take at least this % of its kernel time."""
CAT_MIN_PER_STEP = 8
"""cat_in_loop: a loop launches at least this many concatenation kernels a step, the
longest CAT_GROWTH times the shortest or more (a tensor grown by torch.cat)."""
CAT_GROWTH = 1.5
"""cat_in_loop: the longest concatenation kernel over the shortest, at least."""
CAT_TREND = 0.5
"""cat_in_loop: where the longest concatenation kernel is under CAT_GROWTH x the shortest
(small pieces: a copy's launch jitter, ±10%, hides the growth of one copy), the rank
correlation of a step's concatenation kernels' durations, or grids (blocks: they follow
the output's size), with their order, at least
(median over the modeled steps). Pieces grown by torch.cat measured 0.68 to 0.99 on the
generated battery; kernels of one size give about 0."""
CHAIN_MIN_KERNELS = 4
"""unfused_elementwise: a chain is this many elementwise kernels or more, launched one
after the other with one launch configuration (loops/chains.py)."""
CHAIN_MIN_PCT = 2.0
"""unfused_elementwise: a loop's chains of one launch configuration, their kernels or
the host's dispatch of them, hold at least this % of its time as it runs. The finding's
saving is the model's, so a low bar only lets small chains be priced: at 5%, GeLU
chains whose fix saved 5-12% of their loops (the dispatch of eager ops costs more than
the launches' span shows: allocations, temporaries freed) got no finding (generated
battery seeds 45, 58, 59)."""
GIL_MIN_PCT = 10.0
"""gil_contention: waits for the GIL hold at least this % of a loop's critical path as it
runs."""
COPY_PATH_MIN_PCT = 10.0
"""copy_on_compute_stream: host-to-device copies hold at least this % of a loop's critical
path as it runs."""
ALLOC_MIN_PCT = 5.0
"""alloc_in_loop: memory management calls hold at least this % of a loop's wall time."""
READBACK_MIN_BYTES = 1 << 20
"""readback_in_loop: device-to-host copies of at least this many bytes per iteration ..."""
READBACK_INSTANCES_PCT = 80.0
"""... in at least this % of a loop's iterations."""
LOADS_INSTANCES_PCT = 50.0
"""kernel_loads_per_call: module or library loads in at least this % of iterations."""
HOST_IDLE_PCT = 50.0
"""host_bound: the GPU idle at least this % of a range's wall time ..."""
HOST_OUTSIDE_PCT = 50.0
"""... while its thread spent at least this % of it outside CUDA calls."""
LAUNCH_HOST_PCT = 25.0
"""launch_bound: launch calls fill at least this % of the idle time (when traced)."""
FP32_GEMM_PCT = 10.0
"""fp32_gemm: fp32 GEMMs without tensor cores hold at least this % of a range's kernel
time."""

# --- the Nsight Compute plan (analysis/commands/picks.py) -----------------------------------------
NCU_INSTANCES = 3
"""Launch configurations profiled per kernel name at most (those with the most steady GPU
time); `make compute NCU_INSTANCES=N` raises it."""
NCU_RUN_SHARE = 10.0
"""A launch configuration beyond its name's top one gets an ncu run of its own (the whole
program again) only when it holds this % of the steady-state GPU time; else it is
profiled only where a run for other kernels reaches it. On the H200, such a run of
tests/data/tools/plan/decode_train.py took 20 s for a configuration holding 6.5%
(reports/bench/compute_plan_h200.md)."""
NCU_PASSES = 12
"""Replay passes per profiled launch with the toolkit's section set (SpeedOfLight,
Occupancy, LaunchStats, MemoryWorkloadAnalysis, the roofline chart): every launch of the
committed H200 reports says 12 (`profiler__replayer_passes`, tests/data/ncu/); ncu's
default set takes 10."""
NCU_PASS_OVERHEAD_S = 0.1
"""Seconds a replay pass costs beside the kernel itself (ncu saves the program's device
memory before the first pass and restores what the kernel wrote before each other), for
the plan's estimate. On the H200, with decode_train.py: the same 12 launches cost 15.5 s
more with 12 passes each than with 1 (33.8 s against 18.3 s), 0.117 s a pass, from 0.05
s in the decode loop (little memory held) to 0.16 s in the training loop; its plan of 9
launches took 27.6 s, 0.074 s a pass beside the run's start and the program; after a fresh
start of the machine, the same 9 launches cost 0.148 s a pass
(tests/data/tools/plan/ncu_cost_h200.sh)."""
NCU_MAX_RUNS = 2
"""ncu runs a plan makes at most (each runs the whole program again): the runs are chosen
to reach the most steady GPU time, most first, until they reach the 90% cut."""
NCU_RUN_OVERHEAD_S = 6.0
"""Seconds one ncu run costs beside the program's GPU span (Python, torch and CUDA start
under ncu, ncu's own start and the report: on the H200, ncu attached to decode_train.py
6.1 s after it started), for the plan's estimate ..."""
NCU_SLOWDOWN = 1.0
"""... and how much longer the program's GPU span runs under ncu than under Nsight
Systems (every launch intercepted by both): on the H200, decode_train.py ran 13.4 s under
ncu profiling nothing, 12.8 s alone; its Systems span up to the last launch profiled was
12.9 s, under ncu 11.9 s (the 1-pass run above)."""

# --- peaks of the GPUs the tool meets (NVIDIA's datasheets, dense: no sparsity) ------------
DATASHEET_FLOPS = {
    "NVIDIA H100 80GB HBM3": {"float8": 1978.9e12, "float16": 989.4e12,
                              "bfloat16": 989.4e12, "tfloat32": 494.7e12,
                              "float32": 66.9e12},
    "NVIDIA H100 PCIe": {"float8": 1513e12, "float16": 756.5e12, "bfloat16": 756.5e12,
                         "tfloat32": 378e12, "float32": 51.2e12},
    "NVIDIA H100 NVL": {"float8": 1670.5e12, "float16": 835.5e12, "bfloat16": 835.5e12,
                        "tfloat32": 417.5e12, "float32": 60e12},
    "NVIDIA H200": {"float8": 1978.9e12, "float16": 989.4e12, "bfloat16": 989.4e12,
                    "tfloat32": 494.7e12, "float32": 66.9e12},
    "NVIDIA H200 NVL": {"float8": 1670.5e12, "float16": 835.5e12, "bfloat16": 835.5e12,
                        "tfloat32": 417.5e12, "float32": 60e12},
}
"""Peak FLOP/s per GPU (its CUDA name) and dtype: the tensor-core rate for fp8, fp16, bf16
and tf32, the CUDA-core rate for fp32; the datasheets list sparse rates, half of which is
the dense rate kept here. Sources: NVIDIA H100 Tensor Core GPU datasheet (H100 SXM, H100
PCIe, H100 NVL) and NVIDIA H200 Tensor Core GPU datasheet (H200 SXM, H200 NVL). A rate
measured in the run (workflows/ceilings.py) is preferred where the run has one."""
DATASHEET_BW = {"NVIDIA H100 80GB HBM3": 3.35e12, "NVIDIA H100 PCIe": 2.0e12,
                "NVIDIA H100 NVL": 3.9e12, "NVIDIA H200": 4.8e12, "NVIDIA H200 NVL": 4.8e12}
"""HBM bytes/s per GPU, from the same datasheets."""
DATASHEET_SOURCE = "NVIDIA H100 / H200 Tensor Core GPU datasheets, dense rates"

# --- Nsight Compute classification and rules ----------------------------------------------
LATENCY_PCT = 60.0
"""A kernel whose SM and memory throughput are both under this % of peak is latency-bound."""
HIGH_UTILIZATION_PCT = 80.0
"""Throughput at or above this % of peak counts as near the roof (compute page)."""
OCCUPANCY_GAP_PTS = 10.0
"""low_occupancy: achieved below theoretical occupancy by at least these points."""
HIGH_DRAM_PCT = 80.0
"""low_occupancy: only info when DRAM throughput is at or above this % of peak."""
WAVES_MAX = 4.0
"""wave_quantization: only grids of fewer waves than this lose a noticeable tail."""
EXCESS_DRAM_X = 1.5
"""excess_dram_traffic: DRAM bytes at least this many times the cost model's minimum."""

# --- libraries' own ranges and the steps ------------------------------------------------
LIBRARY_DOMAINS = ("CCCL", "NCCL", "cuDNN", "cuBLAS", "cuBLASLt", "NVSHMEM")
"""NVTX domains libraries annotate their own calls with (compared without case): CUB's
`cub::DeviceSelect::Flagged`, NCCL's collectives. Their ranges are the library's: listed
under the user's range that holds them, no finding and no diff row of their own."""
STEP_MIN_NS = 1_000_000
"""A step found without the user naming it (a range picked by its count, a period of the
kernel sequence) is at least this long: a shorter repeat is an op or a collective, never
the step of a training run."""
STEP_MIN_COUNT = 3
"""Steps a source needs to give before its steps are taken."""
STEP_MATCH_PCT = 90.0
"""A period of a GPU's kernel sequence: kernels equal to the kernel one period later in
at least this % of the repeating part."""
DIFF_CONFIDENCE = 0.95
"""The diff's intervals: this coverage for a median and for a change between medians."""

# --- several ranks ------------------------------------------------------------------------
STRAGGLER_PCT = 5.0
"""straggler: a rank's compute per step above the median rank's by this % of the step."""
EXPOSED_PCT = 10.0
"""comm_not_overlapped: exposed communication above this % of a rank's step."""
