"""The critical-path plot as SVG text, written without a plotting library.

Every systems run with a loop draws this plot, and importing matplotlib costs 0.45 s of
the 3 s the NVTX-heavy capture is allowed on the 2-core machine (the bench); a stacked bar
per loop is a few rectangles, so it is written directly. Markdown viewers (GitHub, VS Code)
show an SVG like a PNG; each segment carries its share as a tooltip.

critical_path_svg  systems/2: per loop range, what held its critical path (stacked shares)
"""

from __future__ import annotations

from html import escape

from ..documents.types import SystemsDoc
from .timeline_md import CATEGORY_SAID, loop_entries, shares

PATH_COLORS = {"gpu": "#4c72b0", "copy_h2d": "#dd8452", "copy_d2h": "#f0b27a",
               "copy_other": "#a0522d", "launch": "#c44e52", "cpu": "#8c8c8c",
               "sync": "#937860", "memory": "#da8bc3", "module": "#ccb974",
               "other_cuda": "#64b5cd", "os": "#bcbd22", "gil": "#17becf",
               "other_thread": "#55a868"}
"""One color per critical-path category (timeline.replay.CATEGORIES)."""
LABEL_W, BAR_W, BAR_H, GAP, TOP = 280, 460, 18, 8, 34
LEGEND_COLS, LEGEND_ROW, LABEL_CHARS = 4, 18, 40
FONT = 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif"'


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'{FONT}>{escape(s)}</text>')


def _bars(loops: list, y0: float) -> list[str]:
    """One row per loop: its name, then its shares stacked left to right."""
    out = []
    for k, e in enumerate(loops):
        y = y0 + k * (BAR_H + GAP)
        name = e.name if len(e.name) <= LABEL_CHARS else e.name[:LABEL_CHARS - 1] + "…"
        out.append(_text(LABEL_W - 6, y + BAR_H - 5, name, anchor="end"))
        x = float(LABEL_W)
        for cat, pct in sorted(shares(e), key=lambda kv: list(PATH_COLORS).index(kv[0])):
            w = BAR_W * min(pct, 100.0) / 100.0
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{BAR_H}" '
                       f'fill="{PATH_COLORS[cat]}"><title>{escape(e.name)}: {pct:.1f}% '
                       f'{escape(CATEGORY_SAID[cat])}</title></rect>')
            x += w
    return out


def _axis(y: float) -> list[str]:
    """The 0-100% axis under the bars."""
    out = [f'<line x1="{LABEL_W}" y1="{y:.1f}" x2="{LABEL_W + BAR_W}" y2="{y:.1f}" '
           'stroke="#444"/>']
    for pct in range(0, 101, 25):
        x = LABEL_W + BAR_W * pct / 100
        out += [f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 4:.1f}" '
                'stroke="#444"/>', _text(x, y + 16, f"{pct}%", 10, "middle")]
    out.append(_text(LABEL_W + BAR_W / 2, y + 32,
                     "% of the loop's wall time on the critical path", 11, "middle"))
    return out


def _legend(cats: list[str], y: float) -> list[str]:
    """The categories drawn, LEGEND_COLS to a row."""
    out = []
    col_w = (LABEL_W + BAR_W) / LEGEND_COLS
    for k, cat in enumerate(cats):
        x, yy = 10 + (k % LEGEND_COLS) * col_w, y + (k // LEGEND_COLS) * LEGEND_ROW
        out += [f'<rect x="{x:.1f}" y="{yy:.1f}" width="12" height="12" '
                f'fill="{PATH_COLORS[cat]}"/>', _text(x + 17, yy + 10, CATEGORY_SAID[cat], 10)]
    return out


def critical_path_svg(doc: SystemsDoc) -> str | None:
    """One bar per modeled loop range: the shares of its wall time each kind of work held
    its critical path (the step model); None without a loop."""
    loops = loop_entries(doc)
    if not loops:
        return None
    cats = [c for c in PATH_COLORS if any(dict(shares(e)).get(c) for e in loops)]
    axis_y = TOP + len(loops) * (BAR_H + GAP)
    legend_y = axis_y + 48
    height = legend_y + LEGEND_ROW * -(-len(cats) // LEGEND_COLS) + 6
    width = LABEL_W + BAR_W + 20
    body = [_text(width / 2, 20, "What held each step (replayed step model)", 13, "middle"),
            *_bars(loops, TOP), *_axis(axis_y), *_legend(cats, legend_y)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
            f'viewBox="0 0 {width} {height:.0f}">\n<rect width="100%" height="100%" '
            'fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")
