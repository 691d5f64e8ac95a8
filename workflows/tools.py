"""Shared plumbing of the drivers: is there a GPU, run folders, one CLI shell.

Finding and running the Nsight tools lives in `analysis.tools` (the analysis converts
report files with them too), the error model in `analysis.errors`; both are re-exported
here for the drivers.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .siblings import sibling

_errors, _tools = sibling("analysis.errors"), sibling("analysis.tools")
EXIT_BAD_INPUT, EXIT_TOOL_MISSING = _errors.EXIT_BAD_INPUT, _errors.EXIT_TOOL_MISSING
ToolError = _errors.ToolError
find_tool, run_tool = _tools.find_tool, _tools.run_tool

__all__ = ["EXIT_BAD_INPUT", "EXIT_TOOL_MISSING", "ToolError", "find_tool", "run_tool",
           "gpu_present", "new_run_dir", "tool_main"]

def gpu_present() -> bool:
    """True when the NVIDIA driver answers with at least one GPU (`nvidia-smi -L`)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return os.path.exists("/dev/nvidia0")
    res = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return res.returncode == 0 and "GPU" in res.stdout


def new_run_dir(root: Path, workload: str, stamp: str, link: str = "latest") -> Path:
    """`root/<workload>/<stamp>/`, plus a `link` to it for the Makefile's next step."""
    run_dir = root / workload / stamp
    run_dir.mkdir(parents=True, exist_ok=False)
    latest = root / workload / link
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(stamp)
    return run_dir


def tool_main(prog: str, argv: list[str] | None, add_arguments: Callable, action: Callable,
              done: str, doc: str | None) -> int:
    """Shared CLI shell of the drivers: parse, log, run `action(args)`, map ToolError.

    Prints `done` followed by the path `action` returns; on ToolError prints one line
    prefixed by `prog` on stderr and returns the error's exit code.
    """
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        result = action(args)
    except ToolError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"{done}: {result}")
    return 0
