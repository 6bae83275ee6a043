"""What the recorder costs an op, counted in machine instructions: an A/B of the per-op path on any Linux machine.

    PYTHONPATH=. python benchmarks/recorder_instructions.py [--calls 40] [--layers 4] [--out FILE]

Timing cannot compare two versions of the recorder's per-op path here: on a
shared two-CPU machine the same run's time per op moves by a third from one run
to the next, more than any one change to the path is worth, and device time to
time it on a GPU is lent by the half hour. Instructions do not move: this runs
the start-up's layer (``safe_dual_stream``, ``--layers`` of them, batch size 1)
on the CPU ``--calls`` times inside one dry capture (``dry_run``), under
valgrind's callgrind, and counts the instructions executed in that loop alone
(everything else, imports and set-up included, is not instrumented), in three
fresh processes (side by side: a count does not depend on what runs beside it):

* ``plain``: no dispatch mode;
* ``mode``: a dispatch mode that only calls each op (``QuickDispatchMode``):
  what torch charges any Python dispatch mode, the floor;
* ``record``: the recorder (``CaptureRecorder``) alone, no checker;
* ``observer`` (only when asked for, ``--modes``): ``cpp_observer/observer.cpp``, the
  C++ observer on torch's ``RecordFunction`` hook that freezes what the recorder
  freezes and writes no record (built on first use: a C++ compiler and ninja, about
  a minute): what the per-op path could cost below Python.

Reported: each count, the ops the recorder wrote (``launches``: the same loop, so
the same ops, in every mode), and per op each mode's instructions above ``plain``. Two runs of one tree agree to about
0.2 per cent. An instruction is not a nanosecond (a C call into torch or a
cache miss costs more than an opcode's add), so a change that counts fewer
instructions is confirmed on a GPU; but a change the count cannot see will not
show in a GPU's time either. Needs valgrind (``apt install valgrind``); Linux only.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MODES = ("plain", "mode", "record", "observer")
COUNTED = "_operator_call"   # the C function whose calls are counted: ``operator.call(loop)`` and nothing else


def child(mode: str, calls: int, layers: int, ready: Path | None) -> dict:
    """Set up ``mode``, say so through ``ready`` and wait for the counting to start, then run the loop."""
    import torch

    from gpu_demo.guard.process import _young_generation_for_records
    from gpu_demo.guard.record.cuda_device import cpu_device
    from gpu_demo.guard.record.dispatch_mode import QuickDispatchMode, op_caller
    from gpu_demo.guard.record.dry_run import dry_capture
    from gpu_demo.guard.record.recorder import CaptureRecorder
    from gpu_demo.lab.corpus import safe_dual_stream

    class CallOnly(QuickDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 (torch's signature)
            return op_caller(func)(*args, **(kwargs or {}))

    torch.set_num_threads(1)
    torch.manual_seed(0)
    _young_generation_for_records()   # as the whole-process check runs, in every mode alike
    stack = torch.nn.Sequential(*(safe_dual_stream.make(torch.device("cpu"), torch.float32)[0]
                                  for _ in range(layers)))
    x = torch.randn(1, safe_dual_stream.HIDDEN)
    recorder = CaptureRecorder({"recorder": "recorder_instructions"}, device=cpu_device()) if mode == "record" else None
    observer = _observer() if mode == "observer" else None
    with torch.no_grad():
        for _ in range(2):
            stack(x)   # first calls: torch's own lazy set-up, not counted
        dispatch = recorder or (CallOnly() if mode == "mode" else None)

        def loop() -> None:
            for _ in range(calls):
                stack(x)

        if dispatch is not None:
            dispatch.__enter__()
        if observer is not None:
            observer.start()
        capturing = recorder.capturing([x]) if recorder is not None else None
        if capturing is not None:
            capturing.__enter__()
        with dry_capture():
            if ready is not None:
                ready.write_text("ready")
                while ready.read_text() != "go":
                    time.sleep(0.02)
            operator.call(loop)
        if observer is not None:
            observer.stop()
        if capturing is not None:
            capturing.__exit__(None, None, None)
        if dispatch is not None:
            dispatch.__exit__(None, None, None)
    launches = sum(type(r).__name__ == "Launch" for r in recorder.trace.records) if recorder else None
    return {"mode": mode, "launches": launches}


def _observer():   # noqa: ANN202 (a module torch builds)
    sys.path.insert(0, str(Path(__file__).parent / "cpp_observer"))
    from measure import build  # cpp_observer/measure.py: builds observer.cpp once, then loads it

    return build()


def counted(mode: str, calls: int, layers: int) -> dict:
    """``mode``'s loop in a fresh process under callgrind: its instructions, and what the child said."""
    with tempfile.TemporaryDirectory() as scratch:
        ready, out = Path(scratch) / "ready", Path(scratch) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
                   f"--toggle-collect={COUNTED}", f"--callgrind-out-file={out}",
                   sys.executable, __file__, "--child", mode, "--calls", str(calls), "--layers", str(layers),
                   "--ready", str(ready)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent),
                                                                          os.environ.get("PYTHONPATH")]))}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        while not (ready.exists() and ready.read_text() == "ready"):
            if process.poll() is not None:
                raise RuntimeError(f"the {mode} run failed: {process.stderr.read().strip().splitlines()[-3:]}")
            time.sleep(0.2)
        subprocess.run(["callgrind_control", "--instr=on", str(process.pid)], check=True, capture_output=True)
        ready.write_text("go")
        stdout, stderr = process.communicate(timeout=3600)
        if process.returncode != 0:
            raise RuntimeError(f"the {mode} run failed: {stderr.strip().splitlines()[-3:]}")
        found = re.search(r"Collected : (\d+)", stderr)
        if found is None:
            raise RuntimeError(f"callgrind reported no count for the {mode} run: {stderr.strip().splitlines()[-3:]}")
        return {**json.loads(stdout.strip().splitlines()[-1]), "instructions": int(found.group(1))}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results (default: print only)")
    parser.add_argument("--calls", type=int, default=40, help="forward calls counted (default 40)")
    parser.add_argument("--layers", type=int, default=4, help="layers in the stack (default 4)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES[:3]),
                        help="what to count (default: plain mode record); per-op figures need plain and record")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.calls, args.layers, args.ready)))
        return 0
    if not {"plain", "record"} <= set(args.modes):   # the command line first: wrong on any machine
        parser.error("--modes needs plain and record: per-op figures are counted above plain, per recorded op")
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        print(f"recorder_instructions: needs {' and '.join(missing)} on the PATH (apt install valgrind)",
              file=sys.stderr)
        return 2
    modes = [mode for mode in MODES if mode in args.modes]
    if "observer" in modes:
        _observer()   # built here once, before the children load it
    with ThreadPoolExecutor(max_workers=len(modes)) as pool:   # counts do not depend on what runs beside them
        runs = dict(zip(modes, pool.map(lambda mode: counted(mode, args.calls, args.layers), modes)))
    plain, launches = runs["plain"]["instructions"], runs["record"]["launches"]
    from gpu_demo.lab.measure.provenance import provenance

    result = {
        "provenance": {**provenance(argv),
                       "command": shlex.join(["python", "benchmarks/recorder_instructions.py", *argv])},
        "calls": args.calls, "layers": args.layers, "launches": launches,
        "instructions": {mode: run["instructions"] for mode, run in runs.items()},
        "per_op_above_plain": {mode: round((runs[mode]["instructions"] - plain) / launches)
                               for mode in modes if mode != "plain"},
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
