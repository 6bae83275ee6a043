"""The calls of the code under check (``Call`` records), op by op: what rules 8, 9 and 15 compare.

A launch belongs to the call whose ``begin`` came before it and whose ``end``
has not yet come. Launches of two calls line up by ``(site, kernel, n)``: the
n-th launch of that kernel from that call site in the call, so a loop over
layers that launches one kernel per layer keeps its layers apart.

``record_capture`` knows its calls and brackets them with ``Call`` records. A
whole program (``capture_checked()``, ``CAPTURE_ORDER_CHECK=1``) says nothing
of the kind: a server runs its model eagerly a few times, then captures it.
``with_calls`` infers the brackets from what the capture itself launched:
the graph's first launch, ``(site, kernel)``, occurs ``m`` times in the
captured call, so every ``m``-th eager occurrence of it before the capture
starts an eager call of the same code. A call ends before the next one starts,
or before any capture begins. Counted back from the capture, so a recording
that starts in the middle of a call only loses that call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..trace import Call, Capture, GraphId, Launch, Record, Trace

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


def same_shapes(call: dict[LaunchKey, Launch], other: dict[LaunchKey, Launch]) -> bool:
    """Whether every launch the two calls share (by key) reads the same shapes in both: the
    same code on the same shapes, so the same graph would stand for both. A prefill and the
    decode steps after it run the same launches on other shapes; a launch that reads nothing
    (``arange``) or only a fixed-shape counter (``add_``) cannot tell them apart by itself."""
    return all(read_shapes(launch) == read_shapes(other[key]) for key, launch in call.items() if key in other)


def with_calls(records: list[Record], graph: int) -> list[Record]:
    """``records`` with ``Call`` records around the eager calls before ``graph``'s capture that
    repeat its captured code, and around the capture's call; as they are when they already
    have ``Call`` records or the capture launched nothing."""
    if any(type(r) is Call for r in records):
        return records
    bracket = {r.op: i for i, r in enumerate(records) if type(r) is Capture and r.graph == graph}
    begin, end = bracket.get("begin"), bracket.get("end")
    if begin is None or end is None:
        return records
    nodes = [r for r in records[begin:end] if type(r) is Launch and r.graph == graph]
    if not nodes:
        return records
    site, kernel = nodes[0].site, nodes[0].kernel
    per_call = sum(n.site == site and n.kernel == kernel for n in nodes)
    occurrences = [i for i, r in enumerate(records[:begin])
                   if type(r) is Launch and r.kernel == kernel and r.site == site and r.graph is None]
    whole = len(occurrences) // per_call
    starts = occurrences[len(occurrences) - whole * per_call::per_call] if whole else []
    captures = [i for i, r in enumerate(records[:begin + 1]) if type(r) is Capture and r.op == "begin"]
    bounds: list[tuple[int, int]] = []   # [first, last] record index of each eager call
    for k, start in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else begin
        stop = min([stop, *(c for c in captures if c > start)])
        bounds.append((start, stop - 1))
    before: dict[int, Call] = {}   # record index -> the bracket just before it, and just after
    after: dict[int, Call] = {}
    for k, (first_i, last_i) in enumerate(bounds):   # eager calls lie before the capture: no index shared
        before[first_i] = Call(records[first_i].step, records[first_i].t_us, "begin", k, EAGER)
        after[last_i] = Call(records[last_i].step, records[last_i].t_us, "end", k, EAGER)
    before[end] = Call(records[end].step, records[end].t_us, "end", len(bounds), CAPTURE)
    after[begin] = Call(records[begin].step, records[begin].t_us, "begin", len(bounds), CAPTURE)
    out: list[Record] = []
    done = 0
    for i in sorted(before.keys() | after.keys()):
        out += records[done:i]
        if i in before:
            out.append(before[i])
        out.append(records[i])
        if i in after:
            out.append(after[i])
        done = i + 1
    return out + records[done:]
