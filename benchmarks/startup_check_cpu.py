"""What the whole-process check's Python costs a start-up, on a CPU: capture by capture.

    PYTHONPATH=. python benchmarks/startup_check_cpu.py [--repeats 5] [--layers 61] [--out FILE]

``process_startup_overhead.py`` times the real thing and needs a GPU, which is
lent by the half hour. This runs the same start-up's shape on a CPU, as a dry
run (``gpu_demo.guard.record.dry_run``): the 61-layer plain stack of
``safe_dual_stream`` layers, and for each of 8 batch sizes two eager warm-up
calls, then the capture's call under ``dry_capture()``, bracketed by the
recorder as a capture, with the whole-process checker (``CaptureChecker``,
``whole_process=True``) fed at each capture's end as ``CAPTURE_ORDER_CHECK=1``
feeds it. Each repeat runs ``plain`` (no recorder) and ``checked`` in fresh
processes, interleaved. Reported: each run's time, the checked runs' ``check_s``
(feeding the checker and its rules at the capture ends and at the end), and
the milliseconds each capture's end spent in checks (median over repeats),
which should not grow with the captures before it, and per mode the seconds in
each phase (``phases_s``, as ``process_startup_overhead.py`` reports them).

What it cannot tell: the ratio a GPU start-up pays (CPU ops are slower, so
ratios here are smaller), and what a graph pool changes. A CPU has no
caching allocator or graph pool, so no allocation is recorded and every block
a capture writes looks to rule 10 like memory outside the graphs' pools: the
free watch and rule 10's watched ranges follow many more blocks than on a GPU.
Read it for the checks' Python cost and its growth, and confirm on a GPU.
Writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch
from process_startup_overhead import SIZES, Phases, fresh_process, report  # its neighbours: a script's folder is on the path

from gpu_demo.guard.process import CaptureChecker, _young_generation_for_records
from gpu_demo.guard.record.cuda_device import cpu_device
from gpu_demo.guard.record.dry_run import dry_capture
from gpu_demo.guard.record.recorder import CaptureRecorder
from gpu_demo.lab.corpus import safe_dual_stream
from gpu_demo.lab.measure.provenance import provenance

MODES = ("plain", "checked")


def child(mode: str, layers: int, sizes: tuple[int, ...]) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = torch.device("cpu")
    stack = torch.nn.Sequential(*(safe_dual_stream.make(device, torch.float32)[0] for _ in range(layers)))
    recorder = checker = None
    if mode == "checked":
        _young_generation_for_records()   # as ``check_process`` does
        recorder = CaptureRecorder({"recorder": "startup_check_cpu"}, device=cpu_device())
        checker = CaptureChecker(recorder, strict=True, on_hazard="warn", whole_process=True)
    per_capture = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        phases = Phases()
        with recorder or nullcontext(), recorder.holding_storages() if recorder else nullcontext():
            for size in sizes:
                x = torch.randn(size, safe_dual_stream.HIDDEN)
                for _ in range(2):
                    stack(x)
                phases.tick("warm_ups")
                before = checker.check_s if checker else 0.0
                with recorder.capturing([x]) if recorder else nullcontext(), dry_capture():
                    stack(x)
                    phases.tick("capture_bodies")
                phases.tick("capture_ends")
                per_capture.append((checker.check_s - before) * 1000 if checker else 0.0)
            if checker is not None:
                checker.check_now("when the start-up ended")
                phases.tick("last_check")
        elapsed = time.perf_counter() - start
    out = {"mode": mode, "startup_s": elapsed, "phases_s": phases}
    if checker is not None:
        out.update(check_s=checker.check_s, check_ms_per_capture=per_capture,
                   findings=sum(len(r.findings) for r in checker.reports))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results (default: print only)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=61)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.layers, SIZES)))
        return 0
    runs = [{mode: fresh_process(__file__, mode, "--layers", str(args.layers)) for mode in MODES}
            for _ in range(args.repeats)]
    checked = [run["checked"] for run in runs]
    result = {
        "provenance": {**provenance(argv), "command": shlex.join(["python", "benchmarks/startup_check_cpu.py", *argv])},
        "layers": args.layers, "sizes": list(SIZES), "repeats": args.repeats,
        "plain_s": [run["plain"]["startup_s"] for run in runs],
        "checked_s": [c["startup_s"] for c in checked],
        "check_s": [c["check_s"] for c in checked],
        "median_check_s": statistics.median(c["check_s"] for c in checked),
        "check_ms_per_capture": [round(statistics.median(c["check_ms_per_capture"][i] for c in checked), 2)
                                 for i in range(len(SIZES))],
        "findings": checked[0]["findings"],
        "phases_s": {mode: Phases.medians([run[mode] for run in runs]) for mode in MODES},
    }
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
