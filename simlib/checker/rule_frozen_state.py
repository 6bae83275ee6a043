"""Rule 7, ``frozen_state``: the graph reads what only the warm-up wrote, from its static inputs."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterator

from ..glossary import GRAPH_HOLDS, NO_NODE
from ..trace import Alloc, Arg, Capture, DataPtr, GraphId, Launch, Mutation, SkippedLaunch, TensorId
from .findings import Finding, plural
from .index import Graph, Index
from .intervals import Intervals
from .rules import FROZEN_STATE
from .wording import consumer_name, shape_text

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


def frozen_state(index: Index) -> Iterator[Finding]:
    """Follow input-derived data through the eager launches before each capture (the
    warm-up), then report what each graph reads of it without writing it."""
    unwritten = {g.id: reads for g in index.graphs.values()
                 if g.inputs and g.begin is not None and not g.failed and (reads := _unwritten_reads(g))}
    if not unwritten:
        return                           # every graph writes all it reads: nothing can be frozen
    graphs = [index.graphs[gid] for gid in unwritten]
    bits = {g.id: 1 << k for k, g in enumerate(graphs)}
    sources = [src for g in graphs for src in _input_sources(g, bits[g.id], index)]
    derived: Intervals[_Derived] = Intervals()
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


def _unwritten_reads(g: Graph) -> list[tuple[Launch, Arg]]:
    """The reads of ``g`` whose bytes no captured node writes or allocates, inputs aside."""
    ranges = [((a.ptr, a.ptr + a.nbytes), node, a) for node in g.nodes for a in node.args
              if a.nbytes and a.ptr]
    written = Intervals((key, a) for key, _, a in ranges if "w" in a.access)
    written.update(((r.ptr, r.ptr + (r.nbytes or 1)), r) for r in g.allocs)
    extents = g.input_extents(g.inputs)
    inputs = [(p, p + extents[p]) for p in g.inputs]
    return [(node, a) for (lo, hi), node, a in ranges
            if "r" in a.access and (lo, hi) not in written and not written.touches(lo, hi)
            and not any(p < hi and lo < q for p, q in inputs)]


def _input_sources(g: Graph, bit: int, index: Index) -> Iterator[tuple[DataPtr, DataPtr, int, int]]:
    """(lo, hi, bit, since) per static input: reading [lo, hi) after step ``since`` (the last
    allocation before the capture of the block that holds it) reads the input."""
    assert g.begin is not None
    extents = g.input_extents(g.inputs)
    since = _allocated(g.inputs, g.begin.step, index)
    for p in g.inputs:
        extent = max(extents[p], index.alloc_nbytes.get(p, 0))
        yield p, p + extent, bit, since[p]


def _allocated(ptrs: tuple[DataPtr, ...], before: int, index: Index) -> dict[DataPtr, int]:
    """The step of the latest allocation before step ``before`` of the block that holds each
    pointer (-1: none seen). By the block, not the pointer: an input read as a view inside its
    block (``x.chunk(2)[1]``) starts no allocation, and what the block held before the input
    (a temporary, freed) is no data of the input."""
    since = dict.fromkeys(ptrs, -1)
    for r in index.eager:
        if type(r) is Alloc and r.step < before:
            for p in ptrs:
                if r.ptr <= p < r.ptr + (r.nbytes or 1):
                    since[p] = r.step
    return since


def _propagate(launch: Launch, derived: Intervals[_Derived],
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


def _frozen_reads(g: Graph, unwritten: list[tuple[Launch, Arg]],
                  warm: list[tuple[tuple[DataPtr, DataPtr], _Derived]],
                  later_writes: list[tuple[int, DataPtr, DataPtr]], index: Index) -> Iterator[Finding]:
    assert g.begin is not None
    derived = Intervals(warm)
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

    def __init__(self, g: Graph) -> None:
        self.at: Intervals[SkippedLaunch] = Intervals()
        self.made: dict[TensorId, SkippedLaunch] = {}
        for use in g.uses:
            if type(use) is SkippedLaunch:
                for a in use.args:
                    if a.writes:
                        self.made.setdefault(a.tensor, use)
                        if a.ptr and (a.ptr, a.ptr + 1) not in self.at:
                            self.at.put(a.ptr, a.ptr + 1, use)


def _frozen(g: Graph, warm: _Derived | None, block: tuple[DataPtr, DataPtr],
            found: list[tuple[Launch, Arg]], skips: _Skips, index: Index) -> Finding:
    assert warm is not None
    reader, arg = found[0]
    lo, hi = block
    more = f"; {plural(len(found) - 1, 'more captured read')}" if len(found) > 1 else ""
    inputs = ", ".join(repr(g.input_label(p)) for p in g.inputs)
    skipped = min((u for _, u in skips.at.overlapping(lo, hi) if u.step < reader.step),
                  key=lambda u: u.step, default=None)
    w = warm.writer
    return FROZEN_STATE.finding(
        reader.step, arg.label, (lo,),
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


def _what_stopped_it(g: Graph, label: str, before: int, skipped: SkippedLaunch | None,
                     skips: _Skips, index: Index) -> str:
    """The host mutation that stopped the capture writing ``label``, with the evidence: the
    op over the emptied tensor that launched nothing, or the host read that skipped it."""
    emptied = g.emptying(before)
    if skipped:
        m = _emptied_upstream(skipped, emptied, skips, index)
        if m is None:
            return (f" In the capture, {consumer_name(skipped)} would have written it but launched nothing "
                    f"({skipped.reason}).")
        evidence = f"{consumer_name(skipped)} launched nothing, so for it the graph holds {GRAPH_HOLDS[NO_NODE]}"
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
                    f"shape {shape_text(guard.shape)} and issued no op that writes {label!r}")
    reason = f" ({m.why})" if m.why else ""
    return (f" What stopped the capture writing it: {m.op} of {m.label!r} at step {m.step}{reason}, "
            f"before the graph's first read; after it, {evidence}.")


def _emptied_upstream(skipped: SkippedLaunch, emptied: list[Mutation], skips: _Skips,
                      index: Index) -> Mutation | None:
    """The mutation that emptied what ``skipped`` read: directly, through views, or through
    the empty outputs of earlier ops that launched nothing."""
    by_tensor = {m.tensor: m for m in emptied}        # the latest mutation of each tensor
    todo, seen = [skipped], set()
    while todo:
        op = todo.pop()
        seen.add(id(op))
        for a in op.args:
            if a.reads:
                hit = next((by_tensor[t] for t in index.emptied_lineage(a.tensor) if t in by_tensor), None)
                if hit is not None:
                    return hit
                maker = skips.made.get(a.tensor)
                if maker is not None and id(maker) not in seen:
                    todo.append(maker)
    return None
