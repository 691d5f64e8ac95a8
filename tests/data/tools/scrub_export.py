"""Make an Nsight Systems export fit to commit as test data, without changing its numbers.

    python tests/data/tools/scrub_export.py RAW.sqlite OUT.sqlite

An export records the capturing machine's environment and full paths. This copies RAW
to OUT, then in OUT only:
- deletes the ENVIRONMENT_VARIABLE rows of META_DATA_CAPTURE (the whole environment);
- blanks TARGET_INFO_SYSTEM_ENV's DeviceEnvironment row;
- shortens absolute path prefixes (capture folder, checkout, virtualenv, home) in
  META_DATA_CAPTURE, META_DATA_EXPORT and StringIds;
- VACUUMs. Timestamps, kernels, API calls and NVTX rows are untouched: run `nsys stats`
  on RAW and OUT and compare (tests/data/README.md).
"""

from __future__ import annotations

import shutil
import sqlite3
import sys

PREFIXES = [("/tmp/capture/", "capture/"), ("/work/main/", "repo/"), ("/work/main", "repo"),
            ("/opt/torch/.venv/", "venv/"), ("/root/", "~/")]


def _replace_sql(column: str) -> str:
    expr = column
    for old, new in PREFIXES:
        expr = f"replace({expr}, '{old}', '{new}')"
    return expr


def scrub(raw: str, out: str) -> None:
    shutil.copyfile(raw, out)
    conn = sqlite3.connect(out)
    with conn:
        conn.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'")
        conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                     "WHERE name = 'DeviceEnvironment'")
        for table in ("META_DATA_CAPTURE", "META_DATA_EXPORT"):
            conn.execute(f"UPDATE {table} SET value = {_replace_sql('value')}")
        conn.execute(f"UPDATE StringIds SET value = {_replace_sql('value')} "
                     "WHERE value LIKE '%/%'")
    conn.execute("VACUUM")
    conn.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    scrub(sys.argv[1], sys.argv[2])
