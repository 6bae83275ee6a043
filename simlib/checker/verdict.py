"""A configuration's verdict: what its replays showed, and whether the graph orders them.

A simulated replay can only be right or wrong; whether the program is safe is
a second question, which the checker answers from the trace. The verdict puts
the two together in the glossary's words: a configuration whose replays
computed the eager result (or lost a race the simulator happened to run one
way) while the checker finds only races (rule 3 ``cross_stream_race`` or rule
4 ``reuse_after_free``, the warnings) is ``unordered`` (``glossary.UNORDERED_MEANS``:
two accesses to the same memory that nothing orders). Anything else keeps the replays' outcome.

The README's scenario table (``gpu_demo.measure.conformance``), the headline, the
pictures' badges, the explorer, the lab and the harness all call ``verdict`` here,
so they cannot disagree about shared-first.
"""

from __future__ import annotations

from typing import Iterable

from ..glossary import CORRECT, SILENT_WRONG, UNORDERED
from .findings import WARNING, Finding


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
