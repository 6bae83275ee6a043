"""Rule 2, ``empty_argument``: a captured op got empty or null a tensor full earlier in the capture."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterator

from ..trace import DataPtr, Mutation, TensorId
from .findings import Finding, plural
from .index import CaptureUse, Graph, Index
from .rules import EMPTY_ARGUMENT
from .wording import capitalised, distinct, what_the_graph_holds


@dataclass
class Emptied:
    """A tensor full earlier in a capture, and the uses that later got it empty or null."""

    ptr: DataPtr
    numel: int
    step: int
    label: str
    uses: list[tuple[CaptureUse, int]] = field(default_factory=list)   # (use, argument index)


def emptied_tensors(g: Graph, index: Index) -> dict[TensorId, Emptied]:
    full: dict[TensorId, tuple[DataPtr, int, int, str]] = {}   # first seen full in this capture: ptr, numel, step, label
    emptied: dict[TensorId, Emptied] = {}   # those a later use got empty or null (most tensors never are)
    for r in heapq.merge(g.uses, g.mutations, key=lambda r: r.step):
        if type(r) is Mutation:   # emptied during capture: it had its data when capture began
            if r.old_numel and r.old_ptr:
                full.setdefault(r.tensor, (r.old_ptr, r.old_numel, r.step, r.label))
            continue
        for k, arg in enumerate(r.args):
            if arg.numel and arg.ptr:
                if arg.tensor not in full:
                    full[arg.tensor] = (arg.ptr, arg.numel, r.step, arg.label)
                continue
            owner = next((t for t in index.emptied_lineage(arg.tensor)
                          if t in full and full[t][2] < r.step), None)
            if owner is not None:
                if owner not in emptied:
                    emptied[owner] = Emptied(*full[owner])
                emptied[owner].uses.append((r, k))
    return {t: emptied[t] for t in full if t in emptied}   # in the order they were first seen full


def empty_arguments(g: Graph, emptied: dict[TensorId, Emptied]) -> Iterator[Finding]:
    for owner, e in emptied.items():
        use, k = e.uses[0]
        arg = use.args[k]
        through = f", through the view {arg.label!r}" if arg.tensor != owner else ""
        affected = distinct((u, u.args[i]) for u, i in e.uses)
        first = "it" if len(affected) == 1 else f"the first, {use.label!r},"
        yield EMPTY_ARGUMENT.finding(
            use.step, e.label, (e.ptr, arg.ptr),
            f"{e.label!r} held {e.numel} elements at {hex(e.ptr)} in the capture of graph {g.id} "
            f"(step {e.step}), but then {plural(len(affected), 'captured op')} got it empty or "
            f"null: {first} got {hex(arg.ptr)} with {arg.numel} elements{through}. "
            f"{capitalised(what_the_graph_holds(affected))}.",
            f"Keep {e.label!r} alive and full until every captured launch that reads it has been "
            f"issued: move the statement that empties it (dispose_tensor, set_, resize_) after "
            f"them, skip it while capturing, or hand the other branch its own copy.")
