"""``benchmarks/recorder_instructions.py`` counts the recorder's per-op instructions under valgrind.
Its loop runs anywhere (a CPU, no valgrind): the recorder writes one launch per op of it, in one
dry capture; the count itself needs valgrind, and is skipped where there is none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from benchmark_run import ROOT, run_benchmark

pytest.importorskip("torch")


def child(mode: str) -> dict:
    done = subprocess.run([sys.executable, "benchmarks/recorder_instructions.py", "--child", mode, "--calls", "3",
                           "--layers", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_counted_loop_records_the_same_launches_every_call():
    one_call = child("record")["launches"]
    assert one_call > 0 and one_call % 3 == 0   # 3 calls of one stack: each call the same launches
    assert child("mode")["launches"] is None   # only the recorder writes launches


@pytest.mark.parametrize("path", ["as it is", "without valgrind"])
def test_modes_without_plain_and_record_are_refused_with_a_reason(path):
    """Said on any machine: the command line is wrong whether valgrind is there or not (the GPU
    machine has none, and once heard only that)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if path == "without valgrind":
        env["PATH"] = os.path.dirname(sys.executable)
    done = subprocess.run([sys.executable, "benchmarks/recorder_instructions.py", "--modes", "mode"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "needs plain and record" in done.stderr


@pytest.mark.slow   # about two minutes under valgrind: make check leaves it out
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="counting instructions needs valgrind")
def test_the_recorder_costs_more_instructions_an_op_than_a_dispatch_mode_that_only_calls(tmp_path):
    result = run_benchmark("recorder_instructions.py", "--calls", "2", "--layers", "1", out=tmp_path / "r.json",
                           timeout=600)
    per_op = result["per_op_above_plain"]
    assert result["instructions"]["plain"] > 0 and result["launches"] > 0
    assert per_op["record"] > per_op["mode"] > 0   # the recorder's work comes on top of torch's charge for a mode
