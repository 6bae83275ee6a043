"""The guard's GPU pass for issues 22 and 25, in one command (on the device, from the repo root):

    PYTHONPATH=. python benchmarks/guard_gpu_run.py

1. the guard's GPU tests (``pytest -m gpu tests/gpu_demo/guard``: dropout in train mode, a
   reference that disagrees with itself, a captured path that differs from eager, the warm
   worker retired by a fault, ``__main__`` functions and closures, the corpus verdicts);
2. ``benchmarks/guard_check_time.py``: check time per tiny model, fresh child and warm worker.

Writes ``$OUT/guard-gpu-h200.json`` (provenance, test counts and every failure's message, the
timings) and ``$OUT/guard-check-time-h200.json``; exits 1 if a test failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guard_check_time  # noqa: E402

from gpu_demo.lab.measure.provenance import provenance  # noqa: E402

TOTAL_S = 230   # the whole pass stays under 4 minutes: the tests first, the timings in what is left


def run_tests(out: Path) -> dict:
    junit = out / "guard-gpu-tests.xml"
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-m",
                               "gpu", "tests/gpu_demo/guard", f"--junitxml={junit}"], capture_output=True, text=True,
                              timeout=160)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return {"exit": "timed out after 160 s", "tests": None, "failures": [], "skipped": None,
                "summary": tail.strip().splitlines()[-3:]}
    suite = ElementTree.parse(junit).getroot().iter("testsuite").__next__()
    failures = [{"test": case.get("name"), "message": (problem.get("message") or "")[:2000]}
                for case in suite.iter("testcase") for problem in case if problem.tag in ("failure", "error")]
    return {"exit": done.returncode, "tests": int(suite.get("tests")), "failures": failures,
            "skipped": int(suite.get("skipped")), "summary": done.stdout.strip().splitlines()[-1:]}


def main() -> int:
    out = Path(os.environ.get("OUT", "out/results"))
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tests = run_tests(out)
    print("tests:", tests["summary"], "failures:", [f["test"] for f in tests["failures"]])
    timing_file = out / "guard-check-time-h200.json"
    left = TOTAL_S - (time.perf_counter() - start)
    timed = guard_check_time.main(["--out", str(timing_file), "--warm", "2", "--budget-s", f"{max(left - 40, 20):.0f}"])
    where = provenance([])
    where["command"] = "PYTHONPATH=. python benchmarks/guard_gpu_run.py"
    check_time = json.loads(timing_file.read_text())["models"] if timed == 0 else f"not measured (exit {timed})"
    (out / "guard-gpu-h200.json").write_text(json.dumps(
        {"provenance": where, "tests": tests, "check_time": check_time}, indent=1))
    return 1 if tests["exit"] else 0


if __name__ == "__main__":
    sys.exit(main())
