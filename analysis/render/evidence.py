"""A finding's evidence as a person reads it: labelled numbers, one bullet each (the whole
evidence stays in the JSON documents)."""

from __future__ import annotations

from .markdown import dur, esc, pct, short


def _evidence_value(key: str, value) -> str:
    """One evidence value as a person reads it: times in s/ms/µs, bytes in MB, lists
    shortened, nested tables summarized (the whole evidence stays in the JSON)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int | float):
        if key.endswith("_ns"):
            return dur(value)
        if key.endswith(("bytes", "_Bps", "_bps")):
            return f"{value / 1e6:,.1f} MB" + ("/s" if key.endswith("ps") else "")
        if key.endswith("_pct"):
            return pct(value)
        return f"{value:,.3g}" if isinstance(value, float) else f"{value:,}"
    if isinstance(value, list):
        shown = ", ".join(short(str(v), 60) for v in value[:3] if not isinstance(v, dict))
        more = f" and {len(value) - 3} more" if len(value) > 3 else ""
        return (shown + more) if shown else f"{len(value)} item(s) (in the JSON)"
    if isinstance(value, dict):
        return f"{len(value)} value(s) (in the JSON)"
    return short(str(value), 120)


def evidence_lines(evidence: dict) -> list[str]:
    """A finding's evidence as labelled numbers, one bullet each."""
    def label(k: str) -> str:
        for unit in ("_ns", "_pct", "_bps", "_Bps"):
            k = k.removesuffix(unit)
        return k.replace("_", " ")
    return [f"- {esc(label(k))}: {esc(_evidence_value(k, v))}" for k, v in evidence.items()]
