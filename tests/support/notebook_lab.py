"""Notebook 06's workbook, built the way the notebook builds it: with the committed H200 results."""

from __future__ import annotations

from gpu_demo.lab import results
from simlib.tutorial.lab import H200, workbook

RECORDED = H200.read(results.path("matrix-h200"), results.path("bench-h200"))
LAB = workbook(RECORDED)
