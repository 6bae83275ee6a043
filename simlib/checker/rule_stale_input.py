"""Rule 5, ``stale_input``: a replay ran with no eager write into a static input since the last.

Followed as the records come (``StaleInputs.add``); the findings come out at
the end (``finish``), one per input, counting every replay that found it stale.
"""

from __future__ import annotations

from ..trace import Arg, Capture, DataPtr, GraphId, Launch, Record, Replay
from .findings import Finding
from .index import Index
from .rules import STALE_INPUT


class StaleInputs:
    """Rule 5 over records in order, for the inputs a capture declared (``Capture.inputs``)."""

    READS = (Launch, Capture, Replay)   # the records ``add`` needs: the checker feeds it no others

    def __init__(self) -> None:
        self._watched: dict[GraphId, dict[DataPtr, list]] = {}   # ptr -> [extent, refreshed]
        self._stale: dict[tuple[GraphId, DataPtr], list[Replay]] = {}
        self._replays: dict[GraphId, int] = {}
        self._labels: dict[tuple[GraphId, DataPtr], str] = {}

    def add(self, r: Record, index: Index) -> list[Finding]:
        kind = type(r)
        if kind is Launch and r.graph is None and self._watched:
            for arg in r.args:
                if arg.writes:
                    self._refreshed(arg)
        elif kind is Capture and r.op == "end" and r.error is None and r.inputs:
            g = index.graph(r.graph)
            extents = g.input_extents(r.inputs)
            self._watched[r.graph] = {p: [extents[p], False] for p in r.inputs}
            self._labels.update(((r.graph, p), g.input_label(p)) for p in r.inputs)
        elif kind is Replay and r.graph in self._watched:
            self._replays[r.graph] = self._replays.get(r.graph, 0) + 1
            for p, state in self._watched[r.graph].items():
                if not state[1]:
                    self._stale.setdefault((r.graph, p), []).append(r)
                state[1] = False
        return []

    def finish(self) -> list[Finding]:
        return [_finding(gid, p, self._labels[gid, p], found, self._replays[gid])
                for (gid, p), found in self._stale.items()]

    def _refreshed(self, arg: Arg) -> None:
        lo, hi = arg.ptr, arg.ptr + arg.nbytes
        for inputs in self._watched.values():
            for p, state in inputs.items():
                if not state[1] and lo < p + state[0] and p < hi:
                    state[1] = True


def _finding(gid: GraphId, p: DataPtr, label: str, found: list[Replay], replays: int) -> Finding:
    first = found[0]
    return STALE_INPUT.finding(
        first.step, label, (p,),
        f"graph {gid} reads its static input {label!r} at {hex(p)}, but {len(found)} of its "
        f"{replays} replays (first at step {first.step}, replay #{first.index}) ran with "
        f"no eager write into it since the capture ended or the previous replay: they "
        f"computed on an old input, not a new one.",
        f"Copy every new input into the captured buffer before each replay "
        f"({label}.copy_(new_input)); the graph never sees a new tensor. Check replays with "
        f"fresh inputs: reusing the warm-up input hides this bug.")
