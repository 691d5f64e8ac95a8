"""A range entry's fields, each declared once: name, type, unit, source and meaning.

documents.RangeEntry is one row of `ranges.parquet` and one object of systems.json's
`ranges`; its list fields of documents (kernels, copies, hot, other_threads and their
kernels) are long tables of their own (`ranges_<field>.parquet`, keyed by `range_row`).
Every reader of the entries' shape reads it from these declarations
(`dataclasses.fields(RangeEntry)[i].metadata`): the range table fills each field from
its `source` (range_table.range_table), the Parquet schema takes its type and unit
(documents/tables.py), the JSON Schema its meaning (documents/schemas), and the column
list of docs/ is checked against them. Adding a field is one declaration here, with a default,
and a column of that name in its source's frame.

Sources:
    table     the table's own: the entry's position
    summary   ranges.summarize: nsys stats' numbers and wall time (`column` when the
              frame names it otherwise)
    per_key   busy.per_key and host.per_key: one frame, a column per field
    devices   the CUDA devices of the range's kernels (Trace.key_devices)
    samples   CPU samples and the libraries they fell in (host.hot_frames)
    lines     Python samples and the user's lines they fell on (pylines.py_lines)
    warmup    why the range is warm-up (range_table.warmup_labels)
    kernels, copies, threads   the range's kernels, copies and other launching threads
    run_model the model of a loop range as it runs (analysis/loops/): one frame by row
    runs      a loop range as it runs (loops/runs.py): one frame by row
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

CATEGORIES = ("gpu", "copy_h2d", "copy_d2h", "copy_other", "launch", "cpu", "sync",
              "memory", "module", "other_cuda", "os", "gil", "other_thread")
"""What held the critical path: GPU work (kernels), copies per copy-engine direction
(host to device, device to host; sets and device copies apart), kernel launch calls and
their latency, CPU time between calls on the range's thread, waiting for the GPU
(synchronize calls and their wake-up), memory management, module loads, other CUDA
calls, OS calls, waiting for the GIL another Python thread held (gil.py), and another
thread of the process (its calls and the time between)."""
SAID = {"gpu": "GPU work", "copy_h2d": "host-to-device copies",
        "copy_d2h": "device-to-host copies", "copy_other": "other copies and sets",
        "launch": "launch calls", "cpu": "CPU between calls", "sync": "sync waiting",
        "memory": "memory management", "module": "module loads",
        "other_cuda": "other CUDA calls", "os": "OS calls",
        "gil": "waiting for the GIL", "other_thread": "another thread"}

SOURCES = ("table", "summary", "per_key", "devices", "samples", "lines", "warmup",
           "kernels", "copies", "threads", "run_model", "runs", "library")


def declared(doc: str, source: str | None = None, unit: str | None = None,
             column: str | None = None, default: Any = dataclasses.MISSING,
             factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its declaration in `metadata`: what it means (`doc`), its
    unit (also the suffix of its name: _ns, _bytes, _pct), where the range table takes it
    from (`source`, one of SOURCES; None for the fields of list items) and the source
    frame's column when it is not the field's name."""
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown source {source!r}: one of {', '.join(SOURCES)}")
    meta = {"doc": doc, "unit": unit, "source": source, "column": column}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def declaration(cls: type, name: str) -> dict[str, Any]:
    """A field's declaration (doc, unit, source, column)."""
    return dict(next(f for f in dataclasses.fields(cls) if f.name == name).metadata)


@dataclass
class KernelStat:
    """One kernel name's launches inside a range (nvtx_kern_sum's row)."""

    name: str = declared("kernel name, whole")
    count: int = declared("launches")
    total_ns: int = declared("summed duration", unit="ns")
    avg_ns: float = declared("mean duration", unit="ns")
    min_ns: int = declared("shortest launch", unit="ns")
    max_ns: int = declared("longest launch", unit="ns")


@dataclass
class ThreadLaunches:
    """Kernels one other thread of the process launched while a range was open."""

    tid: int = declared("the thread's id")
    name: str | None = declared("the thread's name in the export")
    kernel_count: int = declared("kernels it launched while the range was open")
    kernel_time_ns: int = declared("their summed duration", unit="ns")
    role: str | None = declared("what the thread is, from its name (busy.thread_role)",
                                default=None)
    kernels: list[KernelStat] = declared("its kernels by name, most time first",
                                         factory=list)


@dataclass
class CopyStat:
    """Copies (or sets) of one name and memory kinds: `[CUDA memcpy Host-to-Device]`,
    `Pageable -> Device` (copies from pageable memory block the calling thread)."""

    name: str = declared("copy or set kind, as nsys stats names it")
    memory: str = declared("source -> destination memory kinds")
    count: int = declared("operations")
    bytes: int = declared("bytes moved or set", unit="bytes")
    total_ns: int = declared("summed duration", unit="ns")


@dataclass
class HotFrame:
    """A library the range's thread was found in by CPU sampling (leaf frames), with the
    function of it most often on the stack."""

    module: str = declared("library (leaf frame's module)")
    symbol: str = declared("its function most often sampled")
    samples: int = declared("samples in it")
    pct: float = declared("share of the range's samples", unit="%")


@dataclass
class TailStep:
    """A step of a loop that took TAIL_FACTOR (3) times the median step or longer, as it
    ran (loops/runs.py), with what its instance did."""

    instance: int = declared("its position among the loop's steady instances (0: first)")
    start_ns: int = declared("its instance's start (the export's clock)", unit="ns")
    step_ns: int = declared("its step as it ran: its start to the next instance's (the "
                            "last of a run: to the run's end)", unit="ns")
    wall_ns: int = declared("its host range's wall time", unit="ns")
    kernels: int = declared("kernels its thread launched in it")
    sync_ns: int = declared("its thread's time in synchronizing CUDA calls", unit="ns")
    memory_ns: int = declared("in CUDA memory calls (allocation, free)", unit="ns")
    launch_ns: int = declared("in launches", unit="ns")
    os_ns: int = declared("in OS runtime calls outside CUDA calls", unit="ns")
    backlog_ns: int = declared("of the step, the time after its host range in which GPU "
                               "work it launched still ran (the last step of a GPU-bound "
                               "run: the backlog the loop queued)", unit="ns")
    line: str = declared("the user's line most of its thread's Python samples in the step "
                         "fell on (file:line in function, library call); '' without "
                         "samples")


@dataclass
class PyLine:
    """A line of the user's code the range's thread was found on by Python sampling, with
    the library call it was in (pylines.py)."""

    file: str = declared("the user's file (relative to the working directory the program "
                         "ran in, where it lies inside)")
    line: int = declared("its line number")
    function: str = declared("the function the line is in")
    call: str = declared("the library call below the line that spent the time "
                         "(module.function), or the compiled call its source names; '' "
                         "where neither is known")
    code: str = declared("the line's source text ('' where the file is not readable "
                         "where the analysis ran and the export does not carry it: "
                         "`analysis scrub` makes a copy that does)")
    samples: int = declared("Python samples on it")
    pct: float = declared("share of the range's Python samples", unit="%")


def _ns(doc: str, source: str = "per_key") -> Any:
    return declared(doc, source, unit="ns", default=0)


def _n(doc: str, source: str = "per_key") -> Any:
    return declared(doc, source, default=0)


@dataclass
class RangeEntry:
    """One NVTX range path (push/pop path outer->inner, no domain), GPU work or not."""

    name: str = declared("push/pop path outer->inner joined by '/', no domain", "summary",
                         column="path")
    domain: str | None = declared("NVTX domain (None: the default domain)", "summary")
    instances: int = declared("instances that launched GPU work (nvtx_gpu_proj_sum)",
                              "summary")
    kernel_count: int = declared("kernels launched inside it, any depth, same thread "
                                 "(nvtx_kern_sum)", "summary")
    kernel_time_ns: int = declared("their summed duration (nvtx_kern_sum)", "summary",
                                   unit="ns")
    gpu_span_ns: int = declared("first GPU op start -> last GPU op end per instance, "
                                "summed (nvtx_gpu_proj_sum's Total Proj Time)", "summary",
                                unit="ns")
    gpu_idle_ns: int = declared("span not covered by its GPU operations", "summary",
                                unit="ns")
    # beyond nsys stats: the process, what the range's own thread did not launch, and
    # real busy time
    pid: int | None = declared("OS process id: processes are never merged", "summary",
                               default=None)
    devices: list[int] = declared("CUDA devices its kernels ran on", "devices",
                                  factory=list)
    wall_instances: int = _n("every instance, GPU work or not (nvtx_sum)", "summary")
    wall_ns: int = _ns("sum over instances of end - start (nvtx_sum)", "summary")
    wall_median_ns: float = declared("the median instance's end - start", "summary",
                                     unit="ns", default=0.0)
    busy_ns: int = _ns("of the wall time, GPU busy with any op of the process")
    other_threads_kernel_count: int = _n("kernels other threads launched meanwhile")
    other_threads_kernel_time_ns: int = _ns("their summed duration")
    other_threads: list[ThreadLaunches] = declared(
        "the other threads that launched kernels meanwhile, most time first", "threads",
        factory=list)
    # where the wall time went on the range's own thread (calls inside its instances)
    host_launch_ns: int = _ns("kernel and graph launch calls")
    host_sync_ns: int = _ns("synchronize calls, blocking copies and sets")
    host_memory_ns: int = _ns("memory management calls (malloc, free, host alloc)")
    host_module_ns: int = _ns("module and library loads (JIT, new plans)")
    host_other_cuda_ns: int = _ns("every other CUDA call")
    host_os_ns: int = _ns("OS runtime calls outside CUDA calls")
    host_cpu_ns: int = _ns("outside every traced call: Python, CPU work")
    launch_calls: int = _n("kernel and graph launch calls")
    sync_calls: int = _n("synchronize calls, blocking copies and sets")
    module_loads: int = _n("module and library loads")
    blocking_copy_calls: int = _n("copy calls that waited on pageable memory "
                                  "(in sync_calls)")
    blocking_copy_ns: int = _ns("their time (in host_sync_ns)")
    sync_instances: int = _n("instances with at least one synchronize call")
    module_load_instances: int = _n("instances with at least one module load")
    copy_count: int = _n("copies and sets its thread launched")
    copy_bytes: int = declared("their bytes", "per_key", unit="bytes", default=0)
    copy_ns: int = _ns("their summed duration")
    pageable_copy_count: int = _n("of those, from or to pageable host memory")
    pageable_copy_bytes: int = declared("their bytes", "per_key", unit="bytes", default=0)
    pageable_copy_ns: int = _ns("their summed duration")
    copies: list[CopyStat] = declared("its copies by name and memory kinds, most time "
                                      "first", "copies", factory=list)
    cpu_samples: int = _n("CPU samples of its thread inside it", "samples")
    hot: list[HotFrame] = declared("the libraries those samples fell in", "samples",
                                   factory=list)
    py_samples: int = _n("Python samples of its thread inside it", "lines")
    lines: list[PyLine] = declared("the user's lines those samples fell on, most first "
                                   "(at most pylines.LINES)", "lines", factory=list)
    parent: str | None = declared("a library's range (settings.LIBRARY_DOMAINS): the "
                                  "user's range that held most of its instances, whose "
                                  "table lists it; None for the user's own ranges",
                                  "library", default=None)
    warmup: str | None = declared("why it is warm-up (compilation ran in it); None: it "
                                  "is not", "warmup", default=None)
    kernels: list[KernelStat] = declared("its own thread's kernels by name, most time "
                                         "first", "kernels", factory=list)
    row: int = declared("its position in ranges.parquet (range_row of the long tables)",
                        "table", default=0)
    # a loop range's model as it runs (loops/model.py)
    modeled_instances: int = _n("steady instances the model replayed as they run (every "
                                "one, or 16 around the median step and the tail steps)",
                                "run_model")
    replayed_run_ns: int = _ns("the run time the model gives back replayed unchanged (the "
                               "modeled steps, each weighted by the share of the runs' "
                               "time it stands for)", "run_model")
    critical_path_ns: dict[str, int] = declared(
        "the run time by what held the critical path (gpu, copy_h2d, copy_d2h, copy_other, "
        "launch, cpu, sync, memory, module, other_cuda, os, gil, other_thread), the modeled "
        "steps' paths weighted as replayed_run_ns", "run_model", unit="ns", factory=dict)
    critical_threads_ns: dict[str, int] = declared(
        "the other threads on the critical path by name (the export's thread name, else "
        "its id: `pt_autograd_0` is PyTorch's autograd thread; `started at FILE:LINE in "
        "FUNCTION`: the user's line whose `Thread.start` made it, from the Python samples), "
        "and the GIL waits by the thread that held the GIL (`... (holding the GIL)`), "
        "weighted as critical_path_ns",
        "run_model", unit="ns", factory=dict)

    # a loop range as it runs (loops/runs.py)
    runs: int = _n("its runs: maximal sequences of consecutive steady instances on one "
                   "thread", "runs")
    run_instances: int = _n("the instances in them", "runs")
    run_per_instance_ns: int = _ns("an instance's cost as it runs: the runs' spans (first "
                                   "start to the later of the last end and the end of "
                                   "the last GPU operation they launched) over their "
                                   "instances", "runs")
    step_median_ns: float = declared("the median step as it runs (start to next start)",
                                     "runs", unit="ns", default=0.0)
    step_low_ns: float = declared("the low end of the median's 95% interval", "runs",
                                  unit="ns", default=0.0)
    step_high_ns: float = declared("its high end", "runs", unit="ns", default=0.0)
    step_p10_ns: float = declared("the steps' 10th percentile", "runs", unit="ns",
                                  default=0.0)
    step_p90_ns: float = declared("their 90th percentile", "runs", unit="ns", default=0.0)
    step_mean_ns: float = declared("their mean (run_per_instance_ns)", "runs", unit="ns",
                                   default=0.0)
    tail_ns: int = _ns("the mean step less the median, where positive: what the slow "
                       "steps add to each", "runs")
    tail_steps: list[TailStep] = declared("the steps 3x the median or longer, longest "
                                          "first (at most 10)", "runs", factory=list)

    @property
    def time_ns(self) -> int:
        """The range's time over its instances: its wall time, or the span of the GPU work
        it launched where that ran longer (a loop that queues work ahead of the GPU)."""
        return self.time_of(self.wall_ns, self.gpu_span_ns)

    @property
    def run_ns(self) -> int:
        """The loop's time as it runs, all its runs (its wall time where a report folder
        written before runs were measured has none)."""
        return int(self.run_per_instance_ns * self.run_instances) or self.wall_ns

    @staticmethod
    def time_of(wall_ns: int, gpu_span_ns: int) -> int:
        """time_ns from those two fields (for readers of them as columns)."""
        return max(wall_ns, gpu_span_ns)
