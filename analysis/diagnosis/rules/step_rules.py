"""Rules for causes the step model prices: memory management every step, and device-to-
host readbacks of large tensors. Like the host rules they look at loop ranges, report a
cause once on the outermost range where it lives, and leave the saving to the replay
(loops/changes.py: `no_memory`, `readback_on_device`): where no step model holds the
range, the finding says why it is not priced.
"""

from __future__ import annotations

from ...common.settings import ALLOC_MIN_PCT, READBACK_INSTANCES_PCT, READBACK_MIN_BYTES
from ...documents.types import Finding, RangeEntry
from .host_rules import found_loops, nested_evidence, per, readback_of, steps_read_back
from .registry import Context, Rule, rule

DEVICE_TO_HOST = "Device-to-Host"


def readback_bytes(e: RangeEntry) -> int:
    """Bytes the range copied from the device to host memory."""
    return readback_of(e)


def readback_copies(e: RangeEntry) -> int:
    return sum(c.count for c in e.copies if DEVICE_TO_HOST in c.name)


def _reads_back(e: RangeEntry) -> bool:
    """Large device-to-host copies in most iterations."""
    n = readback_copies(e)
    return (n * 100 >= READBACK_INSTANCES_PCT * e.wall_instances
            and per(e, readback_bytes(e)) >= READBACK_MIN_BYTES)


@rule("alloc_in_loop", "systems", "warning",
      "memory management calls (cudaMalloc, cudaFree, host allocations: the caching "
      "allocator giving memory back and asking again, e.g. torch.cuda.empty_cache()) hold "
      "at least `memory_pct` of a loop's wall time", {"memory_pct": ALLOC_MIN_PCT},
      change="no_memory")
def alloc_in_loop(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for path, inner in found_loops(ctx, lambda e: e.wall_ns and e.host_memory_ns * 100
                              >= ALLOC_MIN_PCT * e.wall_ns).items():
        e = ctx.entries[path]
        out.append(r.finding(
            range=path, iterations=e.wall_instances,
            message=f"{path} spends {100.0 * e.host_memory_ns / e.wall_ns:.0f}% of its wall "
            f"time ({per(e, e.host_memory_ns) / 1e6:,.2f} ms per iteration) in memory "
            "management calls: memory is given back and asked for again every iteration.",
            evidence={"host_memory_ns": e.host_memory_ns, "wall_ns": e.wall_ns,
                      "iterations": e.wall_instances, **nested_evidence(inner)},
            suggestion="let the caching allocator keep its blocks: no "
            "torch.cuda.empty_cache() in the loop; PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True against fragmentation; preallocate buffers that are "
            "created every step"))
    return out


@rule("readback_in_loop", "systems", "warning",
      "device-to-host copies of at least `min_bytes` per iteration (`.cpu()`, `.numpy()` "
      "of activations) in at least `instances_pct` of a loop's iterations",
      {"min_bytes": READBACK_MIN_BYTES, "instances_pct": READBACK_INSTANCES_PCT},
      change="readback_on_device")
def readback_in_loop(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for path, inner in found_loops(ctx, _reads_back).items():
        if not steps_read_back(ctx, path):
            continue                 # the copies of a few steps: a checkpoint's (slow_step)
        e = ctx.entries[path]
        size = per(e, readback_bytes(e))
        ns = sum(c.total_ns for c in e.copies if DEVICE_TO_HOST in c.name)
        out.append(r.finding(
            range=path, iterations=e.wall_instances,
            message=f"{path} reads {size / 2**20:,.1f} MiB back from the GPU per iteration "
            f"({per(e, readback_copies(e)):g} device-to-host copies, "
            f"{per(e, ns) / 1e6:,.2f} ms of copy time): the host waits for each and then "
            "works on the copy.",
            evidence={"readback_bytes": readback_bytes(e), "readback_copies":
                      readback_copies(e), "copy_ns": ns, **nested_evidence(inner)},
            suggestion="keep the statistic on the device (compute it with torch ops, "
            "accumulate it as a tensor) and read it after the loop; or copy into a pinned "
            "buffer with .to('cpu', non_blocking=True) and read it steps later"))
    return out
