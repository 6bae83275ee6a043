"""A configuration's verdict: what its replays showed, and whether the graph orders them.

A simulated replay can only be right or wrong; whether the program is safe is
a second question, which the checker answers from the trace. The verdict puts
the two together in the glossary's words: a configuration whose replays
computed the eager result (or lost a race the simulator happened to run one
way) while the checker finds only races (rule 3 ``cross_stream_race`` or rule
4 ``reuse_after_free``) is ``unordered`` (``glossary.UNORDERED_MEANS``:
two accesses to the same memory that nothing orders). Anything else keeps the replays' outcome.

docs/results.md's scenario table (``gpu_demo.measure.conformance``), the headline, the
pictures' badges, the explorer, the lab, the harness and the guard (``on_gpu=True``)
all call ``verdict`` here, so they cannot disagree about shared-first.
"""

from __future__ import annotations

from typing import Iterable

from ..glossary import CORRECT, GRAPH_EAGER_DIFFER, SILENT_WRONG, UNORDERED
from .findings import Finding
from .rules import CROSS_STREAM_RACE, REUSE_AFTER_FREE

RACES = frozenset({CROSS_STREAM_RACE.number, REUSE_AFTER_FREE.number})


def races(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that are races (rules 3 and 4): a replay is right or wrong by which node runs first."""
    return [f for f in findings if f.rule in RACES]


def verdict(outcome: str, findings: Iterable[Finding], *, on_gpu: bool = False) -> str:
    """The verdict in the glossary's words: what the replays did (``outcome``), read beside what
    the checker reports on the same trace (``findings``).

    Simulated replays (``on_gpu=False``) ran one schedule, against an eager run of the same
    program: where the checker finds only races, whatever they computed (``correct`` or
    ``silent_wrong``) is one side of a race, ``unordered``; an error finding (rules 1, 2, 5, ...)
    decides the result on every replay, so it leaves the outcome as it is.

    Replays on a GPU (``on_gpu=True``, ``gpu_demo.guard``) are what the hardware did, against
    the user's own eager reference: a race leaves correct replays ``unordered`` (a hazard the
    hardware has not lost yet), a wrong replay stays ``silent_wrong`` where the checker found
    something, and where it found nothing the two paths differ (``graph_eager_differ``): the
    reference may compute something else, and the capture is not named the culprit.
    """
    findings = list(findings)
    raced = races(findings)
    if on_gpu:
        if outcome == SILENT_WRONG and not findings:
            return GRAPH_EAGER_DIFFER
        return UNORDERED if outcome == CORRECT and raced else outcome
    if outcome in (CORRECT, SILENT_WRONG) and findings and raced == findings:
        return UNORDERED
    return outcome
