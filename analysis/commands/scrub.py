"""A copy of an Nsight Systems SQLite export that is safe to share, with the same numbers.

    python -m analysis scrub IN.sqlite OUT.sqlite

An export records the profiled process's environment three ways: `PROCESS_n:
ENVIRONMENT_VARIABLE` rows of META_DATA_CAPTURE, the DeviceEnvironment row of
TARGET_INFO_SYSTEM_ENV, and whole NUL-separated environment blocks (`NAME=value\\0...`)
in StringIds. Whatever tokens or keys the user kept in the environment travel in all
three. The copy keeps only the rank variables of each (RANK_VARIABLES: the multi-GPU
reports name ranks from them), blanks every other entry, and replaces the working and
home directories of the capture, wherever they start a path in StringIds and the
META_DATA tables, with `.` and `~`. String ids, timestamps, kernels, API calls and NVTX
rows are untouched, so every analysis of the copy equals the original's. The copy also
carries the source text of each line of the user's code its Python samples name (a table,
load/nsys_pysamples.py's SOURCE_TABLE), read here where the code is: a report made from the
copy on another machine names each line's call (`torch.zeros`, `.item()`: compiled calls
have no Python frame, and only the line's text names them) as one made here does. The
input is never modified; the copy is written to a temporary file and renamed.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

from ..common.errors import InputError
from ..documents.io import atomic_path
from ..load.export import connect, view
from ..load.nsys_meta import load_working_dir
from ..load.nsys_pysamples import SOURCE_TABLE, load_py_samples
from ..trace.pylines import source_line, user_frame

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "NODE_RANK")
_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_CAPTURE_ENV = "%ENVIRONMENT_VARIABLE%"


def is_env_block(value: object) -> bool:
    """True for a StringIds value that is an environment: NUL-separated NAME=value entries."""
    if not isinstance(value, str) or "\x00" not in value:
        return False
    entries = [e for e in value.split("\x00") if e]
    return bool(entries) and sum(bool(_ENTRY.match(e)) for e in entries) * 2 > len(entries)


def keep_ranks(block: str) -> str:
    """An environment block reduced to its rank variables (NUL-separated, as it was)."""
    kept = [e for e in block.split("\x00") if e.split("=", 1)[0] in RANK_VARIABLES]
    return "\x00".join(kept)


def _capture_dirs(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(prefix, replacement) for the capture's working and home directories, longest first."""
    dirs: dict[str, str] = {}
    for (value,) in conn.execute("SELECT value FROM META_DATA_CAPTURE "
                                 "WHERE name LIKE '%WORKING_DIR'"):
        if value and value.startswith("/") and value != "/":
            dirs[value.rstrip("/")] = "."
    for (value,) in conn.execute("SELECT value FROM StringIds WHERE instr(value, char(0)) > 0 "
                                 "OR value LIKE 'HOME=%' OR value LIKE 'PWD=%'"):
        for entry in str(value).split("\x00"):
            name, _, path = entry.partition("=")
            if name in ("HOME", "PWD") and path.startswith("/") and path.rstrip("/"):
                dirs.setdefault(path.rstrip("/"), "~" if name == "HOME" else ".")
    return sorted(dirs.items(), key=lambda kv: -len(kv[0]))


def _replace_paths(conn: sqlite3.Connection, table: str,
                   prefixes: list[tuple[str, str]], column: str = "value") -> int:
    """Replace each directory (followed by "/", or as the whole value); rows changed."""
    changed = 0
    for old, new in prefixes:
        changed += conn.execute(f"UPDATE {table} SET {column} = replace({column}, ?, ?) "
                                f"WHERE instr({column}, ?) > 0",
                                (old + "/", new + "/", old + "/")).rowcount
        changed += conn.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = ?",
                                (new, old)).rowcount
    return changed


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def scrub_connection(conn: sqlite3.Connection) -> dict[str, int]:
    """Scrub an open, writable copy in place; return what was blanked (counts)."""
    tables = _tables(conn)
    counts = {"environment_blocks": 0, "environment_rows": 0, "paths": 0}
    prefixes = _capture_dirs(conn) if "META_DATA_CAPTURE" in tables else []
    blocks = [(i, v) for i, v in conn.execute(
        "SELECT id, value FROM StringIds WHERE instr(value, char(0)) > 0") if is_env_block(v)]
    conn.executemany("UPDATE StringIds SET value = ? WHERE id = ?",
                     [(keep_ranks(v), i) for i, v in blocks])
    counts["environment_blocks"] = len(blocks)
    if "META_DATA_CAPTURE" in tables:
        keep = " AND ".join(f"value NOT LIKE '{n}=%'" for n in RANK_VARIABLES)
        cur = conn.execute(f"DELETE FROM META_DATA_CAPTURE WHERE name LIKE ? AND {keep}",
                           (_CAPTURE_ENV,))
        counts["environment_rows"] = cur.rowcount
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                     "WHERE name = 'DeviceEnvironment'")
    for table in ("StringIds", "META_DATA_CAPTURE", "META_DATA_EXPORT"):
        if table in tables:
            counts["paths"] += _replace_paths(conn, table, prefixes)
    return counts


def env_blocks(path: Path) -> int:
    """How many environment blocks and rows with more than rank variables an export holds."""
    conn = connect(path)
    try:
        n = sum(is_env_block(v) and keep_ranks(v) != v for (v,) in conn.execute(
            "SELECT value FROM StringIds WHERE instr(value, char(0)) > 0"))
        if "META_DATA_CAPTURE" in _tables(conn):
            keep = " AND ".join(f"value NOT LIKE '{r}=%'" for r in RANK_VARIABLES)
            n += conn.execute(f"SELECT count(*) FROM META_DATA_CAPTURE WHERE name LIKE ? "
                              f"AND {keep}", (_CAPTURE_ENV,)).fetchone()[0]
        return n
    finally:
        conn.close()


def sampled_sources(src: Path) -> dict[tuple[str, int], str]:
    """The source text of each user line (the innermost user frame of a stack, which a
    report names) the export's Python samples name, as readable here: the file as
    recorded or under the capture's working directory (a line already carried kept)."""
    py = load_py_samples(src)
    if not py.stacks:
        return {}
    conn = connect(src)
    try:
        cwd = load_working_dir(conn, view(conn))
    finally:
        conn.close()
    out: dict[tuple[str, int], str] = {}
    for stack in py.stacks:
        user = user_frame(stack)
        if user is not None and (key := (stack[user][0], stack[user][2])) not in out:
            out[key] = source_line(*key, cwd, py.code)
    return {k: v for k, v in out.items() if v}


def _carry_sources(conn: sqlite3.Connection, code: dict[tuple[str, int], str],
                   prefixes: list[tuple[str, str]]) -> int:
    """Write SOURCE_TABLE, each file named as the scrubbed samples name it (the capture's
    directories replaced as in StringIds); rows written."""
    conn.execute(f"DROP TABLE IF EXISTS {SOURCE_TABLE}")
    conn.execute(f"CREATE TABLE {SOURCE_TABLE} (file TEXT, line INTEGER, code TEXT)")
    conn.executemany(f"INSERT INTO {SOURCE_TABLE} VALUES (?, ?, ?)",
                     [(f, n, c) for (f, n), c in sorted(code.items())])
    _replace_paths(conn, SOURCE_TABLE, prefixes, column="file")
    return len(code)


def scrub(src: Path, dst: Path) -> dict[str, int]:
    """Write the scrubbed copy of `src` to `dst` (atomically); `src` is only read."""
    connect(src).close()                          # InputError unless an SQLite export
    code = sampled_sources(src)
    if dst.exists() and dst.resolve() == src.resolve():
        raise InputError(f"{dst}: the copy must not replace its input")
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
        conn = sqlite3.connect(tmp)
        try:
            if "StringIds" not in _tables(conn):
                raise InputError(f"{src}: has no StringIds table (not an Nsight Systems "
                                 "export?)")
            with conn:
                prefixes = _capture_dirs(conn) if "META_DATA_CAPTURE" in _tables(conn) \
                    else []
                counts = scrub_connection(conn)
                counts["source_lines"] = _carry_sources(conn, code, prefixes) if code else 0
            conn.execute("VACUUM")
        finally:
            conn.close()
    return counts
