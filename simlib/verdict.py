"""A configuration's verdict: what its replays showed, and whether the graph orders them.

A simulated replay can only be right or wrong; whether the program is safe is
a second question, which the checker answers from the trace. The verdict puts
the two together in the glossary's words: a configuration whose replays
computed the eager result (or lost a race the simulator happened to run one
way) while the checker finds only races (rule 3 ``cross_stream_race`` or rule
4 ``reuse_after_free``, the warnings) is ``unordered``: a race the hardware
has not lost yet. Anything else keeps the replays' outcome.

The README's scenario table (``gpu_demo.conformance``), the headline, the
pictures' badges, the explorer and the lab all call ``verdict`` here, so they
cannot disagree about shared-first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .checker import WARNING, Finding, check
from .glossary import CORRECT, SILENT_WRONG, UNORDERED

if TYPE_CHECKING:
    from .scenarios import ScenarioResult


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


def verdict_of(result: "ScenarioResult") -> str:
    """The verdict of one simulated run: its outcome, checked against its own trace."""
    return verdict(result.outcome, check(result.trace))


def agrees(predicted: str, observed: str) -> bool:
    """Whether a GPU's observed outcome agrees with the simulator's verdict.

    ``unordered`` agrees with whatever replays can show short of a crash or a
    capture error: the race may go either way on real hardware.
    """
    if predicted == UNORDERED:
        return observed in (CORRECT, SILENT_WRONG)
    return predicted == observed
