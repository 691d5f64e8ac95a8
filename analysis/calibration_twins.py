"""The twin battery against the fix: each program of tests/data/twins runs its planted
loop, its fix and a control (the planted code again) interleaved in one process
(tests/data/tools/twins/twins.py). The analysis of that one capture names the planted
cause with a finding on the planted loop, priced by the step model; the fixed loop in the
same minutes realizes the saving, and the control's distance from the planted loop is
the noise.

Per program: the finding of the planted cause's rule on `planted` or a range inside it,
its predicted saving per step (its saving over the trace, per planted step), the realized
saving per step (the planted step's time less the fixed one's, an instance's time its
wall time or the span of the GPU work it launched where that ran longer), the noise per
step, and predicted / realized.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import systems
from .documents import Finding, SystemsDoc
from .io import unpack_xz
from .load import nsys_sqlite, torch_logs

TWINS = {
    "item_autograd": ("sync_in_loop", "`.item()` every step of a small training step, its "
                      "backward on the autograd thread"),
    "sync_timing": ("sync_in_loop", "`torch.cuda.synchronize()` after every step, to time "
                    "it"),
    "mask_sync": ("sync_in_loop", "boolean-mask indexing `h[h > 0]` (`nonzero` reads a "
                  "count back)"),
    "empty_cache": ("alloc_in_loop", "`torch.cuda.empty_cache()` every step"),
    "cpu_readback": ("readback_in_loop", "`.cpu()` of a 64 MiB activation every step, then "
                     "numpy on it"),
    "foreach_adam": ("launch_bound", "Adam with `foreach=False` over 96 small tensors"),
    "graph_break_item": ("graph_break", "a compiled function broken on `.item()`, beside a "
                         "second compiled function"),
    "kernel_gpu_bound": ("fp32_gemm", "fp32 GEMMs on the CUDA cores, a GPU-bound loop"),
    "kernel_host_bound": ("fp32_gemm", "the same GEMM in a loop the host holds: the faster "
                          "kernel saves almost nothing"),
    "input_starved": ("input_starved", "batches made in the main process, pageable copies"),
    "pageable_copy": ("pageable_copy", "256 MiB copied from pageable memory every step"),
    "item_sync": ("sync_in_loop", "`.item()`, then 4 ms of host bookkeeping"),
    "launch_bound": ("launch_bound", "200 tiny eager ops per step"),
    "dynamic_shapes": ("kernel_loads_per_call", "cuDNN attention over a sequence one token "
                       "longer every decode"),
    "fp32_gemm": ("fp32_gemm", "8 fp32 4096^3 GEMMs per step without tensor cores"),
}
"""Program -> (the rule that names its planted cause, the cause)."""
TARGET = (0.85, 1.15)
"""predicted / realized within this ..."""
SMALL_PCT = 5.0
"""... or, for an effect under this % of the planted step, within this % of the step."""


@dataclass
class TwinRow:
    program: str
    cause: str
    rule: str
    range: str
    predicted_ns: float        # per planted step
    realized_ns: float
    noise_ns: float
    step_ns: float             # the planted step's time

    @property
    def ratio(self) -> float:
        return self.predicted_ns / self.realized_ns if self.realized_ns > 0 else float("inf")

    @property
    def in_target(self) -> bool:
        if 100.0 * abs(self.realized_ns) < SMALL_PCT * self.step_ns:
            return abs(self.predicted_ns - self.realized_ns) <= SMALL_PCT / 100 * self.step_ns
        return TARGET[0] <= self.ratio <= TARGET[1]


def document(folder: Path) -> SystemsDoc:
    """A twin capture's systems document (with its TORCH_LOGS where it has one)."""
    logs = folder / "torch_logs.txt"
    return systems.build(nsys_sqlite.load(folder / "trace.sqlite"), None,
                         torch_logs.load(logs) if logs.exists() else None)


def named(doc: SystemsDoc, rule: str) -> Finding | None:
    """The finding of `rule` on the planted loop or a range inside it (largest saving)."""
    hits = [f for f in doc.findings if f.rule == rule and f.range
            and (f.range == "planted" or f.range.startswith("planted/"))]
    return max(hits, key=lambda f: f.saving_ns, default=None)


def calibrate(program: str, doc: SystemsDoc) -> TwinRow:
    rule, cause = TWINS[program]
    by = {e.name: e for e in doc.ranges}
    step = next(p for p in ("planted/step", "planted/decode") if p in by)
    per = {label: by[step.replace("planted", label)] for label in ("planted", "fixed",
                                                                    "control")}
    t = {k: e.time_ns / max(e.wall_instances, 1) for k, e in per.items()}
    f = named(doc, rule)
    steps = max(per["planted"].wall_instances, 1)
    return TwinRow(program, cause, rule, f.range if f else "", f.saving_ns / steps if f else 0.0,
                   t["planted"] - t["fixed"], abs(t["planted"] - t["control"]), t["planted"])


def run(data: Path) -> list[TwinRow]:
    unpack_xz(data)
    return [calibrate(p, document(data / p)) for p in TWINS if (data / p).is_dir()]
