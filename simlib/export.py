"""Chrome Trace Event JSON of a trace, to open in Perfetto (ui.perfetto.dev) or chrome://tracing.

The layout follows what torch.profiler (Kineto) writes, so a simulated trace
and a real profile read the same way:

* process ``host`` with one thread ``host``: one complete event (``X``) per
  host step, instants (``i``) for host-side ``set_``/``resize_``, capture
  begin/end and replays;
* process ``GPU 0`` with one thread per stream, named ``stream 7 (main)``:
  Kineto's ``stream N`` plus the simlib stream name (numbered from 7 in order
  of first use); kernels are ``X`` events whose args hold the pointers the
  host froze;
* flow arrows (``s``/``f``, category ``ac2g`` like Kineto's) from each eager
  launch, or graph replay, on the host to the kernels it started.

Chrome requires the ``X`` events of one thread to nest. Programmatic dependent
launch lets a kernel start before its predecessor on the same stream ends, so
a kernel that would overlap goes to an extra track of its stream,
``stream 7 (main) · PDL overlap``.

Output is deterministic: the same trace gives byte-identical JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .trace import (
    Alloc,
    Arg,
    Call,
    Capture,
    DeviceSpan,
    EventOp,
    Fault,
    Free,
    HostSync,
    Launch,
    Mutation,
    Record,
    Replay,
    SkippedLaunch,
    Trace,
    View,
)

HOST_PID = 1
GPU_PID = 2
HOST_TID = 1
FIRST_STREAM_NUMBER = 7      # Kineto shows the first CUDA stream as "stream 7"
FLOW_CATEGORY = "ac2g"       # Kineto's category for CPU-launch -> GPU-kernel arrows
OVERLAP_TRACK = "PDL overlap"

# Which record names a host step, most telling first.
_STEP_PRIORITY = (Launch, SkippedLaunch, Replay, Capture, Mutation, HostSync, EventOp, View,
                  Alloc, Free)


def to_chrome_trace(trace: Trace) -> dict[str, Any]:
    """The Chrome Trace Event JSON object (``traceEvents`` plus metadata) for ``trace``."""
    streams = _StreamTracks.of(trace)
    builder = _Builder(trace, streams)
    builder.host_steps()
    builder.kernels()
    builder.instants()
    return {
        "traceEvents": _metadata(streams) + builder.events,
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "simlib.export",
            "trace_meta": trace.meta,
            "streams": {name: f"stream {n}" for name, n in streams.numbers.items()},
        },
    }


def write_chrome_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``to_chrome_trace(trace)`` to ``path`` (sorted keys: byte-identical reruns)."""
    path = Path(path)
    path.write_text(json.dumps(to_chrome_trace(trace), sort_keys=True, indent=1) + "\n")
    return path


# --------------------------------------------------------------------------- streams
@dataclass
class _StreamTracks:
    """Kineto-style stream numbers, and kernel spans split into non-overlapping lanes."""

    numbers: dict[str, int] = field(default_factory=dict)
    lane_of: dict[int, int] = field(default_factory=dict)     # index of span in trace -> lane
    lanes: dict[str, int] = field(default_factory=dict)       # stream -> number of lanes

    @classmethod
    def of(cls, trace: Trace) -> "_StreamTracks":
        tracks = cls()
        ends: dict[str, list[float]] = {}
        spans = [(i, r) for i, r in enumerate(trace.records) if type(r) is DeviceSpan]
        for i, span in sorted(spans, key=lambda p: (p[1].start_us, p[1].end_us, p[0])):
            lane_ends = ends.setdefault(span.stream, [])
            lane = next((k for k, end in enumerate(lane_ends) if end <= span.start_us), len(lane_ends))
            if lane == len(lane_ends):
                lane_ends.append(span.end_us)
            else:
                lane_ends[lane] = span.end_us
            tracks.lane_of[i] = lane
        for r in trace.records:
            if type(r) is DeviceSpan and r.stream not in tracks.numbers:
                tracks.numbers[r.stream] = FIRST_STREAM_NUMBER + len(tracks.numbers)
        tracks.lanes = {s: len(e) for s, e in ends.items()}
        return tracks

    def tid(self, stream: str, lane: int) -> int:
        n = self.numbers[stream]
        return n if lane == 0 else n * 100 + lane

    def name(self, stream: str, lane: int) -> str:
        base = f"stream {self.numbers[stream]} ({stream})"
        if lane == 0:
            return base
        return f"{base} · {OVERLAP_TRACK}" + (f" {lane}" if lane > 1 else "")


def _metadata(streams: _StreamTracks) -> list[dict[str, Any]]:
    events = [
        _meta("process_name", HOST_PID, 0, name="host"),
        _meta("process_sort_index", HOST_PID, 0, sort_index=0),
        _meta("thread_name", HOST_PID, HOST_TID, name="host"),
        _meta("process_name", GPU_PID, 0, name="GPU 0"),
        _meta("process_sort_index", GPU_PID, 0, sort_index=1),
    ]
    for stream, n in streams.numbers.items():
        for lane in range(streams.lanes[stream]):
            tid = streams.tid(stream, lane)
            events.append(_meta("thread_name", GPU_PID, tid, name=streams.name(stream, lane)))
            events.append(_meta("thread_sort_index", GPU_PID, tid, sort_index=n * 100 + lane))
    return events


def _meta(event: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": event, "pid": pid, "tid": tid, "args": args}


# --------------------------------------------------------------------------- events
@dataclass
class _Builder:
    trace: Trace
    streams: _StreamTracks
    events: list[dict[str, Any]] = field(default_factory=list)
    step_mid: dict[int, float] = field(default_factory=dict)  # host step -> ts inside its slice
    flows: int = 0

    def host_steps(self) -> None:
        """One ``X`` per host step, from the end of the previous one to the end of this one.

        A step ends at its records' ``t_us``, except a host sync, which ends
        when the device work issued before it is done.
        """
        device_done: dict[str | None, float] = {}   # stream (None: any) -> last kernel end so far
        step: list[Record] = []
        previous_end = 0.0
        for r in self.trace.records:
            if type(r) is DeviceSpan:
                for key in (r.stream, None):
                    device_done[key] = max(device_done.get(key, 0.0), r.end_us)
            elif type(r) not in (Fault, Call):      # a call's begin and end are marks, not host work
                if step and r.step != step[0].step:
                    previous_end = self._host_step(step, previous_end, device_done)
                    step = []
                step.append(r)
        if step:
            self._host_step(step, previous_end, device_done)

    def _host_step(self, records: list[Record], start: float,
                   device_done: dict[str | None, float]) -> float:
        main = min(records, key=lambda r: _STEP_PRIORITY.index(type(r)))
        end = max(r.t_us for r in records)
        if type(main) is HostSync:
            end = max(end, device_done.get(main.stream, 0.0))
        end = max(end, start)
        name, category, args = _describe(main)
        step = main.step
        self.events.append({"ph": "X", "name": name, "cat": category, "pid": HOST_PID,
                            "tid": HOST_TID, "ts": _us(start), "dur": _us(_us(end) - _us(start)),
                            "args": {"step": step, **args}})
        self.step_mid[step] = _us((start + end) / 2)
        return end

    def kernels(self) -> None:
        """Each device span as an ``X`` on its stream's lane, with a flow from its host step."""
        launches = {r.id: r for r in self.trace.of(Launch)}
        for i, r in enumerate(self.trace.records):
            if type(r) is not DeviceSpan:
                continue
            launch = launches.get(r.launch)
            tid = self.streams.tid(r.stream, self.streams.lane_of[i])
            args: dict[str, Any] = {"step": r.step, "phase": r.phase, "stream": r.stream,
                                    "launch": r.launch}
            if r.replay is not None:
                args["replay"] = r.replay
            if launch is not None:
                args.update(label=launch.label, role=launch.role, graph=launch.graph,
                            pdl=launch.pdl, frozen_args=_frozen(launch.args))
            start = _us(r.start_us)
            self.events.append({"ph": "X", "name": launch.kernel if launch else f"launch {r.launch}",
                                "cat": "kernel", "pid": GPU_PID, "tid": tid, "ts": start,
                                "dur": _us(_us(r.end_us) - start), "args": args})
            self._flow(r.step, tid, start, "replay" if r.phase == "replay" else "launch")

    def _flow(self, step: int, tid: int, ts: float, name: str) -> None:
        self.flows += 1
        common = {"name": name, "cat": FLOW_CATEGORY, "id": self.flows}
        self.events.append({"ph": "s", "pid": HOST_PID, "tid": HOST_TID,
                            "ts": self.step_mid[step], **common})
        self.events.append({"ph": "f", "bp": "e", "pid": GPU_PID, "tid": tid, "ts": ts, **common})

    def instants(self) -> None:
        """Host mutations, capture begin/end, replays, calls' begin and end, and faults as instant events."""
        for r in self.trace.records:
            kind = type(r)
            if kind is Mutation:
                self._instant(f"{r.op} {r.label}", "mutation", r.t_us, "t",
                              step=r.step, tensor=r.label, old_ptr=hex(r.old_ptr),
                              old_shape=list(r.old_shape), new_ptr=hex(r.new_ptr),
                              new_shape=list(r.new_shape), graph=r.graph, why=r.why)
            elif kind is Capture:
                self._instant(f"capture {r.op} (graph {r.graph})", "capture", r.t_us, "g",
                              step=r.step, stream=r.stream, inputs=[hex(p) for p in r.inputs],
                              error=r.error)
            elif kind is Replay:
                self._instant(f"replay graph {r.graph} #{r.index}", "replay", r.t_us, "t",
                              step=r.step, stream=r.stream)
            elif kind is Call:
                self._instant(f"{r.phase} call {r.index} {r.op}s", "call", r.t_us, "t", step=r.step,
                              phase=r.phase, index=r.index)
            elif kind is Fault:
                self._instant(r.error, "fault", r.t_us, "g", step=r.step, launch=r.launch,
                              detail=r.detail)

    def _instant(self, name: str, category: str, t_us: float, scope: str, **args: Any) -> None:
        self.events.append({"ph": "i", "s": scope, "name": name, "cat": category,
                            "pid": HOST_PID, "tid": HOST_TID, "ts": _us(t_us), "args": args})


def _describe(r: Record) -> tuple[str, str, dict[str, Any]]:
    """Name, category and args of the host step whose main record is ``r``."""
    kind = type(r)
    if kind is Launch:
        where = "captured into graph" if r.graph is not None else "eager"
        return (f"launch {r.kernel}", "cuda_runtime",
                {"label": r.label, "stream": r.stream, "mode": where, "graph": r.graph,
                 "frozen_args": _frozen(r.args)})
    if kind is SkippedLaunch:
        return (f"skip {r.kernel}", "cpu_op",
                {"label": r.label, "stream": r.stream, "graph": r.graph, "reason": r.reason,
                 "frozen_args": _frozen(r.args)})
    if kind is Replay:
        return f"replay graph {r.graph}", "cuda_runtime", {"index": r.index, "stream": r.stream}
    if kind is Capture:
        return f"capture {r.op}", "cuda_runtime", {"graph": r.graph, "stream": r.stream}
    if kind is Mutation:
        return f"{r.op} {r.label}", "cpu_op", {"old_ptr": hex(r.old_ptr), "new_ptr": hex(r.new_ptr)}
    if kind is HostSync:
        return r.op, "cuda_runtime", {"label": r.label, "stream": r.stream}
    if kind is EventOp:
        return f"event {r.op}", "cuda_runtime", {"event": r.event, "stream": r.stream}
    if kind is View:
        return f"view {r.label}", "cpu_op", {"ptr": hex(r.ptr), "shape": list(r.shape)}
    if kind is Alloc:
        return f"alloc {r.label}", "cpu_op", {"ptr": hex(r.ptr), "nbytes": r.nbytes, "pool": r.pool}
    return f"free {r.label}", "cpu_op", {"ptr": hex(r.ptr), "nbytes": r.nbytes, "pool": r.pool}


def _frozen(args: tuple[Arg, ...]) -> dict[str, str]:
    """What the host froze per kernel argument: ``x 0x7e0000000000 [16, 512] r``."""
    return {a.name: f"{a.label} {hex(a.ptr)} {list(a.shape)} {a.access}" for a in args}


def _us(t: float) -> float:
    """Microseconds rounded to the nanosecond (no float noise in the JSON)."""
    return round(t, 3)
