"""What the checker reports: one ``Finding`` per hazard, and the report a person reads."""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass
from typing import Any

from ..trace import DataPtr

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One hazard.

    ``step`` is the host step to look at: the end of the failed capture (rule
    0), the mutation (1), the first launch that got an empty argument (2) or an
    argument short of its extent (6), the later of two racing launches (3),
    the free (4), the first stale replay (5), the graph's first read of a
    frozen value (7), the read of an overwritten result (13), the rebind (14),
    the launch captured with a moving view (15), the capture's end (16), the
    random node (17), the replay that read the old input (18). ``pointers`` are
    the addresses involved; ``why`` and ``fix`` are for a person. ``site`` is the
    user's ``file:line`` of that step (``simlib.checker.sites``): its record's own,
    or ``near`` the last line the recording saw before it; ``""`` where none is
    known (a simulated trace).
    """

    rule: int
    code: str
    severity: str
    step: int
    label: str
    pointers: tuple[DataPtr, ...]
    why: str
    fix: str
    site: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON; pointers as hex strings (exact in any JSON reader)."""
        return {**asdict(self), "pointers": [hex(p) for p in self.pointers]}


def format_report(findings: list[Finding], *, sites: bool = False) -> str:
    """One block per finding, then a one-line summary; with ``sites``, each head names the user's
    line (``Finding.site``), as the guard's reports do (a simulated program's lines are its own)."""
    if not findings:
        return "No capture hazards found."
    blocks = []
    for f in findings:
        where = f" ({f.site})" if sites and f.site else ""
        head = f"{f.severity.upper()} rule {f.rule} ({f.code}) at step {f.step}{where}: {f.label}"
        lines = [head]
        if f.pointers:
            lines.append("  pointers: " + ", ".join(hex(p) for p in f.pointers))
        lines.append(textwrap.fill(f.why, 92, initial_indent="  why: ", subsequent_indent="       "))
        lines.append(textwrap.fill(f.fix, 92, initial_indent="  fix: ", subsequent_indent="       "))
        blocks.append("\n".join(lines))
    errors = sum(f.severity == ERROR for f in findings)
    warnings = len(findings) - errors
    summary = f"{plural(errors, 'error')}, {plural(warnings, 'warning')}"
    return "\n\n".join(blocks) + f"\n\n{summary}."


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
