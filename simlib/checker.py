"""The capture-hazard checker: what will a replay get wrong, read from a trace alone.

``check(trace)`` takes plain records (simulated by simlib or recorded from
real PyTorch by gpu_demo) and returns one ``Finding`` per hazard: failed
captures first, then by host step. It never needs the engine's objects: tensor
ids, pointers, steps, graph edges and allocator blocks are all in the trace.

Rules (severity ``error``: wrong on every replay, or no graph at all;
``warning``: unordered, a race the hardware may not have lost yet):

0. ``capture_failed`` (error): a capture ended with an error, so there is no
   graph. It is reported first, with what the error means; a graph that never
   existed gets no other finding (no races, nothing frozen).
1. ``host_mutation`` (error): during a capture, the host changed a tensor's
   metadata (``set_``, ``resize_``) and then used it: a captured launch or an
   op that launched nothing, a host read of its changed shape (``x.shape``,
   ``numel()``: host code branches on it, so the op it guards may leave no
   node at all), or, when nothing else used it, a view taken of it afterwards.
   Replays never rerun host code, so they all get what the host did after the
   change. (A change before the capture is seen alike by the capture and by
   eager runs, so it is not one.)
2. ``empty_argument`` (error): a captured launch, or an op that launched
   nothing because its outputs were empty, got a tensor empty (0 elements)
   or null (pointer 0) although the same tensor was non-empty earlier in the
   capture. A view of an emptied tensor counts as that tensor. Reported once
   per tensor, at its first such launch.

   Rules 1 and 2 say, for each consumer, what the graph holds for it in the
   words of ``simlib.glossary.GRAPH_HOLDS``: a node whose frozen pointer is 0
   (a raw kernel: replays fault), no node at all (PyTorch launched nothing:
   the output keeps what it held), or, for a host read, only what host code
   issued after branching on the emptied shape.
3. ``cross_stream_race`` (warning): two nodes of one graph touch overlapping
   addresses, at least one writes, and no path in the graph (``Launch.deps``)
   orders them.
4. ``reuse_after_free`` (warning): the same, where the two nodes straddle a
   free during capture of a block covering the overlap: the later node uses
   the block the graph's pool handed out again while the earlier one may
   still be using the old contents. Reported once per free, never as rule 3.
5. ``stale_input`` (error): a replay ran with no eager write into one of the
   graph's static inputs since the capture ended or the previous replay.
6. ``extent_exceeds_storage`` (error): a captured launch touches more bytes at
   an argument (``Arg.nbytes``: its elements, or a raw kernel's declared size)
   than lie behind its pointer (``Arg.storage_nbytes``; none behind pointer
   0): every replay reads past the end into neighbouring data, writes over it,
   or faults at address 0. An argument rule 2 reports is not reported again:
   rule 2 names the cause (emptied during the capture), this rule covers every
   other way a pointer ends up short of its extent.
7. ``frozen_state`` (error): the graph reads an address range that no captured
   node writes and that eager launches before the capture (the warm-up) wrote
   with data derived from the graph's static inputs (``Capture.inputs``;
   derived: written by an eager launch that read such data, followed in
   record order; a freed or reallocated block holds nothing). Every replay
   reads the warm-up's value, whatever its input. The finding names the
   warm-up op that wrote it and, when the capture emptied a tensor before the
   graph's first read, that mutation as what stopped the capture writing it
   (with the op that then launched nothing, or the host read of the emptied
   shape that skipped it). Ranges written eagerly after the capture began
   (refreshed like an input) are not reported; a constant computed from
   nothing input-derived is not either (ops that read only a template's
   shape, ``*_like`` and ``new_*``, derive nothing from it).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import re
import textwrap
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Generic, Iterable, Iterator, TypeVar

from .glossary import GRAPH_HOLDS, HOST_BRANCH, NO_NODE, NULL_POINTER_NODE, SHAPE_ERROR, capture_error, term
from .trace import (Alloc, Arg, Capture, DataPtr, Free, GraphId, HostRead, Launch, Mutation, Record,
                    Replay, SkippedLaunch, TensorId, Trace, View)

ERROR = "error"
WARNING = "warning"

CaptureUse = Launch | SkippedLaunch
Consumer = tuple[Record, Arg | None]     # what used a tensor in a capture, and with which argument


@dataclass(frozen=True)
class Finding:
    """One hazard.

    ``step`` is the host step to look at: the end of the failed capture (rule
    0), the mutation (1), the first launch that got an empty argument (2) or an
    argument short of its extent (6), the later of two racing launches (3),
    the free (4), the first stale replay (5), the graph's first read of a
    frozen value (7). ``pointers`` are the addresses involved; ``why`` and
    ``fix`` are for a person.
    """

    rule: int
    code: str
    severity: str
    step: int
    label: str
    pointers: tuple[DataPtr, ...]
    why: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON; pointers as hex strings (exact in any JSON reader)."""
        return {**asdict(self), "pointers": [hex(p) for p in self.pointers]}


# --------------------------------------------------------------------------- index
@dataclass
class _Graph:
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


@dataclass
class _Index:
    """One pass over the trace: everything the rules look up."""

    graphs: dict[GraphId, _Graph] = field(default_factory=dict)
    views: dict[TensorId, View] = field(default_factory=dict)
    views_of: dict[TensorId, list[View]] = field(default_factory=lambda: defaultdict(list))
    eager: list[Launch | Alloc | Free | Capture] = field(default_factory=list)  # outside captures
    alloc_steps: dict[DataPtr, list[int]] = field(default_factory=lambda: defaultdict(list))
    alloc_nbytes: dict[DataPtr, int] = field(default_factory=dict)

    def graph(self, gid: GraphId) -> _Graph:
        if gid not in self.graphs:
            self.graphs[gid] = _Graph(gid)
        return self.graphs[gid]


def _index(trace: Trace) -> _Index:
    index = _Index()
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
        elif kind is View:
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


# --------------------------------------------------------------------------- check
def check(trace: Trace) -> list[Finding]:
    """Every capture hazard in ``trace``: failed captures first, then by step (empty: clean)."""
    index = _index(trace)
    findings: list[Finding] = []
    for g in index.graphs.values():
        if g.failed:
            findings.append(_capture_failed(g))
            continue
        findings += _host_mutations(g, index)
        emptied = _emptied(g, index)
        findings += _empty_arguments(g, emptied)
        findings += _extents(g, emptied)
        findings += _races(g)
    findings += _frozen_state(index)
    findings += _stale_inputs(trace, index)
    return sorted(findings, key=lambda f: (f.rule != 0, f.step, f.rule, f.label, f.pointers, f.why))


# --------------------------------------------------------------------------- rule 0
_CUDA_ERROR = re.compile(r"\b(cudaError[A-Za-z]+)\b")
# error -> (what it means, how to fix it); others get the glossary's meaning
_CAPTURE_ERRORS: dict[str, tuple[str, str]] = {
    "cudaErrorStreamCaptureUnsupported": (
        "an operation that is not permitted while a stream is capturing ran: a device or stream "
        "synchronize, .item() or another host read of a device value, or a pageable copy",
        "Move the sync or host read out of the captured region (before or after it), or keep the "
        "value on the device."),
    "cudaErrorStreamCaptureInvalidated": (
        "an earlier operation not permitted while capturing (a sync, a host read of a device value, "
        "work on a stream that never waited on the capture) invalidated it, and later captured "
        "calls failed too",
        "Find the first error of the capture (the earliest in the exception chain) and fix that one."),
    "cudaErrorStreamCaptureUnjoined": (
        "a stream forked from the capturing stream still had work when the capture ended",
        "Join every forked stream back before the capture ends: main.wait_stream(alt) after the "
        "last launch on alt."),
    "cudaErrorStreamCaptureIsolation": (
        "a capturing stream waited on an event recorded outside the capture: a graph cannot "
        "depend on uncaptured work",
        "Wait on that event before the capture begins, or record it inside the capture."),
    "cudaErrorStreamCaptureImplicit": (
        "work on the legacy default stream would implicitly wait on the capturing stream",
        "Issue that work on a stream of its own, not on the legacy default stream."),
    "cudaErrorCapturedEvent": (
        "the host queried, synchronized or waited on an event last recorded inside the capture: "
        "a captured event marks a point in a graph, not in time",
        "Query or synchronize such an event only after a replay, or use an event recorded outside "
        "the capture."),
    "shape_mismatch": (
        "a torch op checked shapes on the host while capturing and raised",
        "Keep every tensor a captured op reads at its full shape until that op is issued."),
    "aborted": (
        "the program raised an exception while capturing, so the capture was abandoned",
        "Fix the exception (its traceback names the op) and capture again."),
}


def _capture_failed(g: _Graph) -> Finding:
    end = g.end
    assert end is not None and end.error is not None
    named = _CUDA_ERROR.search(end.error)
    name = named.group(1) if named else end.error
    meaning, fix = _CAPTURE_ERRORS.get(name, (term(capture_error(name)).meaning, "Fix the error and capture again."))
    emptied = _emptying(g, before=end.step)
    cause = ""
    if emptied and not name.startswith("cudaError"):     # a CUDA error has a cause of its own
        m = emptied[-1]
        reason = f", {m.why}" if m.why else ""
        cause = (f" Before it failed, the host emptied {m.label!r} ({m.op} at step {m.step}{reason}): "
                 f"if the error is a shape check, that is its cause ({GRAPH_HOLDS[SHAPE_ERROR]}).")
    return Finding(
        0, "capture_failed", ERROR, end.step, f"graph {g.id}", (),
        f"The capture of graph {g.id} on stream {end.stream} failed at step {end.step} with "
        f"{end.error!r}: {meaning}. There is no graph: nothing was frozen and nothing replays, so "
        f"this report has no race or frozen-value finding for it.{cause}",
        f"{fix} Then check the new trace: a failed capture hides every hazard its graph would "
        f"have had.")


# --------------------------------------------------------------------------- rule 1
def _host_mutations(g: _Graph, index: _Index) -> Iterator[Finding]:
    if not g.mutations:
        return
    uses_of: dict[TensorId, list[tuple[int, Record, Arg | None]]] = defaultdict(list)
    for use in g.uses:
        for arg in use.args:
            uses_of[arg.tensor].append((use.step, use, arg))
    if g.host_reads:
        for read in g.host_reads:
            uses_of[read.tensor].append((read.step, read, None))
        for uses in uses_of.values():
            uses.sort(key=lambda u: u[0])
    for m in g.mutations:
        if (m.old_ptr, m.old_shape) == (m.new_ptr, m.new_shape):
            continue  # nothing changed, nothing to freeze
        affected = _affected(m, g, uses_of, index)
        if not affected:
            continue
        reason = f" ({m.why})" if m.why else ""
        yield Finding(
            1, "host_mutation", ERROR, m.step, m.label, (m.old_ptr, m.new_ptr),
            f"{m.op} at step {m.step}{reason} changed {m.label!r} on the host from "
            f"{hex(m.old_ptr)} ({m.old_numel} elements) to {hex(m.new_ptr)} ({m.new_numel} "
            f"elements) while graph {g.id} was being captured. Replays never rerun host code, so "
            f"every replay gets what the host did after the change, not the data at "
            f"{hex(m.old_ptr)}: {_what_the_graph_holds(affected)}.",
            f"Issue every launch that uses {m.label!r} before the {m.op} (under capture, host "
            f"statement order decides what is frozen), or do not {m.op} it while capturing: "
            f"skip the dispose during capture, dispose only a buffer the branch owns after its "
            f"last use, or give the other branch a clone.")


def _affected(m: Mutation, g: _Graph, uses_of: dict[TensorId, list[tuple[int, Record, Arg | None]]],
              index: _Index) -> list[Consumer]:
    """What used ``m.tensor`` after ``m`` in the capture: launches and skipped ops, host reads
    of its changed shape, or else the views taken of it (a view-only use still carries the
    new pointer). Views taken before ``m`` kept the old storage and are unaffected; views of
    a later view inherit the change whenever they were taken."""
    reshaped = (m.new_shape, m.new_numel) != (m.old_shape, m.old_numel)
    found: dict[int, Consumer] = {}
    views: list[View] = []

    def take(uses: list[tuple[int, Record, Arg | None]]) -> None:
        for _, record, arg in uses:
            if type(record) is not HostRead or reshaped:
                found.setdefault(id(record), (record, arg))

    uses = uses_of.get(m.tensor, [])
    take(uses[bisect.bisect_right(uses, m.step, key=lambda u: u[0]):])
    todo = [v for v in index.views_of.get(m.tensor, ()) if v.step > m.step]
    while todo:
        view = todo.pop()
        views.append(view)
        take(uses_of.get(view.tensor, []))
        todo += index.views_of.get(view.tensor, ())
    if not found:
        found = {id(v): (v, None) for v in views if v.graph == g.id}
    return sorted(found.values(), key=lambda c: c[0].step)


# --------------------------------------------------------------------------- rule 2
@dataclass
class _Emptied:
    """A tensor full earlier in a capture, and the uses that later got it empty or null."""

    ptr: DataPtr
    numel: int
    step: int
    label: str
    uses: list[tuple[CaptureUse, int]] = field(default_factory=list)   # (use, argument index)


def _emptied(g: _Graph, index: _Index) -> dict[TensorId, _Emptied]:
    full: dict[TensorId, _Emptied] = {}      # first seen full in this capture
    for r in heapq.merge(g.uses, g.mutations, key=lambda r: r.step):
        if type(r) is Mutation:   # emptied during capture: it had its data when capture began
            if r.old_numel and r.old_ptr:
                full.setdefault(r.tensor, _Emptied(r.old_ptr, r.old_numel, r.step, r.label))
            continue
        for k, arg in enumerate(r.args):
            if arg.numel and arg.ptr:
                if arg.tensor not in full:
                    full[arg.tensor] = _Emptied(arg.ptr, arg.numel, r.step, arg.label)
                continue
            owner = next((t for t in _emptied_lineage(arg.tensor, index)
                          if t in full and full[t].step < r.step), None)
            if owner is not None:
                full[owner].uses.append((r, k))
    return {t: e for t, e in full.items() if e.uses}


def _empty_arguments(g: _Graph, emptied: dict[TensorId, _Emptied]) -> Iterator[Finding]:
    for owner, e in emptied.items():
        use, k = e.uses[0]
        arg = use.args[k]
        through = f", through the view {arg.label!r}" if arg.tensor != owner else ""
        affected = _distinct((u, u.args[i]) for u, i in e.uses)
        first = "it" if len(affected) == 1 else f"the first, {use.label!r},"
        yield Finding(
            2, "empty_argument", ERROR, use.step, e.label, (e.ptr, arg.ptr),
            f"{e.label!r} held {e.numel} elements at {hex(e.ptr)} in the capture of graph {g.id} "
            f"(step {e.step}), but then {_plural(len(affected), 'captured op')} got it empty or "
            f"null: {first} got {hex(arg.ptr)} with {arg.numel} elements{through}. "
            f"{_capitalised(_what_the_graph_holds(affected))}.",
            f"Keep {e.label!r} alive and full until every captured launch that reads it has been "
            f"issued: move the statement that empties it (dispose_tensor, set_, resize_) after "
            f"them, skip it while capturing, or hand the other branch its own copy.")


def _emptied_lineage(tensor: TensorId, index: _Index) -> Iterator[TensorId]:
    """``tensor``, then the bases it views while it was taken of an emptied storage."""
    yield tensor
    view = index.views.get(tensor)
    while view is not None and view.ptr == 0:
        yield view.base
        view = index.views.get(view.base)


def _emptying(g: _Graph, before: int) -> list[Mutation]:
    """The mutations of ``g`` before step ``before`` that emptied a full tensor."""
    return [m for m in g.mutations if m.step < before and m.old_numel and m.old_ptr
            and (m.new_numel == 0 or m.new_ptr == 0)]


# --------------------------------------------------------------------------- rule 6
def _extents(g: _Graph, emptied: dict[TensorId, _Emptied]) -> Iterator[Finding]:
    """Captured arguments whose extent runs past the bytes behind their pointer."""
    explained = {(id(use), k) for e in emptied.values() for use, k in e.uses}   # rule 2's
    short: dict[TensorId, list[tuple[Launch, Arg]]] = {}
    for node in g.nodes:
        for k, arg in enumerate(node.args):
            behind = 0 if arg.ptr == 0 else arg.storage_nbytes
            if arg.nbytes and behind is not None and arg.nbytes > behind \
                    and (id(node), k) not in explained:
                short.setdefault(arg.tensor, []).append((node, arg))
    for found in short.values():
        node, arg = found[0]
        n = len(found) - 1
        more = f" (and {n} more captured launch{'es' if n > 1 else ''})" if n else ""
        if arg.ptr == 0:
            what = (f"there is nothing behind a null pointer: the graph holds "
                    f"{GRAPH_HOLDS[NULL_POINTER_NODE]} (cudaErrorIllegalAddress at address 0)")
        else:
            over = arg.nbytes - (arg.storage_nbytes or 0)
            past = {"r": f"reads {over} bytes past its end, whatever the allocator put there next: "
                         "silently wrong, or a fault past the end of the segment",
                    "w": f"writes {over} bytes past its end, over whatever the allocator put there "
                         "next: a neighbouring tensor is silently corrupted"}
            what = (f"only {arg.storage_nbytes} bytes of storage lie behind that pointer, so every "
                    f"replay {past.get(arg.access, past['w'])}")
        yield Finding(
            6, "extent_exceeds_storage", ERROR, node.step, arg.label, (arg.ptr,),
            f"{node.label!r} on {node.stream} (step {node.step}) was captured with {arg.label!r} at "
            f"{hex(arg.ptr)} and an extent of {arg.nbytes} bytes ({arg.numel} elements){more}, "
            f"but {what}.",
            f"Size the kernel from the tensor it is given (its element count at launch), not from a "
            f"static batch size, or make {arg.label!r} at least {arg.nbytes} bytes: a kernel must "
            f"never get a pointer with fewer bytes behind it than it touches.")


# --------------------------------------------------------------------------- rules 3 and 4
def _races(g: _Graph) -> Iterator[Finding]:
    """Unordered overlapping accesses of one graph: rule 4 across a free, else rule 3."""
    nodes = g.nodes
    ancestors = _ancestors(nodes)
    by_range: dict[tuple[DataPtr, DataPtr], _Accesses] = {}
    for i, node in enumerate(nodes):
        for k, arg in enumerate(node.args):
            if arg.nbytes and arg.ptr:
                key = (arg.ptr, arg.ptr + arg.nbytes)
                accesses = by_range.get(key)
                if accesses is None:
                    accesses = by_range[key] = _Accesses()
                accesses.add(i, k, arg.writes)
    free_steps = [f.step for f in g.frees]
    racing: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    after_free: dict[int, dict[tuple[int, int], tuple[int, int, int, int]]] = {}
    active: list[tuple[DataPtr, DataPtr]] = []
    for here in sorted(by_range):
        active = [r for r in active if r[1] > here[0]] + [here]
        for there in active:                       # every range overlapping this one, itself too
            lo, hi = max(here[0], there[0]), min(here[1], there[1])
            pairs = _unordered(by_range[here], by_range[there], ancestors)
            if there != here:
                pairs = itertools.chain(pairs, _unordered(by_range[there], by_range[here], ancestors))
            for pair in pairs:
                i, j = pair[0], pair[2]
                free = _free_between(g.frees, free_steps, nodes[i].step, nodes[j].step, lo, hi)
                found = racing if free is None else after_free.setdefault(free, {})
                found[i, j] = min(found.get((i, j), pair), pair)
    for i, ka, j, kb in racing.values():
        yield _race(g, nodes[i], nodes[i].args[ka], nodes[j], nodes[j].args[kb])
    for free, pairs in after_free.items():
        i, ka, j, kb = min(pairs.values())
        yield _reuse(g, g.frees[free], nodes[i], nodes[i].args[ka], nodes[j], nodes[j].args[kb],
                     len(pairs))


@dataclass
class _Accesses:
    """The nodes touching one address range: as bitsets (bit = node position) and a list."""

    items: list[tuple[int, int, bool]] = field(default_factory=list)   # (node, arg index, writes)
    writers: int = 0
    readers: int = 0
    arg: dict[int, int] = field(default_factory=dict)                  # node -> an arg index

    def add(self, node: int, arg: int, writes: bool) -> None:
        self.items.append((node, arg, writes))
        bit = 1 << node
        if writes:
            self.writers |= bit
            self.arg[node] = arg          # name the write when a node both reads and writes
        else:
            self.readers |= bit
            self.arg.setdefault(node, arg)


def _unordered(later: _Accesses, earlier: _Accesses,
               ancestors: list[int]) -> Iterator[tuple[int, int, int, int]]:
    """(i, arg, j, arg) for each access j of ``later`` and each earlier node i of ``earlier``
    that conflicts with it (one of them writes) and has no path to it."""
    for j, kb, writes in later.items:
        conflicting = earlier.writers | (earlier.readers if writes else 0)
        partners = conflicting & ((1 << j) - 1) & ~ancestors[j]
        while partners:
            low = partners & -partners
            i = low.bit_length() - 1
            yield i, earlier.arg[i], j, kb
            partners ^= low


def _ancestors(nodes: list[Launch]) -> list[int]:
    """Per node, the bitset (a Python int, bit = position) of nodes with a path to it.

    A node can only wait for work already issued, so one pass in record order
    is a topological order; a dep naming no earlier node adds no path.
    """
    position: dict[int, int] = {}
    ancestors: list[int] = []
    for node in nodes:
        bits = 0
        for dep in node.deps:
            p = position.get(dep)
            if p is not None:
                bits |= ancestors[p] | (1 << p)
        position[node.id] = len(ancestors)
        ancestors.append(bits)
    return ancestors


def _free_between(frees: list[Free], steps: list[int], after: int, before: int,
                  lo: DataPtr, hi: DataPtr) -> int | None:
    """Index of a free between two steps whose block covers part of [lo, hi)."""
    for f in range(bisect.bisect_right(steps, after), bisect.bisect_left(steps, before)):
        block = frees[f]
        if block.ptr < hi and lo < block.ptr + block.nbytes:
            return f
    return None


def _race(g: _Graph, a: Launch, arg_a: Arg, b: Launch, arg_b: Arg) -> Finding:
    label = arg_a.label if arg_a.writes else arg_b.label
    return Finding(
        3, "cross_stream_race", WARNING, b.step, label, tuple(sorted({arg_a.ptr, arg_b.ptr})),
        f"{a.label!r} on stream {a.stream} {_verb(arg_a)} {arg_a.label!r} at {_range(arg_a)} and "
        f"{b.label!r} on stream {b.stream} {_verb(arg_b)} {arg_b.label!r} at {_range(arg_b)}, "
        f"overlapping addresses, and no path in graph {g.id} orders the two: on replay they may "
        f"run in either order or at once, so the result depends on timing.",
        f"Order them: after issuing {a.label!r}, make {b.stream} wait for {a.stream} "
        f"({b.stream}.wait_stream({a.stream}) or an event) before {b.label!r}, or give each "
        f"stream its own buffer.")


def _reuse(g: _Graph, free: Free, a: Launch, arg_a: Arg, b: Launch, arg_b: Arg, pairs: int) -> Finding:
    more = f" ({pairs} such pairs of launches)" if pairs > 1 else ""
    return Finding(
        4, "reuse_after_free", WARNING, free.step, free.label, (free.ptr,),
        f"{free.label!r} ({free.nbytes} bytes at {hex(free.ptr)}) was freed at step {free.step} "
        f"while graph {g.id} was being captured, and the graph's pool {free.pool} handed the "
        f"block out again: at step {b.step}, {b.label!r} on stream {b.stream} {_verb(arg_b)} "
        f"{arg_b.label!r} in it. {a.label!r} on stream {a.stream} (step {a.step}) "
        f"{_verb(arg_a)} the old {arg_a.label!r} there and has no path to {b.label!r} in the "
        f"graph{more}. On replay they may run in either order, so {a.label!r} can meet the "
        f"bytes of {arg_b.label!r}. Issuing {a.label!r} first on the host does not order "
        f"the device.",
        f"Keep {free.label!r} alive until stream {a.stream} has joined back (dispose it after "
        f"the join, or tensor.record_stream({a.stream})), or skip the dispose while capturing.")


# --------------------------------------------------------------------------- rule 7
# Ops that read only the shape of a template argument (``torch.ones_like(x)``): they derive
# nothing from its data.
_SHAPE_ONLY = re.compile(r"(?:^|\.)(?:\w+_like|new_[a-z_]+)(?:\.|$)")


@functools.lru_cache(maxsize=4096)
def _shape_only(kernel: str) -> bool:
    return _SHAPE_ONLY.search(kernel) is not None


@dataclass(slots=True)
class _Derived:
    """An address range an eager launch wrote from data derived from graphs' static inputs."""

    graphs: int          # bitset over the graphs whose inputs it derives from
    writer: Launch
    arg: Arg


def _frozen_state(index: _Index) -> Iterator[Finding]:
    """Follow input-derived data through the eager launches before each capture (the
    warm-up), then report what each graph reads of it without writing it."""
    unwritten = {g.id: reads for g in index.graphs.values()
                 if g.inputs and g.begin is not None and not g.failed and (reads := _unwritten_reads(g))}
    if not unwritten:
        return                           # every graph writes all it reads: nothing can be frozen
    graphs = [index.graphs[gid] for gid in unwritten]
    bits = {g.id: 1 << k for k, g in enumerate(graphs)}
    sources = [src for g in graphs for src in _input_sources(g, bits[g.id], index)]
    derived: _Intervals[_Derived] = _Intervals()
    at_begin: dict[GraphId, list[tuple[tuple[DataPtr, DataPtr], _Derived]]] = {}
    first_begin = min(g.begin.step for g in graphs if g.begin)
    last_begin = max(g.begin.step for g in graphs if g.begin)
    later_writes: list[tuple[int, DataPtr, DataPtr]] = []   # eager writes once a capture began
    for r in index.eager:
        kind = type(r)
        if kind is Launch:
            if r.step < last_begin:
                _propagate(r, derived, sources)
            if r.step > first_begin:
                later_writes += [(r.step, a.ptr, a.ptr + a.nbytes) for a in r.args if a.writes and a.nbytes]
        elif kind is Capture:
            if r.graph in bits:
                at_begin[r.graph] = [(key, d) for key, d in derived.items() if d.graphs & bits[r.graph]]
        elif r.step < last_begin and derived:   # Alloc or Free: the block changed hands
            derived.clear(r.ptr, r.ptr + (r.nbytes or 1))
    for g in graphs:
        if at_begin.get(g.id):
            yield from _frozen_reads(g, unwritten[g.id], at_begin[g.id], later_writes, index)


def _unwritten_reads(g: _Graph) -> list[tuple[Launch, Arg]]:
    """The reads of ``g`` whose bytes no captured node writes or allocates, inputs aside."""
    ranges = [((a.ptr, a.ptr + a.nbytes), node, a) for node in g.nodes for a in node.args
              if a.nbytes and a.ptr]
    written = _Intervals((key, a) for key, _, a in ranges if "w" in a.access)
    written.update(((r.ptr, r.ptr + max(r.nbytes, 1)), r) for r in g.allocs)
    extents = _input_extents(g, g.inputs)
    inputs = [(p, p + extents[p]) for p in g.inputs]
    return [(node, a) for (lo, hi), node, a in ranges
            if "r" in a.access and (lo, hi) not in written and not written.overlapping(lo, hi)
            and not any(p < hi and lo < q for p, q in inputs)]


def _input_sources(g: _Graph, bit: int, index: _Index) -> Iterator[tuple[DataPtr, DataPtr, int, int]]:
    """(lo, hi, bit, since) per static input: reading [lo, hi) after step ``since`` (its last
    allocation before the capture) reads the input."""
    assert g.begin is not None
    extents = _input_extents(g, g.inputs)
    for p in g.inputs:
        extent = max(extents[p], index.alloc_nbytes.get(p, 0))
        steps = index.alloc_steps.get(p, [])
        before = [s for s in steps if s < g.begin.step]
        yield p, p + extent, bit, before[-1] if before else -1


def _propagate(launch: Launch, derived: _Intervals[_Derived],
               sources: list[tuple[DataPtr, DataPtr, int, int]]) -> None:
    """What ``launch`` writes derives from every input its reads derive from."""
    graphs, step = 0, launch.step
    if not _shape_only(launch.kernel):
        for a in launch.args:
            if "r" in a.access and a.nbytes and a.ptr:
                lo, hi = a.ptr, a.ptr + a.nbytes
                for s_lo, s_hi, bit, since in sources:
                    if s_lo < hi and lo < s_hi and step > since:
                        graphs |= bit
                for _, d in derived.overlapping(lo, hi):
                    graphs |= d.graphs
    for a in launch.args:
        if "w" in a.access and a.nbytes and a.ptr:
            lo, hi = a.ptr, a.ptr + a.nbytes
            if graphs:
                old = derived.get(lo, hi) if "r" in a.access else None
                derived.put(lo, hi, _Derived(graphs | (old.graphs if old else 0), launch, a))
            elif a.access == "w":        # overwritten with data derived from no input
                derived.clear(lo, hi)


def _frozen_reads(g: _Graph, unwritten: list[tuple[Launch, Arg]],
                  warm: list[tuple[tuple[DataPtr, DataPtr], _Derived]],
                  later_writes: list[tuple[int, DataPtr, DataPtr]], index: _Index) -> Iterator[Finding]:
    assert g.begin is not None
    derived = _Intervals(warm)
    reads: dict[tuple[DataPtr, DataPtr], list[tuple[Launch, Arg]]] = {}
    for node, a in unwritten:
        for key, _ in derived.overlapping(a.ptr, a.ptr + a.nbytes):
            reads.setdefault(key, []).append((node, a))
    skips = _Skips(g)
    for (lo, hi), found in reads.items():
        if any(s > g.begin.step and p < hi and lo < q for s, p, q in later_writes):
            continue                     # refreshed eagerly, like an input
        yield _frozen(g, derived.get(lo, hi), (lo, hi), found, skips, index)


class _Skips:
    """The ops of one capture that launched nothing: where they would have written, and
    which made each (empty) tensor."""

    def __init__(self, g: _Graph) -> None:
        self.at: _Intervals[SkippedLaunch] = _Intervals()
        self.made: dict[TensorId, SkippedLaunch] = {}
        for use in g.uses:
            if type(use) is SkippedLaunch:
                for a in use.args:
                    if a.writes:
                        self.made.setdefault(a.tensor, use)
                        if a.ptr and (a.ptr, a.ptr + 1) not in self.at:
                            self.at.put(a.ptr, a.ptr + 1, use)


def _frozen(g: _Graph, warm: _Derived | None, block: tuple[DataPtr, DataPtr],
            found: list[tuple[Launch, Arg]], skips: _Skips, index: _Index) -> Finding:
    assert warm is not None
    reader, arg = found[0]
    lo, hi = block
    more = f"; {_plural(len(found) - 1, 'more captured read')}" if len(found) > 1 else ""
    inputs = ", ".join(repr(_input_label(g, p)) for p in g.inputs)
    skipped = min((u for _, u in skips.at.overlapping(lo, hi) if u.step < reader.step),
                  key=lambda u: u.step, default=None)
    w = warm.writer
    return Finding(
        7, "frozen_state", ERROR, reader.step, arg.label, (lo,),
        f"graph {g.id} reads {arg.label!r} at [{hex(lo)}, +{hi - lo} bytes) ({reader.label!r} on "
        f"{reader.stream}, step {reader.step}{more}), but no captured node writes it: every replay "
        f"reads what the warm-up left there. {w.label!r} on {w.stream} wrote it eagerly at step "
        f"{w.step} from data derived from the graph's static input {inputs}, so whatever input a "
        f"replay gets, it reads the warm-up's answer: silently wrong (replaying the warm-up's own "
        f"input hides it).{_what_stopped_it(g, arg.label, reader.step, skipped, skips, index)}",
        f"Make the graph write {arg.label!r} on every replay: keep what its writer reads alive and "
        f"full until that op is captured (issue it before the dispose, or skip the dispose while "
        f"capturing). If {arg.label!r} is meant to be a constant, compute it from constants, not "
        f"from the input.")


def _what_stopped_it(g: _Graph, label: str, before: int, skipped: SkippedLaunch | None,
                     skips: _Skips, index: _Index) -> str:
    """The host mutation that stopped the capture writing ``label``, with the evidence: the
    op over the emptied tensor that launched nothing, or the host read that skipped it."""
    emptied = _emptying(g, before)
    if skipped:
        m = _emptied_upstream(skipped, emptied, skips, index)
        if m is None:
            return (f" In the capture, {_name(skipped)} would have written it but launched nothing "
                    f"({skipped.reason}).")
        evidence = f"{_name(skipped)} launched nothing, so for it the graph holds {GRAPH_HOLDS[NO_NODE]}"
    else:
        guarded = ((m, h) for m in reversed(emptied) for h in g.host_reads
                   if h.tensor == m.tensor and m.step < h.step < before and 0 in h.shape)
        m, guard = next(guarded, (None, None))
        if m is None or guard is None:
            if not emptied:
                return ""
            m = emptied[-1]
            return (f" The capture emptied {m.label!r} ({m.op} at step {m.step}) before the graph's "
                    f"first read: if the op that writes {label!r} reads it, that op launched nothing "
                    f"or host code skipped it.")
        evidence = (f"host code read {guard.label!r}.{guard.op} at step {guard.step}, saw the emptied "
                    f"shape {_shape(guard.shape)} and issued no op that writes {label!r}")
    reason = f" ({m.why})" if m.why else ""
    return (f" What stopped the capture writing it: {m.op} of {m.label!r} at step {m.step}{reason}, "
            f"before the graph's first read; after it, {evidence}.")


def _emptied_upstream(skipped: SkippedLaunch, emptied: list[Mutation], skips: _Skips,
                      index: _Index) -> Mutation | None:
    """The mutation that emptied what ``skipped`` read: directly, through views, or through
    the empty outputs of earlier ops that launched nothing."""
    by_tensor = {m.tensor: m for m in emptied}        # the latest mutation of each tensor
    todo, seen = [skipped], set()
    while todo:
        op = todo.pop()
        seen.add(id(op))
        for a in op.args:
            if a.reads:
                hit = next((by_tensor[t] for t in _emptied_lineage(a.tensor, index) if t in by_tensor), None)
                if hit is not None:
                    return hit
                maker = skips.made.get(a.tensor)
                if maker is not None and id(maker) not in seen:
                    todo.append(maker)
    return None


# --------------------------------------------------------------------------- rule 5
def _stale_inputs(trace: Trace, index: _Index) -> Iterator[Finding]:
    """Replays with no eager write into a static input since the last capture end or replay."""
    watched: dict[GraphId, dict[DataPtr, tuple[int, bool]]] = {}  # ptr -> (extent, refreshed)
    stale: dict[tuple[GraphId, DataPtr], list[Replay]] = {}
    replays: dict[GraphId, int] = defaultdict(int)
    for r in trace.records:
        kind = type(r)
        if kind is Launch and r.graph is None and watched:
            for arg in r.args:
                if arg.writes:
                    _mark_refreshed(watched, arg)
        elif kind is Capture and r.op == "end" and r.error is None and r.inputs:
            extents = _input_extents(index.graph(r.graph), r.inputs)
            watched[r.graph] = {p: (extents[p], False) for p in r.inputs}
        elif kind is Replay and r.graph in watched:
            replays[r.graph] += 1
            inputs = watched[r.graph]
            for p, (extent, refreshed) in inputs.items():
                if not refreshed:
                    stale.setdefault((r.graph, p), []).append(r)
                inputs[p] = (extent, False)
    for (gid, p), found in stale.items():
        first = found[0]
        label = _input_label(index.graph(gid), p)
        yield Finding(
            5, "stale_input", ERROR, first.step, label, (p,),
            f"graph {gid} reads its static input {label!r} at {hex(p)}, but {len(found)} of its "
            f"{replays[gid]} replays (first at step {first.step}, replay #{first.index}) ran with "
            f"no eager write into it since the capture ended or the previous replay: they "
            f"computed on an old input, not a new one.",
            f"Copy every new input into the captured buffer before each replay "
            f"({label}.copy_(new_input)); the graph never sees a new tensor. Check replays with "
            f"fresh inputs: reusing the warm-up input hides this bug.")


def _mark_refreshed(watched: dict[GraphId, dict[DataPtr, tuple[int, bool]]], arg: Arg) -> None:
    lo, hi = arg.ptr, arg.ptr + arg.nbytes
    for inputs in watched.values():
        for p, (extent, refreshed) in inputs.items():
            if not refreshed and lo < p + extent and p < hi:
                inputs[p] = (extent, True)


def _input_extents(g: _Graph, inputs: Iterable[DataPtr]) -> dict[DataPtr, int]:
    """How many bytes at each input pointer the graph reads (at least one)."""
    extents = {p: 1 for p in inputs}
    for use in g.uses:
        for arg in use.args:
            if arg.ptr in extents:
                extents[arg.ptr] = max(extents[arg.ptr], arg.nbytes)
    return extents


def _input_label(g: _Graph, ptr: DataPtr) -> str:
    return next((a.label for u in g.uses for a in u.args if a.ptr == ptr), hex(ptr))


# --------------------------------------------------------------------------- wording
def _what_the_graph_holds(consumers: list[Consumer]) -> str:
    """``for 'a' on alt at step 5 the graph holds ...; for ...``: per consumer, in glossary words."""
    groups: dict[str, list[str]] = {}
    for record, arg in consumers:
        groups.setdefault(_holds(record, arg), []).append(_name(record))
    return "; ".join(f"for {_listed(names)} the graph holds {holds}" for holds, names in groups.items())


def _holds(record: Record, arg: Arg | None) -> str:
    """What the graph holds for one consumer of a changed or emptied tensor."""
    kind = type(record)
    if kind is SkippedLaunch:
        return GRAPH_HOLDS[NO_NODE]
    if kind is HostRead:
        seen = f"{'emptied' if 0 in record.shape else 'changed'} shape {_shape(record.shape)}"
        return GRAPH_HOLDS[HOST_BRANCH].replace("emptied shape", seen)
    if kind is View:
        return (f"nothing yet: the view carries {hex(record.ptr)} ({record.numel} elements) to "
                f"whatever uses it next")
    assert arg is not None
    if arg.ptr == 0 and arg.nbytes:
        return f"{GRAPH_HOLDS[NULL_POINTER_NODE]} (cudaErrorIllegalAddress)"
    if not arg.nbytes:
        return (f"a node that got 0 bytes of it at {hex(arg.ptr)}: it reads none of the data, so its "
                f"output is wrong")
    return (f"a node frozen with {hex(arg.ptr)} ({arg.numel} elements): it uses whatever is "
            f"there, not the data it was meant to")


def _name(record: Record) -> str:
    if type(record) is HostRead:
        return f"the host's read of {record.label!r}.{record.op} at step {record.step}"
    if type(record) is View:
        return f"the view {record.label!r} taken at step {record.step}"
    return f"{record.label!r} on {record.stream} at step {record.step}"


def _listed(names: list[str], limit: int = 3) -> str:
    shown = names[:limit] + ([f"{len(names) - limit} more"] if len(names) > limit else [])
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _distinct(consumers: Iterable[Consumer]) -> list[Consumer]:
    """Distinct records in step order (a launch may use a tensor twice)."""
    seen: dict[int, Consumer] = {}
    for consumer in consumers:
        seen.setdefault(id(consumer[0]), consumer)
    return sorted(seen.values(), key=lambda c: c[0].step)


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _verb(arg: Arg) -> str:
    return {"r": "reads", "w": "writes", "rw": "reads and writes"}.get(arg.access, "uses")


def _range(arg: Arg) -> str:
    return f"[{hex(arg.ptr)}, +{arg.nbytes} bytes)"


# --------------------------------------------------------------------------- address ranges
V = TypeVar("V")


class _Intervals(Generic[V]):
    """Address ranges ``[lo, hi)``, each with a value; finds the ones overlapping a range.

    Keys stay sorted, so a query bisects to the first range starting at or past
    ``hi`` and walks back only as far as the longest range could reach.
    """

    def __init__(self, items: Iterable[tuple[tuple[DataPtr, DataPtr], V]] = ()) -> None:
        self._keys: list[tuple[DataPtr, DataPtr]] = []
        self._values: dict[tuple[DataPtr, DataPtr], V] = {}
        self._longest = 0
        self.update(items)

    def update(self, items: Iterable[tuple[tuple[DataPtr, DataPtr], V]]) -> None:
        """Add many ranges at once (one sort; a later value for a range replaces an earlier)."""
        self._values.update(items)
        self._keys = sorted(self._values)
        self._longest = max((hi - lo for lo, hi in self._keys), default=0)

    def put(self, lo: DataPtr, hi: DataPtr, value: V) -> None:
        key = (lo, hi)
        if key not in self._values:
            bisect.insort(self._keys, key)
            self._longest = max(self._longest, hi - lo)
        self._values[key] = value

    def get(self, lo: DataPtr, hi: DataPtr) -> V | None:
        return self._values.get((lo, hi))

    def __contains__(self, key: tuple[DataPtr, DataPtr]) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def items(self) -> Iterator[tuple[tuple[DataPtr, DataPtr], V]]:
        return ((key, self._values[key]) for key in self._keys)

    def overlapping(self, lo: DataPtr, hi: DataPtr) -> list[tuple[tuple[DataPtr, DataPtr], V]]:
        keys, found = self._keys, []
        i = bisect.bisect_left(keys, (hi,))
        while i:
            i -= 1
            key = keys[i]
            if key[0] + self._longest <= lo:
                break                    # this range and every one starting earlier end before lo
            if key[1] > lo:
                found.append((key, self._values[key]))
        return found

    def clear(self, lo: DataPtr, hi: DataPtr) -> None:
        """Forget every range that starts in ``[lo, hi)``."""
        keys = self._keys
        first = bisect.bisect_left(keys, (lo,))
        if first == len(keys) or keys[first][0] >= hi:
            return
        last = bisect.bisect_left(keys, (hi,), first)
        for key in keys[first:last]:
            del self._values[key]
        del self._keys[first:last]


# --------------------------------------------------------------------------- report
def format_report(findings: list[Finding]) -> str:
    """One block per finding, then a one-line summary."""
    if not findings:
        return "No capture hazards found."
    blocks = []
    for f in findings:
        head = f"{f.severity.upper()} rule {f.rule} ({f.code}) at step {f.step}: {f.label}"
        lines = [head]
        if f.pointers:
            lines.append("  pointers: " + ", ".join(hex(p) for p in f.pointers))
        lines.append(textwrap.fill(f.why, 92, initial_indent="  why: ", subsequent_indent="       "))
        lines.append(textwrap.fill(f.fix, 92, initial_indent="  fix: ", subsequent_indent="       "))
        blocks.append("\n".join(lines))
    errors = sum(f.severity == ERROR for f in findings)
    warnings = len(findings) - errors
    summary = f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"
    return "\n\n".join(blocks) + f"\n\n{summary}."


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
