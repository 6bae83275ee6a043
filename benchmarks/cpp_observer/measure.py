"""What the recorder's per-op work would cost in C++, against the Python dispatch mode.

``gpu_demo.guard.record.recorder`` does its per-op work in Python, in a ``TorchDispatchMode``;
a dispatch mode that only calls each op (``floor``) already costs a large part of
the 3x the recorder aims for (docs/benchmarks.md, "Recording one capture"). This
measures the alternative below Python: ``observer.cpp``, a C++ observer on
torch's ``RecordFunction`` hook (the one the profiler uses) that freezes, for
every op, what the recorder freezes (each tensor's identity, pointer, storage
block and bytes, numel, shape, bytes, and the current stream) into a log. It
writes no records: turning the log into a trace, and checking it, would come on
top. It also sees every op an op calls through the dispatcher (``observer_ops``
against the dispatch mode's ``ops``), more than a recorder would keep.

Each repeat times one pass of each, interleaved, on one CPU core, the way
``gpu_demo.lab.measure.overhead`` times its floor (``timed``): ``untraced`` (warm-up and
capture, ``gpu_demo.lab.measure.overhead.gpu_pass``), ``cpp_observer`` (the same with the
observer on) and ``floor`` (the same under ``EmptyDispatchMode``). Ratios are
medians of each pass over the untraced pass of its repeat. This process never turns torch's GPU-trace
callbacks on, so none of the three pays for them.

    python benchmarks/cpp_observer/measure.py --out gpu_demo/lab/results/cpp-observer-h200.json

Needs a CUDA GPU, a C++ compiler and ninja (``torch.utils.cpp_extension`` builds
the observer on first use, about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from gpu_demo.lab.measure.overhead import EmptyDispatchMode, ops_in, timed
from gpu_demo.lab.measure.overhead_stacks import STACKS, gpu_pass
from gpu_demo.lab.measure.provenance import provenance
from gpu_demo.lab.moe.settings import RunSettings

HERE = Path(__file__).resolve().parent
COMMAND = "python benchmarks/cpp_observer/measure.py"


def build() -> Any:
    from torch.utils.cpp_extension import load

    try:
        return load("capture_order_observer", [str(HERE / "observer.cpp")], extra_cflags=["-O2", "-DNDEBUG"])
    except (OSError, RuntimeError) as exc:
        raise SystemExit(f"could not build observer.cpp ({exc}); it needs a C++ compiler and ninja "
                         "(pip install ninja)") from exc


class Observing:
    """The observer on inside (a ``mode`` for ``gpu_demo.lab.measure.overhead.timed``); after, ``counts``:
    (ops seen, of them called from no other op, tensors frozen)."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.counts: tuple[int, int, int] = (0, 0, 0)

    def __enter__(self) -> "Observing":
        self.observer.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.counts = tuple(self.observer.stop())


def measure(observer: Any, fn: Callable[..., Any], inputs: list[torch.Tensor], repeats: int) -> dict[str, Any]:
    def one_pass() -> None:
        gpu_pass(fn, inputs)

    ops = ops_in(one_pass)   # also compiles and fills the allocator's caches, like the passes below
    observing = Observing(observer)
    with observing:
        one_pass()
    observer_ops, outermost, tensors = observing.counts
    passes = {"untraced": timed(one_pass, time.perf_counter),
              "cpp_observer": timed(one_pass, time.perf_counter, lambda: observing),
              "floor": timed(one_pass, time.perf_counter, EmptyDispatchMode)}
    samples: dict[str, list[float]] = {name: [] for name in passes}
    for _ in range(repeats):
        for name, run in passes.items():
            samples[name].append(run())
    untraced = samples["untraced"]
    result: dict[str, Any] = {"ops": ops, "observer_ops": observer_ops, "observer_outermost_ops": outermost,
                              "tensors_frozen": tensors}
    for name, times in samples.items():
        result[f"{name}_s"] = {"median": round(statistics.median(times), 4),
                               "samples": [round(t, 4) for t in times]}
        if name != "untraced":
            result[f"{name}_ratio"] = round(statistics.median(t / u for t, u in zip(times, untraced)), 3)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=61)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("this measures CUDA captures: run it on a machine with a CUDA GPU", file=sys.stderr)
        return 2
    observer = build()
    settings = RunSettings()
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})   # every pass on one core, as gpu_demo.lab.measure.overhead does
    results: dict[str, Any] = {"provenance": {**provenance([]), "command": " ".join([COMMAND, *argv])},
                               "layers": args.layers, "repeats": args.repeats, "settings": settings.to_dict()}
    with torch.no_grad():
        for name, make in STACKS.items():
            fn, inputs = make(args.layers, settings)
            results[name] = found = measure(observer, fn, inputs, args.repeats)
            print(f"{name}: C++ observer {found['cpp_observer_ratio']:.2f}x, empty dispatch mode "
                  f"{found['floor_ratio']:.2f}x the untraced pass ({found['ops']} ops, observer saw "
                  f"{found['observer_ops']})")
            del fn, inputs
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
