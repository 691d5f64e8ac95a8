"""A module imported when one of its names is first read.

pyarrow costs a tenth of a second to import (its shared library, and the cloudpickle,
socket and queue modules it brings), and a `systems` run needs it only to write the
Parquet tables, which it does on another core (common/forks.py). The command line imports
pandas without it (analysis/__main__.py: `hide_pyarrow`), and the modules that
make or read Arrow tables name it through `lazy("pyarrow")`: the import happens in the
process, and at the moment, that first uses it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class Lazy:
    """Stands for module `name`: the first attribute read imports it (importlib), every
    read after that is the module's own attribute."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy(name: str) -> Any:
    """Module `name`, imported at its first use (Lazy)."""
    return Lazy(name)
