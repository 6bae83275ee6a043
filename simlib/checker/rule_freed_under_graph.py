"""Rule 10, ``freed_under_graph``: a block a graph uses, outside its pool, freed while the graph lives."""

from __future__ import annotations

import bisect
from typing import Iterator

from ..memory import graph_pool
from ..trace import Alloc, Free, Launch, Replay, Trace
from .findings import ERROR, Finding, plural
from .index import Graph, Index
from .intervals import Intervals


def capture_pool(g: Graph) -> str:
    """The pool ``g``'s capture allocated from: its own, or the graph's it shared."""
    return (g.begin.pool if g.begin is not None else "") or graph_pool(g.id)


def freed_under_graphs(trace: Trace, index: Index) -> Iterator[Finding]:
    """Frees, during a capture or before a later replay, of blocks outside the graph's pool that
    its nodes read or write. A block allocated during a capture belongs to a graph pool (whatever
    its pool is called), so it is not one. Every block counts, pointer 0 and small addresses
    included."""
    frees = [r for r in trace.records if type(r) is Free]
    allocs = [r for r in trace.records if type(r) is Alloc]
    in_capture = {id(a) for g in index.graphs.values() for a in g.allocs}
    last_alloc: dict[int, Alloc] = {}        # per free: the allocation of its block (the last before it)
    block: dict[int, Alloc] = {}
    for r in trace.records:
        if type(r) is Alloc:
            block[r.ptr] = r
        elif type(r) is Free and r.ptr in block:
            last_alloc[id(r)] = block[r.ptr]
    replays: dict[int, list[Replay]] = {}
    for r in trace.of(Replay):
        replays.setdefault(r.graph, []).append(r)
    for g in index.graphs.values():
        if g.failed or g.begin is None or g.end is None or not g.nodes:
            continue
        pool = capture_pool(g)
        later = replays.get(g.id, [])
        steps = [r.step for r in later]
        candidates = []   # (free, during the capture, the replays after it)
        for free in frees:
            if free.step <= g.begin.step or free.pool == pool:
                continue
            alloc = last_alloc.get(id(free))
            if alloc is not None and id(alloc) in in_capture:
                continue                        # a block of a graph pool: not outside every graph's memory
            during = free.step < g.end.step
            after = later[bisect.bisect_right(steps, free.step):]
            if during or after:
                candidates.append((free, during, after))
        if not candidates:
            continue
        used = Intervals(((a.ptr, a.ptr + a.nbytes), (node, a)) for node in g.nodes for a in node.args if a.nbytes)
        reported: set[int] = set()
        for free, during, after in candidates:
            if free.ptr in reported:
                continue
            users = used.overlapping(free.ptr, free.ptr + max(free.nbytes, 1))
            if users:
                reported.add(free.ptr)
                yield _finding(g, free, users[0][1], during, after, _handed_out(allocs, free, after))


def _handed_out(allocs: list[Alloc], free: Free, after: list[Replay]) -> Alloc | None:
    """The first allocation of the freed block's address after the free (before the first replay after it)."""
    until = after[0].step if after else float("inf")
    return next((a for a in allocs if free.step < a.step < until and a.ptr == free.ptr), None)


def _finding(g: Graph, free: Free, user: tuple[Launch, object], during: bool, after: list[Replay],
             again: Alloc | None) -> Finding:
    node, arg = user
    when = (f"while graph {g.id} was being captured" if during
            else f"after graph {g.id} was captured (step {g.end.step if g.end else '?'})")
    access = {"r": "reads", "w": "writes"}.get(getattr(arg, "access", ""), "reads and writes")
    handed = (f" The allocator handed it out again to {again.label!r} at step {again.step}."
              if again is not None else "")
    if after:
        first = after[0]
        replayed = (f"{plural(len(after), 'replay')} of graph {g.id} follow (the first, #{first.index}, "
                    f"at step {first.step}) and use it")
    else:
        replayed = f"every replay of graph {g.id} will use it"
    return Finding(
        10, "freed_under_graph", ERROR, free.step, free.label, (free.ptr,),
        f"{free.label!r} ({free.nbytes} bytes at {hex(free.ptr)}, pool {free.pool}) was freed at step "
        f"{free.step} on stream {free.stream} {when}, but graph {g.id}'s node {node.label!r} on "
        f"{node.stream} (step {node.step}) {access} it. The block lies outside the graph's pool "
        f"(it was allocated before the capture), so once freed the allocator may hand it to any "
        f"tensor, and {replayed}: they read or overwrite whatever lives there then.{handed}",
        f"Keep {free.label!r} alive for as long as graph {g.id} may replay (hold it where the graph "
        f"is held), size it once, before capturing, for the largest case instead of resizing or "
        f"replacing it, or capture the graph again after replacing it.")
