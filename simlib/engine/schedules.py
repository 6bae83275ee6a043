"""Races as schedules: every outcome a graph's replays can have, each with a witness.

simlib times a replay deterministically, so one run shows one order of each
pair of nodes that no edge of the graph orders, and a race looks all right or
all wrong. ``explore(program)`` asks instead what the replays *can* do:

1. run ``program`` on a fresh ``Runtime`` as the profile times it (the
   *default* schedule);
2. find every *race* of every graph it replayed (``races``): two nodes that
   touch overlapping bytes, at least one of them writing, with no path
   between them in the graph;
3. for each race and each way of ordering it that the default run did not
   already show, run ``program`` again under a ``Schedule`` that makes every
   replay finish one node before the other starts: the other waits, as if its
   branch had been delayed (nothing else changes).

4. run ``program`` once more with an allocator that hands no block freed in the
   default pool out again (``Runtime(reuse_default=False)``): which block a
   request gets is the allocator's choice, and a freed block a graph still
   reads goes wrong only once something else takes it. That run is a witness
   where it changes the outcome.

Each run is a ``Witness``: the order it realises, the outcome the program
reported, and its trace, whose replay ``DeviceSpan``s are the start and end
times that realise that order (``simlib.tutorial.plots.timeline`` draws them). The
outcomes of all witnesses are what the program can do; ``witness(outcome)``
says how. One race at a time is ordered; the other races keep their default
order.

The program must build everything on the runtime it is given and be
deterministic (simlib programs are), so node ids match from run to run; it
returns its outcome word (``simlib.glossary``), e.g. by comparing a replay's
output with an eager run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..trace import DataPtr, DeviceSpan, GraphId, Launch, LaunchId, Replay, Trace
from .runtime import Runtime
from .timing import Profile


@dataclass(frozen=True)
class Schedule:
    """Orders every replay must honour: in each pair ``(first, then)`` of node ids,
    ``then`` starts only after ``first`` has finished."""

    before: tuple[tuple[LaunchId, LaunchId], ...] = ()


@dataclass(frozen=True)
class Race:
    """Two nodes of graph ``graph`` touching ``[lo, hi)``, one writing, unordered.

    ``first`` was captured before ``second``.
    """

    graph: GraphId
    first: Launch
    second: Launch
    lo: DataPtr
    hi: DataPtr

    def __str__(self) -> str:
        return (f"{self.first.label!r} ({self.first.stream}) and {self.second.label!r} "
                f"({self.second.stream}) on [{hex(self.lo)}, {hex(self.hi)})")


@dataclass(frozen=True)
class Witness:
    """One schedule and what the program did under it.

    ``order`` is ``(earlier, later)`` for a schedule that orders ``race``;
    both are None for the default schedule.
    """

    outcome: str
    trace: Trace
    race: Race | None = None
    order: tuple[Launch, Launch] | None = None
    reuse_default: bool = True   # False: the allocator handed no freed default-pool block out again

    @property
    def spans(self) -> list[DeviceSpan]:
        """When each node ran in the replays: the start and end times of this schedule."""
        return [r for r in self.trace.of(DeviceSpan) if r.phase == "replay"]

    def describe(self) -> str:
        """``as timed``, or ``if 'b' (alt) starts after 'a' (main) ends``."""
        if not self.reuse_default:
            return "if the allocator hands no freed block out again"
        if self.order is None:
            return "as timed"
        earlier, later = self.order
        return (f"if {later.label!r} ({later.stream}) starts after {earlier.label!r} "
                f"({earlier.stream}) ends")


@dataclass(frozen=True)
class Exploration:
    """The default run, every race found in it, and a witness per explored order."""

    default: Witness
    races: tuple[Race, ...]
    witnesses: tuple[Witness, ...]   # the default first

    @property
    def outcomes(self) -> frozenset[str]:
        """Every outcome some schedule produced."""
        return frozenset(w.outcome for w in self.witnesses)

    def witness(self, outcome: str) -> Witness | None:
        """A schedule that produces ``outcome`` (the default if it does), else None."""
        return next((w for w in self.witnesses if w.outcome == outcome), None)

    def describe(self) -> str:
        """``correct as timed; silent_wrong if 'b' (alt) starts after 'a' (main) ends``."""
        return "; ".join(f"{outcome} {self.witness(outcome).describe()}"  # type: ignore[union-attr]
                         for outcome in dict.fromkeys(w.outcome for w in self.witnesses))


def explore(program: Callable[[Runtime], str], profile: Profile | None = None) -> Exploration:
    """Run ``program`` as timed, then once per unseen order of each race, then with freed blocks
    left alone (see the module doc)."""
    default_rt = Runtime(profile)
    default = Witness(program(default_rt), default_rt.trace)
    found = tuple(races(default_rt.trace))
    shape = _node_ids(default_rt.trace)
    witnesses = [default]
    for race in found:
        for earlier, later in ((race.first, race.second), (race.second, race.first)):
            if _ran_before(default_rt.trace, earlier, later):
                continue
            rt = Runtime(profile, schedule=Schedule(((earlier.id, later.id),)))
            try:
                outcome = program(rt)
            finally:   # a schedule naming other nodes can fail in any way: say why first
                if _node_ids(rt.trace) != shape:
                    raise ValueError(
                        "the program captured different nodes on a second run; explore() needs a "
                        "deterministic program that builds everything on the Runtime it is given")
            witnesses.append(Witness(outcome, rt.trace, race, (earlier, later)))
    kept = Runtime(profile, reuse_default=False)
    outcome = program(kept)
    if all(w.outcome != outcome for w in witnesses):
        witnesses.append(Witness(outcome, kept.trace, reuse_default=False))
    return Exploration(default, found, tuple(witnesses))


def races(trace: Trace) -> Iterator[Race]:
    """Every unordered conflicting pair of nodes of each graph ``trace`` replayed, once per pair."""
    replayed = dict.fromkeys(r.graph for r in trace.of(Replay))
    for graph in replayed:
        yield from _graph_races(graph, trace.launches(graph))


def _graph_races(graph: GraphId, nodes: list[Launch]) -> Iterator[Race]:
    position = {n.id: i for i, n in enumerate(nodes)}
    ancestors: list[int] = []            # per node, a bitset of the nodes with a path to it
    for n in nodes:
        bits = 0
        for d in n.deps:
            if d in position:
                bits |= ancestors[position[d]] | (1 << position[d])
        ancestors.append(bits)
    accesses = sorted((a.ptr, a.ptr + a.nbytes, i, a.writes)
                      for i, n in enumerate(nodes) for a in n.args if a.ptr and a.nbytes)
    seen: set[tuple[int, int]] = set()
    active: list[tuple[int, int, int, bool]] = []
    for here in accesses:
        lo, hi, j, writes = here
        active = [a for a in active if a[1] > lo]
        for other_lo, other_hi, i, other_writes in active:
            pair = (min(i, j), max(i, j))
            if (i == j or not (writes or other_writes) or pair in seen
                    or ancestors[pair[1]] >> pair[0] & 1):
                continue
            seen.add(pair)
            yield Race(graph, nodes[pair[0]], nodes[pair[1]], lo, min(hi, other_hi))
        active.append(here)


def _ran_before(trace: Trace, earlier: Launch, later: Launch) -> bool:
    """Did every replay in ``trace`` finish ``earlier`` before ``later`` started?"""
    spans: dict[tuple[int | None, LaunchId], DeviceSpan] = {
        (r.replay, r.launch): r for r in trace.of(DeviceSpan) if r.phase == "replay"}
    pairs = [(spans[k, earlier.id], spans.get((k, later.id))) for k, lid in spans if lid == earlier.id]
    return bool(pairs) and all(b is not None and a.end_us <= b.start_us for a, b in pairs)


def _node_ids(trace: Trace) -> list[tuple[LaunchId, str, GraphId | None]]:
    return [(r.id, r.label, r.graph) for r in trace.of(Launch) if r.graph is not None]
