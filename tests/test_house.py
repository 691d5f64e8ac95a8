"""The shape of the analysis package: no import cycle (imports inside functions counted),
imports at the top of modules, pages drawn from documents alone."""

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


def _type_only(tree: ast.Module) -> set[int]:
    """Nodes under `if TYPE_CHECKING:` (imports for annotations only)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids |= {id(n) for n in ast.walk(node)}
    return ids


def _targets(module: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The analysis modules an import statement loads (`from . import a` loads `pkg.a`)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    package = module.split(".") if MODULES[module].name == "__init__.py" \
        else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1] if node.level else []
    target = ".".join(base + ([node.module] if node.module else []))
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return subs or ([target] if target in MODULES else [])


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                graph[module] |= set(_targets(module, node)) - {module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_analysis():
    graph = _graph()
    assert graph["analysis.model"], "the graph must see the model's imports"
    assert _cycle(graph) is None


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


def test_render_reads_documents_only():
    graph = _graph()
    render = [m for m in graph if m.startswith("analysis.render")]
    allowed = {"analysis.documents", "analysis.jsoncodec", "analysis.kernel_names"}
    for m in render:
        outside = {n for n in graph[m] if not n.startswith("analysis.render")} - allowed
        assert outside == set(), m


def test_every_committed_meta_declares_the_role_of_each_variant():
    from analysis.documents import ROLES

    metas = sorted((ROOT / "tests" / "data").rglob("*meta*.json"))
    assert metas
    for path in metas:
        meta = json.loads(path.read_text())
        assert set(meta["roles"]) == set(meta.get("ranges", {})), path
        assert set(meta["roles"].values()) <= set(ROLES), path


def test_readme_layout_names_every_module():
    """README's Layout section names every module of the tree (a new module is said
    there, in its place)."""
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):readme.index("Every step of the analysis")]
    modules = sorted(p.name for folder in ("analysis", "workflows", "kernels",
                                           "nsight_workflows")
                     for p in (ROOT / folder).rglob("*.py")
                     if not p.name.startswith("__") and "schemas" not in p.parts)
    assert [m for m in modules if f"`{m}`" not in layout] == []
