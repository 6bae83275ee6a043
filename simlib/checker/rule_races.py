"""Rules 3 and 4, ``cross_stream_race`` and ``reuse_after_free``: unordered overlapping
accesses of one graph, at least one a write; rule 4 when a free during capture lies between."""

from __future__ import annotations

import bisect
import itertools
from typing import Iterator

from ..trace import Arg, DataPtr, Free, Launch
from .findings import Finding
from .index import Graph
from .rules import CROSS_STREAM_RACE, REUSE_AFTER_FREE
from .wording import byte_range, verb


def races(g: Graph) -> Iterator[Finding]:
    """Unordered overlapping accesses of one graph: rule 4 across a free, else rule 3."""
    nodes = g.nodes
    ancestors, chained = _ancestors(nodes)
    by_range: dict[tuple[DataPtr, DataPtr], _Accesses] = {}
    for i, node in enumerate(nodes):
        stream = node.stream if chained else None
        bit = 1 << i
        for k, arg in enumerate(node.args):
            if arg.nbytes and arg.ptr:
                key = (arg.ptr, arg.ptr + arg.nbytes)
                accesses = by_range.get(key)
                if accesses is None:
                    accesses = by_range[key] = _Accesses(stream)
                elif stream != accesses.stream:
                    accesses.stream = None
                writes = "w" in arg.access   # ``Arg.writes`` and ``_Accesses.add``, inlined: every argument of every node
                accesses.items.append((i, k, writes))
                if writes:
                    accesses.writers |= bit
                    accesses.arg[i] = k       # name the write when a node both reads and writes
                else:
                    accesses.readers |= bit
                    accesses.arg.setdefault(i, k)
    free_steps = [f.step for f in g.frees]
    racing: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    after_free: dict[int, dict[tuple[int, int], tuple[int, int, int, int]]] = {}
    active: list[tuple[DataPtr, DataPtr]] = []
    for here in sorted(by_range):
        active = [r for r in active if r[1] > here[0]] + [here]
        for there in active:                       # every range overlapping this one, itself too
            mine, theirs = by_range[here], by_range[there]
            if not (mine.writers or theirs.writers):
                continue                           # reads only: nothing to conflict
            if mine.stream is not None and mine.stream == theirs.stream:
                continue                           # all on one stream, whose order the graph keeps
            lo, hi = max(here[0], there[0]), min(here[1], there[1])
            pairs = _unordered(mine, theirs, ancestors)
            if there != here:
                pairs = itertools.chain(pairs, _unordered(theirs, mine, ancestors))
            for pair in pairs:
                i, j = pair[0], pair[2]
                free = _free_between(g.frees, free_steps, nodes[i].step, nodes[j].step, lo, hi)
                found = racing if free is None else after_free.setdefault(free, {})
                found[i, j] = min(found.get((i, j), pair), pair)
    for i, ka, j, kb in racing.values():
        yield _race(g, nodes[i], nodes[i].args[ka], nodes[j], nodes[j].args[kb])
    for free, pairs in after_free.items():
        i, ka, j, kb = min(pairs.values())
        yield _reuse(g, g.frees[free], nodes[i], nodes[i].args[ka], nodes[j], nodes[j].args[kb],
                     len(pairs))


class _Accesses:
    """The nodes touching one address range: as bitsets (bit = node position) and a list.
    A plain class with slots: a capture makes one per range it touches, hundreds per capture."""

    __slots__ = ("items", "writers", "readers", "arg", "stream")

    def __init__(self, stream: str | None) -> None:
        self.items: list[tuple[int, int, bool]] = []   # (node, arg index, writes)
        self.writers = 0
        self.readers = 0
        self.arg: dict[int, int] = {}                   # node -> an arg index
        self.stream = stream                            # the one stream every access is on, if one


def _unordered(later: _Accesses, earlier: _Accesses,
               ancestors: list[int]) -> Iterator[tuple[int, int, int, int]]:
    """(i, arg, j, arg) for each access j of ``later`` and each earlier node i of ``earlier``
    that conflicts with it (one of them writes) and has no path to it."""
    for j, kb, writes in later.items:
        conflicting = earlier.writers | (earlier.readers if writes else 0)
        partners = conflicting & ((1 << j) - 1) & ~ancestors[j]
        while partners:
            low = partners & -partners
            i = low.bit_length() - 1
            yield i, earlier.arg[i], j, kb
            partners ^= low


def _ancestors(nodes: list[Launch]) -> tuple[list[int], bool]:
    """Per node, the bitset (a Python int, bit = position) of nodes with a path to it; and
    whether each node follows the one before it on its stream (then accesses all on one
    stream are ordered, as a stream orders its work).

    A node can only wait for work already issued, so one pass in record order
    is a topological order; a dep naming no earlier node adds no path.
    """
    position: dict[int, int] = {}
    ancestors: list[int] = []
    last: dict[str, int] = {}   # stream -> its latest node's position
    chained = True
    for node in nodes:
        bits = 0
        for dep in node.deps:
            p = position.get(dep)
            if p is not None:
                bits |= ancestors[p] | (1 << p)
        before = last.get(node.stream)
        if before is not None and not bits >> before & 1:
            chained = False
        last[node.stream] = position[node.id] = len(ancestors)
        ancestors.append(bits)
    return ancestors, chained


def _free_between(frees: list[Free], steps: list[int], after: int, before: int,
                  lo: DataPtr, hi: DataPtr) -> int | None:
    """Index of a free between two steps whose block covers part of [lo, hi)."""
    for f in range(bisect.bisect_right(steps, after), bisect.bisect_left(steps, before)):
        block = frees[f]
        if block.ptr < hi and lo < block.ptr + block.nbytes:
            return f
    return None


def _race(g: Graph, a: Launch, arg_a: Arg, b: Launch, arg_b: Arg) -> Finding:
    label = arg_a.label if arg_a.writes else arg_b.label
    return CROSS_STREAM_RACE.finding(
        b.step, label, tuple(sorted({arg_a.ptr, arg_b.ptr})),
        f"{a.label!r} on stream {a.stream} {verb(arg_a)} {arg_a.label!r} at {byte_range(arg_a)} and "
        f"{b.label!r} on stream {b.stream} {verb(arg_b)} {arg_b.label!r} at {byte_range(arg_b)}, "
        f"overlapping addresses, and no path in graph {g.id} orders the two: on replay they may "
        f"run in either order or at once, so the result depends on timing.",
        f"Order them: after issuing {a.label!r}, make {b.stream} wait for {a.stream} "
        f"({b.stream}.wait_stream({a.stream}) or an event) before {b.label!r}, or give each "
        f"stream its own buffer.")


def _reuse(g: Graph, free: Free, a: Launch, arg_a: Arg, b: Launch, arg_b: Arg, pairs: int) -> Finding:
    more = f" ({pairs} such pairs of launches)" if pairs > 1 else ""
    return REUSE_AFTER_FREE.finding(
        free.step, free.label, (free.ptr,),
        f"{free.label!r} ({free.nbytes} bytes at {hex(free.ptr)}) was freed at step {free.step} "
        f"while graph {g.id} was being captured, and the graph's pool {free.pool} handed the "
        f"block out again: at step {b.step}, {b.label!r} on stream {b.stream} {verb(arg_b)} "
        f"{arg_b.label!r} in it. {a.label!r} on stream {a.stream} (step {a.step}) "
        f"{verb(arg_a)} the old {arg_a.label!r} there and has no path to {b.label!r} in the "
        f"graph{more}. On replay they may run in either order, so {a.label!r} can meet the "
        f"bytes of {arg_b.label!r}. Issuing {a.label!r} first on the host does not order "
        f"the device.",
        f"Keep {free.label!r} alive until stream {a.stream} has joined back (dispose it after "
        f"the join, or tensor.record_stream({a.stream})), or skip the dispose while capturing.")
