"""One loader per source (an Nsight Systems SQLite export, an Nsight Compute CSV, TORCH_LOGS):
each documents its columns (units in names), reads each table once and fails fast.

Imports: `common`.
"""
