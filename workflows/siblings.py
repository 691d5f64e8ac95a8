"""The toolkit's other packages (analysis, kernels), imported one way from a checkout and
from an installed copy.

In a checkout they are top-level packages (`analysis`, `kernels`); installed, they live
inside the distribution's own package (`nsight_workflows.analysis`, ...), so that the
installed toolkit claims no import name it does not own. `workflows` reaches them only
through `sibling()`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ROOT = (__package__ or "workflows").rpartition(".")[0]
"""'' in a checkout, 'nsight_workflows' in an installed copy."""


def sibling(name: str) -> ModuleType:
    """Module `name` (e.g. "analysis.common.tools", "kernels.gelu") of this copy of the toolkit."""
    return importlib.import_module(f"{ROOT}.{name}" if ROOT else name)


def module_name(name: str) -> str:
    """The importable name of this copy's module `name` (for `python -m`)."""
    return f"{ROOT}.{name}" if ROOT else name
