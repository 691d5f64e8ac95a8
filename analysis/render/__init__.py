"""Rendering of analysis results (markdown, plots); no analysis happens here."""
