"""The anchors: each corpus program under PyTorch's CUDA sanitizer and compute-sanitizer's memcheck.

``python -m gpu_demo corpus --anchors`` puts the guard's verdicts beside what
the two tools a user would reach for first say about the same program. Each
runs the program plainly (``run_plain``: the runner's start-up for a function,
the script itself for a script; no recorder, no checker) in a child process
with a timeout:

* ``cuda_sanitizer``: ``TORCH_CUDA_SANITIZER=1``, which reports eager
  cross-stream data races (``CSAN detected a possible data race``) and has no
  model of capture or replay;
* ``compute_sanitizer``: ``compute-sanitizer --tool memcheck``, which reports
  invalid device memory accesses (``ERROR SUMMARY: N errors``); the caching
  allocator hides most out-of-bounds accesses from it.

A verdict is ``reported: ...``, ``clean``, ``crashed: <last line>`` (the tool
or the program died without a report), ``timeout`` or ``not available``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from gpu_demo.guard.protocol.tolerance import DTYPES
from gpu_demo.lab import corpus
from gpu_demo.lab.corpus.serving import serve

TOOLS = ("cuda_sanitizer", "compute_sanitizer")
_REPO = Path(__file__).resolve().parents[3]
_CSAN = "CSAN detected a possible data race"
_MEMCHECK_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_MEMCHECK_FIRST = re.compile(r"========= (Invalid .*|Program hit .*|.*out of bounds.*)")


def run_anchors(name: str, *, dtype: str, replays: int, timeout: float) -> dict[str, dict[str, Any]]:
    """Both tools' verdicts on program ``name``."""
    return {tool: run_tool(tool, name, dtype=dtype, replays=replays, timeout=timeout) for tool in TOOLS}


def run_tool(tool: str, name: str, *, dtype: str, replays: int, timeout: float) -> dict[str, Any]:
    """Run program ``name`` under ``tool`` in a child process; its verdict and the command."""
    plain = [sys.executable, "-m", __name__, name, dtype, str(replays)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")]))}
    if tool == "cuda_sanitizer":
        command, env = plain, {**env, "TORCH_CUDA_SANITIZER": "1"}
    elif tool == "compute_sanitizer":
        found = shutil.which("compute-sanitizer")
        if found is None:
            return {"verdict": "not available", "detail": "compute-sanitizer is not on PATH"}
        command = [found, "--tool", "memcheck", *plain]
    else:
        raise ValueError(f"unknown anchor tool {tool!r}; the tools are: {', '.join(TOOLS)}")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=_REPO)
    except subprocess.TimeoutExpired:
        return {"verdict": "timeout", "detail": f"ran past {timeout:g} s", "command": " ".join(command[1:])}
    return {**verdict(tool, done.returncode, done.stdout + done.stderr), "command": " ".join(command[1:])}


def verdict(tool: str, returncode: int, output: str) -> dict[str, Any]:
    """What ``tool``'s output and exit status say: reported, clean or crashed."""
    lines = output.strip().splitlines()
    last = lines[-1].strip() if lines else "no output"
    if tool == "cuda_sanitizer":
        if _CSAN in output:
            return {"verdict": f"reported: {output.count(_CSAN)} data race(s)", "detail": last}
    else:
        summary = _MEMCHECK_SUMMARY.search(output)
        if summary and int(summary.group(1)):
            first = _MEMCHECK_FIRST.search(output)
            return {"verdict": f"reported: {summary.group(1)} error(s)",
                    "detail": first.group(1).strip() if first else last}
    if returncode != 0:
        return {"verdict": f"crashed: {last[:160]}", "detail": "\n".join(lines[-20:])}
    return {"verdict": "clean", "detail": ""}


def run_plain(name: str, dtype: str, replays: int) -> None:
    """Program ``name`` run the way the runner runs it, with no recorder and no checker."""
    program = corpus.load(name)
    if corpus.is_script(name):
        program.run(torch.device("cuda"), DTYPES[dtype])
    else:
        serve(program.make, DTYPES[dtype], replays, seed=0)


if __name__ == "__main__":
    run_plain(sys.argv[1], sys.argv[2], int(sys.argv[3]))
