"""Translate the program.py line numbers in a capture's Python samples from the version of
program.py it ran to the one committed, statement for statement.

    python remap_lines.py TRACE.sqlite OLD_program.py [NEW_program.py]

The analysis reads the code at a sample's line in the file as it is now; seeds 76 and 77
ran a program.py whose functions sat 8 lines lower (commit 5313472), since moved back to
where seeds 11-75 have them. Each sampled line is mapped through the two files' equal
blocks (difflib), checked to hold the same text on both sides, and rewritten in the
sample's JSON (NVTX_EVENTS.jsonText); a line outside those blocks stays as it is.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
import sys
from pathlib import Path


def line_map(old: list[str], new: list[str]) -> dict[int, int]:
    """1-based line of `old` -> the line of `new` holding the same statement."""
    out: dict[int, int] = {}
    ops = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, _ in ops:
        if tag == "equal":
            out.update({i1 + k + 1: j1 + k + 1 for k in range(i2 - i1)})
    return out


def remap(trace: Path, old: list[str], new: list[str]) -> int:
    """Rewrite the samples' program.py lines in place; the number of samples changed."""
    moved = {a: b for a, b in line_map(old, new).items() if a != b}
    changed = 0
    with sqlite3.connect(trace) as db:
        ids = {r[0] for r in db.execute(
            "SELECT id FROM StringIds WHERE value LIKE '%battery_gen/program.py'")}
        rows = db.execute("SELECT rowid, jsonText FROM NVTX_EVENTS WHERE eventType = 34 "
                          "AND jsonText IS NOT NULL").fetchall()
        for rowid, text in rows:
            sample = json.loads(text)
            frames = [f for f in sample["Python Periodic Sampling"]["Frames"]
                      if f["File"] in ids and f["Line"] in moved]
            for f in frames:
                assert new[moved[f["Line"]] - 1] == old[f["Line"] - 1]
                f["Line"] = moved[f["Line"]]
            if frames:
                db.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE rowid = ?",
                           (json.dumps(sample, separators=(",", ":")), rowid))
                changed += 1
    return changed


if __name__ == "__main__":
    here = Path(__file__).resolve().parent / "program.py"
    trace, old_py = Path(sys.argv[1]), Path(sys.argv[2])
    new_py = Path(sys.argv[3]) if len(sys.argv) > 3 else here
    n = remap(trace, old_py.read_text().split("\n"), new_py.read_text().split("\n"))
    print(f"{trace}: {n} samples' program.py lines translated")
