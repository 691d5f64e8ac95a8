"""The typed documents: meta.json, systems/2, compute/1, their entries and findings.

Each document's shape lives here once, as dataclasses; defaults live in the types, not at
the readers. `to_dict` / `to_json` write them, `from_dict(cls, obj)` reads them back
(documents/codec.py, re-exported here; the JSON schemas under documents/schemas/ are
generated from these types: `python -m analysis.documents.schemas`, and a test keeps the
files in step). Field order is the key order of the JSON files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .codec import (  # noqa: F401  (the documents' readers and writers, re-exported)
    T,
    dump_json,
    from_dict,
    to_dict,
    to_json,
    to_json_bytes,
)
from .compute import (  # noqa: F401  (compute/1, re-exported)
    Ceilings,
    ComputeDoc,
    ComputeRange,
    ComputeSource,
    KernelLaunch,
)
from .entries import (  # noqa: F401  (a range entry and its items, re-exported)
    CopyStat,
    HotFrame,
    KernelStat,
    PyLine,
    RangeEntry,
    TailStep,
    ThreadLaunches,
)
from .findings import (  # noqa: F401  (re-exported)
    NONE_APPLIES,
    SEVERITY_ORDER,
    Finding,
    Severity,
    ordered,
    top_findings,
)

# --- meta.json (written by the runner beside a trace) ------------------------------------

@dataclass
class CostModel:
    """Work one call must do, whatever the implementation."""

    flops: int = 0
    min_bytes: int = 0
    ideal_kernels: int = 1


ROLES = ("baseline", "builtin", "compiled", "triton", "other")
"""What a variant is: the baseline others are compared with (naive eager code), a builtin
op (a library's own kernel), a torch.compile'd function, a hand-written Triton kernel,
or anything else."""
ROLE_OF_NAME = {"naive": "baseline", "eager": "baseline", "builtin": "builtin",
                "compiled": "compiled", "triton": "triton"}
"""The role a variant of one of these names has unless its workload says otherwise."""


def role_by_name(variant: str) -> str:
    """A variant's role from its name alone (ROLE_OF_NAME, else "other")."""
    return ROLE_OF_NAME.get(variant, "other")


@dataclass
class Meta:
    """What the runner says of a run: the ranges it opened, iterations, cost model."""

    schema: str = "meta/1"
    workload: str | None = None
    description: str | None = None
    size: str | None = None
    shapes: list[list[int]] = field(default_factory=list)
    dtype: str | None = None
    iterations: int = 1
    warmup_calls: int | None = None
    domain: str | None = None
    variants: list[str] = field(default_factory=list)
    ranges: dict[str, str] = field(default_factory=dict)   # variant -> range path
    roles: dict[str, str] = field(default_factory=dict)    # variant -> one of ROLES
    cost_model: CostModel | None = None
    correctness: dict[str, Any] | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    compiled: dict[str, Any] | None = None
    ceilings: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # what the capture could not show
    started: str | None = None          # when the run began (ISO 8601)
    code_version: str | None = None     # the toolkit commit that made it (+dirty)
    cwd: str | None = None              # the program's working directory: pages name its
                                        # files relative to it

    def role(self, variant: str) -> str:
        """The variant's role: as meta.json says, else from its name (older files)."""
        return self.roles.get(variant) or role_by_name(variant)

    def ranges_of(self, *roles: str) -> list[tuple[str, str]]:
        """(variant, range path) of the variants that have one of `roles`, in order."""
        return [(v, p) for v, p in self.ranges.items() if self.role(v) in roles]

    def iterations_of(self, instances: int) -> int:
        """Iterations a range ran in all: per-instance iterations x its instances."""
        return self.iterations * max(instances, 1)

    @property
    def ideal_kernels(self) -> int | None:
        return self.cost_model.ideal_kernels if self.cost_model else None

    @property
    def graph_breaks(self) -> list[dict[str, Any]]:
        return list((self.compiled or {}).get("graph_breaks") or [])


# --- systems/2 ----------------------------------------------------------------------------

@dataclass
class Gpu:
    name: str | None
    sm_count: int | None
    memory_bandwidth_Bps: int | None


@dataclass
class SystemsSource:
    path: str
    export_schema_version: str | None
    nsys_version: str | None
    gpus: list[Gpu]


@dataclass
class KernelSummaryRow(KernelStat):
    """One kernel name over the whole trace (nsys stats' cuda_gpu_kern_sum:base row)."""

    time_pct: float                    # of all kernel time in the trace


@dataclass
class StreamBusy:
    """How busy one GPU (stream None) or one of its streams was over the GPU's span."""

    device: int
    stream: int | None
    operations: int
    busy_ns: int
    span_ns: int
    busy_pct: float


@dataclass
class OpRow:
    """A PyTorch op of emit_nvtx ranges, its name stripped of seq/op_id/sizes (ops.py)."""

    name: str
    direction: str                     # "forward" | "backward"
    calls: int
    kernel_count: int                  # kernels launched inside its ranges (inclusive)
    kernel_time_ns: int
    backward_kernel_count: int = 0     # forward rows: its backward ops' kernels (same seq)
    backward_kernel_time_ns: int = 0
    forward_op: str | None = None      # backward rows: the forward op of the same seq


@dataclass
class GpuOp:
    """A GPU operation of one iteration, times relative to the iteration's first op."""

    name: str
    kind: str
    start_ns: int
    end_ns: int


@dataclass
class VariantRow:
    """Per variant of meta.json: numbers per iteration (None where it cannot be said)."""

    variant: str
    range: str
    missing: bool = False
    iterations: int | None = None
    time_per_iter_ns: float | None = None
    kernels_per_iter: float | None = None          # launched by the range's own thread
    other_thread_kernels_per_iter: float = 0.0     # by other threads meanwhile (backward)
    gpu_idle_pct: float | None = None              # of the range's wall time: no GPU op ran
    achieved_Bps: float | None = None
    pct_of_peak_bw: float | None = None
    pct_of_copy_bw: float | None = None
    achieved_flops: float | None = None
    speedup_vs_baseline: float | None = None   # the baseline variant's time / this one's
    floor_ns: float | None = None      # cost model over true ceilings: no version is faster
    lever: str | None = None           # the biggest lever and its expected gain
    first_iteration: list[GpuOp] = field(default_factory=list)


@dataclass
class SystemsDoc:
    """The systems/2 document: per NVTX range, as `nsys stats` counts it, plus findings.
    In systems.json, `ranges` holds the entries of the loop ranges and of the ranges the
    pages show; every range is a row of ranges.parquet beside it (`tables`: each Parquet
    file and its rows)."""

    source: SystemsSource
    ranges: list[RangeEntry]      # every range: a range_table.RangeEntries (made when
                                  # read; read it with entry_column and entry_pick); in
                                  # systems.json the loops' and the pages' only
                                  # (documents.files.summary_rows), every one in Parquet
    variants: list[VariantRow] = field(default_factory=list)
    run: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    ops: list[OpRow] = field(default_factory=list)     # emit_nvtx op ranges, per op
    kernel_summary: list[KernelSummaryRow] = field(default_factory=list)   # whole trace
    gpu_busy: list[StreamBusy] = field(default_factory=list)   # per device and stream
    copies: list[CopyStat] = field(default_factory=list)   # whole trace, = cuda_gpu_mem_*
    ranks: list[RankRow] = field(default_factory=list)     # one export holding every rank
    steps: list[StepSet] = field(default_factory=list)     # per process: its steps
    capture: CaptureTotals | None = None                    # whole-capture GPU totals
    tables: dict[str, int] = field(default_factory=dict)   # Parquet file -> its rows
    schema: str = "systems/2"


def entry_column(entries: Sequence[RangeEntry], field: str) -> list:
    """One field of every entry of a document's range list, read as a column where the
    list keeps its entries as columns (range_table.RangeEntries: none is made for it)."""
    read = getattr(entries, "column", None)
    return read(field) if read is not None else [getattr(e, field) for e in entries]


def entry_array(entries: Sequence[RangeEntry], field: str) -> np.ndarray:
    """A numeric field of every entry as an int64 array (a missing value: 0), without the
    Python list entry_column gives (110k numbers made into objects and back)."""
    read = getattr(entries, "array", None)
    if read is not None:
        return read(field)
    return np.array([getattr(e, field) or 0 for e in entries], dtype=np.int64)


def entry_pick(entries: Sequence[RangeEntry], positions: Iterable[int]) -> list[RangeEntry]:
    """The entries at `positions` of a document's range list (of a RangeEntries: only
    those are made)."""
    take = getattr(entries, "pick", None)
    return take(positions) if take is not None else [entries[i] for i in positions]


def upgraded(obj: dict[str, Any]) -> dict[str, Any]:
    """A document's JSON form in the current version of its schema (older versions are
    read as well: systems/1 named `speedup_vs_baseline` `speedup_vs_naive` and a range's
    `wall_ns` `window_ns`)."""
    if obj.get("schema") != "systems/1":
        return obj
    rows = [{("speedup_vs_baseline" if k == "speedup_vs_naive" else k): v
             for k, v in row.items()} for row in obj.get("variants") or []
            if isinstance(row, dict)]
    entries = [{("wall_ns" if k == "window_ns" else k): v for k, v in e.items()}
               for e in obj.get("ranges") or [] if isinstance(e, dict)]
    return {**obj, "schema": "systems/2", "variants": rows, "ranges": entries}


# --- steps: how each process's steps were found (loops/find.py) -----------------------------

@dataclass
class StepSet:
    """One process's steps: where they came from and how long they took (steady ones)."""

    source: str                       # "named", "user range", "profiler marker",
                                      # "detected" or "whole capture"
    name: str | None = None           # the range path or marker; None when detected
    pid: int | None = None
    device: int | None = None         # detected: the GPU whose kernel sequence repeats
    count: int = 0                    # steady steps (durations_ns)
    warmup: int = 0                   # steps left out before them (warm-up, first calls)
    median_ns: float = 0.0
    median_low_ns: float = 0.0        # the median's interval (settings.DIFF_CONFIDENCE,
    median_high_ns: float = 0.0       # order statistics)
    p10_ns: float = 0.0               # the spread: 10th and 90th percentile step
    p90_ns: float = 0.0
    mean_ns: float = 0.0              # the mean per steady step
    durations_ns: list[int] = field(default_factory=list)   # steady steps, in order
    period_kernels: int | None = None  # detected: kernels per step on the stream read
    nccl_per_step: int | None = None  # NCCL launches per step, when every step has as many
    note: str = ""                    # why the sources before this one gave no steps


@dataclass
class CaptureTotals:
    """The whole capture's GPU time, every process and device together."""

    gpus: int = 0
    span_ns: int = 0                  # per device first to last operation, summed
    busy_ns: int = 0                  # per device time with any operation running, summed
    compute_ns: int = 0               # kernel time of every kernel but NCCL's
    communication_ns: int = 0         # NCCL kernel time
    memory_ns: int = 0                # copies and sets
    idle_ns: int = 0                  # span_ns - busy_ns
    exposed_comm_ns: int = 0          # NCCL kernel time with no other kernel on its device


# --- ranks/1: several ranks side by side ----------------------------------------------------

@dataclass
class RankRow:
    """One rank's step, per step (means over its step range's instances)."""

    rank: int
    steps: int
    path: str
    step_ns: float
    compute_kernel_ns: float          # non-NCCL kernels that started inside the steps
    nccl_kernel_ns: float             # nccl* kernels that started inside the steps
    nccl_kernel_total_ns: int         # every nccl* kernel of the export
    exposed_comm_ns: float            # NCCL kernel time with no compute kernel beside it
    busy_pct: float                   # of the step's wall time, any GPU op of the process
    pid: int | None = None            # the rank's process, when one export holds every rank


@dataclass
class RanksDoc:
    """The cross-rank report of several per-rank exports."""

    ranks: list[RankRow]
    skew_ns: float = 0.0              # slowest minus fastest step time
    findings: list[Finding] = field(default_factory=list)
    schema: str = "ranks/1"


# --- (de)serialization --------------------------------------------------------------------
