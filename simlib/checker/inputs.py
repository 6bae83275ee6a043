"""A whole program's static inputs, named from what it does: nobody declares them.

A program refreshes a graph's inputs by writing into them between replays
(``static.copy_(new)``); weights and constants it leaves alone. So a graph's
static inputs are what it reads, not written by it first, that an eager launch
wrote between the capture's end and its first replay.
"""

from __future__ import annotations

from dataclasses import replace

from ..trace import Arg, Capture, DataPtr, GraphId, Launch, Record, Replay
from .index import Graph
from .intervals import Intervals


def graph_reads(g: Graph) -> list[tuple[DataPtr, DataPtr]]:
    """The ranges ``g`` reads before any of its nodes writes them: where its inputs can be."""
    return [(a.ptr, a.ptr + a.nbytes) for _, a in graph_reads_before_writes(g)]


def with_inputs(records: list[Record], graph: GraphId) -> list[Record]:
    """``records`` with ``graph``'s static inputs named on its ``Capture`` records, where its
    capture named none: what the graph reads, not written by it first, that an eager launch
    wrote between the capture's end and its latest replay in ``records``."""
    bracket = [i for i, r in enumerate(records) if type(r) is Capture and r.graph == graph]
    replays = [i for i, r in enumerate(records) if type(r) is Replay and r.graph == graph]
    if len(bracket) != 2 or records[bracket[0]].inputs:
        return records
    last = replays[-1] if replays and replays[-1] > bracket[1] else len(records)
    nodes = [r for r in records[bracket[0]:bracket[1]] if type(r) is Launch and r.graph == graph]
    refreshed: Intervals[None] = Intervals(((a.ptr, a.ptr + a.nbytes), None) for r in records[bracket[1]:last]
                                           if type(r) is Launch and r.graph is None
                                           for a in r.args if a.writes and a.nbytes)
    inputs = tuple(dict.fromkeys(a.ptr for _, a in reads_before_writes(nodes)
                                 if refreshed.touches(a.ptr, a.ptr + a.nbytes)))
    if not inputs:
        return records
    out = list(records)
    for i in bracket:
        out[i] = replace(records[i], inputs=inputs)
    return out


def graph_reads_before_writes(g: Graph) -> list[tuple[Launch, Arg]]:
    """``reads_before_writes`` of ``g``'s nodes, worked out once when its capture has ended (rules 7, 11
    and 18 all read them)."""
    return g.once("reads", lambda: reads_before_writes(g.nodes))


def reads_before_writes(nodes: list[Launch]) -> list[tuple[Launch, Arg]]:
    """Each read of ``nodes`` (of at least one byte, at a pointer other than 0) that no earlier
    node wrote: what the graph reads from outside itself."""
    written: Intervals[None] = Intervals()
    reads = []
    for node in nodes:
        for a in node.args:
            if not a.nbytes:
                continue
            lo, hi = a.ptr, a.ptr + a.nbytes
            if a.reads and a.ptr and not written.touches(lo, hi):
                reads.append((node, a))
            if a.writes:
                written.put(lo, hi, None)
    return reads
