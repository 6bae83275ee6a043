"""What ``Launch.site`` (the user's line of each launch) costs the recorder, per op, on the CPU.

    PYTHONPATH=. python benchmarks/recorder_site_cost.py [--ops 20000] [--repeats 5]

Records a loop of small CPU ops (``F.silu(x @ w) * 0.5 + x``, called through an
``nn.Module``, as user code is) and prints, as JSON, the median µs per recorded op and
the µs the site walk itself took per launch (timed inside the recorder, so other
processes' noise does not land in the difference of two runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from gpu_demo.guard.record import call_site
from gpu_demo.guard.record import ops as recorder_module
from gpu_demo.guard.record.cuda_device import cpu_device
from gpu_demo.guard.record.recorder import CaptureRecorder
from simlib.trace import Launch


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x @ self.w) * 0.5 + x


def one_pass(ops: int) -> tuple[float, float]:
    """(µs per recorded op, µs of site walk per launch) for about ``ops`` ops."""
    layer, x = Layer(), torch.randn(4, 8)
    spent = [0, 0]
    walk = call_site.user_site

    def timed_walk(skip: int = 1) -> str:
        start = time.perf_counter_ns()
        site = walk(skip + 1)   # and this frame
        spent[0] += time.perf_counter_ns() - start
        spent[1] += 1
        return site

    recorder_module.user_site = timed_walk
    try:
        with CaptureRecorder(device=cpu_device()) as recorder:
            start = time.perf_counter()
            for _ in range(ops // 4):
                layer(x)
            elapsed = time.perf_counter() - start
    finally:
        recorder_module.user_site = walk
    assert all(launch.site for launch in recorder.trace.of(Launch)), "a launch without its site"
    return elapsed / len(recorder.trace.records) * 1e6, spent[0] / spent[1] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one_pass(1000)   # first use: plans and code objects
    passes = [one_pass(args.ops) for _ in range(args.repeats)]
    print(json.dumps({"us_per_recorded_op": round(statistics.median(p[0] for p in passes), 3),
                      "site_us_per_launch": round(statistics.median(p[1] for p in passes), 3),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
