"""What the checker's findings mark on a captured graph: the values its nodes froze, and why in a line.

A graph's box shows pointers; the hazards of the 2026 family hide in what a pointer does not say: a
scalar or a view's size read on the host at capture (rules 8, 15), a generator's state (17), a weight
the host rebound after the capture (14), an output kept across replays (13), an input an op between
graphs makes anew (18), a host int that picked the branch (16); and of the older family, an input
rebuilt every call (9) and a block freed while the graph lives on (10), even after the capture.
``node_marks`` names, per node, the arguments and scalars to draw in vermillion with a one-word tag;
``graph_notes`` says the rest in a line each, under the graph.
"""

from __future__ import annotations

from typing import Sequence

from ...checker import Finding
from ...checker.rules import (
    FREED_UNDER_GRAPH,
    FROZEN_HOST_VALUE,
    HOST_STATE_BRANCH,
    INPUT_FRESH_BETWEEN_GRAPHS,
    INPUT_REBUILT,
    OUTPUT_OVERWRITTEN,
    UNREGISTERED_GENERATOR,
    VIEW_FROZEN,
    WEIGHTS_REBOUND,
)
from ...trace import HostState, Launch, Record, SkippedLaunch

_AT_LAUNCH = frozenset(r.code for r in (FROZEN_HOST_VALUE, VIEW_FROZEN, UNREGISTERED_GENERATOR))
FROZEN, REBOUND, OVERWRITTEN, STALE, FREED, REBUILT = "FROZEN", "REBOUND", "OVERWRITTEN", "STALE", "FREED", "REBUILT"
TAGS = {WEIGHTS_REBOUND.code: REBOUND, OUTPUT_OVERWRITTEN.code: OVERWRITTEN, INPUT_FRESH_BETWEEN_GRAPHS.code: STALE,
        FREED_UNDER_GRAPH.code: FREED, INPUT_REBUILT.code: REBUILT}


Marked = str | tuple[str, int]     # a scalar's, view's or generator's name; an argument's (label, address)


def node_marks(findings: Sequence[Finding], launch: Launch | SkippedLaunch) -> dict[Marked, str]:
    """``{what: tag}`` for what ``launch`` froze that the checker names: a scalar, a view's or a
    generator's name (from the finding's ``label: name`` at the launch's step), or the ``(label,
    address)`` of an argument a rebound weight, a kept output, a stale, rebuilt or freed input points at."""
    prefix = f"{launch.label}: "
    marks: dict[Marked, str] = {f.label.removeprefix(prefix): FROZEN for f in findings
                                if f.code in _AT_LAUNCH and f.step == launch.step and f.label.startswith(prefix)}
    for f in findings:
        if f.code in TAGS and f.pointers:
            marks.update({(a.label, a.ptr): TAGS[f.code] for a in launch.args if a.ptr == f.pointers[0]})
    return marks


def graph_notes(findings: Sequence[Finding], records: Sequence[Record], graph: int,
                addresses: set[int]) -> list[str]:
    """A line per hazard of this graph that its boxes cannot show (``addresses``: what its nodes touch)."""
    flagged = {f.label for f in findings if f.code == HOST_STATE_BRANCH.code}
    notes = [f"frozen host state: {r.owner}.{r.attr} = {r.before} picked these kernels at capture (the capture "
             f"left it {r.after}); no replay changes it, so every replay runs this branch."
             for r in records if isinstance(r, HostState) and r.graph == graph and f"{r.owner}.{r.attr}" in flagged]
    for f in findings:
        if not f.pointers or f.pointers[0] not in addresses:
            continue
        if f.code == WEIGHTS_REBOUND.code:
            notes.append(f"{f.label} was rebound at step {f.step}, after the capture: it names {f.pointers[1]:#x} "
                         f"now, and every replay still reads {f.pointers[0]:#x}.")
        elif f.code == OUTPUT_OVERWRITTEN.code:
            notes.append(f"'{f.label.split(':')[0]}' read the output at {f.pointers[0]:#x} after later replays "
                         "rewrote it: every entry kept shows the last replay's values.")
        elif f.code == INPUT_FRESH_BETWEEN_GRAPHS.code and len(f.pointers) > 1:
            notes.append(f"after the capture the op between the graphs writes a new tensor ({f.pointers[1]:#x}) "
                         f"every step; this graph still reads {f.pointers[0]:#x}.")
    return notes
