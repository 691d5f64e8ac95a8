"""Host-side rules: where a loop's wall time goes besides the GPU, each cause with its
remedy and the wall time removing it would save (analysis/trace/host.py gives the facts).

Every rule here looks at the ranges repeated at least LOOP_MIN_INSTANCES times (a loop's
iterations; warm-up instances set apart) and reports a cause once, on the outermost range
where it lives, naming the nested ranges that hold it. Savings are per instance of that
range (its facts summed over the instances, divided by them).
"""

from __future__ import annotations

import re
from typing import Any

from ...common.names import APART_TAGS, apart_prefix
from ...common.settings import (
    FINDING_MIN_PCT,
    HOST_IDLE_PCT,
    HOST_OUTSIDE_PCT,
    INPUT_BUSY_PCT,
    INPUT_SHARE_PCT,
    LAUNCH_HOST_PCT,
    LOADS_INSTANCES_PCT,
    LOOP_MIN_INSTANCES,
    PAGEABLE_INSTANCES_PCT,
    PINNED_BPS,
    READBACK_INSTANCES_PCT,
    READBACK_MIN_BYTES,
    SYNC_INSTANCES_PCT,
    SYNC_MIN_PCT,
)
from ...documents.types import Finding, RangeEntry
from ..pricing import SYNC_SAID
from .lines import MASK_REMEDY, SIZE_REMEDY, SYNC_CALLS, UNIQUE_REMEDY, UPLOAD_REMEDY, pick
from .registry import ONCE, Context, Rule, rule
from .sync_split import change_for, line_of, site_finding, split

CUDNN = re.compile(r"cudnn|fmha|flash", re.I)


def loops(ctx: Context) -> list[RangeEntry]:
    """The repeated ranges of the process, warm-up left out (once per context)."""
    if "loops" not in ctx.cache:
        ctx.cache["loops"] = [e for e in ctx.entries.values()
                              if e.wall_instances >= LOOP_MIN_INSTANCES]
    return ctx.cache["loops"]


def outermost(paths: list[str]) -> dict[str, list[str]]:
    """Each path that no other path of `paths` encloses -> the paths nested in it."""
    chosen = set(paths)
    out: dict[str, list[str]] = {}
    for p in sorted(paths):
        parts = p.split("/")
        outer = next(("/".join(parts[:i]) for i in range(1, len(parts))
                      if "/".join(parts[:i]) in chosen), p)
        out.setdefault(outer, [])
        if outer != p:
            out[outer].append(p)
    return out


def per(e: RangeEntry, value: float) -> float:
    return value / max(e.wall_instances, 1)


def found_loops(ctx: Context, test) -> dict[str, list[str]]:
    """Outermost loop ranges where `test(entry)` holds -> nested ones where it holds."""
    return outermost([e.name for e in loops(ctx) if test(e)])


def kernel_loads(ctx: Context) -> dict[str, list[str]]:
    """Loops that load modules in most iterations (kernels_loads_per_call's ranges)."""
    if "loads" not in ctx.cache:
        ctx.cache["loads"] = found_loops(ctx, lambda e: e.module_load_instances * 100
                                    >= LOADS_INSTANCES_PCT * e.wall_instances)
    return ctx.cache["loads"]


def starved(ctx: Context) -> dict[str, RangeEntry]:
    """Ranges without kernels of their own that hold a large share of their parent
    loop's wall time while the GPU idles -> their parent."""
    if "starved" not in ctx.cache:
        out = {}
        for e in loops(ctx):
            parent = ctx.entries.get(e.name.rpartition("/")[0])
            if (parent is not None and not e.kernel_count and parent.wall_ns
                    and not _sync_bound(parent)   # the GPU waits for the sync's sake
                    and e.wall_ns * 100 >= INPUT_SHARE_PCT * parent.wall_ns
                    and e.busy_ns * 100 < INPUT_BUSY_PCT * e.wall_ns):
                out[e.name] = parent
        ctx.cache["starved"] = out
    return ctx.cache["starved"]


def relatives(paths: set[str]) -> tuple[set[str], set[str]]:
    """The paths, and every path that encloses one of them (what `_related` looks up)."""
    return paths, {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}


def _related(path: str, found: tuple[set[str], set[str]]) -> bool:
    """Whether `path` is one of the found paths, or encloses or is nested in one of them
    (`found`: the paths and every path that encloses one; set lookups, one per level)."""
    paths, enclosing = found
    if path in paths or path in enclosing:
        return True
    parts = path.split("/")
    return any("/".join(parts[:i]) in paths for i in range(1, len(parts)))


def explained(ctx: Context, path: str) -> bool:
    """Whether a host-side cause found by these rules already covers this range: kernels
    built every call, input starvation, or a loop its syncs hold (_sync_bound)."""
    if "explained" not in ctx.cache:
        ctx.cache["explained"] = relatives(set(kernel_loads(ctx)) | set(starved(ctx))
                                           | set(found_loops(ctx, _sync_bound)))
    return _related(path, ctx.cache["explained"])


def _syncs(e: RangeEntry) -> bool:
    """A synchronize call in most iterations, waiting a noticeable part of them."""
    wait = e.host_sync_ns - e.blocking_copy_ns
    return (e.sync_instances * 100 >= SYNC_INSTANCES_PCT * e.wall_instances
            and wait * 100 >= SYNC_MIN_PCT * e.wall_ns)


def _sync_bound(e: RangeEntry) -> bool:
    """A loop that syncs (_syncs) whose host works outside CUDA calls for less time than
    its GPU: without the sync that work would run under the GPU's, so the GPU idles for
    the sync's sake. Where the host's work outlasts the GPU's, the GPU would wait for it
    with no sync at all (an input built on the loop's thread beside an `.item()`)."""
    return _syncs(e) and e.host_cpu_ns + e.host_os_ns < e.busy_ns


RUNTIME_COMPILERS = re.compile(r"nvrtc|nvJitLink|nvptxcompiler|libcuda", re.I)


def sampled(e: RangeEntry) -> str:
    """What CPU sampling found in the range ("" without samples: rules/lines.py then
    says how to get them)."""
    if not e.cpu_samples or not e.hot:
        return ""
    top = e.hot[0]
    what = f" ({top.symbol})" if top.symbol else ""
    why = ": runtime compilation" if RUNTIME_COMPILERS.search(top.module) else ""
    rest = ", ".join(f"{h.module} {h.pct:.0f}%" for h in e.hot[1:])
    return (f" {top.pct:.0f}% of its {e.cpu_samples} CPU samples in {top.module}{what}{why}"
            + (f" (then {rest})." if rest else "."))


def nested_evidence(inner: list[str]) -> dict[str, Any]:
    return {"nested_ranges": inner[:10]} if inner else {}


@rule("kernel_loads_per_call", "systems", "warning",
      "module or library loads (cuModuleLoad*, cuLibraryLoad*) in at least `instances_pct` "
      "of a loop's iterations: new kernels are built every call",
      {"instances_pct": LOADS_INSTANCES_PCT}, change="no_building")
def kernel_loads_per_call(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for path, inner in kernel_loads(ctx).items():
        e = ctx.entries[path]
        cudnn = any(CUDNN.search(k.name) for k in e.kernels)
        fix = ("cuDNN builds an execution plan for every new shape: disable cuDNN attention "
               "(torch.backends.cuda.enable_cudnn_sdp(False)) or keep shapes static"
               if cudnn else "keep shapes static across calls (pad to a few sizes, a "
               "preallocated cache), mark dynamic dimensions for torch.compile, or pick a "
               "backend that does not build kernels per shape")
        out.append(r.finding(
            range=path, iterations=e.wall_instances,
            message=f"{path} loaded modules in {e.module_load_instances} of its "
            f"{e.wall_instances} iterations ({e.module_loads} loads, "
            f"{e.host_module_ns / 1e6:,.1f} ms in the load calls; "
            f"{e.host_cpu_ns / 1e6:,.1f} ms of CPU outside CUDA calls): kernels are built "
            f"every call, typically for a shape that changes every call.{sampled(e)}",
            evidence={"module_loads": e.module_loads, "load_instances":
                      e.module_load_instances, "iterations": e.wall_instances,
                      "host_module_ns": e.host_module_ns, "host_cpu_ns": e.host_cpu_ns,
                      "busy_ns": e.busy_ns, "wall_ns": e.wall_ns, **nested_evidence(inner)},
            suggestion=fix))
    return out


@rule("input_starved", "systems", "warning",
      "a loop range without kernels of its own holds at least `share_pct` of its parent's "
      "wall time while the GPU is busy under `busy_pct` of it",
      {"share_pct": INPUT_SHARE_PCT, "busy_pct": INPUT_BUSY_PCT}, change="host_ahead")
def input_starved(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for path, parent in starved(ctx).items():
        e = ctx.entries[path]
        share = 100.0 * e.wall_ns / parent.wall_ns
        out.append(r.finding(
            range=path, iterations=e.wall_instances,
            message=f"{path} launches no kernels yet holds {share:.0f}% of "
            f"{parent.name}'s wall time ({per(e, e.wall_ns) / 1e6:,.1f} ms per iteration), "
            f"the GPU busy {100.0 * e.busy_ns / max(e.wall_ns, 1):.0f}% of it: the loop "
            f"waits for its input ({e.host_cpu_ns / 1e6:,.1f} ms CPU outside CUDA calls, "
            f"{e.pageable_copy_ns / 1e6:,.1f} ms of pageable copies).",
            evidence={"parent": parent.name, "share_pct": round(share, 1),
                      "wall_ns": e.wall_ns, "busy_ns": e.busy_ns,
                      "host_cpu_ns": e.host_cpu_ns, "pageable_copy_ns": e.pageable_copy_ns},
            suggestion="prepare batches ahead of the GPU: DataLoader(num_workers=N, "
            "pin_memory=True, prefetch_factor=...), .to(device, non_blocking=True), or "
            "move the preprocessing onto the GPU"))
    return out


@rule("sync_in_loop", "systems", "warning",
      "a synchronize call (`.item()`, `.cpu()`, `print(tensor)`, torch.cuda.synchronize) "
      "in at least `instances_pct` of a loop's iterations, waiting at least `wait_pct` of "
      "their wall time", {"instances_pct": SYNC_INSTANCES_PCT, "wait_pct": SYNC_MIN_PCT},
      change="no_sync")
def sync_in_loop(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for path, inner in found_loops(ctx, _synced).items():
        e = ctx.entries[path]
        kinds = ctx.syncs(path) if ctx.syncs is not None else {}
        top = max(kinds, key=kinds.get) if kinds else "item"
        sites = ctx.sync_sites(path) if ctx.sync_sites is not None else []
        if top == "cpu" and readback_of(e) >= READBACK_MIN_BYTES * e.wall_instances \
                and steps_read_back(ctx, path):
            rest = [s for s in sites if set(s.kinds) - {"cpu"}]   # a large readback:
            if rest and any(s.line is not None for s in rest):   # readback_in_loop's;
                out += _site_findings(r, ctx, e, inner, rest, most=False)  # the others
            continue
        if split(sites):
            out += _site_findings(r, ctx, e, inner, sites)
            continue
        f = _sync_finding(r, e, inner, kinds)
        lone = sites[0] if len(sites) == 1 else None     # one site: where no line's call
        if lone is not None and lone.line is not None and pick(e.lines, SYNC_CALLS) is None:
            f.evidence = {**f.evidence, "lines_named": [line_of(e, lone)]}   # says, its line
        priced = ctx.price(f) if ctx.price is not None else None
        if _syncs(e) or (priced or 0) * 100 >= FINDING_MIN_PCT * e.wall_ns:
            out.append(f)
    return out


def _site_findings(r: Rule, ctx: Context, e: RangeEntry, inner: list[str], sites: list,
                   most: bool = True) -> list[Finding]:
    """Of a loop's sync sites' findings, those whose change saves FINDING_MIN_PCT of its
    wall time or more, and (`most`) the one that saves most (a harness's sync at the end
    of each round is a site that costs nothing; beside a large readback, which another
    rule names, none of them need be the loop's)."""
    found = [site_finding(r, e, s, nested_evidence(inner), SYNC_REMEDY) for s in sites]
    priced = [(ctx.price(f) if ctx.price is not None else None) or 0 for f in found]
    top = max(range(len(found)), key=priced.__getitem__)
    return [f for i, (f, p) in enumerate(zip(found, priced, strict=True))
            if (most and i == top) or p * 100 >= FINDING_MIN_PCT * e.wall_ns]


def steps_read_back(ctx: Context, path: str) -> bool:
    """Whether most of the loop's modeled steps read READBACK_MIN_BYTES back outside
    torch.save (a checkpoint's copies are slow_step's; Pricer.readback_share), True
    without a model: the readback is readback_in_loop's."""
    share = ctx.readback_share(path, READBACK_MIN_BYTES) if ctx.readback_share else None
    return share is None or share * 100 >= READBACK_INSTANCES_PCT


def _synced(e: RangeEntry) -> bool:
    return e.sync_instances * 100 >= SYNC_INSTANCES_PCT * e.wall_instances


def readback_of(e: RangeEntry) -> int:
    return sum(c.bytes for c in e.copies if "Device-to-Host" in c.name)


def _sync_finding(r: Rule, e: RangeEntry, inner: list[str], kinds: dict[str, int]) -> Finding:
    wait = e.host_sync_ns - e.blocking_copy_ns
    calls = e.sync_calls - e.blocking_copy_calls
    said = ", ".join(f"{SYNC_SAID[k]} ({n})" for k, n in sorted(
        kinds.items(), key=lambda kv: -kv[1])) or "synchronize calls"
    top = max(kinds, key=kinds.get) if kinds else "item"
    return r.finding(
        range=e.name, iterations=e.wall_instances,
        change=sync_change(e, top),
        message=f"{e.name} waits for the GPU in {e.sync_instances} of its "
        f"{e.wall_instances} iterations: {per(e, calls):g} synchronize call(s) and "
        f"{per(e, wait) / 1e6:,.2f} ms waiting per iteration, while the GPU was busy "
        f"{per(e, e.busy_ns) / 1e6:,.2f} ms of its {per(e, e.wall_ns) / 1e6:,.2f} ms; "
        f"in the modeled steps: {said}.",
        evidence={"sync_calls": calls, "sync_ns": wait, "iterations": e.wall_instances,
                  "busy_ns": e.busy_ns, "wall_ns": e.wall_ns, "syncs": dict(kinds),
                  **nested_evidence(inner)},
        suggestion=SYNC_REMEDY.get(top, SYNC_REMEDY["item"]))


def sync_change(e: RangeEntry, top: str | None = None) -> str:
    """How the loop model removes the cause of a loop's syncs, from the user's call where
    its Python samples name one (lines.pick): a readback the host converts
    (`.tolist()`, `.numpy()`, `.cpu()`) kept on the device (readback_on_device: the copy,
    its wait and the host's work on it gone); any other sync only stops waiting (no_sync);
    by the syncs' `top` kind where no call says (sync_split.change_for)."""
    line = pick(e.lines, SYNC_CALLS)
    return change_for(top, line.call if line else None)


SYNC_REMEDY = {
    "item": "keep values on the GPU inside the loop: accumulate losses and metrics as "
            "tensors, read them with .item() every N steps or after the loop",
    "cpu": "keep the statistic on the device and read it after the loop, or copy into a "
           "pinned buffer with non_blocking=True and read it steps later",
    "nonzero": MASK_REMEDY,
    "size": SIZE_REMEDY,
    "unique": UNIQUE_REMEDY,
    "synchronize": "time the steps with CUDA events (torch.cuda.Event(enable_timing=True): "
                   "record around the step, read elapsed_time after the loop) instead of "
                   "torch.cuda.synchronize() per step",
    "event": "wait for the event on the GPU (stream.wait_event) or only where the host "
             "needs the result",
    "index": "move the index tensor to the GPU once, before the loop (idx = "
             "idx.to(device)), and index with it there: no copy and no wait per step",
    "upload": UPLOAD_REMEDY,
    "other": "find the call that synchronizes (CUDA API row in the step) and move it out "
             "of the loop"}
"""The remedy of each kind of sync (pricing.SYNC_SAID), in torch's layer."""


@rule("pageable_copy", "systems", "warning",
      "host-to-device copies from pageable memory in at least `instances_pct` of a "
      "loop's iterations (each blocks the calling thread)",
      {"instances_pct": PAGEABLE_INSTANCES_PCT, "pinned_bps": PINNED_BPS}, change="pinned_async")
def pageable_copy(r: Rule, ctx: Context) -> list[Finding]:
    rate = _pinned_rate(ctx)
    out = []
    for path, inner in found_loops(ctx, lambda e: _from_pageable(e)[0] * 100
                              >= PAGEABLE_INSTANCES_PCT * e.wall_instances).items():
        e = ctx.entries[path]
        count, size, ns = _from_pageable(e)
        blocked = max(e.blocking_copy_ns, ns)
        out.append(r.finding(
            range=path, iterations=e.wall_instances,
            message=f"{path} copies {per(e, size) / 2**20:,.1f} MiB per iteration from "
            f"pageable host memory to the GPU in {per(e, count):g} copies "
            f"({per(e, ns) / 1e6:,.2f} ms of copy time, the thread blocked "
            f"{per(e, blocked) / 1e6:,.2f} ms).",
            evidence={"pageable_bytes": size, "pageable_copies": count,
                      "pageable_copy_ns": ns, "blocking_copy_ns": e.blocking_copy_ns,
                      "pinned_bps": rate,
                      **nested_evidence(inner)},
            suggestion="copy from pinned memory: tensor.pin_memory() once (or DataLoader("
            "pin_memory=True)), then .to(device, non_blocking=True)"))
    return out


def _from_pageable(e: RangeEntry) -> tuple[int, int, int]:
    """(copies, bytes, ns) of the range's copies from pageable host memory (a readback
    to the host is readback_in_loop's)."""
    mine = [c for c in e.copies if c.memory.startswith("Pageable")]
    return (sum(c.count for c in mine), sum(c.bytes for c in mine),
            sum(c.total_ns for c in mine))


def _pinned_rate(ctx: Context) -> float:
    """Bytes/s of the trace's host-device copies from pinned memory (at least 1 MiB of
    them), else PINNED_BPS."""
    pinned = [c for c in ctx.systems.copies if "Pinned" in c.memory] if ctx.systems else []
    size, ns = sum(c.bytes for c in pinned), sum(c.total_ns for c in pinned)
    return size / ns * 1e9 if size >= 2**20 and ns else PINNED_BPS


@rule("host_bound", "systems", "warning",
      "the GPU idles at least `idle_pct` of a loop's wall time while its thread spends at "
      "least `outside_pct` of it outside CUDA calls (and no other host rule explains it)",
      {"idle_pct": HOST_IDLE_PCT, "outside_pct": HOST_OUTSIDE_PCT}, change="host_ahead")
def host_bound(r: Rule, ctx: Context) -> list[Finding]:
    def hit(e: RangeEntry) -> bool:
        idle, outside = e.wall_ns - e.busy_ns, e.host_cpu_ns + e.host_os_ns
        return (idle * 100 >= HOST_IDLE_PCT * e.wall_ns and e.wall_ns > 0
                and outside * 100 >= HOST_OUTSIDE_PCT * e.wall_ns
                and e.host_launch_ns * 100 < LAUNCH_HOST_PCT * idle     # not launch-bound
                and not explained(ctx, e.name))

    out = []
    for path, inner in found_loops(ctx, hit).items():
        e = ctx.entries[path]
        outside = e.host_cpu_ns + e.host_os_ns
        part = "OS runtime calls" if e.host_os_ns > e.host_cpu_ns else \
            "CPU work outside any traced call (Python, data preparation, planning)"
        out.append(r.finding(
            range=path, iterations=e.wall_instances,
            message=f"{path} is host-bound: the GPU was busy "
            f"{100.0 * e.busy_ns / e.wall_ns:.0f}% of its wall time while its thread spent "
            f"{100.0 * outside / e.wall_ns:.0f}% outside CUDA calls, mostly in {part}."
            f"{sampled(e)}",
            evidence={"wall_ns": e.wall_ns, "busy_ns": e.busy_ns, "host_cpu_ns":
                      e.host_cpu_ns, "host_os_ns": e.host_os_ns, **nested_evidence(inner)},
            suggestion="move the host work out of the loop or overlap it with the GPU "
            "(prepare ahead, another thread or process); profile it with CPU samples"))
    return out


@rule("first_calls", "systems", "info",
      "the leading instances of a loop range were set apart as warm-up (compilation, "
      "autotuning, CUDA-graph recording, lazy loading: see apart.py); ranked after the "
      "recurring causes, as a cost paid once", unpriced=ONCE)
def first_calls(r: Rule, ctx: Context) -> list[Finding]:
    out = []
    for e in ctx.all_entries.values():
        if not e.warmup or apart_prefix(e.name) != e.name:
            continue                   # not an outermost set-apart instance
        tag = next(t for t in APART_TAGS if e.name.endswith(t))
        steady = ctx.entries.get(e.name.removesuffix(tag))
        median = steady.wall_median_ns if steady else 0.0
        out.append(r.finding(
            range=e.name, iterations=1, one_time=True,
            message=f"{e.name}: {e.wall_instances} first instance(s) took "
            f"{e.wall_ns / 1e6:,.1f} ms where the steady instances take a median "
            f"{median / 1e6:,.2f} ms ({e.warmup}); they are set apart from the range's "
            "numbers.",
            evidence={"wall_ns": e.wall_ns, "instances": e.wall_instances,
                      "steady_median_ns": median, "module_loads": e.module_loads},
            suggestion="run the first calls (torch.compile's compilation and CUDA-graph "
            "recording, cuBLAS/cuDNN initialisation, autotuning) before the timed loop, "
            "and leave them out of measurements"))
    return out
