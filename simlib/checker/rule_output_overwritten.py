"""Rule 13, ``output_overwritten``: a graph's result kept from one replay, read after a later replay of the same graph rewrote it.

A replay writes its results into the same static memory every time. A program
that keeps each step's output without copying it (logits appended to a list,
``make_graphed_callables``' static outputs held across calls) holds windows onto
the next replay's bytes. As rule 11 does between graphs, the program's own reads
decide, and the trace shows two kinds:

(a) an eager view of a graph's result taken after its k-th replay (the view's
    *epoch*: k), read by an eager launch after a later replay of the graph, while
    the program took the same view again (same pointer and shape) in a later
    epoch: it keeps one reference per step (``logits[:, -1]`` appended every
    step), and reads an old one as if it still held its step;
(b) one eager launch whose tensor-list argument (``Arg.element_of``) holds two or
    more elements on the same bytes of one result of a graph that replayed twice
    or more: ``torch.stack(outs)`` of the static output appended every step.

Reading the static output right after each replay, or through one view taken
once, is how correct loops read, and is never reported: (a) needs the same view
taken again in a later epoch, (b) a list; ``x * x`` of one output is neither. A result is
what ``results`` calls one: a blind write of the graph that outlives its
replay. A view belongs to a result when its pointer lies in it and its lineage
reaches the result's tensor; a view of such a view keeps its base's epoch.
Reported once per graph, at the read.

Limits: the static output itself, kept and read later (``held = out``, the
harness's deferred read), reads like the current result: nothing in the trace
says which step the program meant. A view taken once and used as a live window
is clean only while no view of the same geometry is taken in a later step. A list that repeats one element on purpose
(``torch.cat([out, out])`` after two replays) is reported. A read by another
graph's replay is rule 11's business, not this rule's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..trace import Arg, Capture, DataPtr, GraphId, Launch, Record, Replay, TensorId, View
from .findings import Finding
from .index import Graph, Index
from .intervals import Intervals
from .results import Write, graph_writes
from .rules import OUTPUT_OVERWRITTEN

ALIASES_KEPT = 10_000    # views of results followed (then the newest half)


@dataclass(slots=True)
class _Alias:
    result: "_Result"
    epoch: int           # replays of the result's graph when the first view of its line was taken
    view: View


Geometry = tuple[DataPtr, tuple[int, ...]]


@dataclass(slots=True)
class _Result:
    graph: GraphId
    write: Write
    tensors: set[TensorId]      # the written tensor and the bases it views
    latest: dict[Geometry, _Alias] = field(default_factory=dict)   # per view geometry, the newest epoch's


class OutputOverwritten:
    """Rule 13 over records in order; ``watched`` says which memory an eager read or view of matters."""

    READS = (Capture, Replay, View, Launch)   # the records ``add`` needs: the checker feeds it no others

    def __init__(self) -> None:
        self._results: Intervals[list[_Result]] = Intervals()
        self._epochs: dict[GraphId, int] = {}
        self._last: dict[GraphId, Replay] = {}
        self._aliases: dict[TensorId, _Alias] = {}
        self._reported: set[GraphId] = set()

    def watched(self) -> list[tuple[DataPtr, DataPtr]]:
        """The graphs' results: where a view or a read may hold an earlier replay's result."""
        return [span for span, _ in self._results.items()]

    def add(self, r: Record, index: Index) -> list[Finding]:
        kind = type(r)
        if kind is Replay:
            if r.graph in self._epochs:
                self._epochs[r.graph] += 1
                self._last[r.graph] = r
        elif kind is View:
            if r.graph is None and self._results:
                self._viewed(r, index)
        elif kind is Launch:
            if r.graph is None and self._results:
                return self._read(r, index)
        elif kind is Capture and r.op == "end":
            g = index.graph(r.graph)
            if not g.failed and g.nodes:
                self._captured(g, index)
        return []

    def _captured(self, g: Graph, index: Index) -> None:
        self._epochs[g.id] = 0
        for w in graph_writes(g):
            if w.blind and w.live:
                results = self._results.get(*w.span)
                if results is None:
                    self._results.put(*w.span, results := [])
                results.append(_Result(g.id, w, index.lineage(w.arg.tensor)))

    def _result_of(self, tensor: TensorId, ptr: DataPtr, index: Index) -> _Result | None:
        """The result ``tensor`` (at ``ptr``) lies on and descends from, if any."""
        lineage = index.lineage(tensor)
        for _, results in self._results.overlapping(ptr, ptr + 1):
            for res in results:
                if res.tensors & lineage:
                    return res
        return None

    def _viewed(self, v: View, index: Index) -> None:
        base = self._aliases.get(v.base)
        if base is not None:
            self._aliases[v.tensor] = base
        elif v.ptr and (res := self._result_of(v.tensor, v.ptr, index)) is not None:
            alias = self._aliases[v.tensor] = _Alias(res, self._epochs[res.graph], v)
            latest = res.latest.get((v.ptr, v.shape))
            if latest is None or alias.epoch > latest.epoch:
                res.latest[v.ptr, v.shape] = alias
        if len(self._aliases) > ALIASES_KEPT:
            self._aliases = dict(list(self._aliases.items())[ALIASES_KEPT // 2:])

    def _read(self, launch: Launch, index: Index) -> list[Finding]:
        found: list[Finding] = []
        listed: dict[str, list[Arg]] = {}
        for a in launch.args:
            if not (a.reads and a.nbytes):
                continue
            if a.element_of:
                listed.setdefault(a.element_of, []).append(a)
            alias = self._aliases.get(a.tensor)
            if alias is None:
                continue
            res, latest = alias.result, alias.result.latest[alias.view.ptr, alias.view.shape]
            if res.graph not in self._reported and latest.epoch > alias.epoch:
                self._reported.add(res.graph)
                found.append(self._stale_view(launch, a, alias, latest))
        for name, elements in listed.items():
            on: dict[int, tuple[_Result, list[Arg]]] = {}
            for a in elements:
                alias = self._aliases.get(a.tensor)
                res = alias.result if alias is not None else self._result_of(a.tensor, a.ptr, index)
                if res is not None:
                    on.setdefault(id(res), (res, []))[1].append(a)
            for res, args in on.values():
                if res.graph not in self._reported and self._epochs[res.graph] >= 2 and _overlap(args):
                    self._reported.add(res.graph)
                    found.append(self._repeated(launch, name, len(elements), res, args))
        return found

    def _replays_since(self, res: _Result, epoch: int) -> str:
        last, since = self._last[res.graph], self._epochs[res.graph] - epoch
        return (f"graph {res.graph} replayed {since} more time{'s' if since > 1 else ''} since, each writing "
                f"that memory again (the last, replay #{last.index}, at step {last.step})")

    def _stale_view(self, launch: Launch, arg: Arg, alias: _Alias, latest: _Alias) -> Finding:
        res, view = alias.result, alias.view
        node, out = res.write.node, res.write.arg
        return OUTPUT_OVERWRITTEN.finding(
            launch.step, view.label, (out.ptr,),
            f"{launch.label!r} on {launch.stream} at step {launch.step} reads {arg.label!r}, a view of graph "
            f"{res.graph}'s result {out.label!r} ([{hex(out.ptr)}, +{out.nbytes} bytes), written by its node "
            f"{node.label!r}) taken at step {view.step}, {_after(alias.epoch)}. But {self._replays_since(res, alias.epoch)}, "
            f"and the program took the same view again {_after(latest.epoch)} ({latest.view.label!r} at step "
            f"{latest.view.step}): it keeps one reference per step, and every one of them shows the latest "
            f"replay's values, not those of the step it was taken at.",
            _fix(res, out))

    def _repeated(self, launch: Launch, name: str, n: int, res: _Result, args: list[Arg]) -> Finding:
        out = res.write.arg
        last = self._last[res.graph]
        return OUTPUT_OVERWRITTEN.finding(
            launch.step, f"{launch.label}: {name}", (out.ptr,),
            f"{launch.label!r} on {launch.stream} at step {launch.step} takes a list {name!r} of {n} tensors, "
            f"{len(args)} of which lie on the same bytes of graph {res.graph}'s result {out.label!r} "
            f"([{hex(out.ptr)}, +{out.nbytes} bytes)), after graph {res.graph} replayed "
            f"{self._epochs[res.graph]} times (the last, replay #{last.index}, at step {last.step}): the program "
            f"appended the graph's static output once per step without copying it, and every entry shows the "
            f"last replay's values.",
            _fix(res, out))


def _after(epoch: int) -> str:
    return f"after replay #{epoch - 1}" if epoch else "before any replay"


def _overlap(args: list[Arg]) -> bool:
    """Do two of ``args`` touch the same bytes?"""
    spans = sorted((a.ptr, a.ptr + a.nbytes) for a in args)
    return any(nxt[0] < cur[1] for cur, nxt in zip(spans, spans[1:]))


def _fix(res: _Result, out: Arg) -> str:
    return (f"Copy each step's result out before graph {res.graph} replays again ({out.label}.clone(), or a "
            f"copy_ into a buffer you own, then keep that), or read it before the next replay: a graph's "
            f"output, and every view of it, is a window onto the next replay's bytes.")
