"""What the simulator predicts for a configuration: every outcome its schedules can give.

One simulated run has one verdict (``ScenarioResult.verdict()``, ``simlib.checker.verdict``);
``possible_outcomes`` runs the configuration under every order of its races
(``simlib.engine.schedules``), which is what a GPU's outcome is held against (``agrees``).
"""

from __future__ import annotations

from typing import Collection

from ..engine import schedules
from ..engine.profiles import H200
from ..engine.schedules import Exploration
from ..engine.timing import Profile
from . import scenarios
from .spec import MoEConfig

EXPLORED_REPLAYS = 3


def possible_outcomes(config: MoEConfig, profile: Profile | None = H200) -> Exploration:
    """Every outcome the simulated schedules of ``config`` can produce (``simlib.engine.schedules``).

    Replays are explored over at most ``EXPLORED_REPLAYS``: a schedule repeats
    on every replay, so more replays add time, not outcomes.
    """
    explored = config.with_(replays=min(config.replays, EXPLORED_REPLAYS))
    return schedules.explore(lambda rt: scenarios.play(rt, explored).outcome, profile)


def agrees(possible: Collection[str], observed: str) -> bool:
    """A GPU's observed outcome agrees when some simulated schedule produces it.

    ``unordered`` is a verdict, not a set of outcomes: it agrees with nothing by
    itself; the schedules say which outcomes the race can give.
    """
    return observed in possible
