"""Are the reports the same before and after a change? Every committed capture analyzed by
two versions of the code, every file compared.

    python tests/data/tools/same_outputs.py BASE_REF [--new PATH] [--jobs N] [--keep DIR]

BASE_REF (a commit, a branch) is checked out into a temporary git worktree; NEW is a tree
(default: this checkout, as it is on disk, uncommitted changes included). Both run the same
commands from their own tree, over the same files of this checkout's tests/data:

- `systems` on every export (`*.sqlite.xz` unpacked first), with the meta.json and
  torch_logs.txt beside it; per-rank exports (`rank<k>.sqlite`) of one folder together;
- `compute` on every Nsight Compute raw CSV with a meta.json, then `page` on each folder;
- `picks --json` on every systems report of one export;
- `diff` of every battery pair (planted against fixed).

Files are compared as what they hold: JSON by value, Parquet as Arrow tables (schema and
values), anything else byte for byte. Prints one line per difference and the count of files
compared; exit 0 when all are the same, 1 when any differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"


def unpack(data: Path) -> None:
    """The committed xz files unpacked beside themselves (as the tests do)."""
    for xz in data.rglob("*.xz"):
        plain = xz.with_suffix("")
        if not plain.exists() or plain.stat().st_mtime < xz.stat().st_mtime:
            subprocess.run(["xz", "-dkf", str(xz)], check=True)


def jobs(data: Path) -> list[tuple[str, list[str]]]:
    """(report folder, analysis argv) for every capture; folders relative to the output."""
    out: list[tuple[str, list[str]]] = []
    done: set[Path] = set()
    for trace in sorted(data.rglob("*.sqlite")):
        folder = trace.parent
        rel = trace.relative_to(data).with_suffix("").as_posix()
        if trace.stem.startswith("rank"):
            if folder in done:
                continue
            done.add(folder)
            out.append((folder.relative_to(data).as_posix(),
                        ["systems", str(folder), "--quiet"]))
            continue
        argv = ["systems", str(trace), "--quiet"]
        for flag, name in (("--meta", "meta.json"), ("--torch-logs", "torch_logs.txt")):
            if (folder / name).is_file() and trace.name == "trace.sqlite":
                argv += [flag, str(folder / name)]
        out.append((rel, argv))
    return out


def compute_jobs(data: Path) -> list[tuple[str, list[str]]]:
    """(report folder, argv) for every raw CSV that has a meta.json."""
    out = []
    for csv in sorted(data.rglob("*_raw.csv")) + sorted(data.rglob("ncu_raw.csv")):
        stem = csv.name[: -len("raw.csv")]
        meta = csv.with_name(f"{stem}meta.json")
        if meta.is_file():
            out.append((f"compute/{csv.relative_to(data).with_suffix('').as_posix()}",
                        ["compute", str(csv), "--meta", str(meta)]))
    return out


def run_all(tree: Path, out: Path, data: Path, workers: int) -> None:
    """Every command of one tree, its outputs under `out`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}

    def one(folder: str, argv: list[str], then: list[list[str]] = ()) -> None:
        dest = out / folder
        cmds = [["-m", "analysis", *argv, "-o", str(dest)]] + [
            ["-m", "analysis", *t] for t in then]
        for cmd in cmds:
            done = subprocess.run([sys.executable, *cmd], cwd=tree, env=env,
                                  capture_output=True, text=True)
            name = dest if cmd[2] != "picks" else dest / "picks.json"
            if cmd[2] == "picks":
                name.write_text(done.stdout if done.returncode == 0 else "")
            (dest.parent / f"{dest.name}.{cmd[2]}.rc").write_text(
                f"{done.returncode}\n{_last_line(done.stderr)}\n")

    tasks = []
    for folder, argv in jobs(data):
        then = [["page", str(out / folder)]]
        if not argv[1].endswith(("rank0.sqlite",)) and not Path(argv[1]).is_dir():
            then.append(["picks", str(out / folder), "--trace", argv[1], "--json"])
        tasks.append((folder, argv, then))
    for folder, argv in compute_jobs(data):
        tasks.append((folder, argv, [["page", str(out / folder)]]))
    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(one, *t) for t in tasks]:
            f.result()
    _diffs(tree, out, data, env)


def _diffs(tree: Path, out: Path, data: Path, env: dict) -> None:
    """The diff of each battery pair, its markdown and JSON kept."""
    for planted in sorted((data / "battery").glob("*_planted")):
        fixed = planted.with_name(planted.name.replace("_planted", "_fixed"))
        if fixed.is_dir():
            dest = out / "diff" / f"{planted.name}.md"
            dest.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "analysis", "diff", str(planted),
                            str(fixed), "-o", str(dest)], cwd=tree, env=env,
                           capture_output=True)


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines and "Traceback" in text else ""


def same(a: Path, b: Path) -> bool:
    """Whether two output files hold the same thing."""
    if a.suffix == ".json":
        return json.loads(a.read_bytes() or b"null") == json.loads(b.read_bytes() or b"null")
    if a.suffix == ".parquet":
        ta, tb = pq.read_table(a), pq.read_table(b)
        return ta.schema.equals(tb.schema) and ta.equals(tb)
    return a.read_bytes() == b.read_bytes()


def compare(base: Path, new: Path) -> tuple[int, list[str]]:
    """(files compared, differences)."""
    names = {p.relative_to(base) for p in base.rglob("*") if p.is_file()}
    names |= {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    problems = []
    for rel in sorted(names):
        a, b = base / rel, new / rel
        if not a.is_file() or not b.is_file():
            problems.append(f"only in {'base' if a.is_file() else 'new'}: {rel}")
        elif not same(a, b):
            problems.append(f"differs: {rel}")
    return len(names), problems


def worktree(ref: str, where: Path) -> Path:
    """BASE_REF checked out in `where`/tree: apart from the outputs (`where`/base), which
    removing the worktree would take with it."""
    tree = where / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), ref],
                   check=True, capture_output=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="the commit (or branch) to compare against")
    p.add_argument("--new", default=str(REPO), help="the tree to check (default: this one)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--keep", help="write both outputs here (default: a temporary folder)")
    args = p.parse_args(argv)
    unpack(DATA)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        base = worktree(args.base, Path(tmp))
        try:
            for label, tree in (("base", base), ("new", Path(args.new))):
                print(f"running {label} ({tree})", file=sys.stderr)
                run_all(tree, where / label, DATA, args.jobs)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(base)], capture_output=True)
        count, problems = compare(where / "base", where / "new")
    print("\n".join(problems))
    print(f"{count} files compared, {len(problems)} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
