"""Kernel and host-call timelines from ``torch.profiler`` (Kineto/CUPTI).

The profiler's Chrome trace holds what the GPU ran: every kernel with its
stream, start, duration, grid and estimated occupancy, and a *correlation id*
tying it to the host call that launched it (``cudaLaunchKernel`` eagerly, one
``cudaGraphLaunch`` for all kernels of a graph replay). It also holds what the
host did: every aten op (nested ones inside the op that called them) and every
``record_function`` annotation. This module reads that file into plain
records; ``bench``, ``calibrate`` and ``host_costs`` compute from them.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class KernelEvent:
    name: str
    stream: int
    start_us: float
    dur_us: float
    correlation: int
    blocks: int
    occupancy_pct: float | None

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class HostCall:
    """A span of host time: an aten op or a CUDA runtime/driver call."""

    name: str
    start_us: float
    dur_us: float

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class Timeline:
    """Kernels, host launch calls (by correlation id), annotations and aten ops."""

    kernels: list[KernelEvent]
    launches: dict[int, HostCall]
    annotations: list[tuple[str, float, float]]  # (name, start, end) on the host
    cpu_ops: list[HostCall] = field(default_factory=list)  # in start order, nested ones included

    def per_launch(self) -> list[list[KernelEvent]]:
        """Kernels grouped by the host call that launched them (one group per graph
        replay), each group in start order, groups in launch order."""
        groups: dict[int, list[KernelEvent]] = defaultdict(list)
        for k in self.kernels:
            groups[k.correlation].append(k)
        ordered = sorted(groups.values(), key=lambda g: min(k.start_us for k in g))
        return [sorted(g, key=lambda k: k.start_us) for g in ordered]

    def role_of(self, kernel: KernelEvent) -> str:
        """The innermost annotation around the host call that launched ``kernel``."""
        call = self.launches.get(kernel.correlation)
        if call is None:
            return ""
        ts = call.start_us
        around = [(end - start, name) for name, start, end in self.annotations if start <= ts <= end]
        return min(around)[1] if around else ""


def profile(run: Callable[[], None]) -> Timeline:
    """Profile ``run()`` (CPU activity, and CUDA activity when there is a GPU) and
    read back its timeline."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = torch.cuda.is_available()
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return read_chrome_trace(json.loads(path.read_text()))


def read_chrome_trace(data: dict[str, Any]) -> Timeline:
    kernels, launches, annotations, cpu_ops = [], {}, [], []
    for event in data.get("traceEvents", []):
        cat, args = event.get("cat"), event.get("args", {})
        if cat == "kernel":
            grid = args.get("grid", [1, 1, 1])
            kernels.append(KernelEvent(
                name=event["name"], stream=int(args.get("stream", -1)), start_us=float(event["ts"]),
                dur_us=float(event.get("dur", 0.0)), correlation=int(args.get("correlation", -1)),
                blocks=int(grid[0] * grid[1] * grid[2]), occupancy_pct=args.get("est. achieved occupancy %"),
            ))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[int(args["correlation"])] = _host_call(event)
        elif cat == "user_annotation":
            call = _host_call(event)
            annotations.append((call.name, call.start_us, call.end_us))
        elif cat == "cpu_op":
            cpu_ops.append(_host_call(event))
    cpu_ops.sort(key=lambda c: (c.start_us, -c.dur_us))  # a parent before the ops it calls
    return Timeline(sorted(kernels, key=lambda k: k.start_us), launches, annotations, cpu_ops)


def _host_call(event: dict[str, Any]) -> HostCall:
    return HostCall(event["name"], float(event["ts"]), float(event.get("dur", 0.0)))


def same_stream_gaps(group: list[KernelEvent]) -> list[float]:
    """Idle time between consecutive kernels on the same stream."""
    by_stream: dict[int, list[KernelEvent]] = defaultdict(list)
    for k in group:
        by_stream[k.stream].append(k)
    gaps = []
    for ks in by_stream.values():
        gaps += [b.start_us - a.end_us for a, b in zip(ks, ks[1:])]
    return gaps


def join_gap(group: list[KernelEvent]) -> tuple[float, bool] | None:
    """Gap at the first join after two streams overlapped in one replay.

    The join is the first kernel that starts after every kernel started before
    it has ended, once kernels on two streams have run at the same time. The
    gap is its start minus the latest end before it; the flag says whether
    that latest kernel ran on another stream (a cross-stream join).
    """
    overlapped = False
    for i in range(1, len(group)):
        before = group[:i]
        latest = max(before, key=lambda k: k.end_us)
        if not overlapped:
            overlapped = any(a.stream != b.stream and a.end_us > b.start_us and b.end_us > a.start_us
                             for a in before for b in before)
        if overlapped and group[i].start_us >= latest.end_us:
            return group[i].start_us - latest.end_us, latest.stream != group[i].stream
    return None


def sink_gap(group: list[KernelEvent]) -> float:
    """Start of the kernel that ends last (the graph's sink, here the residual
    add) minus the latest end among the kernels before it: negative when it
    started while its predecessor still ran (what PDL allows)."""
    sink = max(group, key=lambda k: k.end_us)
    before = [k.end_us for k in group if k is not sink]
    return sink.start_us - max(before) if before else 0.0


def stream_starts(group: list[KernelEvent]) -> dict[int, float]:
    """Per stream of one replay, keyed by its number of kernels: when its first
    kernel started, relative to the replay's first kernel."""
    first: dict[int, KernelEvent] = {}
    count: dict[int, int] = defaultdict(int)
    for k in group:
        first.setdefault(k.stream, k)
        count[k.stream] += 1
    return {count[s]: round(k.start_us - group[0].start_us, 3) for s, k in first.items()}


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None
