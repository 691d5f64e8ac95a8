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
