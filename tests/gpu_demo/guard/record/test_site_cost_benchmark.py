"""``benchmarks/recorder_site_cost.py`` still runs on a CPU: it swaps the recorder's site walk for
a timed one, so a change to how the recorder calls the walk breaks it without any other test failing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[4]


def test_the_site_cost_benchmark_runs_and_times_a_walk_per_launch():
    done = subprocess.run([sys.executable, "benchmarks/recorder_site_cost.py", "--ops", "400", "--repeats", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0 < result["site_us_per_launch"] < result["us_per_recorded_op"]
