"""A trace in words: what the host did at each step, a capture's landmarks, an error's message.

The notebooks print these beside the pictures, and the explorer's status lines are made of
them; they need neither matplotlib nor ipywidgets.
"""

from __future__ import annotations

import textwrap
from typing import Any, Iterable

from ..memory import short_ptr
from ..programs.scenarios import ScenarioResult
from ..trace import (
    Alloc,
    Capture,
    DeviceSpan,
    EventOp,
    Fault,
    Free,
    HostSync,
    Launch,
    Mutation,
    Replay,
    SkippedLaunch,
    Trace,
    View,
)


def _args(args: Iterable[Any]) -> str:
    return ", ".join(f"{a.label}={short_ptr(a.ptr)}" + ("" if a.numel else " (empty)")
                     for a in args)


def describe_record(r: Any, recorded_on: dict[int, str] | None = None) -> str | None:
    """One host record in words (``None`` for device-side records).

    ``recorded_on`` maps event ids to the stream each was recorded on, so that a
    wait can say what it waits for (``describe_step`` passes it).
    """
    if isinstance(r, Launch):
        if r.graph is not None:
            return (f"capture {r.kernel} on stream {r.stream} as a graph node, freezing "
                    f"{_args(r.args)} (it runs only on replay)")
        return f"launch {r.kernel} on stream {r.stream} with {_args(r.args)}"
    if isinstance(r, SkippedLaunch):
        return (f"skip {r.kernel} on stream {r.stream}: {r.reason} (froze {_args(r.args)}), "
                "so it is not in the graph")
    if isinstance(r, Mutation):
        new = "0x0 (empty)" if r.new_numel == 0 else short_ptr(r.new_ptr)
        why = f" ({r.why})" if r.why else ""
        return f"{r.label}.{r.op}: {short_ptr(r.old_ptr)} -> {new}{why}; no kernel runs"
    if isinstance(r, Alloc):
        return f"allocate {r.label} at {short_ptr(r.ptr)} ({r.nbytes} bytes, pool {r.pool})"
    if isinstance(r, Free):
        return f"free {r.label}'s block {short_ptr(r.ptr)}: back to pool {r.pool} for reuse"
    if isinstance(r, View):
        return f"view {r.label} at {short_ptr(r.ptr)} ({r.numel} elements)"
    if isinstance(r, EventOp):
        if r.op == "record":
            return f"record an event on stream {r.stream}"
        if r.op == "wait":
            source = (recorded_on or {}).get(r.event)
            return (f"stream {r.stream} waits for stream {source}'s event" if source
                    else f"stream {r.stream} waits on event {r.event}")
        return f"event.{r.op}()"
    if isinstance(r, Capture):
        if r.op == "begin":
            return f"begin capturing graph {r.graph} on stream {r.stream}"
        return f"end the capture of graph {r.graph}" + (f" ({r.error})" if r.error else "")
    if isinstance(r, HostSync):
        return f"host waits for the device ({r.op})"
    if isinstance(r, Replay):
        return f"replay graph {r.graph} (replay {r.index})"
    if isinstance(r, Fault):
        return f"device fault: {r.error}"
    return None


def describe_step(trace: Trace, step: int) -> str:
    """What the host did at host step ``step``, in words."""
    recorded_on = {r.event: r.stream for r in trace.of(EventOp)
                   if r.op == "record" and r.step < step and r.stream is not None}
    parts = [d for r in trace.records if r.step == step
             if not isinstance(r, DeviceSpan) and (d := describe_record(r, recorded_on))]
    return f"host step {step}: " + ("; ".join(parts) if parts else "nothing recorded")


def capture_window(trace: Trace, graph: int = 0) -> tuple[int, int]:
    """First and last host step of the capture of ``graph`` (the whole trace without one)."""
    marks = {r.op: r.step for r in trace.of(Capture) if r.graph == graph}
    last = trace.records[-1].step if trace.records else 0
    return marks.get("begin", 0), marks.get("end", last)


def landmarks(source: Trace | ScenarioResult, graph: int = 0) -> dict[str, int]:
    """Host steps worth stopping at in a capture of the MoE step.

    ``capture_begin``, ``fork`` (a second stream joins the capture),
    ``dispose`` (a host ``set_`` during capture), ``first_shared`` (the first
    shared-expert launch, made or skipped), ``join`` and ``capture_end``;
    absent when they did not happen.
    """
    trace = source if isinstance(source, Trace) else source.trace
    first, last = capture_window(trace, graph)
    origin = next((r.stream for r in trace.of(Capture) if r.graph == graph), None)
    marks: dict[str, int] = {"capture_begin": first}
    for r in trace.records:
        if not first <= r.step <= last:
            continue
        if isinstance(r, EventOp) and r.op == "wait" and r.graph == graph:
            if r.stream != origin:
                marks.setdefault("fork", r.step)
            else:
                marks["join"] = r.step
        elif isinstance(r, Mutation) and r.graph == graph:
            marks.setdefault("dispose", r.step)
        elif isinstance(r, (Launch, SkippedLaunch)) and r.graph == graph and r.role == "shared":
            marks.setdefault("first_shared", r.step)
    marks["capture_end"] = last
    return dict(sorted(marks.items(), key=lambda kv: kv[1]))


def landmark_table(source: ScenarioResult, graph: int = 0) -> str:
    """The capture's landmarks, each with what the host did at that step."""
    marks = landmarks(source, graph)
    width = max(map(len, marks))
    return "\n".join(textwrap.fill(f"{name:<{width}}  {describe_step(source.trace, step)}", 100,
                                   subsequent_indent=" " * (width + 2))
                     for name, step in marks.items())


def print_error(error: BaseException, width: int = 100) -> None:
    """Print an exception's message wrapped to ``width`` (CUDA error name first)."""
    print(textwrap.fill(str(error), width, subsequent_indent="    "))
