"""The one error model of the toolkit: exceptions and the exit codes they map to.

Every command (`python -m analysis`, the console command, every `workflows` driver) exits
0 on success, EXIT_BAD_INPUT (2) on bad input or usage with one line naming the file and
what is wrong, EXIT_TOOL_MISSING (3) when a needed tool (nsys, ncu, a GPU) is missing, and
EXIT_TOOL_FAILED (1) when a profiling tool ran and failed. Defined here once; `workflows`
imports them.
"""

from __future__ import annotations

EXIT_TOOL_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_TOOL_MISSING = 3


class ToolkitError(Exception):
    """Base: a one-line message and the exit code the command line turns it into."""

    exit_code = EXIT_BAD_INPUT


class InputError(ToolkitError):
    """The input file is missing, unreadable or not the export we need (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class ToolMissing(ToolkitError):
    """An Nsight tool (or a GPU) needed for the step is not there (exit 3)."""

    exit_code = EXIT_TOOL_MISSING


class ToolError(ToolkitError):
    """A profiling step failed; `exit_code` says how (missing: 3, bad input: 2, failed: 1)."""

    def __init__(self, message: str, exit_code: int = EXIT_TOOL_MISSING):
        super().__init__(message)
        self.exit_code = exit_code
