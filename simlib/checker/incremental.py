"""The checker fed as a program runs: each check costs what happened since the last one.

``IncrementalChecker.feed`` takes the records made since the last call and
returns what they reveal. Each rule says what it needs, and is fed just that:

* the *capture rules* (0 to 4, 6, 16 and 17) need one capture's records: they
  run once, when its ``Capture`` end arrives;
* the *stream rules* follow state per graph as records come, each fed only the
  record types it declares (``READS``; of launches, the eager ones: a graph's
  nodes come with its ``Capture`` end, in ``Index.graph``): rule 10 (the blocks a graph uses, frees
  waiting for its next replay), rule 11 (the graphs' live results, clobbers
  waiting for a read), rule 13 (the views a program keeps of a graph's results,
  by the replay they followed), rule 14 (tensors rebound under a graph, waiting
  for its next replay), rule 18 (what wrote a graph's inputs before its capture,
  and where that launch writes now) and rule 5 (declared inputs);
* with ``whole_program=True`` (a whole program's records, where nobody
  brackets the calls or names the inputs), rules 8, 9 and 15 run at each
  capture's end on the eager calls since the last capture (``calls.with_calls``
  infers them from the capture's first launch), and rule 7 at each graph's first
  replay, with the static inputs named by what the program refreshed since the
  capture (``inputs.with_inputs``).

State is per graph and per live range, never the history: records are read
once. ``check`` (a whole trace at once) feeds everything, then runs rules 7 to 9
and 15 over the whole trace.

Where a rebind (rule 14) dropped a tensor's last reference, its free is not
reported again by rule 10 (``rule_freed_under_graph`` says how it yields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..trace import Capture, DataPtr, Free, GraphId, Launch, Record, Replay, Trace
from .calls import CallRecord, calls_of, with_calls
from .findings import Finding
from .index import Graph, Index, index_trace
from .inputs import graph_reads, with_inputs
from .intervals import Intervals
from .results import graph_writes
from .rule_capture_failed import capture_failed
from .rule_empty_argument import emptied_tensors, empty_arguments
from .rule_extent import short_extents
from .rule_freed_under_graph import FreedUnderGraph
from .rule_frozen_host_value import frozen_host_values
from .rule_frozen_state import frozen_state
from .rule_graphs_clobber import GraphsClobber
from .rule_host_mutation import host_mutations
from .rule_host_state_branch import host_state_branches
from .rule_input_fresh_between_graphs import FreshBetweenGraphs
from .rule_input_rebuilt import rebuilt_inputs
from .rule_output_overwritten import OutputOverwritten
from .rule_races import races
from .rule_stale_input import StaleInputs
from .rule_unregistered_generator import unregistered_generators
from .rule_view_frozen import frozen_views
from .rule_weights_rebound import WeightsRebound
from .rules import FROZEN_STATE

REFRESHES_KEPT = 1_000   # per graph awaiting its first replay: its inputs are named from the first few
WINDOW = 60_000   # whole program: eager records kept for the next capture's checks (then the newest half)


class IncrementalChecker:
    """The checker's state over one program, fed its records in order.

    ``whole_program``: the records are a whole program's (see the module doc);
    ``window`` bounds what is kept for the next capture's calls and warm-up.
    """

    def __init__(self, *, whole_program: bool = False, window: int = WINDOW) -> None:
        self.index = Index(bounded=whole_program)
        self.whole_program = whole_program
        self.window = window
        self._freed = FreedUnderGraph()
        self._clobber = GraphsClobber()
        self._stale = StaleInputs()
        self._overwritten = OutputOverwritten()
        self._rules_of: dict[type, tuple] = {}   # record type -> the stream rules that read it (their READS)
        self._fresh_between = FreshBetweenGraphs()
        for rule in (self._freed, self._clobber, self._stale, self._overwritten, WeightsRebound(),
                     self._fresh_between):
            for kind in rule.READS:
                self._rules_of[kind] = (*self._rules_of.get(kind, ()), rule.add)
        self._checked: set[GraphId] = set()
        self._since_capture: list[Record] = []              # whole program: since the last capture ended
        self._awaiting: dict[GraphId, _Awaiting] = {}       # graphs not replayed yet
        self._reads: Intervals[list[GraphId]] = Intervals()  # what they read, where their inputs can be
        self.watch_changes = 0   # counts changes of what ``watched_reads`` and ``watched_frees`` say

    def feed(self, records: Iterable[Record]) -> list[Finding]:
        """What ``records`` (the next ones, in order) reveal, each finding once."""
        found: list[Finding] = []
        index, whole, rules_of = self.index, self.whole_program, self._rules_of
        for r in records:
            r = index.add(r)
            kind = type(r)
            if whole:   # kept for the next capture's checks (inline: it runs for every record)
                since = self._since_capture
                since.append(r)
                if len(since) > self.window:
                    del since[:len(since) - self.window // 2]
                if self._awaiting and (kind is Free or (kind is Launch and r.graph is None)):
                    self._refreshed(r, kind)
            if kind is not Launch or r.graph is None:   # a graph's nodes reach the rules with its capture's end
                for rule in rules_of.get(kind, ()):
                    out = rule(r, index)
                    if out:
                        found += out
            if kind is Capture and r.op == "end":
                found += self._captured(index.graph(r.graph))
            elif kind is Replay and r.graph in self._awaiting:
                found += self._first_replay(r.graph)
        if whole:
            index.eager.clear()   # rule 7 reads the warm-ups kept per graph instead
        return found

    def finish(self) -> list[Finding]:
        """The program ended: graphs whose capture never ended, frees no replay followed, the
        inputs found stale, and rule 7 for graphs never replayed."""
        found: list[Finding] = []
        for g in list(self.index.graphs.values()):
            if g.id not in self._checked:
                found += self._captured(g)
        for gid in list(self._awaiting):
            found += self._first_replay(gid)
        return found + self._freed.finish() + self._stale.finish()

    def forget_eager(self) -> None:
        """Drop the eager records kept for the next capture's warm-up (a server that serves records
        none worth keeping: its next capture is checked without them)."""
        if self.index.capturing is None:
            self._since_capture.clear()

    def kept(self) -> int:
        """How many records the checker holds (the next capture's warm-up, graphs' awaiting their
        first replay): what a long run's memory depends on, besides the state per graph."""
        return len(self._since_capture) + sum(len(a.window) + len(a.refreshed) for a in self._awaiting.values())

    def watched_reads(self) -> list[tuple[DataPtr, DataPtr]]:
        """Memory an eager launch's access to matters: graphs' live results (rules 11 and 13), and what
        graphs not yet replayed read (their inputs are named by what the program writes there)."""
        return self._clobber.watched() + self._overwritten.watched() + [span for span, _ in self._reads.items()]

    def results_of(self, gid: GraphId) -> list[tuple[DataPtr, DataPtr]]:
        """Where graph ``gid``'s replay leaves what it writes live (its outputs, state it keeps):
        right after its replay, what an eager read finds there is that replay's."""
        g = self.index.graphs.get(gid)
        if g is None or g.failed:
            return []
        return [w.span for w in graph_writes(g) if w.live]

    def ties_writers(self, kernel: str) -> bool:
        """Does a graph read an input that an eager launch of ``kernel`` wrote before its capture
        (rule 18 follows that launch's later calls)?"""
        return self._fresh_between.ties(kernel)

    def watched_frees(self) -> list[tuple[DataPtr, DataPtr]]:
        """Memory a free of matters: the blocks graphs use outside their pools (rule 10), and what graphs
        not yet replayed read (rule 7: a write there after a free refreshes no input)."""
        return self._freed.watched() + [span for span, _ in self._reads.items()]

    def _captured(self, g: Graph) -> list[Finding]:
        self._checked.add(g.id)
        self.watch_changes += 1
        found = _capture_rules(g, self.index)
        if self.whole_program and g.end is not None:
            window, self._since_capture = self._since_capture, []
            if not g.failed:
                found += call_rules(calls_of(Trace(records=with_calls(window, g.id))), self.index)
                self._awaiting[g.id] = _Awaiting(window)
                for lo, hi in graph_reads(g):
                    readers = self._reads.get(lo, hi)
                    if readers is None:
                        self._reads.put(lo, hi, [g.id])
                    elif g.id not in readers:   # one graph reading a range twice is one reader
                        readers.append(g.id)
        return found

    def _first_replay(self, gid: GraphId) -> list[Finding]:
        """Rule 7 for graph ``gid``: its warm-up and capture, then the eager launches that wrote
        into what it reads (its inputs, named by them); nothing to check where none did."""
        awaiting = self._awaiting.pop(gid)
        self.watch_changes += 1
        self._reads = Intervals((span, rest) for span, readers in self._reads.items()
                                if (rest := [g for g in readers if g != gid]))
        if not awaiting.refreshed:   # no eager launch wrote what it reads since: no input to name
            return []
        records = [*awaiting.window, *awaiting.refreshed]
        named = with_inputs(records, gid)
        if named is records:
            return []
        return [f for f in frozen_state(index_trace(Trace(records=named))) if f.rule == FROZEN_STATE.number]

    def _refreshed(self, r: Record, kind: type) -> None:
        """Whole program, a graph awaiting its first replay: what a free or an eager launch changes in
        what rule 7's first-replay check reads (the rest of what ``feed`` keeps for it)."""
        if kind is Free and r.nbytes:
            self._reads.clear(r.ptr, r.ptr + r.nbytes)   # its input is gone: a write there later refreshes nothing
        elif kind is Launch:
            for a in r.args:
                if a.writes and a.nbytes:
                    for _, readers in self._reads.overlapping(a.ptr, a.ptr + a.nbytes):
                        for gid in readers:
                            refreshed = self._awaiting[gid].refreshed
                            if len(refreshed) < REFRESHES_KEPT and (not refreshed or refreshed[-1] is not r):
                                refreshed.append(r)


@dataclass
class _Awaiting:
    """A graph not replayed yet: its warm-up and capture, and the eager launches since that wrote
    into what it reads (they name its static inputs at its first replay)."""

    window: list[Record]
    refreshed: list[Launch] = field(default_factory=list)


def _capture_rules(g: Graph, index: Index) -> list[Finding]:
    """Rules 0 to 4, 6, 16 and 17: what one capture froze, read from its own records."""
    if g.failed:
        return [capture_failed(g)]
    emptied = emptied_tensors(g, index)
    return [*host_mutations(g, index), *empty_arguments(g, emptied), *short_extents(g, emptied), *races(g),
            *host_state_branches(g), *unregistered_generators(g)]


def call_rules(calls: list[CallRecord], index: Index) -> list[Finding]:
    """Rules 8, 9 and 15: each capture's call against the eager calls before it."""
    if not calls:
        return []
    return [*frozen_host_values(calls, index), *rebuilt_inputs(calls, index), *frozen_views(calls, index)]
