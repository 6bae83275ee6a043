"""What a graph's replay writes, and which of it outlives the replay: the graph's results.

A node's write is *blind* when it replaces what is there (``"w"``, by a node that
reads nothing there): a value computed afresh on every replay, unlike an update
in place (``"rw"``, or a node that reads the range it writes: a cache append),
which keeps what is there. A write is *live* unless it lands in a block the
capture allocated and freed again before it ended: such an intermediate is dead
once a replay is over, and the pool hands its block to the next graph by design.
A graph's results are its live writes: what it leaves behind for its reader.
Rule 11 follows them against other graphs' replays, rule 13 against the graph's
own next replay.
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass

from ..trace import Alloc, Arg, DataPtr, Launch
from .index import Graph
from .intervals import Intervals

_LAST = sys.maxsize   # sorts after any step: ``(step, _LAST)`` after every span born at ``step``


@dataclass(slots=True)
class Write:
    """One write of a captured node: whether it replaces what is there, and whether it outlives the replay."""

    node: Launch
    arg: Arg
    blind: bool
    live: bool

    @property
    def span(self) -> tuple[DataPtr, DataPtr]:
        return self.arg.ptr, self.arg.ptr + self.arg.nbytes


def graph_writes(g: Graph) -> list[Write]:
    """Every write of ``g``'s nodes (of at least one byte), in capture order (worked out once, when
    the capture has ended: rules 11, 13 and 18 all read them)."""
    return g.once("writes", lambda: _writes(g))


def _writes(g: Graph) -> list[Write]:
    dead = _intermediates(g)
    found = []
    for node in g.nodes:   # every node of every capture: ``Arg.writes`` and ``reads`` read inline
        args = node.args
        for a in args:
            if "w" not in a.access or not a.nbytes:
                continue
            lo, hi = a.ptr, a.ptr + a.nbytes
            blind = a.access == "w"
            if blind:
                for b in args:
                    if "r" in b.access and b.ptr < hi and lo < b.ptr + b.nbytes:
                        blind = False
                        break
            live = True
            for _, spans in dead.overlapping(lo, hi):
                if _within(spans, node.step):
                    live = False
                    break
            found.append(Write(node, a, blind, live))
    return found


def _within(spans: list[tuple[int, int]], step: int) -> bool:
    """Does ``step`` fall in one of ``spans`` (``[born, died)``, in order, none overlapping: one block's lives)?"""
    i = bisect.bisect_right(spans, (step, _LAST)) - 1
    return i >= 0 and step < spans[i][1]


def _intermediates(g: Graph) -> Intervals[list[tuple[int, int]]]:
    """The blocks ``g``'s capture allocated and freed again, each with the steps it lived between:
    what a node wrote there in that span is an intermediate, dead once a replay is over."""
    opened: dict[DataPtr, Alloc] = {}
    dead: Intervals[list[tuple[int, int]]] = Intervals()
    for r in sorted([*g.allocs, *g.frees], key=lambda r: r.step):
        if type(r) is Alloc:
            opened[r.ptr] = r
        elif (a := opened.pop(r.ptr, None)) is not None:
            key = (a.ptr, a.ptr + (a.nbytes or 1))
            spans = dead.get(*key)
            if spans is None:
                dead.put(*key, spans := [])
            spans.append((a.step, r.step))
    return dead
