"""The simulator's predicted outcome next to the H200's, scenario by scenario.

Every scenario of ``simlib.spec.MATRIX`` is defined once; ``gpu_demo run
--matrix`` ran each on a real H200 (``results/matrix-h200.json``) and
``simlib`` predicts each here. A prediction is the simulated replay's outcome,
except where the checker finds only races (rule 3 or 4 warnings, no error that
decides the result) and the replay did not crash: then the honest prediction is
``unordered``, which agrees with whatever the GPU showed short of a crash
or a capture error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simlib import scenarios
from simlib.checker import check
from simlib.headline import load_gpu_results
from simlib.spec import MoEConfig
from simlib.verdict import agrees, verdict

RESULTS = Path(__file__).resolve().parent / "results" / "matrix-h200.json"


@dataclass(frozen=True)
class Prediction:
    outcome: str        # what simlib predicts, in the outcome vocabulary
    simulated: str      # what the simulated replay itself did
    rules: tuple[str, ...]  # checker findings, as "rule N (code)"


@dataclass(frozen=True)
class Row:
    name: str
    predicted: str
    simulated: str
    gpu: str
    agree: bool
    rules: tuple[str, ...]


def predict(config: MoEConfig) -> Prediction:
    """Run ``config`` in the simulator and check its trace."""
    result = scenarios.run(config)
    findings = check(result.trace)
    rules = tuple(dict.fromkeys(f"rule {f.rule} ({f.code})" for f in findings))
    return Prediction(verdict(result.outcome, findings), result.outcome, rules)


def rows(path: Path = RESULTS) -> list[Row]:
    """One row per scenario the GPU ran, in the order of the results file."""
    try:
        gpu = load_gpu_results(Path(path))
        if gpu is None:
            raise FileNotFoundError("no such file")
    except (OSError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read GPU outcomes from {path}: {exc}. Record them on a GPU "
                         "with `python -m gpu_demo run --matrix`.") from None
    out = []
    for config, case in gpu.cases.items():
        p = predict(config)
        out.append(Row(case["name"], p.outcome, p.simulated, case["outcome"],
                       agrees(p.outcome, case["outcome"]), p.rules))
    return out


def format_table(table: list[Row]) -> str:
    """A Markdown table: scenario, prediction, GPU outcome, agreement."""
    lines = ["| scenario | simulator predicts | H200 showed | agree | checker |",
             "|---|---|---|---|---|"]
    for r in table:
        predicted = r.predicted if r.predicted == r.simulated else f"{r.predicted} (replay: {r.simulated})"
        lines.append(f"| {r.name} | {predicted} | {r.gpu} | {'yes' if r.agree else 'NO'} | "
                     f"{', '.join(r.rules) or 'clean'} |")
    agreed = sum(r.agree for r in table)
    lines.append(f"\n{agreed} of {len(table)} scenarios agree.")
    return "\n".join(lines)
