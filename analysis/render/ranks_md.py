"""Markdown of the cross-rank report (ranks/1): ranks side by side, then findings."""

from __future__ import annotations

from ..documents.types import RanksDoc
from .findings_md import findings_section
from .markdown import INTRO, ranks_table, reflow, us


def render_ranks(doc: RanksDoc, folders: dict[int, str]) -> str:
    """ranks.md: per rank its step, compute, communication and busy time."""
    lines = ["# Ranks side by side", "",
             f"{INTRO} Step time skew across ranks: {us(doc.skew_ns)}.", ""]
    lines += ranks_table(doc.ranks, folders)
    lines += [""] + findings_section(doc.findings, "ranks.json")
    return "\n".join(reflow(lines)).rstrip() + "\n"
