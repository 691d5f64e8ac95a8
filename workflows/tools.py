"""Shared plumbing for the Nsight tool drivers: find a tool, run an argv, fail clearly.

Command lines are plain argv lists built by pure functions, logged with `shlex.join`
and run without a shell; a failed tool is never swallowed.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

log = logging.getLogger("workflows")

EXIT_BAD_INPUT = 2
EXIT_TOOL_MISSING = 3


class ToolError(RuntimeError):
    """A profiling step failed; `exit_code` is what the CLI should exit with."""

    def __init__(self, message: str, exit_code: int = EXIT_TOOL_MISSING):
        super().__init__(message)
        self.exit_code = exit_code


def find_tool(name: str, env_var: str, patterns: Iterable[str],
              environ: dict[str, str] | None = None) -> Path:
    """First executable `name` from $env_var, PATH, then the glob `patterns` (newest last wins).

    Raises ToolError (exit 3) naming every place looked at.
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(env_var)
    if explicit:
        if os.access(explicit, os.X_OK):
            return Path(explicit)
        raise ToolError(f"${env_var}={explicit} is not an executable {name}")
    on_path = shutil.which(name, path=environ.get("PATH"))
    if on_path:
        return Path(on_path)
    found = [p for pat in patterns for p in sorted(glob.glob(pat)) if os.access(p, os.X_OK)]
    if found:
        return Path(found[-1])
    raise ToolError(f"{name} not found (looked at ${env_var}, PATH, {', '.join(patterns)}); "
                    f"install Nsight tools or set {env_var}=/path/to/{name}")


def run_tool(argv: Sequence[str], what: str, env: dict[str, str] | None = None,
             stdout_only: bool = False, stream: bool = False) -> str:
    """Run `argv` (no shell); return stdout+stderr (or stdout alone); raise on failure.

    With `stream`, each output line is also echoed to stderr as it comes, prefixed with
    `what`, so long steps (an nsys capture, ncu's replay passes) show their progress.
    """
    log.info("%s: %s", what, shlex.join(str(a) for a in argv))
    try:
        if stream:
            code, output = _streamed([str(a) for a in argv], what, env)
            stdout = output
        else:
            res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                                 env=env, check=False)
            code, stdout = res.returncode, res.stdout or ""
            output = stdout + (res.stderr or "")
    except OSError as exc:
        raise ToolError(f"{what}: cannot start {argv[0]}: {exc}") from exc
    if code != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise ToolError(f"{what} failed (exit {code}): {shlex.join(map(str, argv))}\n"
                        f"{tail}", exit_code=1)
    return stdout if stdout_only else output


def _streamed(argv: list[str], what: str, env: dict[str, str] | None) -> tuple[int, str]:
    """Run with stdout and stderr merged, echoing lines live; (exit code, all output)."""
    lines = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            print(f"[{what}] {line}", end="", file=sys.stderr, flush=True)
    return proc.returncode, "".join(lines)


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
