"""``run_benchmark``: a script of ``benchmarks/`` run as its docstring says (from the repository root,
``PYTHONPATH=.``), its JSON result read from the last line it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str, timeout: float = 180) -> dict[str, Any]:
    done = subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return json.loads(done.stdout)   # printed indented: the whole output is the JSON
