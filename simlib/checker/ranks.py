"""What a multi-rank check reports: findings with their ranks, and the one merged report.

``simlib.checker.check_ranks`` makes the ``RankFinding``s: each rank's own
findings with its rank, then the cross-rank rule 12 with the ranks it
compared. ``format_rank_report`` is the report a job's rank 0 writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .findings import ERROR, Finding, format_report, plural


@dataclass(frozen=True)
class RankFinding:
    """A finding and the rank(s) it is about: one rank for rules 0-11, the compared ranks for 12."""

    ranks: tuple[int, ...]
    finding: Finding

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), **self.finding.to_dict()}


def format_rank_report(found: Sequence[RankFinding], ranks: Sequence[int], none_captured: str | None = None,
                       *, sites: bool = False) -> str:
    """One report for the whole job: each finding headed by the rank(s) it is about.
    ``none_captured``: no rank captured anything, and this line says so instead of an all-clear;
    ``sites``: as ``format_report``'s."""
    title = f"capture-order check of {plural(len(ranks), 'rank')} ({', '.join(map(str, ranks))}):"
    if not found and none_captured:
        return f"{title}\n{none_captured}"
    if not found:
        return f"{title}\nNo capture hazards found on any rank, and the ranks' captured collectives match."
    blocks = []
    for item in found:
        who = "rank" if len(item.ranks) == 1 else "ranks"
        blocks.append(f"[{who} {', '.join(map(str, item.ranks))}] "
                      + format_report([item.finding], sites=sites).rsplit("\n\n", 1)[0])
    errors = sum(item.finding.severity == ERROR for item in found)
    summary = f"{plural(errors, 'error')}, {plural(len(found) - errors, 'warning')}"
    return f"{title}\n" + "\n\n".join(blocks) + f"\n\n{summary}."
