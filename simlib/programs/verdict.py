"""A configuration's verdict: what its replays showed, and whether the graph orders them.

A simulated replay can only be right or wrong; whether the program is safe is
a second question, which the checker answers from the trace. The verdict puts
the two together in the glossary's words: a configuration whose replays
computed the eager result (or lost a race the simulator happened to run one
way) while the checker finds only races (rule 3 ``cross_stream_race`` or rule
4 ``reuse_after_free``, the warnings) is ``unordered`` (``glossary.UNORDERED_MEANS``:
two accesses to the same memory that nothing orders). Anything else keeps the replays' outcome.

The README's scenario table (``gpu_demo.measure.conformance``), the headline, the
pictures' badges, the explorer and the lab all call ``verdict`` here, so they
cannot disagree about shared-first.
"""

from __future__ import annotations

from typing import Collection, Iterable

from ..checker import WARNING, Finding, check
from ..engine import schedules
from ..engine.profiles import H200
from ..engine.schedules import Exploration
from ..engine.timing import Profile
from ..glossary import CORRECT, SILENT_WRONG, UNORDERED
from . import scenarios
from .scenarios import ScenarioResult
from .spec import MoEConfig

EXPLORED_REPLAYS = 3


def races(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that are races (rules 3 and 4, severity ``warning``)."""
    return [f for f in findings if f.severity == WARNING]


def verdict(outcome: str, findings: Iterable[Finding]) -> str:
    """``unordered`` where the replays ran to a result and the checker finds only races.

    ``outcome`` is what the simulated replays did; ``findings`` what the checker
    reports on the same trace. An error finding (rules 1, 2, 5) decides the
    result on every replay, so it leaves the outcome as it is.
    """
    findings = list(findings)
    if outcome in (CORRECT, SILENT_WRONG) and findings and races(findings) == findings:
        return UNORDERED
    return outcome


def verdict_of(result: ScenarioResult) -> str:
    """The verdict of one simulated run: its outcome, checked against its own trace."""
    return verdict(result.outcome, check(result.trace))


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
