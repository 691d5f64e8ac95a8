"""The period of a GPU's repeating kernel sequence: steps found where no range marks them.

A training or serving loop launches the same kernels in the same order every step, so the
kernel names of one stream, in start order, equal themselves one period later. Candidate
periods are the usual distance between repeats of each name (a kernel launched once per
step repeats every period); the period is the shortest candidate under which at least
STEP_MATCH_PCT of the sequence's later two thirds (warm-up ran first) equals itself one
period on. A step starts at the phase of the period with the longest GPU idle gap before
it (the host's turn between steps), from the start of the repeating part on.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..common.settings import STEP_MATCH_PCT, STEP_MIN_COUNT

CANDIDATES = 24
"""Candidate periods tried (the most common repeat distances)."""


def candidates(names: np.ndarray) -> list[int]:
    """The most common distances between consecutive launches of one kernel name, each
    name counted by its usual (median) distance, weighted by its launches."""
    n = len(names)
    order = np.argsort(names, kind="stable")
    s = names[order]
    same = s[1:] == s[:-1]
    gaps = np.diff(order)[same]
    owner = s[1:][same]
    if not len(gaps):
        return []
    frame = pd.DataFrame({"name": owner, "gap": gaps})
    usual = frame.groupby("name")["gap"].agg(["median", "size"])
    usual = usual[usual["size"] >= STEP_MIN_COUNT - 1]
    votes = usual.groupby(usual["median"].round().astype("int64"))["size"].sum()
    votes = votes[(votes.index >= 1) & (votes.index <= n // STEP_MIN_COUNT)]
    return sorted(votes.sort_values(ascending=False).index[:CANDIDATES].tolist())


def period_of(names: np.ndarray) -> int | None:
    """The shortest candidate period the sequence's later two thirds repeats under."""
    n = len(names)
    tail = n // 3
    for p in candidates(names):
        if n - p - tail < p:
            continue
        eq = names[tail:n - p] == names[tail + p:]
        if eq.mean() * 100 >= STEP_MATCH_PCT:
            return int(p)
    return None


def period_steps(names: np.ndarray, starts: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """(step starts, step ends, kernels per step, kernels before the first step) in GPU
    time, or None when the sequence does not repeat STEP_MIN_COUNT times."""
    p = period_of(names)
    if p is None:
        return None
    n, tail = len(names), len(names) // 3
    gap = np.r_[0, starts[1:] - np.maximum.accumulate(ends)[:-1]]
    reps = (n - tail) // p
    phase = int(np.argmax(np.median(gap[tail:tail + reps * p].reshape(reps, p), axis=0)))
    anchor = tail + phase
    template = names[anchor:anchor + p]
    keep = walk(names, template, anchor)
    if len(keep) < STEP_MIN_COUNT:
        return None
    keep = np.array(keep)
    last = np.maximum.accumulate(ends)
    lo = starts[keep]
    nxt = keep + p
    hi = np.where(nxt < len(names), starts[np.minimum(nxt, len(names) - 1)], last[nxt - 1])
    return lo, hi, p, int(keep[0])


def walk(names: np.ndarray, template: np.ndarray, anchor: int) -> list[int]:
    """Starts of the windows that repeat `template` (STEP_MATCH_PCT of it), from `anchor`
    back until one does not (warm-up before it) and on to the end, finding the template
    again after a step that differs (an extra kernel shifts the rest)."""
    p, n = len(template), len(names)

    def same(i: int) -> bool:
        return (names[i:i + p] == template).mean() * 100 >= STEP_MATCH_PCT

    back = []
    i = anchor - p
    while i >= 0 and same(i):
        back.append(i)
        i -= p
    heads = np.flatnonzero(names == template[0])
    out, i = back[::-1], anchor
    while i + p <= n:
        if same(i):
            out.append(i)
            i += p
            continue
        later = heads[np.searchsorted(heads, i, side="right"):]
        i = next((int(j) for j in later if j + p <= n and same(int(j))), n)
    return out


def nccl_cadence(kernels: pd.DataFrame, ranges: pd.DataFrame, lo: np.ndarray,
                 hi: np.ndarray) -> int | None:
    """NCCL launches per step when STEP_MATCH_PCT of the steps hold as many, at least one
    (a first step may hold one more: the start's broadcast): its kernels,
    else the ranges of NCCL's domain (the host's clock, which the steps' GPU times follow
    closely where the loop waits on its GPU each step; else the counts do not agree)."""
    comm = kernels[kernels["nccl"]]["start_ns"].to_numpy()
    if not len(comm):
        dom = ranges["domain"].astype(str).str.lower() == "nccl"
        comm = np.sort(ranges[dom.to_numpy()]["start_ns"].to_numpy())
    if not len(comm):
        return None
    per = np.searchsorted(comm, hi) - np.searchsorted(comm, lo)
    values, counts = np.unique(per, return_counts=True)
    mode = int(values[np.argmax(counts)])
    agree = counts.max() * 100 >= STEP_MATCH_PCT * len(per)
    return mode if agree and mode > 0 else None
