"""Where the whole-process check's start-up cost goes: the same start-up, one layer of the check added at a time.

    PYTHONPATH=. python benchmarks/process_startup_layers.py --out $OUT/process-startup-layers.json

``process_startup_overhead.py`` times the whole check against none; this times
the layers between, each in a fresh process (the start-up of that benchmark:
8 batch sizes of the 61-layer plain stack warmed up and captured into one pool),
every layer once per repeat, interleaved so drift hits all:

``unchecked``   nothing added
``empty_mode``  a dispatch mode that only calls each op (``EmptyDispatchMode``): what
                being on the dispatch stack costs, before any recording
``gpu_trace``   torch's GPU-trace reports switched on (``torch._C._activate_gpu_trace()``),
                nobody listening: what torch's C++ costs each allocation, free and event
                once they are reported to Python, as the recorder needs them
``recorded``    the recorder as ``check_process`` starts it (the collector's youngest
                generation grown, ``GC_YOUNG``), and no check
``checked``     ``check_process``: the recording and every check

Each layer's ``median_s`` is over repeats; ``over_unchecked`` is the median of its
per-repeat ratio to that repeat's ``unchecked`` run. Writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from process_startup_overhead import SIZES, fresh_process, report, startup  # its neighbour: a script's folder is on the path

from gpu_demo.guard.process import _young_generation_for_records, check_process
from gpu_demo.guard.record.recorder import CaptureRecorder
from gpu_demo.lab.measure.overhead import EmptyDispatchMode, collector_time
from gpu_demo.lab.measure.provenance import provenance

LAYERS = ("unchecked", "empty_mode", "gpu_trace", "recorded", "checked")


def child(layer: str) -> dict:
    torch.cuda.init()
    checker = None
    if layer == "empty_mode":
        EmptyDispatchMode().__enter__()   # never left: the process ends
    elif layer == "gpu_trace":
        torch._C._activate_gpu_trace()
    elif layer == "recorded":
        _young_generation_for_records()
        CaptureRecorder({"recorder": "process_startup_layers"}).__enter__()
    elif layer == "checked":
        checker = check_process("warn")
    with collector_time() as gc_s, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        startup(61, SIZES)
        if checker is not None:
            checker.check_now("when the start-up ended")
        elapsed = time.perf_counter() - start
    return {"layer": layer, "startup_s": elapsed, "gc_s": gc_s[0],
            "check_s": checker.check_s if checker is not None else None}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results (default: print only)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", choices=LAYERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    if not torch.cuda.is_available():
        print("process_startup_layers: needs CUDA (it captures real graphs)", file=sys.stderr)
        return 2
    runs = [{layer: fresh_process(__file__, layer) for layer in LAYERS} for _ in range(args.repeats)]
    result = {
        "provenance": {**provenance(argv), "command": shlex.join(["python", "benchmarks/process_startup_layers.py",
                                                                  *argv])},
        "repeats": args.repeats,
        "layers": {layer: {"startup_s": [run[layer]["startup_s"] for run in runs],
                           "median_s": statistics.median(run[layer]["startup_s"] for run in runs),
                           "over_unchecked": statistics.median(run[layer]["startup_s"] / run["unchecked"]["startup_s"]
                                                               for run in runs),
                           "gc_s": [run[layer]["gc_s"] for run in runs]} for layer in LAYERS},
        "check_s": [run["checked"]["check_s"] for run in runs],
    }
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
