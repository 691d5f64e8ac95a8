"""The JSON Schemas in analysis/documents/schemas/ follow the types, and every document validates."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from analysis.__main__ import main
from analysis.documents import schemas
from analysis.documents.types import to_dict, to_json
from tests.conftest import DATA


@pytest.mark.parametrize("name", sorted(schemas.DOCUMENTS))
def test_committed_schema_is_generated_from_the_types(name: str) -> None:
    assert schemas.path_of(name).read_text() == schemas.render(name), \
        "stale: run python -m analysis.documents.schemas"


def test_readme_column_reference_follows_the_declarations() -> None:
    text = schemas.DOC.read_text()
    assert schemas.readme_with_columns(text) == text, "stale: run python -m analysis.documents.schemas"
    assert "| `ranges.parquet` | `wall_ns` | int64 | ns |" in text
    assert "| `ranges_other_threads_kernels.parquet` | `tid` | int64 |" in text


def _validate(doc_path: Path, name: str) -> None:
    schema = json.loads(schemas.path_of(name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(doc_path.read_text()), schema,
                        cls=jsonschema.Draft202012Validator)


def test_every_document_the_cli_writes_validates(tmp_path: Path, demo: list[Path]) -> None:
    """`make demo`'s documents (the session's `demo` render) and the other commands'."""
    assert demo
    for page in demo:
        _validate(page.parent / "systems.json", "systems")
        if (page.parent / "compute.json").exists():
            _validate(page.parent / "compute.json", "compute")
    for trace in ("train_step_user/trace", "edge/trace", "ddp_single/trace"):
        out = tmp_path / trace.replace("/", "_")
        assert main(["systems", str(DATA / f"{trace}.sqlite"), "-o", str(out)]) == 0
        _validate(out / "systems.json", "systems")
    for meta in sorted(DATA.glob("*/meta.json")) + sorted(DATA.glob("ncu/*_meta.json")):
        _validate(meta, "meta")
    assert main(["systems", str(DATA / "ddp_straggler"), "-o", str(tmp_path / "ranks")]) == 0
    _validate(tmp_path / "ranks" / "ranks.json", "ranks")


def test_a_wrong_document_fails_validation(tmp_path: Path) -> None:
    cap = DATA / "gelu"
    assert main(["systems", str(cap / "trace.sqlite"), "-o", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "systems.json").read_text())
    doc["ranges"][0]["kernel_count"] = "many"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(jsonschema.ValidationError):
        _validate(tmp_path / "bad.json", "systems")


def test_to_json_of_real_documents(tmp_path: Path) -> None:
    from analysis.commands import systems
    from analysis.load import nsys_sqlite

    meta = json.loads((DATA / "matmul_relu" / "meta.json").read_text())
    doc = systems.build(nsys_sqlite.load(DATA / "matmul_relu" / "trace.sqlite"), meta)
    assert json.loads(to_json(doc)) == json.loads(json.dumps(to_dict(doc)))
