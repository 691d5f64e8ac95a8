"""Chains of elementwise kernels in a step: what one fused kernel would do in one pass.

Eager PyTorch runs `0.5 * x * (1 + torch.tanh(c * (x + a * x ** 3)))` as nine kernels,
each reading and writing the whole tensor, each an op dispatched from Python; a fused
kernel (F.gelu, torch.compile, a Triton kernel) reads the input once and writes the
output once. A chain is a run of elementwise kernels the range's thread launched one
after the other with one launch configuration (the same tensor size), no other operation
between them. The change `one_pass` (changes.py) keeps the chain's shortest kernel, the
cost of one pass, and takes the others away with the host's dispatch of each.
"""

from __future__ import annotations

import numpy as np

from ..common.settings import CHAIN_MIN_KERNELS
from .edits import launched, launchers, named_ops
from .graph import Graph

ELEMENTWISE = r"elementwise_kernel"
"""PyTorch's elementwise kernels (vectorized_, unrolled_elementwise_kernel,
elementwise_kernel): one op each, unfused."""


def chains(g: Graph) -> list[np.ndarray]:
    """The step's chains (op nodes, in launch order) of CHAIN_MIN_KERNELS kernels or more,
    kept with the graph."""
    memo = ("chains",)
    if memo not in g.cache:
        g.cache[memo] = _chains(g)
    return g.cache[memo]


def _chains(g: Graph) -> list[np.ndarray]:
    if "grid" not in g.ops or not len(g.ops):
        return []
    nodes, _ = launched(g)
    grid = g.ops["grid"].to_numpy()[nodes - len(g.calls)]
    key = np.where(np.isin(nodes, named_ops(g, ELEMENTWISE)) & (grid > 0), grid,
                   -1 - np.arange(len(nodes)))      # anything else ends a chain
    cuts = np.flatnonzero(np.diff(key) != 0) + 1
    return [run for run in np.split(nodes, cuts) if len(run) >= CHAIN_MIN_KERNELS]


def grid_of(g: Graph, chain: np.ndarray) -> int:
    """The chain's launch configuration (blocks x 1024 + threads per block)."""
    return int(g.ops["grid"].to_numpy()[chain[0] - len(g.calls)])


def host_span(g: Graph, chain: np.ndarray) -> tuple[int, int]:
    """From the start of the chain's first launch to the end of its last, on the clock."""
    call = launchers(g, chain)
    return int(g.start[call].min()), int(g.end[call].max())


def kept(g: Graph, chain: np.ndarray) -> int:
    """The kernel that stands for the fused one: the chain's shortest (one pass: its
    input read once, its output written once)."""
    return int(chain[np.argmin(g.end[chain] - g.start[chain])])
