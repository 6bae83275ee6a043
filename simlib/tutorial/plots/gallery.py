"""A gallery case's pictures: the captured graph and the pointer table of the graph that goes wrong, and, where
graphs share memory, each graph's blocks on one address line with the replays and reads after the captures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from ...glossary import words
from .captured_graph import captured_graph
from .pointers import pointer_table
from .pool import graph_blocks, pool_blocks, shared_spans

if TYPE_CHECKING:   # simlib.programs.gallery runs the harness; the pictures need only its run's trace
    from ...programs.gallery import CaseRun


def case_pictures(run: "CaseRun", graph: str | None = None) -> dict[str, Figure]:
    """``{"graph": ..., "pointers": ...}`` for graph ``graph`` of ``run`` (by program name; default:
    the one its case shows, else the first captured), titled with the run's outcome and what the
    checker reports; and ``"pool"`` where two graphs write the same memory."""
    graphs = run.result.graphs
    if not graphs:
        raise ValueError(f"{run.name} captured no graph ({run.outcome}): there is nothing to draw")
    name = graph or run.shows or next(iter(graphs))
    if name not in graphs:
        raise ValueError(f"{run.name} has no graph {name!r}; its graphs are {list(graphs)}")
    gid = graphs[name].id
    rules = ", ".join(run.rules) or "nothing"
    title = f"{run.name}, graph {name!r}: {words(run.outcome)}; the checker reports {rules}"
    pictures = {"graph": captured_graph(run.result.trace, gid, takeaway=title),
                "pointers": pointer_table(run.result.trace, graph=gid, takeaway=title)}
    ids = {n: g.id for n, g in graphs.items()}
    if shared_spans(graph_blocks(run.result.trace, ids)):
        pictures["pool"] = pool_picture(run)
    return pictures


def pool_picture(run: "CaseRun") -> Figure:
    """Where ``run``'s graphs share memory: their blocks, then who wrote each before it was read."""
    rules = ", ".join(run.rules) or "nothing"
    return pool_blocks(run.result.trace, {n: g.id for n, g in run.result.graphs.items()},
                       takeaway=f"{run.name}, {run.order}: {words(run.outcome)}; the checker reports {rules}")
