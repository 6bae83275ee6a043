"""A gallery case against its PyTorch twin on the H200: what the simulator predicts, what the device showed.

The simulator predicts a *set* of outcomes for a case (``Case.outcomes``): as simulated, and with
an allocator that hands no freed block out again. For a hazard that is a freed block the two
differ: the simulation hands the block to the next allocation, so its replays go wrong, but a
GPU's allocator may not have handed it out yet, and then the replays still read the old bytes
and come out right. ``twin_against_prediction`` says, for the hazard and its fix,
whether the H200 agreed, fell inside that set (and why), differed, or has not run the twin yet.
The H200 results are read from the corpus file the caller names (a notebook passes
``gpu_demo.lab.results.path("corpus-h200")``).
"""

from __future__ import annotations

from pathlib import Path

from ..glossary import words
from ..programs.gallery import Case
from .gpu_results import NOT_RUN, load_corpus_results

LUCK = ("the simulation hands the freed block to the next allocation, so its replays read another "
        "tensor's bytes; on the H200 nothing had taken that block before the replays, so they still read "
        "the old bytes. Which of the two happens is the allocator's choice, not the program's: the rule "
        "fires on both traces, and correct here is luck, not safety.")


def twin_against_prediction(case: Case, path: Path) -> str:
    """A line for the hazard and one for its fix: the predicted outcomes against the twin's H200 truth."""
    corpus = load_corpus_results(Path(path))
    lines = []
    for fixed in (False, True):
        run = case.run(fixed=fixed)
        predicted = case.outcomes(run)
        said = f"{run.name}: the simulator predicts {' or '.join(words(o) for o in sorted(predicted, reverse=True))}"
        twin = corpus.twin(run.name) if corpus else None
        if twin is None or twin.truth is None:
            why = NOT_RUN if twin is None else f"the H200 run left no result ({twin.message or 'the child died'})"
            lines.append(f"{said}; {why}: nothing to compare yet.")
        elif twin.truth == run.outcome:
            lines.append(f"{said}; the H200 showed {words(twin.truth)}: they agree.")
        elif twin.truth in predicted:
            lines.append(f"{said}; the H200 showed {words(twin.truth)}, inside the predicted set: {LUCK}")
        else:
            lines.append(f"{said}; the H200 showed {words(twin.truth)}: they differ, and the simulator "
                         "is wrong about this case.")
    return "\n".join(lines)
