"""The capture-hazard checker: what will a replay get wrong, read from a trace alone.

``check(trace)`` takes plain records (simulated by simlib or recorded from
real PyTorch by gpu_demo) and returns one ``Finding`` per hazard, ordered by
host step. It never needs the engine's objects: tensor ids, pointers, steps
and graph edges are all in the trace.

Rules (severity ``error``: wrong on every replay; ``warning``: a race whose
outcome depends on timing):

1. ``host_mutation`` (error): during a capture, the host changed a tensor's
   metadata (``set_``, ``resize_``) and a later captured launch used that
   tensor, or a view taken of it afterwards. The launch froze the new pointer;
   replays never rerun host code, so they all use it. (A mutation before the
   capture is seen alike by the capture and by eager runs, so it is not one.)
2. ``empty_argument`` (error): a captured launch, or an op that launched
   nothing because its outputs were empty, froze a tensor empty (0 elements)
   or null (pointer 0) although the same tensor was non-empty earlier in the
   capture. A view of an emptied tensor counts as that tensor. Reported once
   per tensor, at its first such launch.
3. ``cross_stream_race`` (warning): two nodes of one graph touch overlapping
   addresses, at least one writes, and no path in the graph orders them.
4. ``reuse_after_free`` (warning): the same, where the two nodes straddle a
   free during capture of a block covering the overlap: the later node uses
   the block the graph's pool handed out again while the earlier one may
   still be using the old contents. Reported once per free, never as rule 3.
5. ``stale_input`` (error): a replay ran with no eager write into one of the
   graph's static inputs since the capture ended or the previous replay.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import textwrap
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator

from .trace import (Arg, Capture, DataPtr, Free, GraphId, Launch, Mutation, Replay,
                    SkippedLaunch, TensorId, Trace, View)

ERROR = "error"
WARNING = "warning"

CaptureUse = Launch | SkippedLaunch


@dataclass(frozen=True)
class Finding:
    """One hazard.

    ``step`` is the host step to look at: the mutation (rule 1), the first
    launch that froze an empty argument (2), the later of two racing launches
    (3), the free (4), the first stale replay (5). ``pointers`` are the
    addresses involved; ``why`` and ``fix`` are for a person.
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
    frees: list[Free] = field(default_factory=list)


@dataclass
class _Index:
    """One pass over the trace: everything the rules look up."""

    graphs: dict[GraphId, _Graph] = field(default_factory=dict)
    views: dict[TensorId, View] = field(default_factory=dict)
    views_of: dict[TensorId, list[View]] = field(default_factory=lambda: defaultdict(list))

    def graph(self, gid: GraphId) -> _Graph:
        if gid not in self.graphs:
            self.graphs[gid] = _Graph(gid)
        return self.graphs[gid]


def _index(trace: Trace) -> _Index:
    index = _Index()
    for r in trace.records:
        kind = type(r)
        if kind is Launch and r.graph is not None:
            g = index.graph(r.graph)
            g.nodes.append(r)
            g.uses.append(r)
        elif kind is SkippedLaunch and r.graph is not None:
            index.graph(r.graph).uses.append(r)
        elif kind is Mutation and r.graph is not None:
            index.graph(r.graph).mutations.append(r)
        elif kind is Free and r.graph is not None:
            index.graph(r.graph).frees.append(r)
        elif kind is View:
            index.views[r.tensor] = r
            index.views_of[r.base].append(r)
    return index


# --------------------------------------------------------------------------- check
def check(trace: Trace) -> list[Finding]:
    """Every capture hazard in ``trace``, ordered by step (empty: clean)."""
    index = _index(trace)
    findings: list[Finding] = []
    for g in index.graphs.values():
        findings += _host_mutations(g, index)
        findings += _empty_arguments(g, index)
        findings += _races(g)
    findings += _stale_inputs(trace, index)
    return sorted(findings, key=lambda f: (f.step, f.rule, f.label, f.pointers, f.why))


# --------------------------------------------------------------------------- rule 1
def _host_mutations(g: _Graph, index: _Index) -> Iterator[Finding]:
    if not g.mutations:
        return
    uses_of: dict[TensorId, list[tuple[int, CaptureUse]]] = defaultdict(list)
    for use in g.uses:
        for arg in use.args:
            uses_of[arg.tensor].append((use.step, use))
    for m in g.mutations:
        if (m.old_ptr, m.old_shape) == (m.new_ptr, m.new_shape):
            continue  # nothing changed, nothing to freeze
        affected = _dedupe(_later_uses(m.tensor, m.step, uses_of, index))
        if not affected:
            continue
        reason = f" ({m.why})" if m.why else ""
        yield Finding(
            1, "host_mutation", ERROR, m.step, m.label, (m.old_ptr, m.new_ptr),
            f"{m.op} at step {m.step}{reason} changed {m.label!r} on the host from "
            f"{hex(m.old_ptr)} ({m.old_numel} elements) to {hex(m.new_ptr)} ({m.new_numel} "
            f"elements) while graph {g.id} was being captured, and then {_ops(affected)} froze "
            f"the new value. Replays never rerun host code: every replay runs "
            f"{_it(affected)} with {hex(m.new_ptr)}, not with the {hex(m.old_ptr)} that holds "
            f"the data.",
            f"Issue every launch that uses {m.label!r} before the {m.op} (under capture, host "
            f"statement order decides what is frozen), or do not {m.op} it while capturing: "
            f"skip the dispose during capture, dispose only a buffer the branch owns after its "
            f"last use, or give the other branch a clone.")


def _later_uses(tensor: TensorId, after: int, uses_of: dict[TensorId, list[tuple[int, CaptureUse]]],
                index: _Index) -> Iterator[CaptureUse]:
    """Uses of ``tensor`` after step ``after``, and of views taken of it after that step.

    A view taken before the mutation kept the old storage and is unaffected;
    views of such a later view inherit the mutation whenever they were taken.
    """
    uses = uses_of.get(tensor, [])
    for _, use in uses[bisect.bisect_right(uses, after, key=lambda u: u[0]):]:
        yield use
    todo = [v.tensor for v in index.views_of.get(tensor, ()) if v.step > after]
    while todo:
        t = todo.pop()
        for _, use in uses_of.get(t, ()):
            yield use
        todo += [v.tensor for v in index.views_of.get(t, ())]


# --------------------------------------------------------------------------- rule 2
def _empty_arguments(g: _Graph, index: _Index) -> Iterator[Finding]:
    live: dict[TensorId, tuple[DataPtr, int, int, str]] = {}  # tensor -> ptr, numel, step, label
    hits: dict[TensorId, list[tuple[CaptureUse, Arg]]] = {}
    for r in heapq.merge(g.uses, g.mutations, key=lambda r: r.step):
        if type(r) is Mutation:   # emptied during capture: it had its data when capture began
            if r.old_numel and r.old_ptr:
                live.setdefault(r.tensor, (r.old_ptr, r.old_numel, r.step, r.label))
            continue
        for arg in r.args:
            if arg.numel and arg.ptr:
                live.setdefault(arg.tensor, (arg.ptr, arg.numel, r.step, arg.label))
                continue
            owner = next((t for t in _emptied_lineage(arg.tensor, index)
                          if t in live and live[t][2] < r.step), None)
            if owner is not None:
                hits.setdefault(owner, []).append((r, arg))
    for owner, found in hits.items():
        use, arg = found[0]
        ptr, numel, seen, label = live[owner]
        through = f", through the view {arg.label!r}" if arg.tensor != owner else ""
        affected = _dedupe(u for u, _ in found)
        first = "it" if len(affected) == 1 else f"the first, {use.label!r},"
        yield Finding(
            2, "empty_argument", ERROR, use.step, label, (ptr, arg.ptr),
            f"{label!r} held {numel} elements at {hex(ptr)} in the capture of graph {g.id} "
            f"(step {seen}), but then {_ops(affected)} froze it empty or null: {first} froze "
            f"{hex(arg.ptr)} with {arg.numel} elements{through}. "
            f"{_consequence(use, arg)}",
            f"Keep {label!r} alive and full until every captured launch that reads it has been "
            f"issued: move the statement that empties it (dispose_tensor, set_, resize_) after "
            f"them, skip it while capturing, or hand the other branch its own copy.")


def _emptied_lineage(tensor: TensorId, index: _Index) -> Iterator[TensorId]:
    """``tensor``, then the bases it views while it was taken of an emptied storage."""
    yield tensor
    view = index.views.get(tensor)
    while view is not None and view.ptr == 0:
        yield view.base
        view = index.views.get(view.base)


def _consequence(use: CaptureUse, arg: Arg) -> str:
    if type(use) is SkippedLaunch:
        return ("PyTorch launched nothing for it, so on every replay its outputs keep whatever "
                "they held before: a stale buffer, wrong results and no error.")
    if arg.ptr == 0 and arg.nbytes:
        return (f"On replay the kernel touches {arg.nbytes} bytes at address 0 "
                "(cudaErrorIllegalAddress; the context is lost).")
    return "On replay the kernel reads none of the data it was meant to, so its output is wrong."


# --------------------------------------------------------------------------- rules 3 and 4
def _races(g: _Graph) -> Iterator[Finding]:
    """Unordered overlapping accesses of one graph: rule 4 across a free, else rule 3."""
    nodes = g.nodes
    ancestors = _ancestors(nodes)
    by_range: dict[tuple[DataPtr, DataPtr], _Accesses] = {}
    for i, node in enumerate(nodes):
        for k, arg in enumerate(node.args):
            if arg.nbytes and arg.ptr:
                by_range.setdefault((arg.ptr, arg.ptr + arg.nbytes), _Accesses()).add(i, k, arg.writes)
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
def _dedupe(uses: Iterable[CaptureUse]) -> list[CaptureUse]:
    """Distinct records in step order (a launch may use a tensor twice)."""
    seen: dict[int, CaptureUse] = {}
    for use in uses:
        seen.setdefault(id(use), use)
    return sorted(seen.values(), key=lambda u: u.step)


def _ops(uses: list[CaptureUse], limit: int = 3) -> str:
    """``2 captured ops ('a' on alt at step 5, ...)``, saying which launched nothing."""
    def one(u: CaptureUse) -> str:
        nothing = ", launched nothing" if type(u) is SkippedLaunch else ""
        return f"{u.label!r} on {u.stream} at step {u.step}{nothing}"
    names = [one(u) for u in uses[:limit]]
    if len(uses) > limit:
        names.append(f"{len(uses) - limit} more")
    return f"{_plural(len(uses), 'captured op')} ({'; '.join(names)})"


def _it(uses: list[CaptureUse]) -> str:
    return repr(uses[0].label) if len(uses) == 1 else "them"


def _verb(arg: Arg) -> str:
    return {"r": "reads", "w": "writes", "rw": "reads and writes"}.get(arg.access, "uses")


def _range(arg: Arg) -> str:
    return f"[{hex(arg.ptr)}, +{arg.nbytes} bytes)"


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
