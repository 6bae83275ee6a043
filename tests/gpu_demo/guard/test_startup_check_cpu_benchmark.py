"""``benchmarks/startup_check_cpu.py`` runs on a CPU (no GPU is needed to see what the checks cost
capture by capture): a small start-up, checked, clean, with a check time for each capture's end."""

from __future__ import annotations

import pytest
from benchmark_run import run_benchmark

pytest.importorskip("torch")


def test_the_cpu_startup_benchmark_checks_every_capture_and_finds_nothing(tmp_path):
    result = run_benchmark("startup_check_cpu.py", "--layers", "3", "--repeats", "1", out=tmp_path / "result.json")
    assert result["findings"] == 0   # the safe stack: a finding here is a false alarm
    assert len(result["check_ms_per_capture"]) == len(result["sizes"]) == 8
    assert all(ms > 0 for ms in result["check_ms_per_capture"])   # every capture's end was checked
    assert 0 < result["check_s"][0] < result["checked_s"][0]
    assert result["provenance"]["command"].startswith("python benchmarks/startup_check_cpu.py")
    checked, plain = result["phases_s"]["checked"], result["phases_s"]["plain"]
    assert set(checked) == {"warm_ups", "capture_bodies", "capture_ends", "last_check"}
    assert set(plain) == {"warm_ups", "capture_bodies", "capture_ends"}
    assert checked["capture_ends"] >= result["check_s"][0] - checked["last_check"] > 0   # the checks run there
    assert 0 < sum(checked.values()) <= result["checked_s"][0]   # one after another, inside the timed run
