"""Find and run the Nsight tools: argv lists built by pure functions, logged, no shell.

Shared by the analysis (to convert .nsys-rep / .ncu-rep reports it is given) and by the
`workflows` drivers (to profile). Command lines are plain argv lists, logged with
`shlex.join` and run without a shell; a failed tool is never swallowed.
"""

from __future__ import annotations

import glob
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import EXIT_TOOL_FAILED, ToolError
from .settings import env

log = logging.getLogger("workflows")

NSYS_PATTERNS = (
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
NCU_PATTERNS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")


def find_tool(name: str, env_var: str, patterns: Iterable[str],
              environ: dict[str, str] | None = None) -> Path:
    """First executable `name` from $env_var, PATH, then the glob `patterns` (newest last wins).

    Raises ToolError (exit 3) naming every place looked at.
    """
    environ = os.environ if environ is None else environ
    explicit = env(env_var, environ)
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
                        f"{tail}", exit_code=EXIT_TOOL_FAILED)
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


def find_nsys(environ: dict[str, str] | None = None) -> Path:
    return find_tool("nsys", "NSYS", NSYS_PATTERNS, environ)


def find_ncu(environ: dict[str, str] | None = None) -> Path:
    return find_tool("ncu", "NCU", NCU_PATTERNS, environ)


def export_argv(nsys: Path | str, report: Path | str, sqlite: Path | str,
                python_samples: bool = False) -> list[str]:
    """`nsys export` of a .nsys-rep to SQLite; with `python_samples` (a capture made with
    --python-sampling=true) the samples' stacks too (--include-json=true: a default
    export leaves them out)."""
    return [str(nsys), "export", "--type=sqlite", "--force-overwrite=true",
            *(["--include-json=true"] if python_samples else []),
            f"--output={sqlite}", str(report)]


def import_csv_argv(ncu: Path | str, report: Path | str, base_units: bool = False) -> list[str]:
    """Raw-page CSV of a report (units in the second row; base units when asked)."""
    argv = [str(ncu), "--import", str(report), "--csv", "--page", "raw"]
    return argv + (["--print-units", "base"] if base_units else [])
