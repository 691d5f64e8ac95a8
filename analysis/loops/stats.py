"""Medians with their intervals: the steps' spread and the diff's noise.

The interval of a median is the order-statistics one (the ranks a binomial(n, 1/2) puts
the median between with settings.DIFF_CONFIDENCE, by the normal approximation; the whole
range for fewer than 6 values); the interval of a change between two medians is a
percentile bootstrap of the ratio (seeded: the same inputs give the same interval).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ..common.settings import DIFF_CONFIDENCE
from ..documents.types import StepSet

BOOTSTRAP = 2000
"""Resamples of the change's bootstrap."""
KEEP = 10_000
"""Step durations a StepSet keeps (the first ones)."""


def _z() -> float:
    """The normal quantile of DIFF_CONFIDENCE (two-sided)."""
    return NormalDist().inv_cdf(0.5 + DIFF_CONFIDENCE / 2)


def median_interval(values: np.ndarray) -> tuple[float, float]:
    """The median's DIFF_CONFIDENCE interval by order statistics."""
    x = np.sort(np.asarray(values, dtype="float64"))
    n = len(x)
    if n == 0:
        return 0.0, 0.0
    if n < 6:
        return float(x[0]), float(x[-1])
    half = _z() * math.sqrt(n) / 2
    lo = max(int(math.floor(n / 2 - half)), 1)
    hi = min(int(math.ceil(n / 2 + half)) + 1, n)
    return float(x[lo - 1]), float(x[hi - 1])


def described(s: StepSet, durations: np.ndarray) -> StepSet:
    """`s` with its steady steps' count, median and interval, spread and mean."""
    d = np.asarray(durations, dtype="int64")
    s.count = len(d)
    if not len(d):
        return s
    s.median_ns = float(np.median(d))
    s.median_low_ns, s.median_high_ns = median_interval(d)
    s.p10_ns, s.p90_ns = (float(v) for v in np.percentile(d, [10, 90]))
    s.mean_ns = float(d.mean())
    s.durations_ns = d[:KEEP].tolist()
    return s


def change_interval(before: np.ndarray, after: np.ndarray, seed: int = 0
                    ) -> tuple[float, float]:
    """The DIFF_CONFIDENCE interval of the change of the median, in % of `before`'s,
    by a percentile bootstrap of both samples (at least 2 values each; else (-inf, inf)
    where one side has a single value)."""
    a, b = np.asarray(before, dtype="float64"), np.asarray(after, dtype="float64")
    if len(a) < 2 or len(b) < 2:
        return -math.inf, math.inf
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(a, (BOOTSTRAP, len(a))), axis=1)
    mb = np.median(rng.choice(b, (BOOTSTRAP, len(b))), axis=1)
    ratio = 100.0 * (mb - ma) / np.where(ma > 0, ma, np.nan)
    tail = 100 * (1 - DIFF_CONFIDENCE) / 2
    lo, hi = np.nanpercentile(ratio, [tail, 100 - tail])
    return float(lo), float(hi)


def loop_verdict(base: tuple[float, float, float], new: tuple[float, float, float],
                 change_pct: float, threshold_pct: float) -> str:
    """A loop's change between two runs: `slower` when its cost as it runs rose by more
    than the threshold and the median steps' intervals (median, low, high) do not
    overlap, `faster` the same way down, else `within noise` (a mean alone never
    gates)."""
    apart_up, apart_down = new[1] > base[2], new[2] < base[1]
    if change_pct > threshold_pct and apart_up:
        return "slower"
    if change_pct < -threshold_pct and apart_down:
        return "faster"
    return "within noise"
