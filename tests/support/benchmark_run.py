"""``run_benchmark``: a script of ``benchmarks/`` run as its docstring says (from the repository root,
``PYTHONPATH=.``), its JSON result read from the file it wrote (``out``: passed as ``--out``), or
else from the last line it printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str, out: Path | None = None, timeout: float = 180) -> dict[str, Any]:
    written = ["--out", str(out)] if out is not None else []
    done = subprocess.run([sys.executable, f"benchmarks/{script}", *args, *written], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text() if out is not None else done.stdout.strip().splitlines()[-1])
