"""The stranger program's table: each cause's saving as the toolkit prices it on the
planted capture (no NVTX range: the loop is detected) against what its fix saved, in the
captured runs (the planted capture's ms per step minus the fixed one's: the run the
analysis reads) and without the profiler (two runs of each variant, plain.txt).

    python tests/data/tools/stranger_score.py tests/data/stranger REPORT_DIR -o reports/bench/stranger.md

REPORT_DIR holds the planted capture's systems.json (`python -m analysis systems
tests/data/stranger/none/trace.sqlite --meta tests/data/stranger/none/meta.json -o DIR`).
A cause's finding is the one with the largest saving that names the cause's line (found
by its text in stranger_train.py, so the table follows the script if lines move).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

SCRIPT = Path(__file__).with_name("stranger_train.py")
CAUSES = {"item": "loss.item()", "mask": "logits[keep]", "batch": "torch.tensor(rows)"}
"""Each cause's fix (stranger_train.py --fix) and the text of the line that makes it."""
MS = re.compile(r"fix=(\w+) steps=\d+ ms_per_step=([\d.]+)")


def line_of(text: str) -> int:
    """The script's last line number holding `text` (the code's; the docstring names the
    causes first)."""
    lines = SCRIPT.read_text().splitlines()
    return max(i for i, x in enumerate(lines, 1) if text in x)


def captured(data: Path) -> dict[str, float]:
    """ms per step of each variant's captured run, as its log printed it."""
    out = {}
    for log in data.glob("*/log.txt"):
        for m in MS.finditer(log.read_text()):
            out[m.group(1)] = float(m.group(2))
    return out


def plain(data: Path) -> dict[str, float]:
    """Median ms per step of each variant run without the profiler."""
    runs: dict[str, list[float]] = {}
    for m in MS.finditer((data / "plain.txt").read_text()):
        runs.setdefault(m.group(1), []).append(float(m.group(2)))
    return {k: statistics.median(v) for k, v in runs.items()}


def priced(doc: dict, line: int) -> tuple[float, str, str]:
    """(ms per step, rule, call) of the largest finding that names `line`."""
    named = [f for f in doc["findings"] if any(
        x.get("line") == line for x in (f.get("evidence") or {}).get("lines_named") or [])]
    if not named:
        return 0.0, "–", ""
    f = max(named, key=lambda f: f.get("saving_per_instance_ns") or 0)
    call = next(x.get("call") or "" for x in f["evidence"]["lines_named"] if x["line"] == line)
    return (f.get("saving_per_instance_ns") or 0) / 1e6, f["rule"], call


def table(data: Path, report: Path) -> str:
    """The markdown table, with the machine it ran on."""
    doc = json.loads((report / "systems.json").read_text())
    cap, pl = captured(data), plain(data)
    env = " ".join((data / "env.txt").read_text().split("\n")[:3])
    rows = ["| cause | line | rule | call | priced ms | realized ms (captured) | "
            "realized ms (plain) |", "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    for cause, text in CAUSES.items():
        line = line_of(text)
        ms, rule, call = priced(doc, line)
        rows.append(f"| {cause} | {line} | {rule} | {call or '–'} | {ms:.3f} | "
                    f"{cap['none'] - cap[cause]:.3f} | {pl['none'] - pl[cause]:.3f} |")
    return (f"# The stranger program (no NVTX range), priced against its fixes\n\n"
            f"Captured on: {env}.\n\nPlanted run: {cap['none']:.3f} ms a step captured, "
            f"{pl['none']:.3f} plain; all three fixed: {cap['all']:.3f} captured, "
            f"{pl['all']:.3f} plain.\n\n" + "\n".join(rows) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path)
    p.add_argument("report", type=Path)
    p.add_argument("-o", "--out", type=Path, required=True)
    a = p.parse_args()
    a.out.write_text(table(a.data, a.report))
    print(a.out.read_text())


if __name__ == "__main__":
    main()
