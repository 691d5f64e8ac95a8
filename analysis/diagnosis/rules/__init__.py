"""Findings as a registry: one rule = one function plus its declared id, source, severity,
thresholds and one-line doc, registered with `@rule(...)` in one place.

Every rule takes the same typed input, a `Context` (the document being built, meta.json,
TORCH_LOGS events and, for systems rules, the attributed trace) and returns `Finding`s
built with keyword fields. `run(source, ctx)` runs the rules of one source (`systems` or
`compute`) in registration order and sorts their findings, most severe first.
docs/rules.md's table is `markdown_table()` (a test keeps them equal), so each threshold
is written once, in its rule's registration.
"""

# the rules register themselves on import, in this order (the order of docs/rules.md's table)
from . import (
    compute_rules,  # noqa: E402, F401, I001
    host_rules,  # noqa: E402, F401, I001
    kernel_rules,  # noqa: E402, F401, I001
    rank_rules,  # noqa: E402, F401, I001
    run_rules,  # noqa: E402, F401, I001
    step_rules,  # noqa: E402, F401, I001
    systems_rules,  # noqa: E402, F401, I001
)
from .registry import REGISTRY, Context, Rule, markdown_table, rule, run, sort_key

__all__ = ["REGISTRY", "Context", "Rule", "markdown_table", "rule", "run", "sort_key"]
