"""The warm worker: one child for many calls, as isolated as a fresh one, replaced after a death."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from gpu_demo.guard.check import check_capture
from gpu_demo.guard.protocol.child import run_in_child
from gpu_demo.guard.protocol.worker import Worker, run_checked, warm_checks

REPO = Path(__file__).resolve().parents[3]


def child_pid(payload, checkpoint):
    checkpoint({"stage": "started"})
    return {"pid": os.getpid(), "n": payload["n"], "retire": payload.get("retire", False)}


def child_dies(payload, checkpoint):
    checkpoint({"stage": "recorded"})
    os._exit(3)


def child_raises(payload, checkpoint):
    raise ValueError(f"bad payload {payload['n']}")


def child_sleeps(payload, checkpoint):
    time.sleep(payload["seconds"])
    return {}


ENTRY = "tests.gpu_demo.guard.test_worker:"


def test_one_worker_answers_many_calls_in_one_process_and_a_death_starts_a_new_one():
    worker = Worker()
    try:
        first, second = (worker.run(ENTRY + "child_pid", {"n": n}, 120) for n in (1, 2))
        assert first["pid"] == second["pid"] != os.getpid() and second["n"] == 2 and worker.started == 1
        dead = worker.run(ENTRY + "child_dies", {}, 120)
        assert dead["stage"] == "recorded" and "child_error" in dead
        retired = worker.run(ENTRY + "child_pid", {"n": 3, "retire": True}, 120)
        after = worker.run(ENTRY + "child_pid", {"n": 4}, 120)
        assert retired["pid"] not in (first["pid"], after["pid"]) and worker.started == 3
        late = worker.run(ENTRY + "child_sleeps", {"seconds": 30}, 1)
        assert "ran past 1 s" in late["child_error"]["message"]
    finally:
        worker.close()


def test_a_worker_answers_what_a_fresh_child_answers():
    with warm_checks() as worker:
        warm = run_checked(ENTRY + "child_raises", {"n": 5}, 120)
        assert worker.started == 1 and "Traceback" in warm["child_error"]["detail"]
    fresh = run_in_child(ENTRY + "child_raises", {"n": 5}, 120)
    assert warm["child_error"]["message"] == fresh["child_error"]["message"]
    assert "pid" in run_checked(ENTRY + "child_pid", {"n": 1}, 120)   # outside a session: a fresh child


PLUGGED = textwrap.dedent("""
    import os
    from gpu_demo.guard.protocol.worker import run_checked

    def test_a(capture_check_worker):
        run_checked("tests.gpu_demo.guard.test_worker:child_pid", {"n": 1}, 120)
        assert capture_check_worker.started == 1

    def test_b(capture_check_worker):
        run_checked("tests.gpu_demo.guard.test_worker:child_pid", {"n": 2}, 120)
        assert capture_check_worker.started == 1
""")


def test_the_pytest_plugin_keeps_one_worker_for_the_session(tmp_path):
    (tmp_path / "test_plugged.py").write_text(PLUGGED)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "-p", "gpu_demo.guard.pytest_plugin", str(tmp_path / "test_plugged.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr


@pytest.mark.gpu
def test_checks_in_a_session_share_one_warm_worker_and_a_fault_retires_it():
    with warm_checks() as worker:
        safe = [check_capture("gpu_demo.lab.corpus.safe_single_stream:make") for _ in range(2)]
        assert worker.started == 1
        faulted = check_capture("gpu_demo.lab.corpus.routed_first_set_empty_triton:make")
        after = check_capture("gpu_demo.lab.corpus.safe_single_stream:make")
    assert all(r.passed for r in safe), safe[0].format()
    assert faulted.verdict == "illegal_address" and after.passed and worker.started == 2
    assert torch.ones(1, device="cuda").sum().item() == 1.0  # the fault stayed in the worker
