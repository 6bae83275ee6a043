"""The simulator's predicted outcomes next to the H200's, scenario by scenario.

Every scenario of ``simlib.programs.spec.MATRIX`` is defined once; ``gpu_demo run
--matrix`` ran each on a real H200 (``results/matrix-h200.json``) and simlib
predicts each here, with the calibrated ``H200`` timing profile.

A prediction is a *set* of outcomes: ``simlib.engine.schedules.explore`` replays the
scenario as the profile times it and then once per order of every race (two
graph nodes that touch the same bytes, one writing, with no path between
them), and the set holds what those schedules produced. A scenario without a
race predicts one outcome; a race predicts each outcome a schedule can give,
with the schedule that gives it (``unordered`` in the glossary's words).
Prediction and GPU **agree when the outcome the GPU showed is in the set**:
a race agrees with "correct" only if some schedule is right, and with
"silently wrong" only if some schedule is wrong.

The incident gallery's programs (``simlib.programs.gallery``, each hazard and its fix) have
rows of their own (``gallery_rows``): each is simulated as its case's runner drives
it, and its PyTorch twin, the corpus program of the same name, ran on the H200
(``results/corpus-h200.json``). A twin with no H200 result yet is listed as *not
run*, never counted as agreeing.

Another card's run (``python -m gpu_demo fidelity --matrix FILE``, a GPU seat's) is read against
the same predictions, made with the H200's timing: a race predicts each of its orders, so a card
that times it otherwise still agrees where it shows one of them.

Schedules are explored over at most ``simlib.programs.predictions.EXPLORED_REPLAYS`` replays: a schedule
repeats on every replay, and from the second replay on memory holds what the
previous one left, so later replays add nothing new.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpu_demo.lab import results
from gpu_demo.lab.moe.harness import count_wrong
from simlib.checker import check
from simlib.checker.verdict import verdict
from simlib.engine import schedules
from simlib.glossary import CORRECT, SILENT_WRONG, UNORDERED
from simlib.programs.gallery import CASES
from simlib.programs.predictions import agrees, possible_outcomes
from simlib.programs.spec import MoEConfig
from simlib.tutorial.gpu_results import NOT_RUN, load_corpus_results, load_gpu_results

RESULTS = results.path("matrix-h200")


@dataclass(frozen=True)
class Prediction:
    outcomes: frozenset[str]   # every outcome some schedule of the replays produced
    simulated: str             # the replay as the profile times it
    outcome: str               # the verdict (simlib.checker.verdict): ``unordered`` where the checker finds a race
    rules: tuple[str, ...]     # checker findings, as "rule N (code)"
    schedules: str             # which schedule gives which outcome (exploration.describe())


@dataclass(frozen=True)
class Row:
    name: str
    predicted: Prediction
    gpu: str
    agree: bool
    gpu_wrong: tuple[int, int] | None   # (wrong replays, replays) the GPU ran, when it replayed


def predict(config: MoEConfig) -> Prediction:
    """Every outcome the simulated scenario's schedules produce, with the checker's findings."""
    exploration = possible_outcomes(config)
    findings = check(exploration.default.trace)
    rules = tuple(dict.fromkeys(f"rule {f.rule} ({f.code})" for f in findings))
    return Prediction(exploration.outcomes, exploration.default.outcome,
                      verdict(exploration.default.outcome, findings), rules, exploration.describe())


def rows(path: Path = RESULTS) -> list[Row]:
    """One row per scenario the GPU ran, in the order of the results file."""
    try:
        gpu = load_gpu_results(Path(path))
        if gpu is None:
            raise FileNotFoundError("no such file")
    except (OSError, KeyError, TypeError, AttributeError, ValueError) as exc:   # JSON errors are ValueErrors
        raise ValueError(f"cannot read GPU outcomes from {path}: {type(exc).__name__}: {exc}. Record them on a GPU "
                         "with `python -m gpu_demo run --matrix`.") from None
    out = []
    for config, case in gpu.cases.items():
        p = predict(config)
        errors = case.get("errors") or []
        wrong = count_wrong(errors, case["tolerance"])
        out.append(Row(case["name"], p, case["outcome"], agrees(p.outcomes, case["outcome"]),
                       None if wrong is None else (wrong, len(errors))))
    return out


def card(path: Path) -> str:
    """The GPU a results file ran on, as a table names it (``H200`` for ``NVIDIA H200``; ``GPU``
    where the file has no provenance)."""
    try:
        gpu = (json.loads(Path(path).read_text()).get("provenance") or {}).get("gpu")
    except (OSError, ValueError, AttributeError):
        gpu = None
    return gpu.removeprefix("NVIDIA ") if isinstance(gpu, str) and gpu else "GPU"


def format_table(table: list[Row], gpu: str = "H200") -> str:
    """A Markdown table: scenario, prediction, GPU outcome, agreement; then how agreement is defined."""
    lines = [f"| scenario | simulator predicts | {gpu} showed | agree | checker |",
             "|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r.name} | {_predicted(r.predicted)} | {_shown(r)} | "
                     f"{'yes' if r.agree else 'NO'} | {', '.join(r.predicted.rules) or 'clean'} |")
    agreed = sum(r.agree for r in table)
    lines.append(f"\n{agreed} of {len(table)} scenarios agree. A prediction is every outcome the "
                 "simulated replays can have: as the profile times them, and with each race ordered "
                 "either way; it agrees when the GPU's outcome is one of them.")
    return "\n".join(lines)


def _predicted(p: Prediction) -> str:
    if len(p.outcomes) == 1:
        return p.simulated
    return f"{UNORDERED}: {p.schedules}"


def _shown(r: Row) -> str:
    """The GPU's outcome; for a race, how many replays ran a wrong schedule."""
    if len(r.predicted.outcomes) == 1 or r.gpu_wrong is None or r.gpu not in (CORRECT, SILENT_WRONG):
        return r.gpu
    wrong, total = r.gpu_wrong
    return f"{r.gpu} ({wrong} of {total} replays wrong)"


# ----------------------------------------------------------------- the incident gallery
@dataclass(frozen=True)
class GalleryRow:
    name: str                  # the gallery program, hazard or fix: its corpus twin's name
    predicted: frozenset[str]  # the simulated outcomes (one: a gallery program has no race)
    rules: tuple[str, ...]     # the checker's findings on the simulated trace, as "rule N (code)"
    gpu: str | None            # the twin's H200 truth; None: not run there yet, or no result
    ran: bool = True           # False: the results file has no such program

    @property
    def agree(self) -> bool | None:
        """``None`` when the twin has no H200 truth: no agreement is claimed."""
        return None if self.gpu is None else agrees(self.predicted, self.gpu)

    @property
    def shown(self) -> str:
        return self.gpu or (NOT_RUN if not self.ran else "no result (the child died)")


def gallery_rows(path: Path = results.path("corpus-h200")) -> list[GalleryRow]:
    """One row per gallery program (each case's hazard, then its fix), with its twin's H200 truth."""
    corpus = load_corpus_results(Path(path))   # None: no corpus run yet; a bad file raises a one-line ValueError
    out = []
    for case in CASES.values():
        for fixed in (False, True):
            run = case.run(fixed=fixed)
            found = list(schedules.races(run.result.trace))
            if found:   # a race would make the prediction a set of schedules: explore them first
                raise ValueError(f"gallery program {run.name} has a race ({found[0]}); its row needs "
                                 "simlib.engine.schedules.explore, not one run")
            twin = corpus.twin(run.name) if corpus else None
            out.append(GalleryRow(run.name, case.outcomes(run),
                                  tuple(dict.fromkeys(f"rule {f.rule} ({f.code})" for f in run.findings)),
                                  twin.truth if twin else None, ran=twin is not None))
    return out


def format_gallery_table(table: list[GalleryRow], gpu: str = "H200") -> str:
    """A Markdown table of the gallery's programs, then how many agree and how many have not run."""
    lines = [f"| gallery program | simulator predicts | {gpu} showed | agree | checker |", "|---|---|---|---|---|"]
    for r in table:
        agree = {None: "not run", True: "yes", False: "NO"}[r.agree]
        lines.append(f"| {r.name} | {', '.join(sorted(r.predicted))} | {r.shown} | {agree} | "
                     f"{', '.join(r.rules) or 'clean'} |")
    ran = [r for r in table if r.gpu is not None]
    lines.append(f"\n{sum(bool(r.agree) for r in ran)} of {len(table)} gallery programs agree with their "
                 f"PyTorch twin's {gpu} run; {len(table) - len(ran)} with no {gpu} result yet "
                 "(`python -m gpu_demo corpus`), which count as not agreeing.")
    return "\n".join(lines)
