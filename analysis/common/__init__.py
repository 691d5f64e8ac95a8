"""What every stage shares: settings and thresholds, errors, intervals, paths, progress,
external tools, and the naming vocabulary (kernel labels, set-apart and op-range names).

Imports: the standard library, numpy and pandas only; no other package of `analysis`.
"""
