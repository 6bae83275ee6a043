"""Rule 11, ``graphs_clobber``: a replay of one graph overwrote a live result of another.

Followed in record order: each replay of graph A leaves A's results where its
nodes wrote; a replay of graph B that writes over one of them clobbers it; a
read of that result afterwards (by an eager launch, or by a replay of another
graph, A's own next replay included when it reads the result back as state),
before A writes it again, reads B's bytes. Only memory allocated during a
capture (graph pools, shared with ``pool=``) is followed: a buffer allocated
before any capture and updated by every graph (a KV cache) is shared by
design, and its ranges cannot tell one graph's slots from another's.

Only B's blind writes clobber (``"w"``, by a node that reads nothing there): an
update in place (``"rw"``, or a node that reads the range it writes, a cache
append) keeps what is there. A read counts as a read of A's result when it
reads A's tensor or a view of it (a weak reference included), or else A's
exact range where B wrote a different one (a read of B's own output, laid
where A's was, is B's result and fine); A reading its own state back always
counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..trace import Arg, GraphId, Launch, Replay, Trace
from .findings import ERROR, Finding
from .index import Index
from .intervals import Intervals

Access = tuple[Launch, Arg]


@dataclass(slots=True)
class _Result:
    graph: GraphId
    write: Access


@dataclass(slots=True)
class _Clobber:
    victim: GraphId
    result: Access           # the victim's write that the clobber overwrote
    graph: GraphId
    replay: Replay
    write: Access            # the clobbering node's write


def graphs_clobber(trace: Trace, index: Index) -> Iterator[Finding]:
    if sum(1 for g in index.graphs.values() if not g.failed and g.nodes) < 2:
        return                                  # one graph cannot clobber another
    if len({r.graph for r in trace.of(Replay)}) < 2:
        return                                  # results are left by replays: of two graphs at least
    pool = Intervals(((a.ptr, a.ptr + a.nbytes), a) for g in index.graphs.values() for a in g.allocs if a.nbytes)
    if not pool:
        return
    writes: dict[GraphId, list[tuple[Launch, Arg, bool]]] = {}   # (node, arg, blind)
    reads: dict[GraphId, list[Access]] = {}
    for g in index.graphs.values():
        if g.failed or not g.nodes:
            continue
        written: Intervals[Access] = Intervals()
        writes[g.id], reads[g.id] = [], []
        for node in g.nodes:
            for a in node.args:
                if not a.nbytes:
                    continue
                lo, hi = a.ptr, a.ptr + a.nbytes
                if a.reads and not written.overlapping(lo, hi):
                    reads[g.id].append((node, a))           # reads what the graph did not write first
                if a.writes and pool.overlapping(lo, hi):
                    written.put(lo, hi, (node, a))
                    blind = a.access == "w" and not any(b.reads and b.ptr < hi and lo < b.ptr + b.nbytes
                                                        for b in node.args)
                    writes[g.id].append((node, a, blind))
    results: Intervals[_Result] = Intervals()
    clobbered: Intervals[_Clobber] = Intervals()
    reported: set[tuple[GraphId, GraphId]] = set()
    for r in trace.records:
        kind = type(r)
        if kind is Replay and r.graph in writes:
            for node, a in reads[r.graph]:
                yield from _read(clobbered, reported, node, a, r.graph, index)
            for node, a, blind in writes[r.graph]:
                lo, hi = a.ptr, a.ptr + a.nbytes
                for key, c in clobbered.overlapping(lo, hi):
                    if c.victim == r.graph:
                        clobbered.clear(key[0], key[0] + 1)     # the victim wrote its result again
                for _, res in results.overlapping(lo, hi) if blind else ():
                    if res.graph != r.graph:
                        clobbered.put(lo, hi, _Clobber(res.graph, res.write, r.graph, r, (node, a)))
                results.put(lo, hi, _Result(r.graph, (node, a)))
        elif kind is Launch and r.graph is None and clobbered:
            for a in r.args:
                if a.reads and a.nbytes:
                    yield from _read(clobbered, reported, r, a, None, index)
            for a in r.args:
                if a.access == "w" and a.nbytes:
                    for key, _ in clobbered.overlapping(a.ptr, a.ptr + a.nbytes):
                        clobbered.clear(key[0], key[0] + 1)   # overwritten: nobody's result now


def _read(clobbered: Intervals[_Clobber], reported: set[tuple[GraphId, GraphId]], reader: Launch, arg: Arg,
          graph: GraphId | None, index: Index) -> Iterator[Finding]:
    for _, c in clobbered.overlapping(arg.ptr, arg.ptr + arg.nbytes):
        if c.graph == graph or (c.victim, c.graph) in reported or (
                graph != c.victim and not _reads_result(arg, c, index)):
            continue
        reported.add((c.victim, c.graph))
        yield _finding(c, reader, arg, graph)


def _reads_result(arg: Arg, c: _Clobber, index: Index) -> bool:
    """Does ``arg`` read the victim's result: its tensor (or a view of it, a weak reference
    included), or else its exact range where the clobber's differs?"""
    mine, theirs = c.result[1].tensor, c.write[1].tensor
    lineage = _lineage(arg.tensor, index)
    if (mine in lineage) != (theirs in lineage):
        return mine in lineage
    span, mine_arg, theirs_arg = (arg.ptr, arg.nbytes), c.result[1], c.write[1]
    return span == (mine_arg.ptr, mine_arg.nbytes) and span != (theirs_arg.ptr, theirs_arg.nbytes)


def _lineage(tensor: int, index: Index) -> set[int]:
    """``tensor`` and the bases it is a view of (each once: recorded links may loop)."""
    seen = {tensor}
    view = index.views.get(tensor)
    while view is not None and view.base not in seen:
        seen.add(view.base)
        view = index.views.get(view.base)
    return seen


def _finding(c: _Clobber, reader: Launch, arg: Arg, graph: GraphId | None) -> Finding:
    (a_node, a_arg), (b_node, b_arg) = c.result, c.write
    if graph is None:
        by = f"the eager launch {reader.label!r} on {reader.stream} at step {reader.step}"
    elif graph == c.victim:
        by = f"graph {graph}'s next replay (its node {reader.label!r}, reading its own state back)"
    else:
        by = f"graph {graph}'s node {reader.label!r}, on a replay,"
    return Finding(
        11, "graphs_clobber", ERROR, c.replay.step, a_arg.label, tuple(sorted({a_arg.ptr, b_arg.ptr})),
        f"Graph {c.victim}'s node {a_node.label!r} writes its result {a_arg.label!r} at "
        f"[{hex(a_arg.ptr)}, +{a_arg.nbytes} bytes), and graph {c.graph}'s node {b_node.label!r} writes "
        f"{b_arg.label!r} at [{hex(b_arg.ptr)}, +{b_arg.nbytes} bytes), over it: the replay of graph "
        f"{c.graph} at step {c.replay.step} (replay #{c.replay.index} on {c.replay.stream}) clobbered graph "
        f"{c.victim}'s result, and {by} read {arg.label!r} afterwards, before graph {c.victim} wrote it "
        f"again. It got graph {c.graph}'s bytes.",
        _fix(c, a_arg.label, state=graph == c.victim))


def _fix(c: _Clobber, label: str, *, state: bool) -> str:
    if state:        # the victim's own state, read back by its next replay
        return (f"Create {label!r} before capturing any graph, so that it is no graph's pool memory and "
                f"no replay initialises or reuses it, or give each graph its own {label!r}.")
    return (f"Read (or copy out: result.clone()) graph {c.victim}'s {label!r} before replaying graph "
            f"{c.graph}, or give the graphs separate memory: no pool=, or a cache or workspace allocated "
            f"once before capturing and owned by one graph.")
