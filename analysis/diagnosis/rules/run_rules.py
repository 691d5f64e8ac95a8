"""Rules read on the loop as it runs: what holds its critical path (loops/model.py) names
the cause. A Python thread holding the GIL while the loop's thread waits for it,
host-to-device copies in line with the kernels on the compute stream, a loop that waits
for its DataLoader's workers (named by the user's `for` line in the samples), a batch
built from Python data on its thread, tensors updated one by one, slow steps in its tail,
fp32 GEMMs without tensor cores (kernel_rules.py has the rules read on a loop's kernels).
Each reports its cause once, on the outermost loop where it holds, and leaves the saving
to the replay (loops/changes.py: `no_gil`, `prefetch`, `input_ahead`, `batch_on_device`,
`foreach`, `host_ahead`, `faster_kernels`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...common.settings import (
    BUILD_MIN_PCT,
    COPY_PATH_MIN_PCT,
    FP32_GEMM_PCT,
    GIL_MIN_PCT,
    INPUT_WAIT_MIN_PCT,
    PER_TENSOR_MIN_PCT,
    SAVE_MIN_PCT,
    SLOW_STEP_FACTOR,
    SLOW_TAIL_PCT,
)
from ...documents.types import Finding, PyLine, RangeEntry
from ...trace.pylines import LOADER_CALLS
from ..roofline import datasheet
from .host_rules import found_loops, loops, nested_evidence, outermost, per
from .lines import named_lines
from .registry import Context, Rule, rule


def path_pct(e: RangeEntry, what: str) -> float:
    """The share of the loop's run time its critical path spends in `what`."""
    return 100.0 * e.critical_path_ns.get(what, 0) / max(e.run_ns, 1)


def _per_run_instance(e: RangeEntry, ns: float) -> float:
    return ns / max(e.run_instances or e.wall_instances, 1)


def per_loop(r: Rule, ctx: Context, test: Callable[[RangeEntry], bool],
             make: Callable[[RangeEntry], dict | list[dict]]) -> list[Finding]:
    """One finding per outermost loop where `test` holds (or one per dict where `make`
    gives a list): `make(e)` gives its message, evidence and suggestion; its range,
    iterations (the loop's instances as it runs) and the nested loops where `test` holds
    too (nested_evidence) are every rule's here."""
    out = []
    for path, inner in found_loops(ctx, test).items():
        e = ctx.entries[path]
        made = make(e)
        for fields in made if isinstance(made, list) else [made]:
            fields["evidence"] = {**fields["evidence"], **nested_evidence(inner)}
            out.append(r.finding(range=path, iterations=e.run_instances or e.wall_instances,
                                 **fields))
    return out


def on_lines(r: Rule, ctx: Context, lines_of: Callable[[RangeEntry], list[PyLine]],
             min_pct: float, make: Callable[[RangeEntry, list[PyLine], float], dict],
             each: bool = False) -> list[Finding]:
    """One finding per outermost loop whose sampled lines `lines_of(e)` hold `min_pct` of
    its Python samples or more: `make(e, those lines, their share)` gives its fields;
    with `each`, one per line of such a loop, `make(e, [line], its share)`: each names its
    own call and is priced on the windows where its line was sampled (a per-parameter
    optimizer step and a loop of `p.mul_` in one step are two remedies, two savings)."""
    def share(e: RangeEntry) -> float:
        return sum(ln.pct for ln in lines_of(e))
    return per_loop(r, ctx, lambda e: share(e) >= min_pct,
                    lambda e: [make(e, [ln], ln.pct) for ln in lines_of(e)] if each
                    else make(e, lines_of(e), share(e)))


def held_by(r: Rule, ctx: Context, category: str, min_pct: float,
            said: Callable[[RangeEntry, float], str], suggestion: str,
            extra: Callable[[RangeEntry], dict] = lambda e: {},
            also: Callable[[RangeEntry], bool] = lambda e: True) -> list[Finding]:
    """One finding per outermost loop whose critical path spends `min_pct` of its run time
    or more in `category` (and `also` holds), `said(e, its share an instance)` the
    message."""
    def make(e: RangeEntry) -> dict:
        ns = e.critical_path_ns.get(category, 0)
        return {"message": said(e, _per_run_instance(e, ns)), "suggestion": suggestion,
                "evidence": {f"{category}_ns": ns, "run_ns": e.run_ns, **extra(e)}}
    return per_loop(r, ctx, lambda e: path_pct(e, category) >= min_pct and also(e), make)


def _holders(e: RangeEntry) -> dict[str, int]:
    """The threads that held the GIL while the loop waited, by name."""
    return {k.removesuffix(" (holding the GIL)"): v for k, v in e.critical_threads_ns.items()
            if k.endswith("(holding the GIL)")}


@rule("gil_contention", "systems", "warning",
      "another Python thread of the process holds the GIL while the loop's thread waits "
      "for it (pthread_cond_timedwait while the other thread runs the interpreter, from "
      "CPU samples) for at least `gil_pct` of the loop's critical path as it runs",
      {"gil_pct": GIL_MIN_PCT}, change="no_gil")
def gil_contention(r: Rule, ctx: Context) -> list[Finding]:
    def said(e: RangeEntry, ns: float) -> str:
        gil = max(e.critical_path_ns.get("gil", 0), 1)
        who = ", ".join(f"{name} {100.0 * v / gil:.0f}%"
                        for name, v in list(_holders(e).items())[:3] if v >= gil / 100)
        return (f"{e.name} waits for the GIL {path_pct(e, 'gil'):.0f}% of its time as it "
                f"runs ({ns / 1e6:,.2f} ms an instance): its thread waits in "
                "pthread_cond_timedwait while another Python thread of the process runs "
                f"the interpreter ({who or 'a thread of the process'}).")
    return one_per_iteration(held_by(
        r, ctx, "gil", GIL_MIN_PCT, said,
        "move the other thread's pure-Python work into a process (multiprocessing, a "
        "DataLoader worker) or do it between steps; in a thread, let it sleep or work in "
        "native code that releases the GIL", lambda e: {"holders": _holders(e)}), "gil_ns")


def one_per_iteration(found: list[Finding], measure: str) -> list[Finding]:
    """Of findings on sibling loops of an iteration (one parent, as many steps each:
    ranges one after the other in each iteration, each as it runs spanning it), the one
    whose evidence `measure` is largest, the others named in its evidence (`siblings`): a
    change of the whole step as it runs (the GIL's holder gone) saves the same
    iteration's time in each."""
    def group(f: Finding) -> tuple[str, int] | None:
        parent = (f.range or "").rpartition("/")[0]
        return (parent, f.iterations) if parent else None
    best: dict[tuple[str, int], Finding] = {}
    for f in found:
        k = group(f)
        if k is not None and (k not in best or f.evidence[measure] > best[k].evidence[measure]):
            best[k] = f
    out = []
    for f in found:
        k = group(f)
        if k is None or best[k] is f:
            others = [x.range for x in found if x is not f and k is not None and group(x) == k]
            f.evidence = {**f.evidence, **({"siblings": others} if others else {})}
            out.append(f)
    return out


@rule("copy_on_compute_stream", "systems", "warning",
      "host-to-device copies in line with the kernels on the compute stream (a blocking "
      "`.to('cuda')`: the loop's thread waits for its copies) hold at least `copy_pct` of "
      "a loop's critical path as it runs",
      {"copy_pct": COPY_PATH_MIN_PCT}, change="prefetch")
def copy_on_compute_stream(r: Rule, ctx: Context) -> list[Finding]:
    def said(e: RangeEntry, ns: float) -> str:
        return (f"{e.name} spends {path_pct(e, 'copy_h2d'):.0f}% of its time as it runs "
                f"({ns / 1e6:,.2f} ms an instance) in host-to-device copies on its critical "
                "path: each copy waits for the kernels before it on the stream, and the "
                "kernels after it wait for the copy, while the copy engine could work "
                "beside them.")
    return held_by(r, ctx, "copy_h2d", COPY_PATH_MIN_PCT, said,
                   "prefetch the next batch on a side stream: from pinned memory, `with "
                   "torch.cuda.stream(side): nxt = batch.to('cuda', non_blocking=True)`, then "
                   "`torch.cuda.current_stream().wait_stream(side)` before using it "
                   "(DataLoader(pin_memory=True) pins the batches)",
                   also=lambda e: e.host_sync_ns > 0)   # the thread waits for its copies


def loader_lines(e: RangeEntry) -> list[PyLine]:
    """The range's sampled lines that wait for the next batch (LOADER_CALLS)."""
    return [ln for ln in e.lines if LOADER_CALLS.match(ln.call or "")]


@rule("input_wait", "systems", "warning",
      "the loop's thread waits for the DataLoader's next batch (its Python samples in the "
      "worker queue's reads under the user's `for` line) in at least `wait_pct` of its "
      "samples", {"wait_pct": INPUT_WAIT_MIN_PCT}, change="input_ahead")
def input_wait(r: Rule, ctx: Context) -> list[Finding]:
    def make(e: RangeEntry, lines: list[PyLine], pct: float) -> dict:
        top = lines[0]
        return {
            "message": f"{e.name} waits for its input: {pct:.0f}% of its Python samples on "
            f"{top.file}:{top.line} in {top.function} (`{top.code or top.call}`), in the "
            f"DataLoader's worker queue ({top.call}): the workers do not keep up with the "
            "step.",
            "evidence": {"wait_pct": pct, "run_ns": e.run_ns, "file": top.file,
                         "line": top.line, "call": top.call},
            "suggestion": "more DataLoader workers (num_workers), a cheaper __getitem__ "
            "(tokenize or decode once, ahead of training), persistent_workers=True and a "
            "larger prefetch_factor"}
    return on_lines(r, ctx, loader_lines, INPUT_WAIT_MIN_PCT, make)


BUILD = re.compile(r"^torch\.(?:tensor|as_tensor|from_numpy)$|^Tensor\.new_tensor$")
"""Calls that make a tensor from Python data (lists, NumPy arrays) on the host."""
TORCH = re.compile(r"^(?:torch|Tensor|F|nn)\.")


def build_lines(e: RangeEntry) -> list[PyLine]:
    """The range's sampled lines that build a tensor from Python data (BUILD), and the
    lines of the same functions that call no torch op (the data made value by value
    before it), most sampled first."""
    made = [ln for ln in e.lines if BUILD.match(ln.call or "")]
    where = {(ln.file, ln.function) for ln in made}
    return [ln for ln in e.lines if ln in made or (
        (ln.file, ln.function) in where and not TORCH.match(ln.call or ""))]


@rule("batch_in_python", "systems", "warning",
      "the loop's thread builds a tensor from Python data every step (torch.tensor of a "
      "list, and the lines of the same function that make the values) in at least "
      "`build_pct` of its Python samples", {"build_pct": BUILD_MIN_PCT},
      change="batch_on_device")
def batch_in_python(r: Rule, ctx: Context) -> list[Finding]:
    def make(e: RangeEntry, lines: list[PyLine], pct: float) -> dict:
        top = next(ln for ln in lines if BUILD.match(ln.call or ""))
        return {
            "message": f"{e.name} builds a batch from Python data every step: {pct:.0f}% of "
            f"its Python samples on {', '.join(f'{ln.file}:{ln.line}' for ln in lines[:3])}"
            f", ending in {top.call} at {top.file}:{top.line} in {top.function}"
            + (f" (`{top.code}`)" if top.code else "") + ": the values are made one by one "
            "on the loop's thread and copied from pageable memory.",
            "evidence": {"build_pct": pct, "run_ns": e.run_ns, "lines_named": named_lines(lines)},
            "suggestion": f"at {top.file}:{top.line}: build the batch on the GPU "
            "(torch.rand, torch.randint, torch.arange and tensor ops on device=...), or in "
            "DataLoader workers (num_workers=N, pin_memory=True), not value by value in "
            "Python"}
    return on_lines(r, ctx, build_lines, BUILD_MIN_PCT, make)


PER_TENSOR = re.compile(r"\.(?:mul|add|sub|div|addcmul|addcdiv|lerp|copy|zero|clamp|"
                        r"mul_scalar|sqrt|exp|neg)_$|^torch\.optim\.\w+\._single_tensor_")
"""An in-place tensor method called from the user's line (`p.mul_(0.999)`): in a loop over
tensors, one op and one launch each, where torch._foreach_* makes one of them all; or an
optimizer's per-parameter path (torch.optim.adam._single_tensor_adam, foreach=False),
where foreach=True or fused=True makes them a few."""


def per_tensor_lines(e: RangeEntry) -> list[PyLine]:
    """The range's sampled lines that update a tensor in place (PER_TENSOR)."""
    return [ln for ln in e.lines if PER_TENSOR.search(ln.call or "")]


@rule("per_tensor_ops", "systems", "warning",
      "a line of the loop updates tensors in place one by one (`p.mul_(...)` in a Python "
      "loop over tensors: an op and a launch each) in at least `line_pct` of its Python "
      "samples", {"line_pct": PER_TENSOR_MIN_PCT}, change="foreach")
def per_tensor_ops(r: Rule, ctx: Context) -> list[Finding]:
    def make(e: RangeEntry, lines: list[PyLine], pct: float) -> dict:
        top = lines[0]
        return {
            "message": f"{e.name} updates tensors one by one: {pct:.0f}% of its Python "
            f"samples on {top.file}:{top.line} in {top.function}"
            + (f" (`{top.code}`)" if top.code else "") + f", in {top.call}: each tensor "
            "is an op dispatched from Python and a kernel launched on its own.",
            "evidence": {"line_pct": pct, "run_ns": e.run_ns, "lines_named": named_lines(lines)},
            "suggestion": f"at {top.file}:{top.line}: update the list at once with "
            "torch._foreach_* (torch._foreach_mul_(tensors, 0.999), _foreach_add_, "
            "_foreach_lerp_), or the optimizer's foreach=True / fused=True"}
    return on_lines(r, ctx, per_tensor_lines, PER_TENSOR_MIN_PCT, make, each=True)


def _slow_steps(ctx: Context, e: RangeEntry) -> tuple[list[tuple[int, int]], str, bool]:
    """The loop's slow steps as (start, end) windows, their sampled line, and whether
    the call named them (Pricer.slow_steps: where torch.save was sampled, else the steps
    SLOW_STEP_FACTOR x its median step or longer, read off its runs), else its tail
    steps (3x, the document's)."""
    if ("slow", e.name) not in ctx.cache:
        wins, line, saved = ctx.slow_steps(e.name, SLOW_STEP_FACTOR) if ctx.slow_steps \
            else ((), "", False)
        tail = [s.line for s in e.tail_steps if s.line]
        line = line if saved or not tail else max(set(tail), key=lambda x: (tail.count(x), x))
        ctx.cache[("slow", e.name)] = (list(wins) or [
            (s.start_ns, s.start_ns + s.step_ns) for s in e.tail_steps], line, saved)
    return ctx.cache[("slow", e.name)]


def _slow(ctx: Context, e: RangeEntry) -> bool:
    wins, _, saved = _slow_steps(ctx, e)
    if saved is None:             # the slow steps ran the other steps' own line, slower
        return False
    if saved:                     # the call says: its time, not the steps' spread
        return sum(b - a for a, b in wins) * 100 >= \
            SAVE_MIN_PCT * max(e.run_per_instance_ns, 1) * max(e.run_instances, 1)
    return e.tail_ns * 100 >= SLOW_TAIL_PCT * max(e.run_per_instance_ns, 1) and bool(wins)


@rule("slow_step", "systems", "warning",
      "torch.save sampled on a loop's thread for `save_pct` of its cost or more (the "
      "call names it, whatever its steps' lengths); else a loop's steps as they run "
      "average `tail_pct` of its cost or more above its median step, from steps "
      "`factor`x the median or longer (a periodic checkpoint, evaluation or logging step "
      "on the loop's thread), unless their Python samples fell most on the line the "
      "other steps' did (the loop's own work, run slower)",
      {"save_pct": SAVE_MIN_PCT, "tail_pct": SLOW_TAIL_PCT, "factor": SLOW_STEP_FACTOR},
      change="host_ahead")
def slow_step(r: Rule, ctx: Context) -> list[Finding]:
    def make(e: RangeEntry) -> dict:
        wins, line, saved = _slow_steps(ctx, e)
        longest = max(b - a for a, b in wins)
        said = (f"{e.name}: torch.save ran on the loop's thread {len(wins)} time(s) in its "
                f"{e.run_instances} steps, up to {longest / 1e6:,.2f} ms" if saved else
                f"{e.name}: {len(wins)} of its {e.run_instances} steps took up to "
                f"{longest / max(e.step_median_ns, 1):,.1f}x its median step "
                f"({e.step_median_ns / 1e6:,.2f} ms), {e.tail_ns / 1e6:,.2f} ms an "
                "instance as it runs")
        return {
            "message": said + (f"; their samples fell on {line}" if line else "") + ".",
            "evidence": {"tail_ns": e.tail_ns, "slow_steps": len(wins),
                         "median_step_ns": e.step_median_ns, "line": line,
                         "torch_save": bool(saved),
                         "windows": [[a, b] for a, b in wins]},
            "suggestion": "move the periodic work off the loop's thread: an asynchronous "
            "checkpoint (torch.distributed.checkpoint.async_save, or a copy to pinned "
            "memory saved by another thread), evaluation in another process or less often"}
    return per_loop(r, ctx, lambda e: _slow(ctx, e), make)


FP32_GEMM = re.compile(r"sgemm|gemm.*f32f32_f32f32.*ffma|ffma.*gemm", re.I)
"""cuBLAS / CUTLASS fp32 GEMMs on the CUDA cores (FFMA): no tensor cores."""


@rule("fp32_gemm", "systems", "warning",
      "fp32 GEMMs on the CUDA cores (cuBLAS `sgemm` / `*_f32f32_*_ffma_*` kernels, by short "
      "or demangled name) hold at least `kernel_pct` of a loop's kernel time; a nested "
      "loop where they do has its own finding, and its loop's counts the GEMMs outside it "
      "(if they hold `kernel_pct` of the kernel time outside it)",
      {"kernel_pct": FP32_GEMM_PCT}, change="faster_kernels")
def fp32_gemm(r: Rule, ctx: Context) -> list[Finding]:
    gpu = ctx.systems.source.gpus[0].name if ctx.systems and ctx.systems.source.gpus else None
    peaks = {"fp32_peak_flops": datasheet(gpu, "float32")[0],
             "tf32_peak_flops": datasheet(gpu, "tfloat32")[0]}
    found = {e.name: _gemms(ctx, e) for e in loops(ctx)}

    def holds(ns: float, total: float) -> bool:
        return bool(total) and ns * 100 >= FP32_GEMM_PCT * total

    out = []
    for path, inner in found_loops(ctx, lambda e: holds(*found[e.name][:2])).items():
        apart = outermost(inner)                  # the nested loops' GEMMs apart
        for p, deeper in apart.items():
            out.append(_gemm_finding(r, ctx.entries[p], found[p], peaks, deeper))
        e = ctx.entries[path]
        ns, total, names = found[path]       # what is left outside them, of what is left
        ns -= sum(per(e, found[p][0] * ctx.entries[p].wall_instances) for p in apart)
        rest = total - sum(per(e, found[p][1] * ctx.entries[p].wall_instances)
                           for p in apart)
        if holds(ns, rest):
            out.append(_gemm_finding(r, e, (ns, rest, names), peaks, [], sorted(apart)))
    return out


def _gemm_finding(r: Rule, e: RangeEntry, gemms: tuple[float, float, list[str]],
                  peaks: dict[str, float | None], inner: list[str],
                  apart: list[str] | None = None) -> Finding:
    """The finding of one loop's fp32 GEMMs (per iteration, of its kernel time), those of
    the nested loops `apart` left out (their own findings; its change's scope too)."""
    ns, total, names = gemms
    outside = f" outside {', '.join(apart)}" if apart else ""
    return r.finding(
        range=e.name, kernel=names[0] if names else None, iterations=e.wall_instances,
        message=f"{e.name} spends {ns / 1e6:,.2f} ms per iteration{outside} "
        f"({100.0 * ns / total:.0f}% of its kernel time) in fp32 GEMMs on the CUDA cores, "
        "without tensor cores.",
        evidence={"gemm_ns": ns * e.wall_instances, "kernels": names[:5], **peaks,
                  **({"ranges_apart": apart} if apart else {}), **nested_evidence(inner)},
        suggestion="let fp32 matmuls use TF32 tensor cores: "
        "torch.set_float32_matmul_precision('high') (or "
        "torch.backends.cuda.matmul.allow_tf32 = True), or run them in bf16 under "
        "torch.autocast")


def _gemms(ctx: Context, e: RangeEntry) -> tuple[float, float, list[str]]:
    """(fp32 GEMM ns, all kernel ns) per iteration and the GEMMs' names: by short name, else,
    where a short name says nothing (CUTLASS's `Kernel2`), by the demangled names in the
    loop's modeled steps (`cutlass::Kernel2<cutlass_80_simt_sgemm_...>`), those named
    by their short names included: a step with both (a cuBLAS `..._ffma_...` GEMM beside
    CUTLASS ones) counts them all (seed 64 g05: by short names 7% of its kernel time)."""
    names = sorted({k.name for k in e.kernels if FP32_GEMM.search(k.name)})
    generic = sorted({k.name for k in e.kernels if re.fullmatch(r"Kernel\d*", k.name)})
    if generic and ctx.kernels is not None:
        _, ns, total = ctx.kernels(e.name, FP32_GEMM.pattern)
        if total:
            return ns, total, names + generic
    return (per(e, sum(k.total_ns for k in e.kernels if k.name in names)),
            per(e, e.kernel_time_ns), names)
