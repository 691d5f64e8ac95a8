"""The documents users and tools read: typed records, their schemas, JSON and Parquet writing,
and the per-range tables (systems.json, compute.json, ranges.parquet, ...).

Imports: `common`.
"""
