"""Exceptions the CLI turns into one-line messages and exit codes (no tracebacks)."""

from __future__ import annotations

EXIT_BAD_INPUT = 2
EXIT_TOOL_MISSING = 3


class InputError(Exception):
    """The input file is missing, unreadable or not the export we need (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class ToolMissing(Exception):
    """An Nsight tool needed to convert the input is not installed (exit 3)."""

    exit_code = EXIT_TOOL_MISSING
