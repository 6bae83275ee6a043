"""The checker's one pass over a trace: per graph, what its capture produced; per tensor, its views.

Every rule reads this index instead of the records, so the trace is walked
once. The view links come from recorded traces too, where nothing promises
they form a tree: the walks over them visit each view once (see
``Index.emptied_lineage`` and ``Index.views_taken_of``), so a check ends on
any trace.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

from ..trace import (
    Alloc,
    Capture,
    DataPtr,
    Free,
    GraphId,
    HostRead,
    Launch,
    Mutation,
    SkippedLaunch,
    TensorId,
    Trace,
    View,
)

CaptureUse = Launch | SkippedLaunch


@dataclass
class Graph:
    """What one capture produced, in host order."""

    id: GraphId
    nodes: list[Launch] = field(default_factory=list)
    uses: list[CaptureUse] = field(default_factory=list)
    mutations: list[Mutation] = field(default_factory=list)
    host_reads: list[HostRead] = field(default_factory=list)
    frees: list[Free] = field(default_factory=list)
    allocs: list[Alloc] = field(default_factory=list)
    inputs: tuple[DataPtr, ...] = ()
    begin: Capture | None = None
    end: Capture | None = None

    @property
    def failed(self) -> bool:
        return self.end is not None and self.end.error is not None

    def emptying(self, before: int) -> list[Mutation]:
        """The mutations of this capture before step ``before`` that emptied a full tensor."""
        return [m for m in self.mutations if m.step < before and m.old_numel and m.old_ptr
                and (m.new_numel == 0 or m.new_ptr == 0)]

    def input_extents(self, inputs: Iterable[DataPtr]) -> dict[DataPtr, int]:
        """How many bytes at each input pointer the graph reads (at least one)."""
        extents = {p: 1 for p in inputs}
        for use in self.uses:
            for arg in use.args:
                if arg.ptr in extents:
                    extents[arg.ptr] = max(extents[arg.ptr], arg.nbytes)
        return extents

    def input_label(self, ptr: DataPtr) -> str:
        return next((a.label for u in self.uses for a in u.args if a.ptr == ptr), hex(ptr))


@dataclass
class Index:
    """One pass over the trace: everything the rules look up."""

    graphs: dict[GraphId, Graph] = field(default_factory=dict)
    views: dict[TensorId, View] = field(default_factory=dict)
    views_of: dict[TensorId, list[View]] = field(default_factory=lambda: defaultdict(list))
    eager: list[Launch | Alloc | Free | Capture] = field(default_factory=list)  # outside captures
    alloc_steps: dict[DataPtr, list[int]] = field(default_factory=lambda: defaultdict(list))
    alloc_nbytes: dict[DataPtr, int] = field(default_factory=dict)

    def graph(self, gid: GraphId) -> Graph:
        if gid not in self.graphs:
            self.graphs[gid] = Graph(gid)
        return self.graphs[gid]

    def emptied_lineage(self, tensor: TensorId) -> Iterator[TensorId]:
        """``tensor``, then the bases it views while it was taken of an emptied storage
        (each once: in a recorded trace two views can name each other as base)."""
        yield tensor
        seen = {tensor}
        view = self.views.get(tensor)
        while view is not None and view.ptr == 0 and view.base not in seen:
            seen.add(view.base)
            yield view.base
            view = self.views.get(view.base)

    def views_taken_of(self, tensor: TensorId, after: int) -> Iterator[View]:
        """The views of ``tensor`` taken after step ``after``, then every view of those
        (whenever taken: a view of a view inherits its base's storage). Each view once,
        and never ``tensor`` itself again, should the links lead back to it."""
        todo = [v for v in self.views_of.get(tensor, ()) if v.step > after]
        seen = {id(v) for v in todo}
        while todo:
            view = todo.pop()
            yield view
            for v in self.views_of.get(view.tensor, ()):
                if id(v) not in seen and v.tensor != tensor:
                    seen.add(id(v))
                    todo.append(v)


def index_trace(trace: Trace) -> Index:
    """Sort the records into graphs (by ``graph``, or by the capture open when the allocator
    spoke) and index the views."""
    index = Index()
    capturing: GraphId | None = None    # the capture open now: allocator records join it
    for r in trace.records:
        kind = type(r)
        if kind is Launch:
            if r.graph is None:
                index.eager.append(r)
            else:
                g = index.graph(r.graph)
                g.nodes.append(r)
                g.uses.append(r)
        elif kind is SkippedLaunch and r.graph is not None:
            index.graph(r.graph).uses.append(r)
        elif kind is Mutation and r.graph is not None:
            index.graph(r.graph).mutations.append(r)
        elif kind is HostRead and r.graph is not None:
            index.graph(r.graph).host_reads.append(r)
        elif kind is View and r.base != r.tensor:   # a view op that returned its input links nothing
            index.views[r.tensor] = r
            index.views_of[r.base].append(r)
        elif kind is Alloc:
            index.alloc_steps[r.ptr].append(r.step)
            index.alloc_nbytes[r.ptr] = r.nbytes
            if capturing is None:
                index.eager.append(r)
            else:
                index.graph(capturing).allocs.append(r)
        elif kind is Free:
            if not r.nbytes and r.ptr in index.alloc_nbytes:   # the allocator hook gives no size
                r = replace(r, nbytes=index.alloc_nbytes[r.ptr])
            gid = r.graph if r.graph is not None else capturing
            if gid is None:
                index.eager.append(r)
            else:
                index.graph(gid).frees.append(r)
        elif kind is Capture:
            g = index.graph(r.graph)
            g.inputs = tuple(dict.fromkeys((*g.inputs, *r.inputs)))
            if r.op == "begin":
                g.begin, capturing = r, r.graph
                index.eager.append(r)
            elif r.op == "end":
                g.end, capturing = r, None
    return index
