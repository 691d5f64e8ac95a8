"""File plumbing of the CLI: atomic writes, meta.json, report-file conversion, documents.

Inputs are never modified; every output is written to a temporary file in the target
folder and renamed, so an interrupted run never leaves half a report.
"""

from __future__ import annotations

import csv
import ctypes
import functools
import io
import itertools
import json
import lzma
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from . import tools
from .documents import T, dump_json, from_dict, upgraded
from .errors import InputError, ToolError, ToolMissing
from .jsoncodec import list_body, split_at


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


RENAME_EXCHANGE = 2
"""renameat2's flag that swaps two existing names in one step (Linux 3.15+, glibc 2.28+)."""


def replace_file(new: Path, target: Path) -> None:
    """os.replace(new, target), leaving the old file at `new` where it was swapped in: the
    caller removes it (a report's staging folder is removed after its commit).

    Where the kernel swaps the two names in one step (renameat2 with RENAME_EXCHANGE), it
    does: as atomic as a rename (a reader sees the old file or the new one), and on ext4
    without what a rename over an existing file sets off, the new file's blocks allocated
    and its writeback started there and then (auto_da_alloc: 75 ms for a 168 MB
    systems.json on the 2-core CPU machine, against 0.1 ms). Elsewhere (no such call, a
    file system that cannot swap, a folder or no file at either name) it is os.replace."""
    if (new.is_file() and target.is_file() and not target.is_symlink()
            and _swapped(new, target)):
        return
    os.replace(new, target)


def _swapped(a: Path, b: Path) -> bool:
    """Whether renameat2 swapped `a` and `b` (False where it is missing or refused)."""
    call = _renameat2()
    at_cwd = -100                                  # AT_FDCWD: paths relative to the cwd
    return call is not None and call(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b),
                                     RENAME_EXCHANGE) == 0


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                     ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def _replace_atomically(path: Path, fill: Callable[[IO[bytes]], object]) -> None:
    """Have `fill` write a temporary file in `path`'s folder, then rename it to `path`."""
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        fill(fh)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename."""
    _replace_atomically(path, lambda fh: fh.write(text.encode("utf-8")))


def write_csv_atomic(path: Path, columns: list[str], rows: Iterable[Iterable[Any]],
                     text: Collection[int] | None = None) -> None:
    """A table as CSV (the csv module's minimal quoting, "\n" line ends, None as an empty
    field: what pandas' to_csv writes for the same values), atomically.

    `text`: the positions of the only columns that may hold strings or None, the others
    holding numbers; the table is then written by write_csv_columns, in half the csv
    module's time (110k range rows of 37 columns: 0.74 s -> 0.3 s)."""
    if text is not None and len(columns) > 1:
        rows = list(rows)
        cols = [list(c) for c in zip(*rows, strict=True)] or [[] for _ in columns]
        write_csv_columns(path, columns, cols, text)
        return
    _replace_atomically(path, lambda fh: _csv_module(fh, itertools.chain([columns], rows)))


def _csv_module(fh: IO[bytes], rows: Iterable[Iterable[Any]]) -> None:
    """Rows written by the csv module (minimal quoting, "\n" line ends), as UTF-8."""
    out = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    out.flush()
    out.detach()


def write_csv_columns(path: Path, header: list[str], columns: list[list],
                      text: Collection[int]) -> None:
    """A table given column by column (`text`: as in write_csv_atomic): write_csv_blocks
    with one block."""
    write_csv_blocks(path, header, [columns], text)


def write_csv_blocks(path: Path, header: list[str], blocks: Iterable[list[list]],
                     text: Collection[int], with_header: bool = True) -> None:
    """A table given as blocks of rows, each block column by column (`text`: as in
    write_csv_atomic), written as the csv module writes it: each text column of a block
    quoted once, as a column (one of numbers or of None only, as it is), then one format
    string per row, made in C (numbers by str; for floats that is repr, what csv
    writes). A block is written and freed before the next is made: 110k range rows made
    at once were 120 MB of new pages in the writer (30k page faults). Without
    `with_header`: the rows only (a part of a table, join_parts)."""
    top = [header] if with_header else []
    if len(header) < 2:                    # one column: the csv module's own quoting
        rows = (row for cols in blocks for row in zip(*cols, strict=True))
        _replace_atomically(path, lambda fh: _csv_module(fh, itertools.chain(top, rows)))
        return
    line = ",".join(["%s"] * len(header)) + "\n"

    def fill(fh: IO[bytes]) -> None:
        _csv_module(fh, top)
        for columns in blocks:
            cols = [_text_column(c) if i in text else c for i, c in enumerate(columns)]
            fh.write("".join(map(line.__mod__, zip(*cols, strict=True))).encode("utf-8"))

    _replace_atomically(path, fill)


def _text_column(values: list) -> list:
    """A column of a text position as its CSV fields (_csv_field), numbers as they are."""
    kinds = set(map(type, values))
    if kinds <= {int, float}:
        return values
    if kinds == {type(None)}:
        return [""] * len(values)
    return list(map(_csv_field, values))


def _csv_field(value: Any) -> str:
    """One field as the csv module's minimal quoting writes it (a carriage return, quoted
    or not depending on the Python version, is left to the csv module itself)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        return str(value)
    if "\r" in value:
        one = io.StringIO()
        csv.writer(one, lineterminator="\n").writerow([value, ""])
        return one.getvalue()[:-2]
    if '"' in value:
        return '"' + value.replace('"', '""') + '"'
    return '"' + value + '"' if "," in value or "\n" in value else value


def write_json_atomic(path: Path, doc: object) -> None:
    """A document as JSON (documents.to_json_bytes), written to a temporary file and
    renamed."""
    _replace_atomically(path, lambda fh: dump_json(doc, fh))


def start_json(part: Path, doc: object, key: str, rows: range | None = None) -> None:
    """Write the beginning of `doc`'s JSON into `part`: up to and including its top-level
    list at `key` (jsoncodec.split_at, list_body); finish_json completes it with the rest
    of the final document. With `rows`, only that part of the list: its head where it
    begins the list, its closing where it ends it (finish_json joins the parts)."""
    items = getattr(doc, key)
    rows = range(len(items)) if rows is None else rows
    head = split_at(doc, key)[0] if rows.start == 0 else []
    close = [b"\n  ]"] if rows.stop == len(items) else []
    pieces = itertools.chain(head, list_body(items, key, rows), close)
    with part.open("wb") as fh:
        for piece in pieces:      # a batch at a time, its heap reused by the next (a list
            fh.write(piece)       # of every piece held 168 MB of new pages: 40k faults)


def finish_json(parts: list[Path], path: Path, doc: object, key: str) -> bool:
    """Join what start_json wrote into `parts` (the list's parts in order, the first with
    the document's beginning), append the rest of `doc`'s JSON (what follows its list at
    `key`) and rename the whole to `path` (join_parts): to_json_bytes(doc), where the
    beginning is doc's own and the list the one start_json was given. False (the parts
    removed, nothing written) when the beginning differs or orjson refuses a value."""
    try:
        head, tail = split_at(doc, key)
    except TypeError:                  # orjson.JSONEncodeError is a TypeError
        head, tail = None, []
    if head is not None:
        head_bytes = b"".join(bytes(p) for p in head)
        with parts[0].open("rb") as fh:
            if fh.read(len(head_bytes)) == head_bytes:
                join_parts(parts, path, tail)
                return True
    for part in parts:
        part.unlink()
    return False


def join_parts(parts: list[Path], path: Path,
               after: Iterable[bytes | memoryview] = ()) -> None:
    """Append parts[1:] to parts[0] in order (the kernel's copy, _append), then `after`,
    and rename it to `path`; the parts are removed."""
    with parts[0].open("r+b", buffering=0) as fh:
        fh.seek(0, os.SEEK_END)
        for other in parts[1:]:
            _append(fh, other)
        for piece in after:
            _write_all(fh, piece)
    for other in parts[1:]:
        other.unlink()
    os.chmod(parts[0], _plain_mode())
    os.replace(parts[0], path)


def _append(fh: IO[bytes], source: Path) -> None:
    """Append `source`'s bytes to the unbuffered file `fh`: copied by the kernel
    (os.copy_file_range, nothing read into this process), by a plain copy where the
    file system or platform cannot."""
    with source.open("rb") as src:
        left = os.fstat(src.fileno()).st_size
        try:
            while left > 0 and (n := os.copy_file_range(src.fileno(), fh.fileno(), left)):
                left -= n
        except (AttributeError, OSError):      # no such call, or not between these files
            fh.seek(0, os.SEEK_END)
            while chunk := src.read(1 << 20):
                _write_all(fh, chunk)


def _write_all(fh: IO[bytes], data: bytes | memoryview) -> None:
    """Write all of `data` to the unbuffered file `fh` (a raw write may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[fh.write(view):]


def unpack_xz(root: Path) -> list[Path]:
    """Decompress every `*.sqlite.xz` under `root` beside itself, unless an up-to-date
    copy is there already; return the paths written.

    The committed captures (tests/data) are stored xz-compressed (a fifth of their size)
    and read as plain SQLite files; the unpacked copies are git-ignored.
    """
    written = []
    for packed in sorted(root.rglob("*.sqlite.xz")):
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
