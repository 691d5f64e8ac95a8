"""Shared plumbing of the drivers: is there a GPU, run folders, one CLI shell.

Finding and running the Nsight tools lives in `analysis.common.tools` (the analysis converts
report files with them too), the error model in `analysis.common.errors`; both are re-exported
here for the drivers.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .siblings import sibling

_errors, _tools = sibling("analysis.common.errors"), sibling("analysis.common.tools")
EXIT_BAD_INPUT, EXIT_TOOL_MISSING = _errors.EXIT_BAD_INPUT, _errors.EXIT_TOOL_MISSING
ToolError = _errors.ToolError
find_tool, run_tool = _tools.find_tool, _tools.run_tool

__all__ = ["EXIT_BAD_INPUT", "EXIT_TOOL_MISSING", "ToolError", "find_tool", "run_tool",
           "gpu_present", "new_run_dir", "finish_run", "run_folder", "tool_main",
           "code_version", "started"]

def code_version(root: Path | None = None) -> str | None:
    """The toolkit checkout's commit (`git rev-parse --short HEAD`, `+dirty` with local
    changes), or None outside a git checkout: reports say which code made each run."""
    root = root or Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def started() -> str:
    """Now, as the runs record it (local time, ISO 8601 to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def gpu_present() -> bool:
    """True when the NVIDIA driver answers with at least one GPU (`nvidia-smi -L`)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return os.path.exists("/dev/nvidia0")
    res = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return res.returncode == 0 and "GPU" in res.stdout


def new_run_dir(root: Path, name: str, suffix: str = "") -> Path:
    """A new `root/<name>/<timestamp><suffix>/` (two runs in the same second get -2, -3);
    `latest` is not touched until the run completes (finish_run)."""
    base = time.strftime("%Y%m%d-%H%M%S")
    (root / name).mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        run_dir = root / name / (f"{base}{suffix}" if n == 1 else f"{base}-{n}{suffix}")
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise ToolError(f"{root / name}: cannot make a new run folder", exit_code=EXIT_BAD_INPUT)


def finish_run(run_dir: Path, link: str, needed: list[str]) -> None:
    """Point `<name>/<link>` at run_dir, atomically, once the files it needs are there."""
    missing = [f for f in needed if not (run_dir / f).is_file()]
    if missing:
        raise ToolError(f"the run did not write {', '.join(missing)}", exit_code=1)
    tmp = run_dir.parent / f".{link}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, run_dir.parent / link)


@contextlib.contextmanager
def run_folder(root: Path, name: str, link: str, needed: list[str],
               suffix: str = "") -> Iterator[Path]:
    """A new run folder for the body to fill; `link` moves to it only when the body
    completed and wrote `needed`. A failed or interrupted run stays, marked FAILED, and
    the error says where it is and that `link` still shows the last complete run."""
    run_dir = new_run_dir(root, name, suffix)
    try:
        yield run_dir
        finish_run(run_dir, link, needed)
    except BaseException as exc:
        (run_dir / "FAILED").write_text(f"{type(exc).__name__}: {exc}\n")
        where = (f"(this run stays in {run_dir}, marked FAILED; {run_dir.parent / link} "
                 "still points at the last complete run)")
        if isinstance(exc, ToolError):
            raise ToolError(f"{exc} {where}", exit_code=exc.exit_code) from exc
        if isinstance(exc, KeyboardInterrupt):
            print(f"interrupted {where}", file=sys.stderr)
        raise


def tool_main(prog: str, argv: list[str] | None, add_arguments: Callable, action: Callable,
              done: str, doc: str | None, parse: Callable | None = None) -> int:
    """Shared CLI shell of the drivers: parse, log, run `action(args)`, map ToolError.

    Prints `done` followed by the path `action` returns; on ToolError prints one line
    prefixed by `prog` on stderr and returns the error's exit code.
    """
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = parse(p, argv) if parse else p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        result = action(args)
    except ToolError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"{done}: {result}")
    return 0
