"""Each configuration of the MoE step simulated once per process, its findings and verdict with it.

The notebooks, the tables and the explorer ask for the same configurations again and again
(a redraw, a table cell); they share these caches, so a configuration is run and checked once.
"""

from __future__ import annotations

import functools

from .. import checker
from ..checker.verdict import verdict
from ..programs.scenarios import ScenarioResult, run
from ..programs.spec import MoEConfig


@functools.lru_cache(maxsize=256)
def scenario(config: MoEConfig) -> ScenarioResult:
    """``scenarios.run(config)``, cached: a configuration is simulated once per process."""
    return run(config)


@functools.lru_cache(maxsize=256)
def findings(config: MoEConfig) -> tuple[checker.Finding, ...]:
    """The checker's findings on ``config``'s trace, cached like ``scenario``."""
    return tuple(checker.check(scenario(config).trace))


def judged(config: MoEConfig) -> str:
    """``config``'s verdict (``simlib.checker.verdict``): its replays' outcome, or ``unordered``."""
    return verdict(scenario(config).outcome, findings(config))
