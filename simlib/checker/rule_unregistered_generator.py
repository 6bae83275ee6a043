"""Rule 17, ``unregistered_generator``: a captured random op draws from a generator the graph does not advance."""

from __future__ import annotations

from typing import Iterator

from ..trace import DEFAULT_GENERATOR, GENERATOR, Launch
from .findings import Finding, plural
from .index import Graph
from .rules import UNREGISTERED_GENERATOR


def unregistered_generators(g: Graph) -> Iterator[Finding]:
    """One finding per generator that ``g``'s random nodes draw from, neither the default nor registered."""
    drawn: dict[str, list[Launch]] = {}
    for node in g.nodes:
        name = dict(node.scalars).get(GENERATOR)
        if name is not None and name != DEFAULT_GENERATOR and name not in g.generators:
            drawn.setdefault(name, []).append(node)
    for name, nodes in drawn.items():
        node, more = nodes[0], len(nodes) - 1
        also = f" So does {plural(more, 'more node')} of the graph." if more else ""
        registered = ", ".join(g.generators) or "none"
        yield UNREGISTERED_GENERATOR.finding(
            node.step, f"{node.label}: {name}", (),
            f"{node.label!r} on {node.stream} at step {node.step} was captured into graph {g.id} drawing from "
            f"the generator {name!r}, which the graph does not advance: it is not the default CUDA generator, "
            f"and it was not registered with the graph (registered: {registered}). The capture read the "
            f"generator's state (seed and offset) once and froze it into the node, so every replay draws the "
            f"same numbers: the dropout mask, the noise or the sample of the capture, every step.{also}",
            f"Register the generator with the graph before capturing it "
            f"(graph.register_generator_state({name})), so that each replay advances it, or draw from the "
            f"default CUDA generator, which every graph advances.")
