"""Device-side kernel timelines from ``torch.profiler`` (Kineto/CUPTI).

The profiler's Chrome trace holds what the GPU ran: every kernel with its
stream, start, duration, grid and estimated occupancy, and a *correlation id*
tying it to the host call that launched it (``cudaLaunchKernel`` eagerly, one
``cudaGraphLaunch`` for all kernels of a graph replay). This module reads that
file into plain records; ``bench`` and ``calibrate`` compute from them.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
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


@dataclass
class Timeline:
    """Kernels, host launch calls (by correlation id) and role annotations."""

    kernels: list[KernelEvent]
    launch_ts: dict[int, float]
    annotations: list[tuple[str, float, float]]  # (name, start, end) on the host

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
        ts = self.launch_ts.get(kernel.correlation)
        if ts is None:
            return ""
        around = [(end - start, name) for name, start, end in self.annotations if start <= ts <= end]
        return min(around)[1] if around else ""


def profile(run: Callable[[], None]) -> Timeline:
    """Profile ``run()`` (CPU and CUDA activity) and read back its timeline."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return read_chrome_trace(json.loads(path.read_text()))


def read_chrome_trace(data: dict[str, Any]) -> Timeline:
    kernels, launch_ts, annotations = [], {}, []
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
            launch_ts[int(args["correlation"])] = float(event["ts"])
        elif cat == "user_annotation":
            start = float(event["ts"])
            annotations.append((event["name"], start, start + float(event.get("dur", 0.0))))
    return Timeline(sorted(kernels, key=lambda k: k.start_us), launch_ts, annotations)


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
