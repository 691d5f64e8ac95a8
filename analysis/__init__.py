"""Analysis of Nsight exports, in stages: load -> trace -> loops -> diagnosis -> documents
-> render, driven by commands. Never imports torch or triton: it runs on any laptop.

Packages, each importing only those below it (checked by `lint-imports`, `.importlinter`):
commands > render > diagnosis > loops > trace > load | documents > common.
"""
