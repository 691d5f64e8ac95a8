"""The shape of the analysis package: its layers and no import cycle (import-linter's
contracts), no private name imported across modules, imports at the top of modules."""

from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "analysis"
LAZY_ON_PURPOSE = {"matplotlib", "matplotlib.pyplot", "distributed", "psutil", "tqdm"}
"""Dependencies a module loads only when the feature that needs it runs: the optional
ones, and tqdm (a progress bar shows on few runs; its import was 11 ms of every start)."""


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


MODULES = _modules()


def test_the_layers_hold():
    """The import contracts of pyproject.toml (`make lint` runs them too): stages in
    layers, no cycle between sibling modules, render reading documents alone, analysis
    without torch."""
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                        no_logo=True) == 0


def _private_imports() -> list[str]:
    """`from X import _name` where X is another analysis module: a private name used
    outside the module that owns it."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "")
                                                     .startswith("analysis")):
                found += [f"{module}:{node.lineno} {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_module():
    assert _private_imports() == []


def test_imports_at_the_top_except_optional_dependencies():
    late = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in top:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else [node.module or ""]
                inside_guard = any(isinstance(n, ast.If | ast.Try) and node in ast.walk(n)
                                   for n in tree.body)
                if not (set(names) <= LAZY_ON_PURPOSE or inside_guard):
                    late.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    assert late == []


def test_every_committed_meta_declares_the_role_of_each_variant():
    from analysis.documents.types import ROLES

    metas = sorted((ROOT / "tests" / "data").rglob("*meta*.json"))
    assert metas
    for path in metas:
        meta = json.loads(path.read_text())
        assert set(meta["roles"]) == set(meta.get("ranges", {})), path
        assert set(meta["roles"].values()) <= set(ROLES), path


def test_layout_names_every_module():
    """docs/layout.md names every module of the tree (a new module is said there, in its
    place)."""
    readme = (ROOT / "docs" / "layout.md").read_text()
    layout = readme[readme.index("## Layout"):readme.index("Every step of the analysis")]
    modules = sorted(p.name for folder in ("analysis", "workflows", "kernels",
                                           "nsight_workflows")
                     for p in (ROOT / folder).rglob("*.py")
                     if not p.name.startswith("__") and "schemas" not in p.parts)
    assert [m for m in modules if f"`{m}`" not in layout] == []
