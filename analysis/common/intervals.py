"""Interval arithmetic on numpy arrays: the ground floor that loaders and analyses share
(no module of the analysis below it).

`union` merges intervals into disjoint sorted blocks, `clipped_union` takes a window's
share of a union, `covered` measures how much of each [lo, hi] the blocks cover, `minus`
takes intervals out of others.
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted blocks covering the intervals [starts, ends)."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_end[:-1]]
    heads = np.flatnonzero(new)
    tails = np.r_[heads[1:], len(s)] - 1
    return s[heads], run_end[tails]


def clipped_union(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """union() of the intervals, clipped to the window [lo, hi): the window's share of a
    union, so that a union over a whole trace is the sum of its windows' shares."""
    bs, be = union(starts, ends)
    bs, be = np.maximum(bs, lo), np.minimum(be, hi)
    keep = be > bs
    return bs[keep], be[keep]


def covered(block_s: np.ndarray, block_e: np.ndarray, lo: np.ndarray,
            hi: np.ndarray) -> np.ndarray:
    """Length of [lo, hi] covered by the disjoint sorted blocks, for each (lo, hi)."""
    if not len(block_s):
        return np.zeros(len(lo), dtype="int64")
    before = np.r_[0, np.cumsum(block_e - block_s)]

    def upto(t: np.ndarray) -> np.ndarray:          # covered length of (-inf, t]
        i = np.searchsorted(block_s, t, side="right") - 1
        j = np.maximum(i, 0)
        part = np.clip(np.minimum(t, block_e[j]) - block_s[j], 0, None)
        return np.where(i >= 0, before[j] + part, 0)

    return np.maximum(upto(hi) - upto(lo), 0)


def minus(keep: list[tuple[int, int]] | tuple, cut: list[tuple[int, int]] | tuple
          ) -> tuple[tuple[int, int], ...]:
    """The intervals `keep` ([start, end) rows) less every interval of `cut`: what lies
    in a range's instances outside the ranges nested in them."""
    if not len(keep):
        return ()
    cs, ce = union(np.array([a for a, _ in cut], dtype="int64"),
                   np.array([b for _, b in cut], dtype="int64"))
    out: list[tuple[int, int]] = []
    for a, b in keep:
        at = a
        lo, hi = np.searchsorted(ce, a, side="right"), np.searchsorted(cs, b, side="left")
        for s, e in zip(cs[lo:hi].tolist(), ce[lo:hi].tolist(), strict=True):
            if s > at:
                out.append((at, s))
            at = max(at, e)
        if at < b:
            out.append((at, b))
    return tuple(out)
