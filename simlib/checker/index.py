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
from typing import Any, Callable, Iterable, Iterator

from ..trace import (
    Alloc,
    Capture,
    DataPtr,
    Free,
    GraphId,
    HostRead,
    HostState,
    Launch,
    Mutation,
    Record,
    SkippedLaunch,
    TensorId,
    Trace,
    View,
)

CaptureUse = Launch | SkippedLaunch
VIEWS_KEPT = 20_000   # a bounded index's views (then the newest half, with the views they descend from)


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
    host_states: list[HostState] = field(default_factory=list)
    inputs: tuple[DataPtr, ...] = ()
    generators: tuple[str, ...] = ()     # registered with the graph: its replays advance them
    begin: Capture | None = None
    end: Capture | None = None
    # What several rules read off the ended capture (``once``: its writes, its reads before writes).
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, kept in ``derived`` once the capture has ended (its nodes are final then)."""
        if self.end is None:
            return make()
        value = self.derived.get(key)
        if value is None:
            value = self.derived[key] = make()
        return value

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
    alloc_nbytes: dict[DataPtr, int] = field(default_factory=dict)
    # A whole process: views kept only as far as the newest records need (a view's lineage),
    # so the index does not grow with the run.
    bounded: bool = False

    capturing: GraphId | None = None    # the capture open now: allocator records join it

    def add(self, r: Record) -> Record:
        """Index one more record (in record order); returns it as indexed (a ``Free`` the
        allocator hook left unsized gets its block's size)."""
        kind = type(r)   # the kinds most records are, tested first
        if kind is Launch:
            if r.graph is None:
                self.eager.append(r)
            else:
                g = self.graph(r.graph)
                g.nodes.append(r)
                g.uses.append(r)
        elif kind is Alloc:
            self.alloc_nbytes[r.ptr] = r.nbytes
            if self.capturing is None:
                self.eager.append(r)
            else:
                self.graph(self.capturing).allocs.append(r)
        elif kind is Free:
            if not r.nbytes and r.ptr in self.alloc_nbytes:   # the allocator hook gives no size
                r = replace(r, nbytes=self.alloc_nbytes[r.ptr])
            gid = r.graph if r.graph is not None else self.capturing
            if gid is None:
                self.eager.append(r)
            else:
                self.graph(gid).frees.append(r)
        elif kind is SkippedLaunch and r.graph is not None:
            self.graph(r.graph).uses.append(r)
        elif kind is Mutation and r.graph is not None:
            self.graph(r.graph).mutations.append(r)
        elif kind is HostRead and r.graph is not None:
            self.graph(r.graph).host_reads.append(r)
        elif kind is HostState:
            self.graph(r.graph).host_states.append(r)
        elif kind is View and r.base != r.tensor:   # a view op that returned its input links nothing
            self.views[r.tensor] = r
            self.views_of[r.base].append(r)
            if self.bounded and len(self.views) > VIEWS_KEPT:
                self._forget_old_views()
        elif kind is Capture:
            g = self.graph(r.graph)
            g.inputs = tuple(dict.fromkeys((*g.inputs, *r.inputs)))
            g.generators = tuple(dict.fromkeys((*g.generators, *r.generators)))
            if r.op == "begin":
                g.begin, self.capturing = r, r.graph
                self.eager.append(r)
            elif r.op == "end":
                g.end, self.capturing = r, None
        return r

    def _forget_old_views(self) -> None:
        """Keep the newest half of the views (a view's lineage is read soon after it is taken), and
        every older view one of them descends from, so their lineages stay whole. A server takes a
        view of an output every step: 20,000 views bound the index at about ten megabytes."""
        views = self.views
        kept = dict(list(views.items())[len(views) // 2:])
        for view in list(kept.values()):
            base = views.get(view.base)
            while base is not None and base.tensor not in kept:
                kept[base.tensor] = base
                base = views.get(base.base)
        self.views = kept
        self.views_of = defaultdict(list)
        for view in kept.values():
            self.views_of[view.base].append(view)

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

    def lineage(self, tensor: TensorId) -> set[TensorId]:
        """``tensor`` and the bases it is a view of (each once: recorded links may loop)."""
        seen = {tensor}
        view = self.views.get(tensor)
        while view is not None and view.base not in seen:
            seen.add(view.base)
            view = self.views.get(view.base)
        return seen

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
    for r in trace.records:
        index.add(r)
    return index
