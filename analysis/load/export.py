"""An export opened once: one read-only SQLite connection per file and process, shared by
every loader, with the table several of them need (StringIds) read once.

A `systems` run reads one export through ranges, operations, the host split, samples,
Python samples, the step windows and the kernel sequence; each loader asks `shared(path)`
for the connection instead of opening its own, so the file is opened once and SQLite's page
cache serves them all. A worker process (another pid) opens its own: a connection never
crosses a fork. The connection `prefetch.start` opened before the imports is this one. A
file written anew at the same path (another inode, size or time) gets a new connection.
`close_all()` ends them (tests; a long-lived notebook).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from ..common.errors import InputError
from . import prefetch
from .prefetch import SQLITE_MAGIC
from .rows import Db

T = TypeVar("T")


@dataclass
class Reader:
    """One open export: its connection, its sqlite-utils view, and what was read once."""

    path: Path
    conn: sqlite3.Connection
    memo: dict[str, Any] = field(default_factory=dict)

    def once(self, key: str, read: Callable[[], T]) -> T:
        """`read()` the first time `key` is asked for, the same value after."""
        if key not in self.memo:
            self.memo[key] = read()
        return self.memo[key]

    @property
    def db(self) -> sqlite_utils.Database:
        return self.once("sqlite_utils", lambda: view(self.conn))

    @property
    def rows(self) -> Db:
        """The rowid searcher of rows.py, its probes kept across windows and loaders."""
        return self.once("rows", lambda: Db(self.conn))

    def strings(self) -> dict[int, str]:
        """StringIds as {id: text}, read once."""
        return self.once("StringIds", self._strings)

    def _strings(self) -> dict[int, str]:
        try:
            return dict(self.conn.execute("SELECT id, value FROM StringIds").fetchall())
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: cannot read StringIds ({exc})") from exc


_OPEN: dict[tuple, Reader] = {}


def view(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """sqlite-utils' view of an export's connection, without sqlite-utils plugins: they add
    SQL functions for a user's own databases, which no query here calls, and loading them
    scans every installed distribution's entry points (16 ms of each run)."""
    return sqlite_utils.Database(conn, execute_plugins=False)


def _key(path: Path) -> tuple:
    try:
        st = path.stat()
    except OSError:
        return (os.getpid(), str(path))            # connect() says what is wrong
    return (os.getpid(), str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


def shared(path: str | Path) -> Reader:
    """This process's reader of `path`, opened (and checked: InputError) on first use."""
    path = Path(path)
    key = _key(path)
    reader = _OPEN.get(key)
    if reader is None:
        reader = _OPEN[key] = Reader(path, connect(path, prefetch.adopt(path)))
    return reader


def close_all() -> None:
    """Close every reader this process opened."""
    for key, reader in list(_OPEN.items()):
        if key[0] == os.getpid():
            reader.conn.close()
    _OPEN.clear()
    prefetch.forget()


def connect(path: Path, opened: sqlite3.Connection | None = None) -> sqlite3.Connection:
    """Open `path` read-only after checking it is an SQLite file; InputError if not.
    `opened`: the connection prefetch.start opened on it, checked and used instead."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: is a directory, not an Nsight Systems SQLite export")
    with path.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        what = "an empty file" if not head else "not an SQLite file"
        raise InputError(f"{path}: {what}; expected an export from "
                         "`nsys export --type=sqlite`")
    try:
        conn = opened or sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: unreadable SQLite file ({exc})") from exc
    return conn
