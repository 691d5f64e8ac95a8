"""Kernel names as a reader takes them in: the base name of a C++ template kernel plus the
op its functor or lambda names, for example

    void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add<float>, ...>(int, T2, T3)
        -> vectorized_elementwise_kernel (add)
    void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>(...)
        -> CatArrayBatchedCopy

Pages show the label; documents and tables keep the whole name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from .emit_nvtx import OP_ID, WRAPPER
from .settings import LIBRARY_DOMAINS

_OPS = [re.compile(p) for p in (
    r"CUDAFunctor(?:OnSelf)?_(\w+)",              # at::CUDAFunctor_add<float>
    r"binary_internal::(\w+?)Functor\b",          # binary_internal::MulFunctor<float>
    r"(\w+?)CUDAKernelImpl\b",                    # GeluCUDAKernelImpl(...)
    r"\blaunch_(\w+)\(",                          # launch_clamp_scalar(...)
    r"(\w+?)_kernel_cuda\b",                      # exp_kernel_cuda(...), direct_copy_...
    r"(\w+?)_(?:and_transform|functor)\b",        # uniform_and_transform, sum_functor
    r"\b(Max|Min|Mean|Norm|Argmax|Argmin)Ops\b",  # at::MaxOps<float>
    r"\b(?!Binary|AUnary|BUnary|Unary|Func)(\w+?)Functor\b",   # FillFunctor<float>
)]


def _split(name: str) -> tuple[str, str]:
    """(the qualified name, what follows it: template arguments and parameters)."""
    text = name.removeprefix("void ").strip()
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch in "<(" and depth == 0 and not _in_unnamed(text, i):
            cut = i
            break
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
    return text[:cut], text[cut:]


def _in_unnamed(text: str, i: int) -> bool:
    """Whether the bracket at `i` opens `<unnamed>` or `(anonymous namespace)`, parts of
    a qualified name rather than its arguments."""
    return text.startswith("<unnamed>", i) or text.startswith("(anonymous namespace)", i)


GENERIC = {"Kernel", "Kernel2", "kernel", "device_kernel", "DeviceKernel"}
"""Base names that say nothing (CUTLASS's `Kernel<Gemm...>`): their first template
argument names the kernel."""

_FIRST_ARG = re.compile(r"<\s*(?:[\w]+::)*(\w+)")


def kernel_label(name: str) -> str:
    """The base name of a kernel (its qualified name's last part) and, for a template
    whose arguments name an op, that op in parentheses (for a generic base name, its
    first template argument); a plain name as it is."""
    if "<" not in name and "(" not in name:
        return name
    qualified, rest = _split(name)
    base = qualified.rsplit("::", 1)[-1].strip() or name
    for pattern in _OPS:
        m = pattern.search(rest)
        if m:
            return f"{base} ({m.group(1).lower()})"
    m = _FIRST_ARG.match(rest) if base in GENERIC else None
    return f"{base} ({m.group(1)})" if m else base


def kernel_labels(names: list[str]) -> dict[str, str]:
    """Each name's kernel_label, made unique among `names` where two kernels share one
    (`vectorized_elementwise_kernel (mul) #2`), in the order given."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for name in names:
        if name in out:
            continue
        label = kernel_label(name)
        seen[label] = seen.get(label, 0) + 1
        out[name] = label if seen[label] == 1 else f"{label} #{seen[label]}"
    return out


_NESTED_WRAPPER = "/" + WRAPPER


DETECTED = "detected step"
"""The range each detected step of a script without ranges becomes (loops/detected.py)."""


def is_detected(path: str) -> bool:
    """Whether the path is a detected step's or inside one."""
    return path == DETECTED or path.startswith(DETECTED + "/")


def is_op_path(path: str) -> bool:
    """Whether the path runs into an emit_nvtx op range (user_path(path) != path),
    by three searches in C (user_path's own, for every one of 110k names, took 0.1 s)."""
    return path.startswith(WRAPPER) or OP_ID in path or _NESTED_WRAPPER in path


def op_paths(paths: list[str]) -> np.ndarray:
    """is_op_path of every path, as a bool array (its three searches inline: 110k calls
    of it cost a third more)."""
    return np.array([p.startswith(WRAPPER) or OP_ID in p or _NESTED_WRAPPER in p
                     for p in paths], dtype=bool)


def matching(pred: Callable[[str], bool], paths: list[str]) -> np.ndarray:
    """pred of every path as a bool array; is_op_path runs inline (op_paths)."""
    if pred is is_op_path:
        return op_paths(paths)
    return np.fromiter(map(pred, paths), dtype=bool, count=len(paths))


def user_path(path: str) -> str:
    """The path cut before its first emit_nvtx op range (`aten::linear, seq = 3, op_id =
    7`, `autograd::engine::evaluate_function: ...`): findings name the user's own range;
    the ops have their own table. "" when the path starts with an op range."""
    if path.startswith(WRAPPER):
        return ""
    op = path.find(OP_ID)
    cut = len(path) if op < 0 else path.rfind("/", 0, op) + 1    # the op range's part
    wrapped = path.find(_NESTED_WRAPPER)
    if 0 <= wrapped < cut:
        cut = wrapped + 1
    return path if cut == len(path) else path[:max(cut - 1, 0)]


COMPILE_TAG = " [compile]"
"""Suffix of the instances of a repeated range in which torch.compile compiled (TORCH_LOGS
placed a graph break or recompile in them): they become an entry of their own, labelled
warm-up, and the range's other instances stay as they are."""


WARMUP_TAG = " [warm-up]"
"""Suffix of the instances of a repeated range that launched far more kernels than its
other instances (autotuning benchmarks its candidates there, first calls initialise):
set apart and labelled warm-up the same way (warmup_instances)."""


APART_TAGS = (COMPILE_TAG, WARMUP_TAG)


WARMUP_NAME = re.compile(r"warm[-_ ]?up", re.I)
"""A range whose path says warm-up (`warmup`, `warm-up`, `Warm_Up`) is warm-up by name."""


def named_warmup(path: str) -> bool:
    """Whether a range path says warm-up (WARMUP_NAME): it is labelled so, and nothing in
    it is set apart (it is warm-up already)."""
    return "warm" in path.lower() and WARMUP_NAME.search(path) is not None


def steady_path(path: str) -> str:
    """A set-apart range's path with its tags taken out (`step [warm-up]` -> `step`)."""
    for tag in APART_TAGS:
        path = path.replace(tag, "")
    return path


def tagged_paths(paths: list[str]) -> np.ndarray:
    """Whether each path is inside a set-apart instance (an APART_TAGS tag anywhere in
    it), as a bool array (C searches: record_shapes names hold " [" everywhere)."""
    return np.array([COMPILE_TAG in p or WARMUP_TAG in p for p in paths], dtype=bool)


def apart_prefix(path: str) -> str:
    """The outermost set-apart instance path in `path` (ending in a APART_TAGS suffix), or ""
    when the path is inside no part."""
    if " [" not in path:
        return ""
    ends = [path.find(p) + len(p) for p in APART_TAGS if p in path]
    return path[:min(ends)] if ends else ""


_LIBRARY = {d.lower() for d in LIBRARY_DOMAINS}


def is_library(domain: object) -> bool:
    """Whether an NVTX domain name is a library's (settings.LIBRARY_DOMAINS; case does not
    matter): its ranges are the library's, not the user's."""
    return isinstance(domain, str) and domain.lower() in _LIBRARY


def library_mask(domains: pd.Series | list) -> np.ndarray:
    """is_library for a column of domain names (each distinct name tested once)."""
    codes, names = pd.factorize(pd.Series(domains, dtype=object))   # NA: code -1
    known = np.array([is_library(d) for d in names.tolist()] + [False], dtype=bool)
    return known[codes]
