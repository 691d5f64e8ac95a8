"""The text primitives of every page: prose wrapping, escaping for table cells, numbers
with units, GitHub-flavoured tables."""

from __future__ import annotations

import html as _html
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": " ",
                         **{c: "\\" + c for c in "\\`*_[]|~#"}})


WIDTH = 100
"""Prose is wrapped at this width (markdown joins the lines of a paragraph again); table
rows and code lines are left whole."""


NAME_WIDTH = 80
"""Range and op names on a page are cut to this many characters."""


def short(name: str, width: int = NAME_WIDTH) -> str:
    """A long range or op name cut to `width` characters (the documents keep it whole)."""
    return name if len(name) <= width else name[: width - 1] + "…"


def reflow(lines: list[str], width: int = WIDTH) -> list[str]:
    """Wrap long prose lines, keeping list items, suggestions and quotes in their block."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width or line.startswith(("|", "    ", "#", "![", "<")):
            out.append(line)
            continue
        lead = next((p for p in ("> ", "- ", "  ") if line.startswith(p)), "")
        follow = {"> ": "> ", "- ": "  ", "  ": "  "}.get(lead, "")
        hard = line.endswith("  ")                    # a markdown hard line break
        out += textwrap.wrap(line, width, initial_indent="", subsequent_indent=follow,
                             break_long_words=False, break_on_hyphens=False)
        if hard:
            out[-1] += "  "
    return out


def esc(text: Any) -> str:
    """Text safe inside a markdown table cell: HTML entities, escaped markdown marks,
    newlines as spaces (one pass: str.translate)."""
    return str(text).translate(_ESCAPES)


def code(text: Any, cell: bool = False) -> str:
    """Text as a code span, written as it is (Markdown reads no escape inside one): a
    fence of one more backtick than the longest run inside, padded where the text begins
    or ends with one; newlines as spaces; in a table `cell`, `|` as `\\|` (GFM splits
    cells before it reads spans, and drops that backslash)."""
    s = str(text).replace("\n", " ")
    if cell:
        s = s.replace("|", "\\|")
    fence = "`" * (max(map(len, re.findall("`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def html(text: Any) -> str:
    """Text inside raw HTML (a <summary> line): Markdown reads nothing there, so nothing
    is backslash-escaped; `<`, `>` and `&` as HTML entities, newlines as spaces."""
    return _html.escape(str(text), quote=False).replace("\n", " ")


SHOWN_PARTS = 3
"""An absolute path on a page keeps its last parts only (the document keeps it whole)."""


def shown_path(path: Any) -> str:
    """A file's path as a page names it: a relative path as given, an absolute one by its
    last SHOWN_PARTS parts (`…/gelu/trace.sqlite`): a page names no folder of the
    machine that wrote it."""
    text = str(path)
    parts = text.split("/")
    if not text.startswith("/") or len(parts) <= SHOWN_PARTS + 1:
        return text
    return "…/" + "/".join(parts[-SHOWN_PARTS:])


def us(ns: float | None) -> str:
    return "–" if ns is None else f"{ns / 1e3:,.1f} µs"


def dur(ns: float | None) -> str:
    """A duration in the unit a reader takes in at a glance (s, ms or µs)."""
    if ns is None:
        return "–"
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:,.2f} s"
    return f"{ns / 1e6:,.2f} ms" if abs(ns) >= 1e6 else us(ns)


def gbps(bps: float | None) -> str:
    return "–" if bps is None else f"{bps / 1e9:,.0f} GB/s"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]],
          align: str | None = None) -> list[str]:
    """A GFM table; `align` is one char per column (l or r)."""
    align = align or "l" * len(header)
    marks = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out
