"""What the pictures read off a trace: which blocks are live, what a frozen pointer is.

Plain bookkeeping over records, shared by the pictures and their takeaways;
nothing here draws.
"""

from __future__ import annotations

from typing import Sequence

from ...engine.profiles import PROFILES
from ...memory import short_ptr
from ...programs.scenarios import ScenarioResult
from ...trace import Alloc, Arg, DeviceSpan, EventOp, Free, Launch, Record, SkippedLaunch, Trace


def trace_of(source: Trace | ScenarioResult) -> Trace:
    return source if isinstance(source, Trace) else source.trace


def until(trace: Trace, step: int | None) -> list[Record]:
    if step is None:
        return trace.records
    return [r for r in trace.records if r.step <= step]


def streams_of(trace: Trace) -> list[str]:
    """Streams in order of first use."""
    seen: dict[str, None] = {}
    for r in trace.records:
        if isinstance(r, (Launch, SkippedLaunch, DeviceSpan, EventOp)) and r.stream is not None:
            seen.setdefault(r.stream)
    return list(seen)


class Blocks:
    """Which device blocks are live, replayed in host order from Alloc/Free records."""

    def __init__(self) -> None:
        self.blocks: dict[int, tuple[int, bool]] = {}

    def apply(self, r: Record) -> None:
        if isinstance(r, Alloc):
            self.blocks[r.ptr] = (r.nbytes, True)
        elif isinstance(r, Free):
            self.blocks[r.ptr] = (r.nbytes, False)

    def freed(self, ptr: int) -> bool:
        hit = self.blocks.get(ptr)
        if hit is None:
            hit = next(((n, live) for p, (n, live) in self.blocks.items() if p <= ptr < p + n),
                       None)
        return hit is not None and not hit[1]


def arg_problem(arg: Arg, blocks: Blocks | None = None) -> str | None:
    """Why a frozen argument is wrong: ``null``, ``empty`` or ``freed``; ``None`` if live."""
    if arg.ptr == 0 and arg.numel > 0:
        return "null"
    if arg.numel == 0:
        return "empty"
    if blocks is not None and blocks.freed(arg.ptr):
        return "freed"
    return None


def reused_block(records: Sequence[Record], graph: int, ptr: int | None = None) -> Alloc | None:
    """The first allocation that got a block freed during the capture of ``graph`` (of ``ptr``)."""
    freed: set[int] = set()
    for r in records:
        if isinstance(r, Free) and r.graph == graph and ptr in (None, r.ptr):
            freed.add(r.ptr)
        elif isinstance(r, Alloc) and r.ptr in freed and r.pool != "default":
            return r
    return None


def show_full_pointers(full: bool | None, trace: Trace, graph: int) -> bool:
    """Full addresses where asked, or (``None``) where the capture reuses a freed block.

    When the pool hands one block out twice, the equal addresses are the point,
    and ``0x7e…00000`` would hide whether they are equal.
    """
    return reused_block(trace.records, graph) is not None if full is None else full


def pointer_text(ptr: int, full: bool) -> str:
    if ptr == 0:
        return "0x0"
    return hex(ptr) if full else short_ptr(ptr)


def replay_spans(records: Sequence[Record]) -> list[DeviceSpan]:
    return [r for r in records if isinstance(r, DeviceSpan) and r.phase == "replay"
            and r.replay == 0]


def late_starts(trace: Trace, spans: Sequence[DeviceSpan]) -> list[tuple[DeviceSpan, float]]:
    """Replay kernels the graph executor held back: each with the time its inputs were ready.

    A replay's first kernel on a newly opened executor stream starts
    ``graph_branch_launch_us`` after the replay began (``simlib.engine.runtime``), later
    than its dependencies allow. Found only where the trace names its profile.
    """
    profile = PROFILES.get(trace.meta.get("profile", ""))
    if profile is None or not spans:
        return []
    deps = {r.id: r.deps for r in trace.of(Launch)}
    by_launch = {s.launch: s for s in spans}
    t0 = min(s.start_us for s in spans)
    slack = profile.graph_node_gap_us + profile.cross_stream_gap_us + 1e-6
    late = []
    for s in spans:
        ready = max([t0] + [by_launch[d].end_us for d in deps.get(s.launch, ()) if d in by_launch])
        if (s.start_us - ready > slack
                and abs(s.start_us - t0 - profile.graph_branch_launch_us) < 1e-6):
            late.append((s, ready))
    return late
