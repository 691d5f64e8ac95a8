"""Findings: the rules, their remedies and levers, prices from the step model, the roofline
and Compute findings, rank comparisons.

Imports: `loops`, `trace`, `load`, `documents`, `common`.
"""
