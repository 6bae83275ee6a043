"""The calls of the code under check (``Call`` records), op by op: what rules 8 and 9 compare.

A launch belongs to the call whose ``begin`` came before it and whose ``end``
has not yet come. Launches of two calls line up by ``(site, kernel, n)``: the
n-th launch of that kernel from that call site in the call, so a loop over
layers that launches one kernel per layer keeps its layers apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..trace import Call, GraphId, Launch, Trace

LaunchKey = tuple[str, str, int]      # (site, kernel, n-th such launch in its call)
CAPTURE, WARMUP, EAGER = "capture", "warmup", "eager"


@dataclass
class CallRecord:
    """One call: its phase, where it began and ended (positions in the trace's records, which
    order calls even where no host step lies between them), and its launches in issue order."""

    index: int
    phase: str
    begin: int
    end: int | None = None
    launches: list[Launch] = field(default_factory=list)
    _keyed: dict[LaunchKey, Launch] | None = None
    _by_role: dict[str, list[Launch]] = field(default_factory=dict)

    def of_role(self, role: str) -> list[Launch]:
        """The call's launches of that role (``"h2d"``), in issue order: rule 9 asks for each
        argument of each captured node, so a scan of every launch each time would be quadratic."""
        if role not in self._by_role:
            self._by_role[role] = [launch for launch in self.launches if launch.role == role]
        return self._by_role[role]

    def keyed(self) -> dict[LaunchKey, Launch]:
        """Each launch under its ``(site, kernel, n)`` key."""
        if self._keyed is None:
            counts: dict[tuple[str, str], int] = {}
            self._keyed = {}
            for launch in self.launches:
                n = counts.get((launch.site, launch.kernel), 0)
                counts[launch.site, launch.kernel] = n + 1
                self._keyed[launch.site, launch.kernel, n] = launch
        return self._keyed

    def graphs(self) -> set[GraphId]:
        return {launch.graph for launch in self.launches if launch.graph is not None}

    def describe(self) -> str:
        return f"{self.phase} call {self.index}"


def calls_of(trace: Trace) -> list[CallRecord]:
    """Every call of the trace, in the order they began (empty: the trace has no ``Call`` records)."""
    calls: list[CallRecord] = []
    open_calls: dict[int, CallRecord] = {}
    for position, r in enumerate(trace.records):
        kind = type(r)
        if kind is Launch:
            for call in open_calls.values():
                call.launches.append(r)
        elif kind is Call:
            if r.op == "begin":
                call = CallRecord(r.index, r.phase, position)
                calls.append(call)
                open_calls[r.index] = call
            elif r.index in open_calls:
                open_calls.pop(r.index).end = position
    return calls


def earlier_eager_calls(calls: list[CallRecord], capture: CallRecord) -> list[CallRecord]:
    """The warm-up and eager calls that ended before ``capture`` began."""
    return [c for c in calls if c.phase in (WARMUP, EAGER) and c.end is not None and c.end < capture.begin]


def read_shapes(launch: Launch) -> tuple[tuple[int, ...], ...]:
    """The shapes of what a launch reads: two calls that read other shapes belong to other graphs."""
    return tuple(a.shape for a in launch.args if a.reads)
