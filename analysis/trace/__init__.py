"""The measured trace: ranges and their kernels, the host split, ops, samples and the user's
lines; the `Trace` type (trace/types.py) lives here, below every user of it.

Imports: `load`, `documents`, `common`.
"""
