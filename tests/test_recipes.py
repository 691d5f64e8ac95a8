"""The "How to add" recipes of docs/contributing.md, each done once in a scratch: a workload file with a role
of its own, a rule (one function, one registration), a document field filled by name.
Also: docs/settings.md names every declared setting."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.commands import systems
from analysis.common import settings
from analysis.diagnosis import rules
from analysis.diagnosis.rules import REGISTRY, Context, Rule
from analysis.documents import range_build, schemas
from analysis.documents.codec import to_dict
from analysis.documents.types import Finding, RangeEntry
from tests.conftest import DATA
from workflows import settings as wsettings
from workflows import workloads

DOCS = DATA.parent.parent / "docs"


def test_recipe_a_workload_file_with_its_own_role(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "from workflows.workloads import CostModel, Workload, compiled, impl, randn\n"
        "def double(x):\n    return x * 2\n"
        "def double_v2(x):\n    return x + x\n"
        "MINE = Workload(name='mine', description='x * 2', dtype='float32',\n"
        "    sizes={'default': [(64,)]}, make_inputs=randn,\n"
        "    variants={'naive': impl(double), 'compiled': compiled(impl(double)),\n"
        "              'double_v2': impl(double_v2)},\n"
        "    reference=impl(double), roles={'double_v2': 'triton'},\n"
        "    cost=lambda shapes, dtype: CostModel(flops=64, min_bytes=512, ideal_kernels=1))\n")
    w = workloads.resolve(str(path))
    assert w.all_roles() == {"naive": "baseline", "compiled": "compiled",
                             "double_v2": "triton"}


def test_recipe_a_rule(monkeypatch) -> None:
    monkeypatch.setattr(rules.registry, "REGISTRY", dict(REGISTRY))   # a scratch registry
    monkeypatch.setitem(vars(settings), "MY_KERNELS", 100)

    @rules.rule("my_rule", "systems", "info", "a range launched at least `kernels` kernels",
                {"kernels": settings.MY_KERNELS}, unpriced="a count of kernels is no change")
    def my_rule(r: Rule, ctx: Context) -> list[Finding]:
        return [r.finding(range=e.name, message=f"{e.name}: {e.kernel_count} kernels",
                          evidence={"kernels": e.kernel_count}, suggestion="fewer")
                for e in ctx.entries.values() if e.kernel_count >= settings.MY_KERNELS]

    doc = systems.build(_export("gelu"))
    mine = [f for f in doc.findings if f.rule == "my_rule"]
    assert mine and all(f.evidence["kernels"] >= 100 for f in mine)
    assert all(f.saving_ns == 0 and f.not_priced == "a count of kernels is no change"
               for f in mine)
    assert any("`my_rule`" in line for line in rules.markdown_table())
    with pytest.raises(ValueError, match="neither a change"):
        rules.rule("no_price", "systems", "info", "never")(my_rule)


def test_recipe_a_document_field(tmp_path: Path) -> None:
    """A range entry field declared once (its type, unit, meaning and source) reaches the
    range table from a per-key column of its name, the entries, their JSON, the Parquet
    table with its unit, and the JSON Schema with its meaning."""
    from analysis.documents import tables
    from analysis.documents.entries import declared
    from analysis.trace import busy, host, ranges

    @dataclasses.dataclass
    class Entry(RangeEntry):
        host_ns: int = declared("the new fact", "per_key", unit="ns", default=0)

    trace = _trace("gelu")
    summary = ranges.summarize(trace)
    extra = busy.per_key(trace)[0]
    new = summary.set_index("key")[["kernel_count"]].rename(
        columns={"kernel_count": "host_ns"})            # a per-key column of that name
    table = range_build.range_table(summary, trace.kernels,
                                    [extra, host.per_key(trace), new], cls=Entry)
    entries = table.entries(cls=Entry)
    assert [e.host_ns for e in entries] == summary["kernel_count"].tolist()
    assert to_dict(entries[0])["host_ns"] == entries[0].kernel_count    # in the JSON
    tables.write_range_tables(tmp_path, table, Entry)                   # in Parquet
    back = tables.read_range_table(tmp_path, Entry)
    assert back.column("host_ns") == summary["kernel_count"].tolist()
    field = pq.read_schema(tmp_path / tables.RANGES).field("host_ns")
    assert field.metadata[b"unit"] == b"ns"
    assert schemas._object(Entry, {})["properties"]["host_ns"]["description"] == \
        "the new fact [ns]"                                              # and its schema


def _export(name: str):
    from analysis.load import nsys_sqlite

    return nsys_sqlite.load(DATA / name / "trace.sqlite")


def _trace(name: str):
    from analysis.trace import build as model

    return model.attribute(_export(name))


def _summary(name: str):
    from analysis.trace import ranges

    return ranges.summarize(_trace(name))


def test_readme_names_every_setting() -> None:
    section = (DOCS / "settings.md").read_text()
    names = set(settings.ENVIRONMENT) | set(wsettings.ENVIRONMENT) | {
        k for k, v in vars(settings).items() if re.fullmatch(r"[A-Z][A-Z_]+", k)
        and isinstance(v, int | float) and not isinstance(v, bool)}
    missing = sorted(n for n in names if f"`{n}`" not in section)
    assert missing == [], "docs/settings.md lacks these"


def test_settings_are_read_only_through_their_declarations(monkeypatch) -> None:
    monkeypatch.setenv("NSYS", "/x/nsys")
    assert settings.env("NSYS") == "/x/nsys"
    with pytest.raises(KeyError, match="not a declared setting"):
        settings.env("HOME")
    with pytest.raises(KeyError, match="not a declared setting"):
        wsettings.env("HOME")
    monkeypatch.setenv("TORCH_LOGS", "dynamo,graph_breaks")
    assert wsettings.torch_log_artifacts() == ["dynamo", "graph_breaks", "recompiles"]
