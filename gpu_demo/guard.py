"""A one-line guard for test suites: is this function safe to capture?

    from gpu_demo import assert_capture_safe

    def test_moe_layer_is_capture_safe():
        assert_capture_safe(layer, hidden_states)

``assert_capture_safe(fn, *example_inputs)`` records a warm-up and a capture
of ``fn(*example_inputs)`` (a dry run on a CPU, a real capture on a GPU; no
replay, so a bad capture cannot fault the test process) and runs
``simlib.checker`` over the trace. It raises ``AssertionError`` carrying the
checker's report if the checker finds a hazard or the capture itself fails.

On a CPU the dry run only sees the capture path of code that asks
``gpu_demo.streams.is_capturing()`` (as ``gpu_demo.moe`` does); code that asks
``torch.cuda.is_current_stream_capturing()`` directly runs its eager path there.
The dry run also cannot see the caching allocator reuse a freed block (see
``gpu_demo.recorder``); a real capture on a GPU can.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from simlib.trace import Trace

from .recorder import record_capture


def check_trace(trace: Trace) -> tuple[list[Any], str]:
    """``simlib.checker``'s findings for ``trace`` and its printable report."""
    from simlib.checker import check, format_report

    findings = check(trace)
    return findings, format_report(findings)


def assert_capture_safe(fn: Callable[..., Any], *example_inputs: torch.Tensor) -> None:
    """Raise ``AssertionError`` (with the checker's report) unless capturing
    ``fn(*example_inputs)`` freezes no hazard the checker knows."""
    if not example_inputs or not all(isinstance(t, torch.Tensor) for t in example_inputs):
        raise TypeError("assert_capture_safe(fn, *example_inputs) needs at least one example tensor, and only tensors")
    with torch.no_grad():
        trace = record_capture(fn, example_inputs, replays=0)
    findings, report = check_trace(trace)
    error = trace.meta.get("capture_error")
    if findings or error:
        headline = f"capture failed: {error}\n" if error else ""
        raise AssertionError(f"{getattr(fn, '__name__', type(fn).__name__)} is not capture-safe:\n{headline}{report}")
