"""Make a committed export smaller without changing what the analysis reads: drop the tables
no loader reads (OSRT_CALLCHAINS: the OS runtime calls' native backtraces, often half the
file), VACUUM, and compress it again beside itself.

    python tests/data/tools/drop_unread.py tests/data/autotune/trace.sqlite [...]

Run `tests/data/tools/same_outputs.py` (or compare `python -m analysis systems` before and
after) to check that every document stays the same; the `nsys stats` references beside each
export were taken on the whole file and stay valid for every table kept.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

UNREAD = ("OSRT_CALLCHAINS",)


def trim(path: Path) -> tuple[int, int]:
    """(bytes before, bytes after) of the plain export; its .xz written anew."""
    before = path.stat().st_size
    conn = sqlite3.connect(path)
    try:
        for table in UNREAD:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    subprocess.run(["xz", "-9", "-T2", "-k", "-f", str(path)], check=True)
    return before, path.stat().st_size


def main(argv: list[str]) -> int:
    for arg in argv:
        before, after = trim(Path(arg))
        print(f"{arg}: {before:,} -> {after:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
