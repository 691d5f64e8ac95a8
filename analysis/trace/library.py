"""Libraries' own NVTX ranges (settings.LIBRARY_DOMAINS: CUB's `CCCL`, `NCCL`, cuDNN, ...).

A library annotates its calls in its own domain, so its ranges nest on a stack of their
own and come out as top-level paths (`cub::DeviceSelect::Flagged`). They are the
library's, not the user's: the rules judge no such range, the diff gives them no row, and
the pages list each under the user's range that held most of its instances (`parent`,
found here: the innermost push/pop range of a non-library domain, on the same thread,
that encloses the instance; emit_nvtx op ranges are cut off as findings cut them).
"""

from __future__ import annotations

import bisect
from collections import Counter

import numpy as np
import pandas as pd

from ..common.names import library_mask


def parents(ranges: pd.DataFrame, user_path) -> dict[int, str]:
    """Per key of a library's ranges: the user's range path (cut by `user_path`) that held
    most of its instances; keys whose instances no user range held are left out. Walks
    only the threads that hold library ranges."""
    lib = library_mask(ranges["domain"])
    if not lib.any():
        return {}
    pushpop = (ranges["style"] == "PushPop").to_numpy()
    tid = ranges["global_tid"].to_numpy(dtype="int64")
    held: dict[int, Counter] = {}
    for t in np.unique(tid[lib]).tolist():
        mine = tid == t
        libs = np.flatnonzero(mine & lib)
        user = _around(ranges, np.flatnonzero(mine & pushpop & ~lib), libs)
        if not len(user):
            continue
        _enclosing(ranges, user, libs, held, user_path)
    return {k: c.most_common(1)[0][0] for k, c in held.items()}


def _around(ranges: pd.DataFrame, user: np.ndarray, libs: np.ndarray) -> np.ndarray:
    """The user ranges in which some library instance starts: only they can enclose one,
    and every range enclosing one of them does too, so the parent links among them are
    those among all (on the 66k-range record_shapes capture, a few hundred of the op
    ranges the walk took 20 ms over)."""
    start = ranges["start_ns"].to_numpy(dtype="int64")
    at = np.sort(start[libs])
    lo = np.searchsorted(at, start[user], side="left")
    hi = np.searchsorted(at, ranges["end_ns"].to_numpy(dtype="int64")[user], side="right")
    return user[hi > lo]


def _enclosing(ranges: pd.DataFrame, user: np.ndarray, libs: np.ndarray,
               held: dict[int, Counter], user_path) -> None:
    """Count, per library key, the innermost user range enclosing each of its instances
    (user ranges of one thread nest, so the candidate starting last before the instance
    is it or one of its ancestors: up the parent links until one encloses it)."""
    start = ranges["start_ns"].to_numpy(dtype="int64")
    end = ranges["end_ns"].to_numpy(dtype="int64")
    order = user[np.lexsort((-end[user], start[user]))]
    s, e = start[order].tolist(), end[order].tolist()
    up, stack = [-1] * len(order), []              # parent link of each, by a stack pass
    for i in range(len(order)):
        while stack and e[stack[-1]] < e[i]:
            stack.pop()
        up[i] = stack[-1] if stack else -1
        stack.append(i)
    paths, keys = ranges["path"].to_numpy(dtype=object), ranges["key"].to_numpy()
    for row in libs.tolist():
        i = bisect.bisect_right(s, int(start[row])) - 1
        while i >= 0 and e[i] < int(end[row]):
            i = up[i]
        if i >= 0 and (where := user_path(paths[order[i]])):
            held.setdefault(int(keys[row]), Counter())[where] += 1
