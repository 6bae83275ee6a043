"""The incident gallery: the incident family as simulated programs, each with its fix.

Each ``Case`` (``CASES``, by name) holds a public incident: its threads, a
one-paragraph story, the few lines of PyTorch it models (``pytorch``,
``pytorch_fix``: strings for the notebook), a builder of the hazardous and of
the fixed simulated program, the outcome expected per replay order, and the
checker rules it fires. Names are those of the PyTorch twins in
``gpu_demo.lab.corpus``, the family as it stands in 2026 (issue 36) included.
By module: ``frozen`` (the graph froze what the
host changes), ``freed`` (a block a graph uses, freed), ``between_graphs``
(two graphs, one pool or one input between them), ``host_state`` (host ints
and generator state a capture froze), ``outputs`` (a graph's output kept
across its own replays).

    from simlib.programs.gallery import CASES
    case = CASES["shared_pool_clobber"]
    run = case.run()                       # the hazard, in its first order
    run.outcome, run.rules                 # ('silent_wrong', ['graphs_clobber'])
    run.computed()                         # what each replay computed, against eager
    case.run(fixed=True).outcome           # 'correct'

``shared_pool_what_if(order, copied_out)`` is the widget's what-if for two
graphs in one pool; ``simlib.tutorial.plots.gallery`` draws a run.
"""

from __future__ import annotations

from .between_graphs import READ_AT_ONCE, READ_LATER
from .case import ONE_ORDER, Case, CaseRun
from .cases import CASES
from .what_if import WhatIf, shared_pool_what_if

__all__ = ["CASES", "Case", "CaseRun", "ONE_ORDER", "READ_AT_ONCE", "READ_LATER", "WhatIf", "case",
           "shared_pool_what_if"]


def case(name: str) -> Case:
    """The case whose hazard or fix is called ``name``."""
    for c in CASES.values():
        if name in (c.name, c.fix):
            return c
    raise KeyError(f"no gallery case {name!r}; the cases are: " + ", ".join(CASES))
