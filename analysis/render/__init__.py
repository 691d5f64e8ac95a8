"""Rendering of documents (markdown, SVG, plots, the page); no analysis happens here.

Imports: `documents`, `common`.
"""
