"""nsight-workflows, as installed: the toolkit under one import name of its own.

The repository keeps its top-level folders (`analysis/`, `workflows/`, `kernels/`); an
installed copy maps them in here as `nsight_workflows.analysis`, `.workflows` and
`.kernels`, so that installing the toolkit claims no import name that other packages use
(`kernels`, for one, is Hugging Face's kernel hub). Their imports are relative (analysis,
kernels) or go through `workflows.siblings`, so the same files work both ways.

In a checkout that is not installed, the folders beside this one are added to this
package's path, so `python -m nsight_workflows` works there too.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.2.0"

_HERE = Path(__file__).resolve().parent
if not (_HERE / "analysis").is_dir() and (_HERE.parent / "analysis" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # a checkout: analysis/, workflows/, kernels/ beside
