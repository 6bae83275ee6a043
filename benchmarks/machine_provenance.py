"""Where a run on this machine came from (the CPU benchmarks': no GPU, no torch needed), and how
such a benchmark hands its results back: a summary printed, the JSON written where asked."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def provenance() -> dict:
    """Machine, Python, commit, date and command (deliberately without the host name)."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs", "python": platform.python_version(),
            "commit": commit, "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(["python", *sys.argv]), "environment": sys.prefix}


def hand_back(results: dict, summary: Callable[[dict], str], out: Path | None) -> int:
    """Print the summary; write the results as JSON to ``out`` if given."""
    print(summary(results))
    if out is not None:
        out.write_text(json.dumps(results, indent=1) + "\n")
    return 0
