"""A sampled twin capture made small enough to commit, its analysis unchanged: the
scheduling events and the OS calls' backtraces (SCHED_EVENTS, OSRT_CALLCHAINS, which no
analysis here reads) are dropped, and the Python
samples (NVTX_EVENTS rows of eventType 34) are kept only on the threads that hold NVTX
ranges or made CUDA calls (the sampler samples every Python thread: DataLoader's and the
interpreter's own among them, none of which a range's numbers read; a script without
ranges keeps its launching thread's). Every range, kernel, call, OS call and
CPU sample stays, so nsys stats gives the same numbers on the trimmed copy.

    python tests/data/tools/trim_sampled.py trace.sqlite
"""

from __future__ import annotations

import sqlite3
import sys

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


def trim(path: str) -> tuple[int, int]:
    """Trim `path` in place; (Python samples kept, removed)."""
    conn = sqlite3.connect(path)
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (RUNTIME,)).fetchone():
        conn.execute(f"CREATE TEMP TABLE {RUNTIME} (globalTid INTEGER)")
    conn.execute("DROP TABLE IF EXISTS SCHED_EVENTS")
    conn.execute("DROP TABLE IF EXISTS OSRT_CALLCHAINS")
    gone = conn.execute(
        "DELETE FROM NVTX_EVENTS WHERE eventType = 34 AND globalTid NOT IN (SELECT DISTINCT "
        "globalTid FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)) AND globalTid NOT IN "
        f"(SELECT DISTINCT globalTid FROM {RUNTIME})").rowcount
    kept = conn.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34").fetchone()[0]
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    return kept, gone


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        kept, gone = trim(arg)
        print(f"{arg}: SCHED_EVENTS and OSRT_CALLCHAINS dropped, kept {kept} Python samples, removed {gone}")
