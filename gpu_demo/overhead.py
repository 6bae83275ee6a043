"""What recording and checking a capture costs, against the same capture without them.

Issue 10's target: recording a 61-layer capture with ``gpu_demo.recorder`` and
checking it with ``simlib.checker`` takes less than 3 times as long as warming
up and capturing it plainly. One repeat of each, interleaved so drift hits both:

``plain``     ``graphs.warm_up`` (two eager forwards on a side stream) and a
              ``torch.cuda.graph`` capture, then a device sync
``recorded``  ``record_capture(fn, inputs, replays=0)``: the same warm-up and
              capture under the recorder, then a device sync (``record_s``), and
              ``check(trace)`` (``check_s``)

A first untimed pass of both compiles kernels and fills the allocator's caches.
Two stacks: the project's ``MoEStack`` with ``MoEConfig(layers=61,
order="shared_first")``, and a plain-PyTorch stack of 61 ``safe_dual_stream``
corpus layers (no project annotations: what the recorder sees in user code).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
import torch.nn as nn
from simlib.checker import check
from simlib.spec import MoEConfig

from . import graphs
from .recorder import record_capture
from .settings import RunSettings

TARGET_RATIO = 3.0
Stack = tuple[Callable[..., Any], list[torch.Tensor]]


def compare(plain: Callable[[], float], recorded: Callable[[], tuple[float, float, dict[str, int]]],
            repeats: int) -> dict[str, Any]:
    """Time ``plain`` and ``recorded`` ``repeats`` times each, interleaved, after one untimed pass;
    the ratio of medians, (record + check) / plain."""
    plain()
    recorded()
    plain_s: list[float] = []
    record_s: list[float] = []
    check_s: list[float] = []
    sizes: dict[str, int] = {}
    for _ in range(repeats):
        plain_s.append(plain())
        rec, chk, sizes = recorded()
        record_s.append(rec)
        check_s.append(chk)
    total = [r + c for r, c in zip(record_s, check_s)]
    ratio = statistics.median(total) / statistics.median(plain_s)
    return {
        "plain_s": _stats(plain_s), "record_s": _stats(record_s), "check_s": _stats(check_s),
        "record_and_check_s": _stats(total), "ratio": round(ratio, 3), "target_ratio": TARGET_RATIO,
        "within_target": ratio < TARGET_RATIO, **sizes,
    }


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(samples), 4), "min": round(min(samples), 4),
            "samples": [round(s, 4) for s in samples]}


def _timed_plain(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        graphs.warm_up(lambda: fn(*inputs))
        graph, _ = graphs.capture(lambda: fn(*inputs))
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        del graph
        return elapsed
    return run


def _timed_recorded(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> Callable[[], tuple[float, float, dict[str, int]]]:
    def run() -> tuple[float, float, dict[str, int]]:
        started = time.perf_counter()
        trace = record_capture(fn, inputs, replays=0)
        torch.cuda.synchronize()
        recorded = time.perf_counter()
        findings = check(trace)
        checked = time.perf_counter()
        error = trace.meta.get("capture_error")
        if error:
            raise RuntimeError(f"the recorded capture failed ({error}); the overhead of a failed capture means nothing")
        return recorded - started, checked - recorded, {"records": len(trace.records), "findings": len(findings)}
    return run


def moe_stack(layers: int, settings: RunSettings) -> Stack:
    from .moe import MoEStack

    config = MoEConfig(layers=layers, order="shared_first")
    generator = torch.Generator().manual_seed(settings.seed + 1)
    return MoEStack(config, settings), [settings.random(config.tokens, config.hidden, generator=generator)]


def plain_stack(layers: int, settings: RunSettings) -> Stack:
    from .corpus import safe_dual_stream

    torch.manual_seed(settings.seed)
    made = [safe_dual_stream.make(settings.torch_device, settings.torch_dtype) for _ in range(layers)]
    return nn.Sequential(*(layer for layer, _ in made)), [made[0][1][0]]


def run_overhead(layers: int = 61, repeats: int = 5, settings: RunSettings | None = None) -> dict[str, Any]:
    """Both stacks, on this machine's GPU."""
    settings = settings or RunSettings()
    results: dict[str, Any] = {"layers": layers, "repeats": repeats, "settings": settings.to_dict()}
    with torch.no_grad():
        for name, make in (("moe_stack", moe_stack), ("plain_pytorch_stack", plain_stack)):
            fn, inputs = make(layers, settings)
            results[name] = compare(_timed_plain(fn, inputs), _timed_recorded(fn, inputs), repeats)
            del fn, inputs
            torch.cuda.empty_cache()
    return results
