"""The checker fed as a program runs: each check costs what happened since the last one.

``IncrementalChecker.feed`` takes the records made since the last call and
returns what they reveal. Each rule says what it needs, and is fed just that:

* the *capture rules* (0 to 4 and 6) need one capture's records: they run once,
  when its ``Capture`` end arrives;
* the *stream rules* follow state per graph as records come: rule 10 (the
  blocks a graph uses, frees waiting for its next replay), rule 11 (the graphs'
  live results, clobbers waiting for a read) and rule 5 (declared inputs);
* with ``whole_program=True`` (a whole program's records, where nobody
  brackets the calls or names the inputs), rules 8 and 9 run at each capture's end on the eager calls since the
  last capture (``calls.with_calls`` infers them from the capture's first
  launch), and rule 7 at each graph's first replay, with the static inputs
  named by what the program refreshed since the capture (``inputs.with_inputs``).

State is per graph and per live range, never the history: records are read
once. ``check`` (a whole trace at once) feeds everything, then runs rules 7 to 9
over the whole trace.
"""

from __future__ import annotations

from typing import Iterable

from ..trace import Capture, DataPtr, GraphId, Launch, Record, Replay, Trace
from .calls import calls_of, with_calls
from .findings import Finding
from .index import Graph, Index, index_trace
from .inputs import graph_reads, with_inputs
from .rule_capture_failed import capture_failed
from .rule_empty_argument import emptied_tensors, empty_arguments
from .rule_extent import short_extents
from .rule_freed_under_graph import FreedUnderGraph
from .rule_frozen_host_value import frozen_host_values
from .rule_frozen_state import frozen_state
from .rule_graphs_clobber import GraphsClobber
from .rule_host_mutation import host_mutations
from .rule_input_rebuilt import rebuilt_inputs
from .rule_races import races
from .rule_stale_input import StaleInputs
from .rules import FROZEN_STATE

WINDOW = 200_000   # whole process: eager records kept for the next capture's checks (then the newest half)


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
        self._checked: set[GraphId] = set()
        self._since_capture: list[Record] = []            # whole process: since the last capture ended
        self._awaiting: dict[GraphId, list[Record]] = {}  # graphs not replayed yet: their warm-up and capture
        self._after: list[Launch] = []                    # eager launches since the oldest of them ended
        self._after_from: dict[GraphId, int] = {}         # where each one's part of ``_after`` starts
        self.watch_changes = 0   # counts changes of what ``watched_reads`` and ``watched_frees`` say

    def feed(self, records: Iterable[Record]) -> list[Finding]:
        """What ``records`` (the next ones, in order) reveal, each finding once."""
        found: list[Finding] = []
        index, whole = self.index, self.whole_program
        stream = (self._freed.add, self._clobber.add, self._stale.add)
        for r in records:
            r = index.add(r)
            kind = type(r)
            if whole:
                self._keep(r, kind)
            for rule in stream:
                found += rule(r, index)
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

    def kept(self) -> int:
        """How many records the checker holds (the next capture's warm-up, graphs' awaiting their
        first replay): what a long run's memory depends on, besides the state per graph."""
        return len(self._since_capture) + sum(map(len, self._awaiting.values())) + len(self._after)

    def watched_reads(self) -> list[tuple[DataPtr, DataPtr]]:
        """Memory an eager launch's access to matters: graphs' live results (rule 11), and what
        graphs not yet replayed read (their inputs are named by what the program writes there)."""
        awaiting = [span for gid in self._awaiting for span in graph_reads(self.index.graph(gid))]
        return self._clobber.watched() + awaiting

    def watched_frees(self) -> list[tuple[DataPtr, DataPtr]]:
        """Memory a free of matters (rule 10: the blocks graphs use outside their pools)."""
        return self._freed.watched()

    def _captured(self, g: Graph) -> list[Finding]:
        self._checked.add(g.id)
        self.watch_changes += 1
        found = _capture_rules(g, self.index)
        if self.whole_program and g.end is not None:
            window, self._since_capture = self._since_capture, []
            if not g.failed:
                found += _call_rules(with_calls(window, g.id), self.index)
                self._awaiting[g.id] = window
                self._after_from[g.id] = len(self._after)
        return found

    def _first_replay(self, gid: GraphId) -> list[Finding]:
        """Rule 7 for graph ``gid``: its warm-up and capture, then the eager launches since."""
        window = self._awaiting.pop(gid)
        self.watch_changes += 1
        records = with_inputs([*window, *self._after[self._after_from.pop(gid):]], gid)
        if self._awaiting:
            first = min(self._after_from.values())
            if first:
                del self._after[:first]
                self._after_from = {g: k - first for g, k in self._after_from.items()}
        else:
            self._after.clear()
        return [f for f in frozen_state(index_trace(Trace(records=records))) if f.rule == FROZEN_STATE.number]

    def _keep(self, r: Record, kind: type) -> None:
        """Whole process: what the next capture's checks and rule 7's first-replay checks read."""
        since = self._since_capture
        since.append(r)
        if len(since) > self.window:
            del since[:len(since) - self.window // 2]
        if self._awaiting and kind is Launch and r.graph is None:
            self._after.append(r)
            if len(self._after) > self.window:
                cut = len(self._after) - self.window // 2
                del self._after[:cut]
                self._after_from = {g: max(0, k - cut) for g, k in self._after_from.items()}


def _capture_rules(g: Graph, index: Index) -> list[Finding]:
    """Rules 0 to 4 and 6: what one capture froze, read from its own records."""
    if g.failed:
        return [capture_failed(g)]
    emptied = emptied_tensors(g, index)
    return [*host_mutations(g, index), *empty_arguments(g, emptied), *short_extents(g, emptied), *races(g)]


def _call_rules(records: list[Record], index: Index) -> list[Finding]:
    """Rules 8 and 9: the capture's call against the eager calls before it."""
    calls = calls_of(Trace(records=records))
    if not calls:
        return []
    return [*frozen_host_values(calls, index), *rebuilt_inputs(calls, index)]
