"""Rule 11, ``graphs_clobber``: a replay of one graph overwrote a live result of another.

Followed in record order (``GraphsClobber.add``): each replay of graph A leaves
A's results where its nodes wrote; a replay of graph B that writes over one of
them clobbers it; a read of that result afterwards (by an eager launch, or by
a replay of another graph, A's own next replay included when it reads the
result back as state), before A writes it again, reads B's bytes. Only memory
allocated during a capture (graph pools, shared with ``pool=``) is followed: a
buffer allocated before any capture and updated by every graph (a KV cache)
is shared by design, and its ranges cannot tell one graph's slots from
another's.

What is live decides. A's *intermediates*, whose blocks A's capture allocated
and freed again before it ended, are dead once a replay is over: the pool
hands them to the next graph by design, and nobody reads them. A's results are
what its capture left allocated (its outputs, a cache it created), and what it
writes outside memory its own capture allocated.

Only B's blind writes clobber (``"w"``, by a node that reads nothing there): an
update in place (``"rw"``, or a node that reads the range it writes, a cache
append) keeps what is there. A read counts as a read of A's result when it
reads A's tensor or a view of it (a weak reference included), or else A's
exact range where none of B's writes there had that range (a read of B's own
output, laid where A's was, is B's result and fine); A reading its own state
back always counts.

A replay is a state change on fixed addresses (a graph writes the same ranges
every time), so the work of one is known at the capture: a graph whose writes
and whose results overlap no other graph's (``_Captured.alone``), once its
results are in place and while nothing is clobbered, changes nothing by
replaying, and costs nothing. And a replay of graph B from a state (the results
and clobbers, as they are) it was replayed from before leads to the state it
led to then: a server replays a few graphs in a few orders, so each such step
is walked once and remembered (``MEMO_KEPT`` of them). A clobber names the
replay that made it last (``_made_at``), not one kept in the state.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from ..trace import Arg, Capture, DataPtr, GraphId, Launch, Record, Replay
from .findings import Finding
from .index import Graph, Index
from .inputs import graph_reads_before_writes
from .intervals import Intervals
from .results import Write, graph_writes
from .rules import GRAPHS_CLOBBER

Access = tuple[Launch, Arg]
MEMO_KEPT = 4096   # replays remembered: (state, graph) -> the state it led to


@dataclass(slots=True)
class _Result:
    graph: GraphId
    write: Access


@dataclass(slots=True)
class _Clobber:
    victim: GraphId
    result: Access           # the victim's write that the clobber overwrote
    graph: GraphId
    key: tuple               # (span, victim, clobbering graph, result): the same clobber in any state
    writes: list[Access] = field(default_factory=list)   # the clobbering graph's writes there, first first


@dataclass
class _Captured:
    """A graph's writes into graph-pool memory, its reads of it, and what a replay does to the
    results, worked out once at its capture (``_replayed`` then touches only what other graphs'
    results or clobbers share with it)."""

    writes: list[Write]        # into graph-pool memory, in capture order
    reads: list[Access]        # of graph-pool memory, before the graph writes it
    footprint: list[tuple[DataPtr, DataPtr]] = field(default_factory=list)   # the writes' spans, merged
    cleared: list[tuple[DataPtr, DataPtr]] = field(default_factory=list)     # the dead writes' spans, merged
    live: list[tuple[DataPtr, DataPtr]] = field(default_factory=list)        # the live writes' spans, merged
    left: list[tuple[tuple[DataPtr, DataPtr], Access]] = field(default_factory=list)   # results a replay leaves
    shared: list[int] = field(default_factory=list)   # the writes a replay walks (``GraphsClobber._neighbours``)
    alone: bool = False   # it walks none, and no other graph writes where it writes live
    _order: list[int] = field(default_factory=list)    # the writes by address (``touching``)
    _lows: list[DataPtr] = field(default_factory=list)
    _widest: int = 0

    def __post_init__(self) -> None:
        final: Intervals[Access] = Intervals()   # a replay's writes in order, on an empty map
        spans = [w.span for w in self.writes]
        self._order = sorted(range(len(spans)), key=spans.__getitem__)
        self._lows = [spans[i][0] for i in self._order]
        self._widest = max((hi - lo for lo, hi in spans), default=0)
        for w, span in zip(self.writes, spans):
            if w.live:
                final.put(*span, (w.node, w.arg))
            else:
                final.clear(*span)
        self.footprint = _merged(spans)
        self.cleared = _merged(span for w, span in zip(self.writes, spans) if not w.live)
        self.live = _merged(span for w, span in zip(self.writes, spans) if w.live)
        self.left = list(final.items())

    def touching(self, spans: list[tuple[DataPtr, DataPtr]]) -> set[int]:
        """The writes (by index) that overlap one of ``spans``, found by address: a capture asks this
        of every graph before it, so the cost is what overlaps, not every graph's every write."""
        found, writes, lows, order = set(), self.writes, self._lows, self._order
        for lo, hi in spans:
            if not _in(self.footprint, (lo, hi)):
                continue
            for k in range(bisect.bisect_right(lows, lo - self._widest), bisect.bisect_left(lows, hi)):
                a = writes[order[k]].arg
                if a.ptr + a.nbytes > lo:
                    found.add(order[k])
        return found


def _merged(spans) -> list[tuple[DataPtr, DataPtr]]:
    """``spans`` as disjoint ranges, in order (touching ones joined)."""
    out: list[list[DataPtr]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


class GraphsClobber:
    """Rule 11 over records in order; ``watched`` says which memory an eager read of matters."""

    READS = (Launch, Replay, Capture)   # the records ``add`` needs: the checker feeds it no others

    def __init__(self) -> None:
        self._pool: Intervals[None] = Intervals()       # blocks allocated during captures
        self._graphs: dict[GraphId, _Captured] = {}
        self._in_place: set[GraphId] = set()            # graphs whose results a replay has put
        self._results: Intervals[_Result] = Intervals()
        self._clobbered: Intervals[_Clobber] = Intervals()
        self._reported: set[tuple[GraphId, GraphId]] = set()
        self._live: list[tuple[DataPtr, DataPtr]] = []       # the graphs' live writes, merged
        self._clobbers: list[tuple[DataPtr, DataPtr]] = []   # where a clobber can lie, merged
        self._made_at: dict[tuple, Replay] = {}   # a clobber's key -> the replay that made it last
        # The state (``_results``, ``_clobbered``) by number, one pair of maps per state's contents, and
        # what a replay from a state led to: the state's number, its maps and the clobbers it made.
        self._state: int | None = 0     # None: changed by an eager write, not known by its contents
        self._numbers = itertools.count(1)
        self._owned = True   # no remembered state holds the maps now: they may change in place
        self._states: dict[tuple, tuple[int, Intervals[_Result], Intervals[_Clobber]]] = {}
        self._memo: dict[tuple[int, GraphId], tuple[int, Intervals[_Result], Intervals[_Clobber], list[tuple]]] = {}

    def watched(self) -> list[tuple[DataPtr, DataPtr]]:
        """Graph-pool memory the graphs write: where an eager read may read a clobbered result."""
        return [w.span for g in self._graphs.values() for w in g.writes if w.live]

    def add(self, r: Record, index: Index) -> list[Finding]:
        kind = type(r)
        if kind is Replay:
            return self._replayed(r, index) if r.graph in self._graphs else []
        if kind is Launch:
            return self._eager(r, index) if r.graph is None and self._clobbered else []
        if kind is Capture and r.op == "end":
            self._captured(index.graph(r.graph))
        return []

    def _captured(self, g: Graph) -> None:
        self._pool.update(((a.ptr, a.ptr + a.nbytes), None) for a in g.allocs if a.nbytes)
        if g.failed or not g.nodes:
            return
        pool = self._pool
        self._graphs[g.id] = _Captured(
            [w for w in graph_writes(g) if pool.touches(*w.span)],
            [(node, a) for node, a in graph_reads_before_writes(g) if pool.touches(a.ptr, a.ptr + a.nbytes)])
        self._neighbours(g.id, self._graphs[g.id])

    def _neighbours(self, gid: GraphId, new: _Captured) -> None:
        """What the capture of graph ``gid`` changes in what each graph's replay must walk
        (``_Captured.shared``) and in which graphs are alone. Results lie only where graphs write
        live, clobbers only under a blind write over another graph's live write (``_clobbers``): the
        writes that can touch either are known from the captures alone, and a capture adds to them."""
        self._memo.clear()   # a replay may walk more now
        theirs, mine = self._live, new.live   # every graph captured before is another
        others = [o for other, o in self._graphs.items() if other != gid]
        spans = [w.span for w in new.writes if w.blind and _in(theirs, w.span)]   # its blind writes on their results
        for o in others:                                                         # theirs on its results
            spans += [o.writes[i].span for i in o.touching(mine) if o.writes[i].blind]
        self._live = _merged([*theirs, *mine])
        self._clobbers = clobbers = _merged([*self._clobbers, *spans])
        new.shared = [i for i, w in enumerate(new.writes) if _in(theirs, w.span) or _in(clobbers, w.span)]
        new.alone = not new.shared
        touched = _merged([*mine, *spans])   # where the others' writes now touch a result or a clobber
        for o in others:
            grown = o.touching(touched)
            if grown and not grown.issubset(o.shared):
                o.shared = sorted(grown.union(o.shared))
            o.alone = o.alone and not o.shared and not any(_in(new.footprint, span) for span in o.live)
            new.alone = new.alone and not any(_in(o.footprint, span) for span in mine)

    def _replayed(self, r: Replay, index: Index) -> list[Finding]:
        """The record-order walk of ``_step`` over the writes that can touch another graph's result or
        a clobber (``_neighbours``), then what every write leaves: the dead writes' spans cleared, the
        graph's results put (``_Captured``). The same state as walking every write, at the cost of
        what the graphs share; a graph alone, once its results are in place, costs nothing."""
        captured, found = self._graphs[r.graph], []
        if captured.alone and not self._clobbered and r.graph in self._in_place:
            return found   # it writes what it wrote last time, where nobody else does
        self._in_place.add(r.graph)
        if self._clobbered:
            for node, a in captured.reads:
                found += self._read(node, a, r.graph, index)
        key = (self._state, r.graph)
        remembered = self._memo.get(key)
        if remembered is not None:   # replayed from this state before: the same state again
            self._state, self._results, self._clobbered, made = remembered
            self._owned = False
            for clobber in made:
                self._made_at[clobber] = r
            return found
        self._own()
        writes, step = captured.writes, self._step
        for i in captured.shared:
            step(writes[i], r)
        results = self._results
        for lo, hi in captured.cleared:
            results.clear(lo, hi)                         # dead intermediates: nobody's result
        for (lo, hi), access in captured.left:
            results.put(lo, hi, _Result(r.graph, access))
        if len(self._memo) >= MEMO_KEPT:   # a server's states are few: these were not
            self._memo.clear()
            self._states.clear()
        made = [c.key for _, c in self._clobbered.items() if self._made_at.get(c.key) is r]
        self._known()
        if key[0] is not None:
            self._memo[key] = (self._state, self._results, self._clobbered, made)
        return found

    def _own(self) -> None:
        """Before a change: maps of this rule's own, not a remembered state's."""
        if not self._owned:
            self._results, self._clobbered, self._owned = self._results.copy(), self._clobbered.copy(), True
        self._state = None

    def _known(self) -> None:
        """The state by its contents: the number and maps of the same contents met before, else new ones."""
        results, clobbered = self._results, self._clobbered
        contents = (tuple((k, v.graph, id(v.write[1])) for k, v in results.items()),
                    tuple((c.key, tuple(id(a) for _, a in c.writes)) for _, c in clobbered.items()))
        known = self._states.get(contents)
        if known is None:
            known = self._states[contents] = (next(self._numbers), results, clobbered)
        self._state, self._results, self._clobbered = known
        self._owned = False

    def _step(self, w: Write, r: Replay) -> None:
        """One write of graph ``r.graph``'s replay, in record order: what it clobbers, and whose result is there after."""
        (lo, hi), node, a = w.span, w.node, w.arg
        for key, c in self._clobbered.overlapping(lo, hi) if self._clobbered else ():
            if c.victim == r.graph:
                self._clobbered.clear(key[0], key[0] + 1)     # the victim wrote its result again
            elif c.graph == r.graph and self._made_at.get(c.key) is r:
                c.writes.append((node, a))                   # the clobbering replay writes there again
        for _, res in self._results.overlapping(lo, hi) if w.blind else ():
            if res.graph != r.graph:
                key = (lo, hi, res.graph, r.graph, id(res.write[1]))
                self._clobbered.put(lo, hi, _Clobber(res.graph, res.write, r.graph, key, [(node, a)]))
                self._made_at[key] = r
        if w.live:
            self._results.put(lo, hi, _Result(r.graph, (node, a)))
        else:
            self._results.clear(lo, hi)

    def _eager(self, r: Launch, index: Index) -> list[Finding]:
        found = []
        for a in r.args:
            if a.reads and a.nbytes:
                found += self._read(r, a, None, index)
        for a in r.args:
            if a.access == "w" and a.nbytes:
                for key, _ in self._clobbered.overlapping(a.ptr, a.ptr + a.nbytes):
                    self._own()
                    self._clobbered.clear(key[0], key[0] + 1)   # overwritten: nobody's result now
        return found

    def _read(self, reader: Launch, arg: Arg, graph: GraphId | None, index: Index) -> list[Finding]:
        found = []
        for _, c in self._clobbered.overlapping(arg.ptr, arg.ptr + arg.nbytes):
            if c.graph == graph or (c.victim, c.graph) in self._reported or (
                    graph != c.victim and not _reads_result(arg, c, index)):
                continue
            self._reported.add((c.victim, c.graph))
            found.append(_finding(c, self._made_at[c.key], reader, arg, graph))
        return found


def _in(spans: list[tuple[DataPtr, DataPtr]], span: tuple[DataPtr, DataPtr]) -> bool:
    """Does ``span`` overlap one of ``spans`` (disjoint, in order)?"""
    lo, hi = span
    i = bisect.bisect_left(spans, (hi,)) - 1
    return i >= 0 and spans[i][1] > lo


def _reads_result(arg: Arg, c: _Clobber, index: Index) -> bool:
    """Does ``arg`` read the victim's result: its tensor (or a view of it, a weak reference
    included), or else its exact range where none of the clobber's writes had it?"""
    mine, theirs = c.result[1].tensor, {a.tensor for _, a in c.writes}
    lineage = index.lineage(arg.tensor)
    if (mine in lineage) != bool(theirs & lineage):
        return mine in lineage
    span, mine_arg = (arg.ptr, arg.nbytes), c.result[1]
    return span == (mine_arg.ptr, mine_arg.nbytes) and all(span != (a.ptr, a.nbytes) for _, a in c.writes)


def _finding(c: _Clobber, replay: Replay, reader: Launch, arg: Arg, graph: GraphId | None) -> Finding:
    (a_node, a_arg), (b_node, b_arg) = c.result, c.writes[0]
    if graph is None:
        by = f"the eager launch {reader.label!r} on {reader.stream} at step {reader.step}"
    elif graph == c.victim:
        by = f"graph {graph}'s next replay (its node {reader.label!r}, reading its own state back)"
    else:
        by = f"graph {graph}'s node {reader.label!r}, on a replay,"
    return GRAPHS_CLOBBER.finding(
        replay.step, a_arg.label, tuple(sorted({a_arg.ptr, b_arg.ptr})),
        f"Graph {c.victim}'s node {a_node.label!r} writes its result {a_arg.label!r} at "
        f"[{hex(a_arg.ptr)}, +{a_arg.nbytes} bytes), and graph {c.graph}'s node {b_node.label!r} writes "
        f"{b_arg.label!r} at [{hex(b_arg.ptr)}, +{b_arg.nbytes} bytes), over it: the replay of graph "
        f"{c.graph} at step {replay.step} (replay #{replay.index} on {replay.stream}) clobbered graph "
        f"{c.victim}'s result, and {by} read {arg.label!r} at [{hex(arg.ptr)}, +{arg.nbytes} bytes) "
        f"afterwards, before graph {c.victim} wrote it again. It got graph {c.graph}'s bytes.",
        _fix(c, a_arg.label, state=graph == c.victim))


def _fix(c: _Clobber, label: str, *, state: bool) -> str:
    if state:        # the victim's own state, read back by its next replay
        return (f"Create {label!r} before capturing any graph, so that it is no graph's pool memory and "
                f"no replay initialises or reuses it, or give each graph its own {label!r}.")
    return (f"Read (or copy out: result.clone()) graph {c.victim}'s {label!r} before replaying graph "
            f"{c.graph}, or give the graphs separate memory: no pool=, or a cache or workspace allocated "
            f"once before capturing and owned by one graph.")
