"""The results recorded on real GPUs, as committed (``README.md`` here says what each file holds).

This folder is where every results file lives (``RESULTS_DIR``); ``path(name)`` is file
``name`` of it (``"matrix-h200"``), ``load(name)`` its JSON. Plain ``json`` and ``pathlib``:
reading results needs neither torch nor a GPU, so a notebook on any seat can hand them to
simlib's tutorial, which opens no path of its own into gpu_demo.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "load", "path"]

RESULTS_DIR = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """Results file ``name``: ``path("matrix-h200")`` is ``RESULTS_DIR / "matrix-h200.json"``."""
    return RESULTS_DIR / f"{name}.json"


def load(name: str) -> Any:
    """The JSON of results file ``name`` (``load("bench-h200")["latency"]``)."""
    return json.loads(path(name).read_text())
