"""The catalogue of the generated battery: cause patterns as users write them, each with
the fix its remedy names, and negative controls (a change that saves nothing).

A cause is `Cause(name, rules, setup, planted, fixed)`:
- `setup(rng, size, dev) -> state` builds what the cause reads (tensors sized by `size`,
  0..1: the generator draws it);
- `planted(state, i)` and `fixed(state, i)` run in step `i` of a loop, on the loop's
  thread, between the step's own work; the fixed one does what the remedy says;
- `rules`: the findings that name this cause (any of them), "" for a negative control.

The lines below are the user's lines the Python samples see (this file is not a library).
"""

from __future__ import annotations

import io
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

State = dict[str, Any]


@dataclass(frozen=True)
class Cause:
    name: str
    rules: tuple[str, ...]
    setup: Callable[[random.Random, float, str], State]
    planted: Callable[[State, int], None]
    fixed: Callable[[State, int], None]
    control: bool = False


def _vec(rng: random.Random, size: float, dev: str, lo: int = 18, hi: int = 24) -> torch.Tensor:
    return torch.randn(1 << int(lo + (hi - lo) * size), device=dev)


def _nothing(s: State, i: int) -> None:
    return None


# --- syncs: a value read back where the remedy keeps it on the device --------------------
def _item(s: State, i: int) -> None:
    s["log"] = (s["x"] * 2).sum().item()


def _item_fixed(s: State, i: int) -> None:
    s["acc"] = s.get("acc", 0) + (s["x"] * 2).sum()


def _guard(s: State, i: int) -> None:
    if not torch.isfinite(s["x"]).all():
        raise FloatingPointError("non-finite")


def _guard_fixed(s: State, i: int) -> None:
    torch._assert_async(torch.isfinite(s["x"]).all())


def _tolist(s: State, i: int) -> None:
    s["v"] = s["x"][:4096].tolist()


def _tolist_fixed(s: State, i: int) -> None:
    s["v"] = s["x"][:4096] * 1


def _mask(s: State, i: int) -> None:
    s["z"] = s["x"][s["x"] > 0]


def _mask_fixed(s: State, i: int) -> None:
    s["z"] = torch.where(s["x"] > 0, s["x"], 0.0)


def _reps_setup(rng: random.Random, size: float, dev: str) -> State:
    n = 1 << int(14 + 6 * size)
    reps = torch.randint(1, 4, (n,), device=dev)
    return {"x": torch.randn(n, device=dev), "reps": reps, "total": int(reps.sum())}


def _repeat(s: State, i: int) -> None:
    s["z"] = torch.repeat_interleave(s["x"], s["reps"])


def _repeat_fixed(s: State, i: int) -> None:
    s["z"] = torch.repeat_interleave(s["x"], s["reps"], output_size=s["total"])


def _labels_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"y": torch.randint(0, 1000, (1 << int(16 + 6 * size),), device=dev)}


def _unique(s: State, i: int) -> None:
    s["seen"] = torch.unique(s["y"])


def _unique_fixed(s: State, i: int) -> None:
    s["seen"] = s["y"].new_zeros(1000, dtype=torch.bool).index_fill_(0, s["y"], True)


def _index_setup(rng: random.Random, size: float, dev: str) -> State:
    x = _vec(rng, size, dev, 18, 23)
    idx = torch.randint(0, x.numel(), (1 << int(14 + 4 * size),))
    return {"x": x, "idx_cpu": idx, "idx_dev": idx.to(dev)}


def _cpu_index(s: State, i: int) -> None:
    s["z"] = s["x"][s["idx_cpu"]]


def _cpu_index_fixed(s: State, i: int) -> None:
    s["z"] = s["x"][s["idx_dev"]]


def _sync(s: State, i: int) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# --- copies -----------------------------------------------------------------------------
def _upload_setup(rng: random.Random, size: float, dev: str) -> State:
    n = 1 << int(20 + 4 * size)
    host = torch.randn(n)
    return {"host": host, "pinned": host.pin_memory() if dev == "cuda" else host, "dev": dev}


def _upload(s: State, i: int) -> None:
    s["b"] = s["host"].to(s["dev"])


def _upload_fixed(s: State, i: int) -> None:
    s["b"] = s["pinned"].to(s["dev"], non_blocking=True)


def _readback(s: State, i: int) -> None:
    s["a"] = (s["x"] + 1).cpu()


def _readback_fixed(s: State, i: int) -> None:
    s["a"] = s["x"] + 1


# --- memory -----------------------------------------------------------------------------
def _cache_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"n": 1 << int(24 + 3 * size), "dev": dev}


def _empty_cache(s: State, i: int) -> None:
    t = torch.empty(s["n"], device=s["dev"])
    t.fill_(1.0)
    del t
    torch.cuda.empty_cache()


def _empty_cache_fixed(s: State, i: int) -> None:
    t = torch.empty(s["n"], device=s["dev"])
    t.fill_(1.0)
    del t


def _zeros_setup(rng: random.Random, size: float, dev: str) -> State:
    n = 1 << int(24 + 4 * size)
    return {"a": torch.randn(n, device=dev), "n": n, "dev": dev}


def _zeros(s: State, i: int) -> None:
    out = torch.zeros(s["n"], device=s["dev"])
    torch.add(s["a"], 1.0, out=out)
    s["out"] = out


def _zeros_fixed(s: State, i: int) -> None:
    out = torch.empty(s["n"], device=s["dev"])
    torch.add(s["a"], 1.0, out=out)
    s["out"] = out


def _cat_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"piece": torch.randn(1 << int(12 + 4 * size), device=dev),
            "m": int(16 + 48 * size)}


def _cat(s: State, i: int) -> None:
    out = s["piece"][:0]
    for _ in range(s["m"]):
        out = torch.cat([out, s["piece"]])
    s["out"] = out


def _cat_fixed(s: State, i: int) -> None:
    s["out"] = torch.cat([s["piece"]] * s["m"])


def _grow_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"n": 1 << int(16 + 4 * size), "dev": dev}


def _grow(s: State, i: int) -> None:
    s["t"] = torch.empty(s["n"] + 4096 * (i % 8), device=s["dev"])


def _grow_fixed(s: State, i: int) -> None:
    s["t"] = torch.empty(s["n"], device=s["dev"])


# --- host work --------------------------------------------------------------------------
def _batch_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"rows": int(32 + 96 * size), "cols": 64, "dev": dev, "rng": random.Random(7)}


def _py_batch(s: State, i: int) -> None:
    r = s["rng"]
    rows = [[r.random() for _ in range(s["cols"])] for _ in range(s["rows"])]
    s["b"] = torch.tensor(rows, device=s["dev"])


def _py_batch_fixed(s: State, i: int) -> None:
    s["b"] = torch.rand(s["rows"], s["cols"], device=s["dev"])


def _prep_setup(rng: random.Random, size: float, dev: str) -> State:
    n = int(200_000 + 600_000 * size)
    return {"n": n, "dev": dev, "ready": torch.randn(n // 4).to(dev)}


def _prep(s: State, i: int) -> None:
    raw = torch.randn(s["n"])                         # input built on the loop's thread
    s["b"] = (raw.sort().values[::4] * 0.5).to(s["dev"])


def _prep_fixed(s: State, i: int) -> None:
    s["b"] = s["ready"]                               # built ahead (workers)


def _small_setup(rng: random.Random, size: float, dev: str) -> State:
    k = int(24 + 72 * size)
    return {"ps": [torch.randn(256, device=dev) for _ in range(k)]}


def _small_ops(s: State, i: int) -> None:
    for p in s["ps"]:
        p.mul_(0.999)


def _small_ops_fixed(s: State, i: int) -> None:
    torch._foreach_mul_(s["ps"], 0.999)


def _adam_setup(rng: random.Random, size: float, dev: str) -> State:
    k = int(16 + 48 * size)
    ps = [torch.nn.Parameter(torch.randn(128, 128, device=dev)) for _ in range(k)]
    for p in ps:
        p.grad = torch.randn_like(p)
    fused = {"fused": True} if dev == "cuda" else {"foreach": True}
    return {"slow": torch.optim.AdamW(ps, foreach=False),
            "fast": torch.optim.AdamW(ps, **fused)}


def _adam(s: State, i: int) -> None:
    s["slow"].step()


def _adam_fixed(s: State, i: int) -> None:
    s["fast"].step()


def _save_setup(rng: random.Random, size: float, dev: str) -> State:
    k = int(4 + 12 * size)
    return {"state": {f"w{j}": torch.randn(512, 512, device=dev) for j in range(k)},
            "every": 8}


def _save(s: State, i: int) -> None:
    if i % s["every"] == s["every"] - 1:
        torch.save(s["state"], io.BytesIO())


def _gil_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"stop": None, "thread": None}


def _spin(stop: threading.Event) -> None:
    acc = 0
    while not stop.is_set():
        for k in range(20_000):
            acc = (acc * 31 + k) % 1_000_003


def _gil(s: State, i: int) -> None:
    if s["thread"] is None:
        s["stop"] = threading.Event()
        s["thread"] = threading.Thread(target=_spin, args=(s["stop"],), daemon=True)
        s["thread"].start()


def gil_stop(s: State) -> None:
    """Stop the background thread (the generator calls it after the loop)."""
    if s.get("thread") is not None:
        s["stop"].set()
        s["thread"].join()
        s["thread"] = None


# --- kernels ----------------------------------------------------------------------------
def _gemm_setup(rng: random.Random, size: float, dev: str) -> State:
    n = int(1024 + 3072 * size) // 64 * 64
    return {"a": torch.randn(n, n, device=dev), "b": torch.randn(n, n, device=dev)}


def _fp32(s: State, i: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    s["c"] = s["a"] @ s["b"]


def _fp32_fixed(s: State, i: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    s["c"] = s["a"] @ s["b"]
    torch.backends.cuda.matmul.allow_tf32 = False


def _gelu(s: State, i: int) -> None:
    x = s["x"]
    s["z"] = 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def _gelu_fixed(s: State, i: int) -> None:
    s["z"] = F.gelu(s["x"], approximate="tanh")


def _x_setup(rng: random.Random, size: float, dev: str) -> State:
    return {"x": _vec(rng, size, dev)}


def _contig(s: State, i: int) -> None:
    s["z"] = s["x"].contiguous()


CATALOGUE: tuple[Cause, ...] = (
    Cause("item", ("sync_in_loop",), _x_setup, _item, _item_fixed),
    Cause("bool_guard", ("sync_in_loop",), _x_setup, _guard, _guard_fixed),
    Cause("tolist", ("sync_in_loop", "readback_in_loop"), _x_setup, _tolist, _tolist_fixed),
    Cause("mask_index", ("sync_in_loop",), _x_setup, _mask, _mask_fixed),
    Cause("repeat_interleave", ("sync_in_loop",), _reps_setup, _repeat, _repeat_fixed),
    Cause("unique", ("sync_in_loop",), _labels_setup, _unique, _unique_fixed),
    Cause("cpu_index", ("sync_in_loop", "pageable_copy", "copy_on_compute_stream"),
          _index_setup, _cpu_index, _cpu_index_fixed),
    Cause("synchronize", ("sync_in_loop",), _x_setup, _sync, _nothing),
    Cause("blocking_upload", ("pageable_copy", "copy_on_compute_stream", "sync_in_loop"),
          _upload_setup, _upload, _upload_fixed),
    Cause("readback", ("readback_in_loop", "sync_in_loop"), _x_setup, _readback,
          _readback_fixed),
    Cause("empty_cache", ("alloc_in_loop",), _cache_setup, _empty_cache, _empty_cache_fixed),
    Cause("zeros_overwrite", ("fill_overwritten",), _zeros_setup, _zeros, _zeros_fixed),
    Cause("cat_growth", ("cat_in_loop",), _cat_setup, _cat, _cat_fixed),
    Cause("python_batch", ("host_bound", "input_starved", "batch_in_python"), _batch_setup, _py_batch,
          _py_batch_fixed),
    Cause("input_on_thread", ("host_bound", "input_starved"), _prep_setup, _prep,
          _prep_fixed),
    Cause("small_ops", ("launch_bound", "host_bound", "per_tensor_ops"), _small_setup, _small_ops,
          _small_ops_fixed),
    # AdamW(foreach=False) runs each parameter's update as a chain of elementwise
    # kernels, each op dispatched from Python; its fix (fused=True) is one kernel: what
    # unfused_elementwise names at its line (and one_pass models) as well as the launches
    Cause("adam_single", ("launch_bound", "host_bound", "unfused_elementwise"), _adam_setup,
          _adam, _adam_fixed),
    Cause("checkpoint", ("slow_step",), _save_setup, _save, _nothing),
    Cause("gil_thread", ("gil_contention",), _gil_setup, _gil, _nothing),
    Cause("fp32_gemm", ("fp32_gemm",), _gemm_setup, _fp32, _fp32_fixed),
    Cause("unfused_gelu", ("fusion_failure", "unfused_elementwise"), _x_setup, _gelu,
          _gelu_fixed),
    Cause("alloc_grow", (), _grow_setup, _grow, _grow_fixed, control=True),
    Cause("contiguous", (), _x_setup, _contig, _nothing, control=True),
)
"""21 causes and 2 negative controls."""

BY_NAME = {c.name: c for c in CATALOGUE}
