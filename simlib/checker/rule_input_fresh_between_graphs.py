"""Rule 18, ``input_fresh_between_graphs``: an op between graphs makes a graph's input anew, elsewhere, every step.

Piecewise graphs run some ops eagerly between the pieces (vLLM #53915). When
such an op returns a fresh tensor every step, the next piece keeps reading the
tensor of the capture's step: the program made the graph a new input that the
graph never sees. Followed as the records come (``FreshBetweenGraphs.add``): at
the end of a graph's capture, each range it reads from outside itself (no node
wrote it first, no node writes it at all: not state it keeps, such as a cache)
is tied to the eager launch that wrote it last, by that launch's ``(site,
kernel)`` (the user's line, as ``calls`` lines launches up). If, between two
replays of the graph, the same launch wrote a tensor of the same size elsewhere
and nothing wrote the range the graph reads, the graph's next replay is
reported, once per graph and launch.

Rule 10 also reports the capture's tensor where the program freed it since (the
graph reads a freed block); this rule says why it went stale, and it fires too
when the old tensor is kept alive. An input its owner rebound (``Rebind``: new
weights uploaded every step and bound to the module) is rule 14's, and this
rule yields for it. Limits: a launch without a site (``""``) ties
nothing; a fresh tensor the allocator happens to place where the old one was is
no new input (the replays read it: right by luck), and the rule says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..trace import Arg, Capture, DataPtr, Free, GraphId, Launch, Rebind, Record, Replay
from .findings import Finding
from .index import Graph, Index
from .inputs import graph_reads_before_writes
from .intervals import Intervals
from .results import graph_writes
from .rules import INPUT_FRESH_BETWEEN_GRAPHS

Writer = tuple[str, str]          # (site, kernel) of an eager launch


@dataclass(slots=True)
class _Input:
    """A range graph ``graph`` reads that the eager launch ``writer`` wrote before its capture."""

    graph: GraphId
    node: Launch
    arg: Arg
    writer: Launch
    nbytes: int                                   # what the writer's write there spanned
    refreshed: bool = False                       # since the last replay: something wrote the range
    elsewhere: tuple[Launch, Arg] | None = None   # ... and the writer wrote a new tensor elsewhere
    rebound: bool = False                         # its owner rebound it: rule 14's

    @property
    def span(self) -> tuple[DataPtr, DataPtr]:
        return self.arg.ptr, self.arg.ptr + self.arg.nbytes


class FreshBetweenGraphs:
    """Rule 18 over records in order."""

    READS = (Launch, Free, Capture, Replay, Rebind)   # the records ``add`` needs: the checker feeds it no others

    def __init__(self) -> None:
        self._writers: Intervals[Launch] = Intervals()        # the last eager launch (with a site) per range
        self._by_writer: dict[Writer, list[_Input]] = {}
        self._by_range: Intervals[list[_Input]] = Intervals()
        self._of_graph: dict[GraphId, list[_Input]] = {}
        self._reported: set[tuple[GraphId, str, str]] = set()

    def ties(self, kernel: str) -> bool:
        """Is some graph's input tied to an eager launch of ``kernel``?"""
        return any(k == kernel for _, k in self._by_writer)

    def add(self, r: Record, index: Index) -> list[Finding]:
        kind = type(r)
        if kind is Launch:
            if r.graph is None:
                self._eager(r)
        elif kind is Free:
            self._writers.clear(r.ptr, r.ptr + (r.nbytes or 1))
        elif kind is Rebind:
            for _, inputs in self._by_range.overlapping(r.old_ptr, r.old_ptr + (r.old_nbytes or 1)):
                for inp in inputs:
                    inp.rebound = True
        elif kind is Replay:
            return self._replayed(r)
        elif kind is Capture and r.op == "end":
            g = index.graph(r.graph)
            if not g.failed and g.nodes:
                self._captured(g)
        return []

    def _eager(self, r: Launch) -> None:
        written = [a for a in r.args if "w" in a.access and a.nbytes]   # ``Arg.writes``, inlined: every eager launch
        by_range = self._by_range
        for a in written:
            lo, hi = a.ptr, a.ptr + a.nbytes
            for _, inputs in by_range.overlapping(lo, hi) if by_range else ():
                for inp in inputs:
                    inp.refreshed = True
            if r.site:
                self._writers.put(lo, hi, r)
        for inp in self._by_writer.get((r.site, r.kernel), ()) if self._by_writer else ():
            lo, hi = inp.span
            for a in written:
                if a.nbytes == inp.nbytes and not (a.ptr < hi and lo < a.ptr + a.nbytes):
                    inp.elsewhere = (r, a)

    def _captured(self, g: Graph) -> None:
        kept = Intervals((w.span, None) for w in graph_writes(g))     # state the graph updates itself
        tied: list[_Input] = []
        spans: set[tuple[DataPtr, DataPtr]] = set()   # ``tied``'s: a range read twice is one input
        for node, a in graph_reads_before_writes(g):
            lo, hi = a.ptr, a.ptr + a.nbytes
            if (lo, hi) in spans or kept.touches(lo, hi):
                continue
            writers = [w for _, w in self._writers.overlapping(lo, hi)]
            if writers:
                writer = max(writers, key=lambda w: w.step)
                wrote = next(b for b in writer.args if b.writes and b.nbytes and b.ptr < hi and lo < b.ptr + b.nbytes)
                tied.append(_Input(g.id, node, a, writer, wrote.nbytes))
                spans.add((lo, hi))
        self._of_graph[g.id] = tied
        for inp in tied:
            self._by_writer.setdefault((inp.writer.site, inp.writer.kernel), []).append(inp)
            known = self._by_range.get(*inp.span)
            if known is None:
                self._by_range.put(*inp.span, [inp])
            else:
                known.append(inp)

    def _replayed(self, replay: Replay) -> list[Finding]:
        found = []
        for inp in self._of_graph.get(replay.graph, ()):
            key = (inp.graph, inp.writer.site, inp.writer.kernel)
            if inp.elsewhere is not None and not inp.refreshed and not inp.rebound and key not in self._reported:
                self._reported.add(key)
                found.append(_finding(inp, replay))
            inp.refreshed, inp.elsewhere = False, None
        return found


def _finding(inp: _Input, replay: Replay) -> Finding:
    writer, (fresh, arg) = inp.writer, inp.elsewhere
    lo, _ = inp.span
    return INPUT_FRESH_BETWEEN_GRAPHS.finding(
        replay.step, inp.arg.label, (lo, arg.ptr),
        f"Graph {inp.graph}'s node {inp.node.label!r} (step {inp.node.step}) reads {inp.arg.label!r} at "
        f"[{hex(lo)}, +{inp.arg.nbytes} bytes), which the eager launch {writer.label!r} ({writer.kernel}, "
        f"issued at {writer.site}) wrote at step {writer.step}, before the capture. After the capture the same "
        f"launch wrote its result to a new tensor {arg.label!r} at [{hex(arg.ptr)}, +{arg.nbytes} bytes) "
        f"(step {fresh.step}) and nothing wrote the range the graph reads: graph {inp.graph} replayed at step "
        f"{replay.step} (replay #{replay.index} on {replay.stream}) on the capture's tensor. The op between the "
        f"graphs made the graph a new input every step, and the graph never sees it.",
        f"Have {writer.label!r} write into the tensor the graph captured (out=static_input, or "
        f"static_input.copy_(result) before each replay), or capture the op into one of the graphs: a graph "
        f"reads the addresses it was captured with.")
