"""File plumbing of the CLI: atomic writes, meta.json, report-file conversion, documents.

Inputs are never modified; every output is written to a temporary file in the target
folder and renamed, so an interrupted run never leaves half a report.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ..common import tools
from ..common.errors import InputError, ToolError, ToolMissing
from .types import T, dump_json, from_dict, upgraded


def _plain_mode() -> int:
    """The permissions a plain `open(path, "w")` would give: 0o666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path in `path`'s folder; on success rename it to `path`.

    The file gets a plain file's permissions (mkstemp's are 0600, which would hide reports
    from teammates on a shared machine); on failure the temporary file is removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix,
                                dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _plain_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _replace_atomically(path: Path, fill: Callable[[IO[bytes]], object]) -> None:
    """Have `fill` write a temporary file in `path`'s folder, then rename it to `path`."""
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        fill(fh)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    _replace_atomically(path, lambda fh: fh.write(text.encode("utf-8")))


def write_json_atomic(path: Path, doc: object) -> None:
    """A document as JSON (documents.to_json_bytes), written to a temporary file and
    renamed."""
    _replace_atomically(path, lambda fh: dump_json(doc, fh))


PACKED = ("*.sqlite.xz", "*_raw*.csv.xz")
"""What unpack_xz decompresses: the exports, and Nsight Compute's raw CSVs (`nsys stats`
references stay packed: their reader takes .csv.xz as it is)."""


def unpack_xz(root: Path) -> list[Path]:
    """Decompress every export and ncu raw CSV (PACKED) under `root` beside itself,
    unless an up-to-date copy is there already; return the paths written.

    The committed captures (tests/data) are stored xz-compressed (a fifth of their size,
    a tenth for the CSVs) and read as plain files; the unpacked copies are git-ignored.
    """
    written = []
    for packed in sorted(p for pattern in PACKED for p in root.rglob(pattern)):
        plain = packed.with_suffix("")
        if plain.is_file() and plain.stat().st_mtime >= packed.stat().st_mtime:
            continue
        with lzma.open(packed) as src:
            _replace_atomically(plain, lambda dst, src=src: shutil.copyfileobj(src, dst, 1 << 20))
        written.append(plain)
    return written


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from `path`; InputError naming the file and `what` it should be."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a readable {what} ({exc})") from exc
    if not isinstance(obj, dict):
        raise InputError(f"{path}: {what} must hold a JSON object")
    return obj


def load_meta(path: Path | None) -> dict[str, Any] | None:
    return None if path is None else read_json_object(path, "meta.json")


def _convert(report: Path, tool: str, find: Callable[[], Path],
             run: Callable[[Path], None]) -> None:
    """Run a report-to-file conversion with an installed Nsight tool, mapping failures.

    A missing input is exit 2, a missing tool exit 3, a tool that fails on the file exit 2.
    """
    if not report.is_file():
        raise InputError(f"{report}: no such file")
    try:
        exe = find()
    except ToolError as exc:
        raise ToolMissing(f"{report}: reading {report.suffix} needs {tool}: {exc}") from exc
    try:
        run(exe)
    except ToolError as exc:
        lines = str(exc).strip().splitlines()
        said = lines[0] + (f" ... {lines[-1]}" if len(lines) > 1 else "")
        raise InputError(f"{report}: {tool} could not export it: {said}") from exc


def nsys_rep_to_sqlite(report: Path, workdir: Path) -> Path:
    """Export a .nsys-rep to SQLite in `workdir` with the installed nsys."""
    out = workdir / (report.stem + ".sqlite")
    _convert(report, "nsys", tools.find_nsys,
             lambda nsys: tools.run_tool(tools.export_argv(nsys, report, out), "nsys export"))
    return out


def ncu_rep_to_csv(report: Path, workdir: Path) -> Path:
    """Export a .ncu-rep's raw page to CSV in `workdir` with the installed ncu."""
    out = workdir / (report.stem + ".csv")
    _convert(report, "ncu", tools.find_ncu, lambda ncu: out.write_text(
        tools.run_tool(tools.import_csv_argv(ncu, report), "ncu --import", stdout_only=True)))
    return out


class _NotDrawn(Exception):
    """The plot had nothing to show: leave no file."""


def write_png(out: Path, name: str, draw: Callable[[Path], Path | None]) -> str | None:
    """Draw a plot through a temporary file and rename it to out/name; None if not drawn."""
    try:
        with atomic_path(out / name, suffix=".png") as tmp:
            if draw(tmp) is None:
                raise _NotDrawn
        return name
    except _NotDrawn:
        return None
    except ImportError:             # matplotlib is optional: reports without plots
        print(f"analysis: matplotlib is not installed, {name} skipped "
              "(pip install matplotlib)", file=sys.stderr)
        return None


def load_json_doc(path: Path, cls: type[T]) -> T:
    """A typed report document (SystemsDoc, ComputeDoc) from its JSON file; InputError if
    the file is not one."""
    schema = cls.schema  # type: ignore[attr-defined]   (the dataclass default)
    obj = upgraded(read_json_object(path, f"{schema} JSON report"))
    if obj.get("schema") != schema:
        raise InputError(f"{path}: not a {schema} document")
    try:
        return from_dict(cls, obj)
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: not a valid {schema} document ({exc})") from exc
