"""Two GPU runs of the corpus or the model zoo, program by program: what changed between them.

A seat's own run (``python -m gpu_demo corpus --out mine.json``, ``python -m gpu_demo zoo --out
mine.json``), or a new commit's, against the committed H200 results (``corpus-h200.json``,
``zoo-h200.json``) or any other run of the same kind: ``python -m gpu_demo compare mine.json``.
Compared for each program in both: its GPU truth, and what the guard said (``check_capture``'s
answer, its replay and its rules, the whole-process check's rules; for a zoo model also the warm
check and whether it came out clean). A corpus program's ``flagged_by`` is made of these. A
program in one file only is named, and not counted as a change: a run with ``--only`` leaves
the rest out.

A race's outcome depends on timing: where both runs flagged a program by rule 3 or 4
(``cross_stream_race``, ``reuse_after_free``), its GPU truth and ``check_capture``'s replay may
differ from run to run, and with them its answer (those rules warn, so the replay decides it).
Those differences are listed apart and not counted; its rules still are. Plain ``json``: no
torch, no GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_demo.lab.results import path
from simlib.checker.findings import plural

KINDS = {"programs": "corpus", "entries": "zoo"}   # a results file's list of programs, by its key
RACES = ("rule 3 ", "rule 4 ")   # a program flagged so has an outcome that depends on timing
TIMED = ("GPU truth", "check_capture's replay", "check_capture's answer")   # what its timing decides


class ResultsError(ValueError):
    """A file that is not a corpus or zoo results file (or not the same kind as the other)."""


@dataclass(frozen=True)
class Change:
    """One fact of one program that the two runs disagree on."""

    program: str
    fact: str
    before: Any
    after: Any
    timed: bool   # a race's: its timing may decide it (listed, not counted)

    def __str__(self) -> str:
        note = " (a race: timing decides it; not counted)" if self.timed else ""
        return f"{self.program}: {self.fact} {_shown(self.before)} -> {_shown(self.after)}{note}"


def load(file: Path) -> tuple[str, dict[str, Any]]:
    """``file``'s kind (``corpus`` or ``zoo``) and its JSON; ``ResultsError`` says what is wrong."""
    try:
        results = json.loads(Path(file).read_text())
    except FileNotFoundError:
        raise ResultsError(f"{file}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{file}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{file}: not JSON ({exc.msg} at line {exc.lineno})") from None
    kind = next((kind for key, kind in KINDS.items() if isinstance(results, dict)
                 and isinstance(results.get(key), list)), None)
    if kind is None:
        raise ResultsError(f"{file}: not a corpus or zoo results file (it has neither a 'programs' nor an "
                           f"'entries' list; write one with python -m gpu_demo corpus --out or zoo --out)")
    return kind, results


def default_against(kind: str) -> Path:
    """The committed H200 results of ``kind``."""
    return path(f"{kind}-h200")


def changes(before: dict[str, Any], after: dict[str, Any], kind: str) -> tuple[list[Change], list[str], list[str], int]:
    """What differs, program by program; then the programs only ``before`` has, only ``after``, and
    how many both have."""
    old, new = _programs(before, kind), _programs(after, kind)
    found, shared = [], [n for n in old if n in new]
    for name in shared:
        a, b = _facts(old[name], kind), _facts(new[name], kind)
        raced = _raced(old[name]) and _raced(new[name])
        found += [Change(name, fact, a[fact], b[fact], raced and fact in TIMED)
                  for fact in a if a[fact] != b[fact]]
    return found, [n for n in old if n not in new], [n for n in new if n not in old], len(shared)


def report(before_file: Path | None, after_file: Path) -> tuple[str, int]:
    """The comparison as text, and the exit status: 0 the same, 1 a counted change. ``before_file``
    ``None``: the committed H200 results of ``after_file``'s kind."""
    other, after = load(after_file)
    before_file = before_file or default_against(other)
    kind, before = load(before_file)
    if other != kind:
        raise ResultsError(f"{after_file} holds {other} results and {before_file} {kind} results: compare a "
                           f"run with one of its own kind")
    found, gone, added, both = changes(before, after, kind)
    counted = [c for c in found if not c.timed]
    changed, timed = len({c.program for c in counted}), len(found) - len(counted)
    before_file, after_file = _near(before_file), _near(after_file)
    lines = [f"{kind} results: {after_file} ({_origin(after)})",
             f"      against: {before_file} ({_origin(before)})",
             f"{both} programs in both: {both - changed} the same, {changed} changed"
             + (f"; {plural(timed, 'difference')} a race's timing decides" if timed else "")]
    lines += [f"  {c}" for c in found]
    if gone:
        lines.append(f"Only in {before_file} (not run in {after_file}), {plural(len(gone), 'program')}: "
                     f"{', '.join(gone)}")
    if added:
        lines.append(f"Only in {after_file}, {plural(len(added), 'program')}: {', '.join(added)}")
    return "\n".join(lines), 1 if counted else 0


def _programs(results: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    key = next(key for key, k in KINDS.items() if k == kind)
    return {p["name"]: p for p in results[key] if isinstance(p, dict) and "name" in p}


def _facts(p: dict[str, Any], kind: str) -> dict[str, Any]:
    """What the run says of program ``p``: its truth and the guard's verdicts (``None``: not run)."""
    guard, process, truth = p.get("guard") or {}, p.get("process") or {}, p.get("truth") or {}
    facts = {"GPU truth": truth.get("outcome"),
             "check_capture's answer": guard.get("answer"),
             "check_capture's replay": guard.get("verdict"),
             "check_capture's rules": sorted(guard.get("codes") or []),
             "whole-process rules": sorted(process.get("rules") or [])}
    if kind == "zoo":
        facts["warm check"] = p.get("guard_warm")
        facts["clean"] = p.get("clean")
    return facts


def _raced(p: dict[str, Any]) -> bool:
    said = [*(p.get("flagged_by") or []), *((p.get("process") or {}).get("rules") or [])]
    return any(r.startswith(RACES) for r in said)


def _origin(results: dict[str, Any]) -> str:
    p = results.get("provenance") or {}
    parts = [p.get("gpu"), f"torch {p['torch']}" if p.get("torch") else None,
             (p.get("date_utc") or "")[:10] or None, f"source {p['source']}" if p.get("source") else None]
    return ", ".join(x for x in parts if x) or "no provenance"


def _near(file: Path) -> Path:
    """``file`` as the reader would type it: from the working folder, where it lies below it."""
    file = Path(file)
    try:
        return file.resolve().relative_to(Path.cwd())
    except ValueError:
        return file


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
