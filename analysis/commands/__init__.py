"""What users run: systems, compute, reports and the page, diff, picks, scrub, demo, bench,
calibration and the `nsys stats` reference; each drives the stages below it.

Imports: any package of `analysis`.
"""
