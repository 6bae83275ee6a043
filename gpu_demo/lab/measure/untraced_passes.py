"""Plain passes timed in a process that never records: what the recorder's cost is judged against.

Once a recorder has run, torch's GPU-trace callbacks stay on for the rest of the
process (``gpu_demo.guard.record.hooks``): every allocation, free and event calls into
Python, recorder or not. A plain pass timed in the recording process pays for
them; a program that never records does not. ``UntracedPasses`` keeps a child
process (``python -m gpu_demo.lab.measure.untraced_passes``) that builds the same stack and never
records, and times one plain pass there per call, so that
``gpu_demo.lab.measure.overhead`` can pair it in time with the recorded pass timed here
(the H200 host runs everything about 1.6 times slower for seconds at a time:
both passes of a pair must share the spell).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_demo.lab.measure.overhead_stacks import STACKS, gpu_pass
from gpu_demo.lab.moe.settings import RunSettings

READY = "ready"
TIME = "time"
WARM_PASSES = 3   # untimed plain passes before the first timed one: the GPU up to speed


class UntracedPasses:
    """Each call times one plain pass of ``stack`` (``gpu_demo.lab.measure.overhead_stacks.STACKS``) in the
    child, which runs on CPU core ``core`` when given (the caller's, so both sides of a pair
    run on one core)."""

    def __init__(self, stack: str, layers: int, settings: RunSettings, core: int | None = None,
                 timeout: float = 600.0) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")
        root = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self._child = subprocess.Popen(
            [sys.executable, "-m", "gpu_demo.lab.measure.untraced_passes", stack, str(layers), json.dumps(settings.to_dict()),
             *([str(core)] if core is not None else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self._timeout = timeout
        self._answer(READY)

    def __call__(self) -> float:
        self._send(TIME)
        return float(self._answer())

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.stdin.close()
            self._child.wait(self._timeout)
        self._stderr.close()

    def __enter__(self) -> "UntracedPasses":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _send(self, line: str) -> None:
        try:
            self._child.stdin.write(line + "\n")
            self._child.stdin.flush()
        except BrokenPipeError:
            self._died()

    def _answer(self, expected: str | None = None) -> str:
        line = self._child.stdout.readline().strip()
        if not line or (expected is not None and line != expected):
            self._died()
        return line

    def _died(self) -> None:
        self._child.kill()
        self._child.wait()
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:]
        raise RuntimeError(f"the untraced plain passes' process ended (exit {self._child.returncode}):\n{tail}")


def main(argv: list[str]) -> None:
    """The child: ``python -m gpu_demo.lab.measure.untraced_passes STACK LAYERS SETTINGS_JSON [CORE]``; answers
    each ``time`` line on stdin with the seconds one plain pass took (on CPU core CORE)."""
    import torch


    stack, layers, settings = argv[0], int(argv[1]), RunSettings(**json.loads(argv[2]))
    if len(argv) > 3:
        os.sched_setaffinity(0, {int(argv[3])})
    fn, inputs = STACKS[stack](layers, settings)
    with torch.no_grad():
        for _ in range(WARM_PASSES):
            gpu_pass(fn, inputs)
        print(READY, flush=True)
        for line in sys.stdin:
            if line.strip() != TIME:
                break
            gc.collect()
            started = time.perf_counter()
            gpu_pass(fn, inputs)
            print(time.perf_counter() - started, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
