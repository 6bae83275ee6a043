"""What Python's garbage collector costs the recorder per op: full collections as the recorder tunes them, and as they were.

    PYTHONPATH=. python benchmarks/recorder_gc.py [--iterations 2000] [--repeats 5] [--out FILE]

A recording keeps what it writes, so every op adds objects that survive, and
each full collection walks them all (``gpu_demo.guard.record.collector``). This
records a loop of small CPU ops (``F.rms_norm``, a matmul, ``F.silu``, an add:
eight aten ops an iteration) for ``--iterations`` iterations after a warm-up,
in fresh processes, interleaved: ``tuned`` (full collections ``collector.FEWER``
times rarer while recording, what the recorder does) and ``untuned`` (the
program's thresholds: ``FEWER`` set to 1). Each reports microseconds per
recorded aten op and the milliseconds the collector spent, by generation (timed
through ``gc.callbacks``); the JSON has every run, the medians and the ratio
untuned over tuned, with provenance. Runs on a CPU: the recorder's Python is
the same there.
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from process_startup_overhead import fresh_process, report  # its neighbours: a script's folder is on the path

from gpu_demo.guard.record import collector
from gpu_demo.guard.record.cuda_device import cpu_device
from gpu_demo.guard.record.recorder import CaptureRecorder
from gpu_demo.lab.measure.provenance import provenance

MODES = ("tuned", "untuned")
ATEN_OPS = 8   # per iteration: rms_norm's pow, mean, add, rsqrt, mul, mul; mm; silu; add (the last two counted once)
WARM = 200


def work(x: torch.Tensor, w: torch.Tensor, iterations: int) -> torch.Tensor:
    for _ in range(iterations):
        x = x + torch.nn.functional.silu(torch.nn.functional.rms_norm(x, (x.shape[-1],)) @ w)
    return x


def child(mode: str, iterations: int) -> dict:
    torch.set_num_threads(1)
    if mode == "untuned":
        collector.FEWER = 1
    x, w = torch.randn(16, 64), torch.randn(64, 64)
    spent, started = {0: 0.0, 1: 0.0, 2: 0.0}, [0.0]

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            spent[info["generation"]] += time.perf_counter() - started[0]

    with torch.no_grad(), CaptureRecorder(device=cpu_device()) as recorder:
        work(x, w, WARM)
        gc.callbacks.append(timed)
        start = time.perf_counter()
        work(x, w, iterations)
        elapsed = time.perf_counter() - start
        gc.callbacks.remove(timed)
        records = len(recorder.trace.records)
    return {"mode": mode, "us_per_op": elapsed / (iterations * ATEN_OPS) * 1e6, "records": records,
            "gc_ms": {str(g): round(s * 1000, 2) for g, s in spent.items()}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="JSON results (default: print only)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.iterations)))
        return 0
    runs = [fresh_process(__file__, mode, "--iterations", str(args.iterations))
            for _ in range(args.repeats) for mode in MODES]
    median = {mode: statistics.median(r["us_per_op"] for r in runs if r["mode"] == mode) for mode in MODES}
    result = {"iterations": args.iterations, "repeats": args.repeats, "runs": runs,
              "median_us_per_op": median, "untuned_over_tuned": median["untuned"] / median["tuned"],
              "provenance": {**provenance(argv), "command": shlex.join(["python", "benchmarks/recorder_gc.py", *argv])}}
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
