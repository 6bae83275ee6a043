"""``record_capture``: the warm-up, capture and replays of one function, recorded.

The protocol a recording follows (warm-up, capture, replays with input
refresh; on a GPU the warm-up's first call, which only initialises, is not
recorded; the next ``RECORDED_WARMUPS`` warm-up calls and the capture's call are,
each between ``Call`` records, so the rules can compare the calls op by op),
while the recorder (``gpu_demo.record.recorder``) writes down what each step
froze: on a GPU for real, on CPU tensors as a *dry run* in which
``gpu_demo.record.dry_run.dry_capture`` makes the program take its capture path
while nothing is actually captured. The dry run keeps every storage that
warm-up and capture touch alive (``CaptureRecorder.holding_storages``), so it
shows what the host froze but not how the caching allocator reuses freed
blocks: a reuse after free (checker rule 4) only shows in a real capture.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from gpu_demo.guard.protocol import capture_replay
from gpu_demo.guard.protocol.cuda_errors import classify_capture_failure, first_error, one_line
from gpu_demo.guard.record.call_site import raised_at
from gpu_demo.guard.record.cuda_device import cpu_device, cuda_device
from gpu_demo.guard.record.dry_run import dry_capture
from gpu_demo.guard.record.recorder import CaptureRecorder
from simlib.trace import Call, Trace

# Warm-up calls recorded before the capture's call: two, so that a value (a host scalar,
# a freshly copied input) that changes every call shows as changing before the capture
# does it a third time (the frozen-value and rebuilt-input rules need two earlier calls).
RECORDED_WARMUPS = 2


def record_capture(
    fn: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    *,
    replays: int = 3,
    refresh: str = "fresh",
    meta: dict[str, Any] | None = None,
) -> Trace:
    """Record ``RECORDED_WARMUPS`` warm-up calls, the capture and ``replays`` replays of ``fn(*inputs)``.

    On a GPU the warm-up is ``capture_replay.warm_up``'s eager calls, and the
    first is not recorded: it initialises lazily (cuBLAS handles, Triton
    compiles and autotuning, the allocator's pool), none of which a replay
    sees, and what it leaves behind that the graph reads, the later calls
    either write again (and are recorded writing it) or leave alone, as every
    later eager call does. Each recorded call is bracketed by ``Call`` records
    (phase ``warmup``, then ``capture`` for the capture's call).

    ``inputs`` are the captured input buffers. Before each replay they are
    refreshed per ``refresh`` (``fresh`` random values, ``stale``: untouched,
    ``same_as_eager``: the values the warm-up saw). On a GPU the capture and
    replays are real; a capture error ends the recording (``Capture`` end with
    ``error``, ``meta["capture_error"]``) and a replay fault adds a ``Fault``.
    With inputs on the CPU (on any machine) it is a dry run: the capture runs
    under ``dry_capture()`` and the replays are ``Replay`` records only.
    """
    on_gpu = any(t.is_cuda for t in inputs)
    warm_values = [t.clone() for t in inputs]
    recorder = CaptureRecorder({"recorder": "gpu_demo.record", "mode": "cuda" if on_gpu else "dry_run",
                                "torch": torch.__version__, **(meta or {})},
                               device=cuda_device() if on_gpu else cpu_device())
    try:
        if on_gpu:
            capture_replay.warm_up(lambda: fn(*inputs), iterations=1)   # lazy initialisation: not recorded
    except Exception as exc:  # a function that fails eagerly is a result too
        return _failed(recorder.trace, exc)
    with recorder:
        try:
            if on_gpu:
                for index in range(RECORDED_WARMUPS):
                    capture_replay.warm_up(lambda: _call(recorder, index, "warmup", fn, inputs), iterations=1)
                graph = torch.cuda.CUDAGraph()
                with recorder.capturing(inputs) as graph_id, torch.cuda.graph(graph):
                    _call(recorder, RECORDED_WARMUPS, "capture", fn, inputs)
            else:
                with recorder.holding_storages():
                    for index in range(RECORDED_WARMUPS):
                        _call(recorder, index, "warmup", fn, inputs)
                    with recorder.capturing(inputs) as graph_id, dry_capture():
                        _call(recorder, RECORDED_WARMUPS, "capture", fn, inputs)
        except Exception as exc:  # a capture that fails is a result, not a crash
            return _failed(recorder.trace, exc)
        generator = torch.Generator().manual_seed(0)
        for index in range(replays):
            _refresh(inputs, warm_values, refresh, generator)
            if not on_gpu:
                recorder.replay(graph_id, index)
                continue
            try:
                graph.replay()  # recorded by the recorder's CUDAGraph.replay wrapper
                torch.cuda.synchronize()
            except RuntimeError as exc:
                recorder.fault(exc)
                break
    return recorder.trace


def _call(recorder: CaptureRecorder, index: int, phase: str, fn: Callable[..., Any],
          inputs: Sequence[torch.Tensor]) -> Any:
    with recorder.calling(index, phase):
        return fn(*inputs)


def _failed(trace: Trace, exc: BaseException) -> Trace:
    """The outcome (``meta["capture_error"]``), PyTorch's own words and the call that failed."""
    first = first_error(exc)
    trace.meta["capture_error"] = classify_capture_failure(first)
    trace.meta["capture_error_message"] = f"{type(first).__name__}: {one_line(first)}"
    site = raised_at(first)
    trace.meta["capture_error_call"] = _failing_call(trace) + (f", at {site}" if site else "")
    return trace


def _failing_call(trace: Trace) -> str:
    """Which call of the recording failed: the last one that began."""
    begun = [c for c in trace.of(Call) if c.op == "begin"]
    if not begun:
        return "the first warm-up call"
    if begun[-1].phase == "capture":
        return "the capture's call"
    return (f"warm-up call {begun[-1].index + 1} of {RECORDED_WARMUPS}, on the same input buffers as the call "
            "before it (does the function change its own inputs?)")


def _refresh(inputs: Sequence[torch.Tensor], warm_values: Sequence[torch.Tensor], how: str,
             generator: torch.Generator) -> None:
    """Fresh values are ``capture_replay.fresh_like``'s: integer inputs (indices) stay in their range."""
    if how == "stale":
        return
    for t, warm in zip(inputs, warm_values):
        t.copy_(warm if how == "same_as_eager" else capture_replay.fresh_like(t, generator, t.device))
