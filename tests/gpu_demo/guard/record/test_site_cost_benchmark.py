"""``benchmarks/recorder_site_cost.py`` still runs on a CPU: it swaps the recorder's site walk for
a timed one, so a change to how the recorder calls the walk breaks it without any other test failing."""

from __future__ import annotations

import pytest
from benchmark_run import run_benchmark

pytest.importorskip("torch")


def test_the_site_cost_benchmark_runs_and_times_a_walk_per_launch():
    result = run_benchmark("recorder_site_cost.py", "--ops", "400", "--repeats", "1", timeout=120)
    assert 0 < result["site_us_per_launch"] < result["us_per_recorded_op"]
