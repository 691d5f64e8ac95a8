"""Loops and their steps: a loop is a range that repeats, a step one instance of it. Steps
found, the step model (graph, replay, critical path) and the changes it can price.

Imports: `trace`, `load`, `documents`, `common`.
"""
