"""Rule 1, ``host_mutation``: the host changed a tensor's metadata during a capture, then used it."""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Iterator

from ..trace import Arg, HostRead, Mutation, Record, TensorId, View
from .findings import Finding
from .index import Graph, Index
from .rules import HOST_MUTATION
from .wording import Consumer, what_the_graph_holds


def host_mutations(g: Graph, index: Index) -> Iterator[Finding]:
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
        yield HOST_MUTATION.finding(
            m.step, m.label, (m.old_ptr, m.new_ptr),
            f"{m.op} at step {m.step}{reason} changed {m.label!r} on the host from "
            f"{hex(m.old_ptr)} ({m.old_numel} elements) to {hex(m.new_ptr)} ({m.new_numel} "
            f"elements) while graph {g.id} was being captured. Replays never rerun host code, so "
            f"every replay gets what the host did after the change, not the data at "
            f"{hex(m.old_ptr)}: {what_the_graph_holds(affected)}.",
            f"Issue every launch that uses {m.label!r} before the {m.op} (under capture, host "
            f"statement order decides what is frozen), or do not {m.op} it while capturing: "
            f"skip the dispose during capture, dispose only a buffer the branch owns after its "
            f"last use, or give the other branch a clone.")


def _affected(m: Mutation, g: Graph, uses_of: dict[TensorId, list[tuple[int, Record, Arg | None]]],
              index: Index) -> list[Consumer]:
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
    for view in index.views_taken_of(m.tensor, after=m.step):
        views.append(view)
        take(uses_of.get(view.tensor, []))
    if not found:
        found = {id(v): (v, None) for v in views if v.graph == g.id}
    return sorted(found.values(), key=lambda c: c[0].step)

