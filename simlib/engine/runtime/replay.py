"""Replaying a captured graph: when each node runs, as a graph executor places it."""

from __future__ import annotations

import heapq

from ...trace import DeviceSpan, Launch, Replay
from ..generators import Draw
from ..graph import CapturedGraph
from ..stream import NEVER, Stream
from ..timing import place


class ReplayCalls:
    """``g.replay()``: every node with its frozen arguments, timed on the executor's lanes.

    Mixed into ``simlib.engine.runtime.Runtime``, whose state (``trace``, ``streams``, ``_capture``, ...)
    and host clock (``_host``) it uses.
    """

    def replay(self, g: CapturedGraph, stream: Stream | None = None) -> None:
        """``g.replay()``: run every node with the arguments frozen at capture."""
        s = stream or self.current_stream
        step = self._host(self.profile.graph_launch_us)
        if not g.ok:
            raise ValueError(f"graph {g.label!r} cannot be replayed: its capture failed")
        if self._capture is not None:
            raise ValueError("replaying a graph inside another capture is not modelled")
        p = self.profile
        start0 = max(self.now + p.launch_latency_us, s.ready)
        by_id: dict[int, tuple[Launch, float, float]] = {}
        end_all = start0
        index = g.replays
        lanes = _Lanes()
        extra = self._scheduled_deps(g)
        if extra:   # lanes follow the capture order; the schedule only delays nodes
            opened_lane = {n.id: lanes.assign(n) for n in g.nodes}
        bases = {gen: gen.advance(draws) for gen, draws in g.draws.items()}   # this replay's random numbers
        for node in _topological(g.nodes, extra) if extra else g.nodes:
            deps = node.deps + extra.get(node.id, ()) if extra else node.deps
            same = [by_id[d] for d in deps if by_id[d][0].stream == node.stream]
            cross = [by_id[d][2] for d in deps if by_id[d][0].stream != node.stream]
            prev = max(same, key=lambda t: t[2]) if same else None
            opened = opened_lane[node.id] if extra else lanes.assign(node)
            issue = start0 + (p.graph_branch_launch_us if opened else 0.0)
            fn, duration = self._kernels[node.id]
            if type(fn) is Draw:
                fn = fn.at(bases[fn.generator])
            slot = place(issue, duration, prev[2] if prev else None,
                         prev[1] if prev else start0, max(cross) if cross else None,
                         p.graph_node_gap_us, node.pdl, p)
            by_id[node.id] = (node, slot.start, slot.end)
            end_all = max(end_all, slot.end)
            self.trace.records.append(DeviceSpan(step, self.now, node.id, node.stream, slot.start,
                                                 slot.end, "replay", index))
            self.device.schedule(node, slot, fn)
        s.tail_start, s.tail_end, s.waits = start0, end_all, NEVER
        g.replays += 1
        self.trace.records.append(Replay(step, self.now, g.id, index, s.name))

    def _scheduled_deps(self, g: CapturedGraph) -> dict[int, tuple[int, ...]]:
        """Per node of ``g``, the nodes the schedule says must finish before it starts."""
        if self.schedule is None:
            return {}
        ids = {n.id for n in g.nodes}
        extra: dict[int, tuple[int, ...]] = {}
        for first, then in self.schedule.before:
            if first in ids and then in ids:
                extra[then] = extra.get(then, ()) + (first,)
        return extra


class _Lanes:
    """How a graph executor maps the DAG onto its internal streams ("lanes").

    A replay does not keep the capture's streams. Nodes are placed in capture
    order: a node continues the lane of its first dependency that still ends a
    lane and that no earlier node continued; otherwise it starts a branch, which reuses a lane whose
    work has been joined (its last node has a successor) or opens a new one.
    Measured on an H200, the first kernel of a newly opened lane starts about
    ``graph_branch_launch_us`` after the replay begins, which is why the branch
    captured *second* starts late and issue order shows in replay time.
    """

    def __init__(self) -> None:
        self.continued: set[int] = set()
        self.joined: set[int] = set()
        self.tails: list[int | None] = []

    def assign(self, node: Launch) -> bool:
        """Place ``node``; True if it opened a new lane."""
        self.joined.update(node.deps)
        lane_of = {t: i for i, t in enumerate(self.tails) if t is not None}
        heir = next((d for d in node.deps if d not in self.continued and d in lane_of), None)
        if heir is not None:
            self.continued.add(heir)
            self.tails[lane_of[heir]] = node.id
            return False
        free = next((i for i, t in enumerate(self.tails) if t is None or t in self.joined), None)
        if free is not None:
            self.tails[free] = node.id
            return False
        self.tails.append(node.id)
        return len(self.tails) > 1


def _topological(nodes: list[Launch], extra: dict[int, tuple[int, ...]]) -> list[Launch]:
    """``nodes`` in capture order, except that each waits for its ``extra`` predecessors too."""
    index = {n.id: i for i, n in enumerate(nodes)}
    waiting = {n.id: len({*n.deps, *extra.get(n.id, ())}) for n in nodes}
    successors: dict[int, list[int]] = {}
    for n in nodes:
        for d in {*n.deps, *extra.get(n.id, ())}:
            successors.setdefault(d, []).append(n.id)
    ready = [index[n.id] for n in nodes if not waiting[n.id]]
    heapq.heapify(ready)
    order: list[Launch] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for succ in successors.get(node.id, ()):
            waiting[succ] -= 1
            if not waiting[succ]:
                heapq.heappush(ready, index[succ])
    if len(order) < len(nodes):
        stuck = [n.label for n in nodes if waiting[n.id]]
        raise ValueError(f"the schedule's orders form a cycle with the graph's edges (nodes "
                         f"{stuck} can never start); order only nodes no path already orders")
    return order
